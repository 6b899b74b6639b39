"""TD115 run-stopped on the stop shapes test_run_stopped.py does not drive: stops inside an eval, a checkpoint
save, RL sampling, async and stream rollouts, between steps (right after `Wrote metrics`), a flush race at
exit, console captures that end with a traceback, a Ctrl-C, a `Killed` line or nothing, the recipes' own
plan lines (SFT, RL, DPO, distillation) with max_steps and resumes, and short runs with no plan.

The simulated cases run fixtures/generate.py's training process (tinker-cookbook 0.6.1's trace collector
and metrics store) SIGKILLed on entering a named span; the text cases are built by tests/stopped_shapes.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "fixtures"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import stopped_shapes  # noqa: E402
from stopped_shapes import run_stopped, unreported_kill  # noqa: E402


def _stopped(path: Path):
    return run_stopped(path)


@pytest.fixture(scope="module")
def text_runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("shapes")
    runs = {}
    for name, build in stopped_shapes.CASES.items():
        (root / name).mkdir()
        build(root / name)
        runs[name] = root / name
    return runs


def test_a_console_traceback_is_a_decoded_crash_with_high_confidence(text_runs):
    finding, _, _ = _stopped(text_runs["console_traceback"])
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high"
    assert finding.steps == [7] and "step 7 of 20 planned" in finding.message
    assert "context window" in finding.evidence["error_cause"]


def test_ctrl_c_in_a_terminal_is_interrupted(text_runs):
    # The terminal echoes `^C` in front of the traceback: it is still the KeyboardInterrupt's traceback.
    finding, _, _ = _stopped(text_runs["console_keyboard_interrupt"])
    assert finding.evidence["kind"] == "interrupted" and finding.confidence == "high", finding.message
    assert finding.steps == [7] and "KeyboardInterrupt" in finding.message


def test_an_error_raised_while_an_interrupted_run_shuts_down_is_not_the_crash(text_runs):
    # asyncio logs CancelledError -> KeyboardInterrupt -> a task's ValueError in one record (the corpus'
    # bash_codeforces run): Ctrl-C stopped the run, the ValueError came on the way out.
    finding, _, result = _stopped(text_runs["shutdown_interrupt_chain"])
    assert finding.evidence["kind"] == "interrupted", finding.message
    assert "CancelledError → KeyboardInterrupt → ValueError" in finding.message
    assert "did not stop the run" in finding.message
    assert "BadRequestError" not in finding.message  # an earlier launch's capture is another story
    assert finding.steps == [3] and "`Starting sample` with no `took`" in finding.message
    assert finding.severity == "warning"


@pytest.mark.parametrize(
    ("case", "shown"), [("console_killed", "`Killed`"), ("console_oom", "Out of memory: Killed process 48121")]
)
def test_a_terminal_kill_report_makes_the_kill_sure(text_runs, case, shown):
    finding, _, _ = _stopped(text_runs[case])
    assert finding.evidence["kind"] == "killed" and finding.confidence == "high"
    assert finding.steps == [5] and shown in finding.message
    # A console capture has no clock: it cannot say the hold was short, only that it is not recorded.
    assert "too short a hold" not in finding.message and "is not recorded" in finding.message
    assert "cannot say" not in finding.message


def test_a_console_that_ends_mid_step_with_nothing_is_a_kill_the_files_cannot_prove(text_runs):
    finding, _, _ = _stopped(text_runs["console_ends_with_nothing"])
    assert unreported_kill(finding) and finding.confidence == "medium"
    assert finding.steps == [5] and "`Starting sample` with no `took`" in finding.message
    assert "the files cannot say" in finding.message


def test_a_stop_inside_step_0s_evals_names_the_phase(text_runs):
    finding, _, _ = _stopped(text_runs["step0_in_evals"])
    assert finding.steps == [0] and "`Starting run_evals` with no `took`" in finding.message
    assert finding.confidence in ("medium", "low")


def test_distillation_plan_line_is_read(text_runs):
    # distillation/train_on_policy.py: `Will train on N batches (dataset has N)`.
    finding, outcome, _ = _stopped(text_runs["distill_completed"])
    assert finding is None and "all 12 planned steps" in outcome.reason
    finding, _, _ = _stopped(text_runs["distill_stopped"])
    assert finding is not None and finding.evidence["kind"] == "stopped early" and finding.steps == [5]
    # The rows end short of a known plan (sure); why, and whether it is still going, the files do not say.
    assert finding.confidence == "medium"


@pytest.mark.parametrize(
    "case", ["dpo_completed", "dpo_max_steps", "rl_max_steps", "resumed_completed", "short_healthy_no_plan"]
)
def test_completed_or_merely_short_runs_stay_silent(text_runs, case):
    finding, outcome, _ = _stopped(text_runs[case])
    assert finding is None, finding.message
    assert outcome.status == "passed"


def test_a_resumed_run_killed_mid_step_counts_from_its_own_launch(text_runs):
    finding, _, _ = _stopped(text_runs["resumed_then_killed"])
    assert unreported_kill(finding) and finding.steps == [16]
    assert "step 16 of 30 planned" in finding.message and "`Starting train` with no `took`" in finding.message


# --- runs the cookbook's own writers produce, SIGKILLed at a chosen place --------------------------------


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory) -> dict[str, Path]:
    pytest.importorskip("tinker_cookbook")
    import generate
    from sim.loops import Opts

    scenarios = {
        "sl_kill_in_eval": Opts(name="e", n_steps=20, eval_every=5, test_size=8, kill_in_span=("evals", 2)),
        "sl_kill_in_save": Opts(name="s", n_steps=20, save_every=5, kill_in_span=("save_checkpoint", 1)),
        "rl_kill_in_sampling": Opts(name="r", kind="rl", n_steps=20, kill_in_span=("sampling", 7)),
        "rl_kill_after_write": Opts(name="w", kind="rl", n_steps=20, kill_after_metrics_at_step=7),
        # Killed in step 6's training (assembling its data) while the rollout workers sample ahead.
        "rl_async_kill": Opts(
            name="a", kind="rl", n_steps=20, max_steps_off_policy=1, kill_in_span=("assemble_training_data", 6)
        ),
        "sl_completed": Opts(name="c", n_steps=12),
    }
    root = tmp_path_factory.mktemp("sim_stops")

    def one(item):
        name, opts = item
        out = root / name
        out.mkdir()
        proc = generate.run_process(opts, out)
        assert generate.expected_exit(opts, proc.returncode), (name, proc.returncode, proc.stderr[-2000:])
        return name, out

    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = dict(pool.map(one, scenarios.items()))
    runs.update(_flush_races(runs["sl_completed"], root))
    return runs


def _flush_races(completed: Path, root: Path) -> dict[str, Path]:
    """The completed run as its trace looks when the writer's flush loop lost its last batch at exit
    (FORMATS.md 2): the final step's finish_batch and step spans have a B and no E. With its plan, and with
    every plan removed (no plan line, no progress key, no final checkpoint)."""
    out = {}
    for name, keep_plan in (("flush_race", True), ("flush_race_no_plan", False)):
        run = root / name
        shutil.copytree(completed, run)
        lines = (run / "trace_events.jsonl").read_text().splitlines(True)
        last_step_end = max(i for i, line in enumerate(lines) if '"name": "step", "ph": "E"' in line)
        (run / "trace_events.jsonl").write_text("".join(lines[:last_step_end]))
        if not keep_plan:
            log = (run / "logs.log").read_text().splitlines(True)
            (run / "logs.log").write_text("".join(line for line in log if "Training for" not in line))
            rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            (run / "metrics.jsonl").write_text(
                "".join(json.dumps({k: v for k, v in r.items() if k != "progress"}) + "\n" for r in rows)
            )
            checkpoints = (run / "checkpoints.jsonl").read_text().splitlines(True)
            (run / "checkpoints.jsonl").write_text("".join(c for c in checkpoints if '"final"' not in c))
        out[name] = run
    return out


def test_a_kill_inside_an_eval_names_the_eval_in_its_own_step(sim_runs):
    finding, _, _ = _stopped(sim_runs["sl_kill_in_eval"])
    assert unreported_kill(finding) and finding.steps == [10]
    # The eval runs every 5 steps: its step is the enclosing submit_batch's, not "one after the last eval".
    assert "submit_batch (step 10) › evals (step 10)" in finding.message, finding.message


def test_a_kill_inside_a_checkpoint_save_names_the_save_in_its_own_step(sim_runs):
    finding, _, _ = _stopped(sim_runs["sl_kill_in_save"])
    assert unreported_kill(finding) and finding.steps == [10]
    assert "finish_batch (step 10) › save_checkpoint (step 10)" in finding.message, finding.message


def test_a_kill_in_rl_sampling_is_killed_in_that_step(sim_runs):
    finding, _, _ = _stopped(sim_runs["rl_kill_in_sampling"])
    assert unreported_kill(finding) and finding.steps == [7] and finding.confidence == "medium"
    assert "do_sync_training › sampling" in finding.message


def test_a_kill_right_after_wrote_metrics_is_between_steps_not_mid_step(sim_runs):
    # Only the loop's own span (do_sync_training) is open: no step was in flight.
    finding, _, _ = _stopped(sim_runs["rl_kill_after_write"])
    assert finding.evidence["kind"] == "stopped early" and finding.confidence == "medium", finding.message
    assert finding.steps == [8] and "no step open" in finding.message
    assert "mid-step" not in finding.message


def test_an_async_rl_kill_lists_only_tracks_inside_a_step(sim_runs):
    finding, _, _ = _stopped(sim_runs["rl_async_kill"])
    # The trace writer may not have flushed step 6's B events before the SIGKILL (FORMATS.md 2: the last
    # <= 1 s may be missing); then only rollouts of guessed steps are open and the run reads as stopped
    # between steps. Either way it is never a hang and never a crash.
    assert finding.evidence["kind"] in ("killed", "stopped early"), finding.message
    assert finding.steps == [6]
    # Rollout worker loops waiting for work (only their loop span open) are not in flight.
    assert "inside trajectory_group_worker_loop (B" not in finding.message


def test_a_flush_race_at_exit_is_not_a_kill(sim_runs):
    finding, outcome, _ = _stopped(sim_runs["flush_race"])
    assert finding is None and "all 12 planned steps" in outcome.reason
    # No plan to compare with: the final step's spans with no E belong to a step whose row was written.
    finding, outcome, _ = _stopped(sim_runs["flush_race_no_plan"])
    assert finding is None, finding.message
    assert outcome.status == "passed"


def _sft_with_checkpoints(folder: Path, logged: int, total: int, batches: list[int]) -> Path:
    folder.mkdir()
    stopped_shapes._rows(folder / "metrics.jsonl", [stopped_shapes.sft_row(step, total) for step in range(logged)])
    with open(folder / "checkpoints.jsonl", "w", encoding="utf-8") as f:
        for batch in batches:
            f.write(json.dumps({"name": f"{batch:06d}", "epoch": 0, "batch": batch, "state_path": "tinker://x"}) + "\n")
    return folder


def test_a_checkpoint_past_the_last_row_moves_the_stop_and_says_the_metrics_end_early(tmp_path):
    # The corpus' distillation_off: rows end at step 682, checkpoints.jsonl goes on to batch 700.
    finding, _, _ = _stopped(_sft_with_checkpoints(tmp_path / "cut", 20, 100, [10, 20, 30]))
    assert finding is not None and finding.evidence["kind"] == "stopped early"
    assert finding.steps == [30] and finding.evidence["run_end"]["checkpoint_past_rows"] == 30
    assert "checkpoint was saved at batch 30, past the last row logged (step 19)" in finding.message


def test_a_checkpoint_named_for_the_next_batch_is_the_cookbooks_order_not_a_gap(tmp_path):
    # The cookbook saves checkpoint N before step N: a last row at step 19 and a checkpoint 20 are in step.
    finding, _, _ = _stopped(_sft_with_checkpoints(tmp_path / "saved", 20, 100, [10, 20]))
    assert finding is not None and finding.steps == [20]
    assert "checkpoint_past_rows" not in finding.evidence["run_end"] and "checkpoint was saved" not in finding.message


def test_a_relaunched_runs_checkpoints_are_not_read_against_its_last_launchs_rows(tmp_path):
    # bash_codeforces: each launch appends to checkpoints.jsonl; a later launch restarting at step 0 has
    # fewer rows than an earlier launch's checkpoints, which says nothing about the metrics ending early.
    folder = _sft_with_checkpoints(tmp_path / "relaunched", 6, 100, [0, 5])
    stopped_shapes._rows(folder / "metrics.jsonl", [stopped_shapes.sft_row(step, 100) for step in range(2)])
    finding, _, _ = _stopped(folder)
    assert finding is not None and "checkpoint_past_rows" not in finding.evidence["run_end"]
    assert finding.steps == [2] and "checkpoint was saved" not in finding.message
