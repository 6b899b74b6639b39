"""TD115 run-stopped against runs the cookbook's own writers produced in processes that really stopped.

Each scenario runs fixtures/generate.py's training process (tinker-cookbook 0.6.1's trace collector and
TrainingRunStore, the simulated service) in a subprocess that is SIGKILLed mid-step, hangs in an SDK call
with its heartbeat going (then SIGKILLed), hangs in user code holding the GIL (then SIGKILLed), or
crashes with a traceback; `analyze` must name the kind of stop, the step, the phase and what was in flight.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("tinker_cookbook")

from trace_doctor.api import analyze, load_run  # noqa: E402
from trace_doctor.derive.progress import run_plan  # noqa: E402
from trace_doctor.derive.run_end import OPEN_SPANS_LISTED, run_end  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
sys.path.insert(0, str(FIXTURES))

import generate  # noqa: E402
from sim.loops import Opts  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stopped_shapes import unreported_kill  # noqa: E402

STOP_AT = 14
PLANNED = 40
SCENARIOS = {
    "killed": Opts(name="killed", n_steps=PLANNED, crash_at_step=STOP_AT, dumps=True),
    "service_hang": Opts(
        name="service_hang", n_steps=PLANNED, service_hangs_at_step=STOP_AT, dumps=True, kill_after_s=5
    ),
    "user_hang": Opts(name="user_hang", n_steps=PLANNED, user_hang_at_step=STOP_AT, dumps=True, kill_after_s=5),
    "crashed": Opts(name="crashed", n_steps=PLANNED, raise_at_step=STOP_AT),
    "completed": Opts(name="completed", n_steps=12, dumps=True),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stopped")

    def one(item: tuple[str, Opts]) -> tuple[str, Path]:
        name, opts = item
        out = root / name
        out.mkdir()
        proc = generate.run_process(opts, out)
        generate.write_outputs(opts, out, proc)
        assert generate.expected_exit(opts, proc.returncode), (name, proc.returncode, proc.stderr[-2000:])
        return name, out

    with ThreadPoolExecutor(max_workers=len(SCENARIOS)) as pool:
        return dict(pool.map(one, SCENARIOS.items()))


def _stopped(path: Path, **options):
    result = analyze(load_run(str(path)), **options)
    found = [f for f in result.findings if f.rule == "run-stopped"]
    return found[0] if found else None, result


def test_sigkill_mid_step_is_killed_with_the_open_step(runs):
    finding, _ = _stopped(runs["killed"])
    assert finding is not None and unreported_kill(finding)
    assert finding.steps == [STOP_AT]
    assert f"step {STOP_AT} of {PLANNED} planned" in finding.message
    # The trace's open spans name the phase: finish_batch › step, the results being awaited.
    assert "finish_batch (step 14) › step (step 14)" in finding.message
    assert "too short a hold to call a hang" in finding.message


def test_hang_in_sdk_call_with_heartbeat_is_hung_on_the_service(runs):
    finding, result = _stopped(runs["service_hang"])
    assert finding is not None and finding.evidence["kind"] == "hung on the service"
    assert finding.steps == [STOP_AT]
    assert "SDK request(s) stayed pending on [holder]" in finding.message
    assert "_APIFuture._result_async" in finding.message
    # The SDK thread kept going (its loop dumped to the end, no heartbeat warning): escalate.
    assert finding.evidence["session_ids"] and finding.evidence["session_ids"][0] in finding.message
    assert finding.evidence["stuck_s"] >= 2.0
    # A cut-off run's late results are not a service queue.
    assert not [f for f in result.findings if f.rule == "server-side-wait"]


def test_hang_in_user_code_holding_the_gil_is_hung_in_user_code(runs):
    finding, _ = _stopped(runs["user_hang"])
    assert finding is not None and finding.evidence["kind"] == "hung in user code"
    assert finding.severity == "error"
    assert finding.steps == [STOP_AT]
    assert "get_batch" in finding.message and "catastrophic_regex" in finding.message
    # The stack watchdog is starved of the GIL too: on a loaded box it may catch [main] in the regex only
    # once, and one block is not a state that held. Two or more must be read as one held state.
    blocks = (runs["user_hang"] / "stacks.txt").read_text().split("--- [")
    in_regex = [b for b in blocks if b.startswith("main]") and "catastrophic_regex" in b]
    if len(in_regex) >= 2:
        assert "[main]'s stack stayed in catastrophic_regex" in finding.message
    else:
        assert "the main thread was blocked" in finding.message


def test_crash_with_traceback_is_crashed_and_decoded(runs):
    finding, _ = _stopped(runs["crashed"])
    assert finding is not None and finding.evidence["kind"] == "crashed"
    assert finding.steps == [STOP_AT]
    assert "tinker.BadRequestError" in finding.message
    assert "context window" in (finding.evidence["error_cause"] or "")


def test_completed_run_passes(runs):
    finding, result = _stopped(runs["completed"])
    assert finding is None
    status = {r.rule: r for r in result.rule_results} if hasattr(result, "rule_results") else None
    if status is not None:
        assert status["run-stopped"].status == "passed"


def test_a_stricter_hold_threshold_turns_the_service_hang_into_a_stop_it_cannot_tell_from_a_hang(runs):
    finding, _ = _stopped(runs["service_hang"], overrides={"run-stopped": {"min_stuck_s": 3600.0}})
    assert finding is not None and unreported_kill(finding)


def test_a_run_the_watch_saw_stalled_is_hung_not_killed_whatever_the_hold_threshold(runs):
    # The same files, as `trace-doctor watch` hands them over when its own stall bound is passed: the
    # silence it saw is the hold, so run-stopped's stricter bound does not turn a live hang into a kill.
    run = load_run(str(runs["service_hang"]))
    run.meta.watched_stall_s = 1.5
    result = analyze(run, overrides={"run-stopped": {"min_stuck_s": 3600.0}})
    [finding] = [f for f in result.findings if f.rule == "run-stopped"]
    assert finding.evidence["kind"] == "hung on the service"
    assert finding.evidence["run_end"]["watched_stall_s"] == 1.5
    assert "`trace-doctor watch` saw nothing written for 1.50 s" in finding.message  # not rounded to 2 s
    # `Session heartbeat failed ... for session <id>` names one id, not "heartbeat".
    assert len(finding.evidence["session_ids"]) == 1 and "heartbeat" not in finding.evidence["session_ids"]


@pytest.mark.parametrize("group", ["runs", "training"])
def test_healthy_fixtures_do_not_fire(group):
    for folder in sorted((FIXTURES / group).iterdir()):
        expected = folder / "EXPECTED.json"
        if not folder.is_dir():
            continue
        if expected.exists() and "run-stopped" in json.loads(expected.read_text()).get("must_fire", []):
            continue
        if folder.name in ("sl_resumed",) or folder.name.startswith("sl_stopped_"):
            continue
        finding, _ = _stopped(folder, select=["run-stopped"])
        assert finding is None, (folder.name, finding.message)


def test_plan_from_progress_fractions():
    import polars as pl

    # rl/train.py: done_frac = (batch + 1) / batches; supervised/train.py before 0.6: step / steps.
    rows = pl.DataFrame({"step": [0, 1, 2], "progress/done_frac": [1 / 57, 2 / 57, 3 / 57]})
    assert run_plan(rows, None).steps == 57
    rows = pl.DataFrame({"step": [1, 2, 3], "progress": [1 / 40, 2 / 40, 3 / 40]})
    assert run_plan(rows, None).steps == 40
    plan = run_plan(pl.DataFrame({"step": [0]}), {"max_steps": 100})
    assert plan.steps == 100 and plan.upper_bound
    assert run_plan(pl.DataFrame({"step": [0]}), {}).steps is None
    # 0.6.1 RL: done_frac counts the dataset's batches, max_steps ends the loop sooner.
    rows = pl.DataFrame({"step": [0, 1], "progress/done_frac": [1 / 100, 2 / 100]})
    assert (
        run_plan(rows, {"max_steps": 30}) == run_plan(rows, {"max_steps": 30})
        and run_plan(rows, {"max_steps": 30}).steps == 30
    )


def test_plan_from_the_log_line_beats_an_unknown_and_respects_max_steps():
    import polars as pl

    from trace_doctor.ingest.parsers.log_kinds import classify_message

    def events(message):
        found = classify_message(message, "INFO", "tinker_cookbook.rl.train")
        return pl.DataFrame(
            {
                "source": ["logs.log"],
                "line": [9],
                "kind": [found.kind],
                "message": [message],
                "fields": [json.dumps(found.fields)],
            }
        )

    steps = pl.DataFrame({"step": [0, 1]})
    plan = run_plan(steps, {"max_steps": 500}, events("Will train on 57 batches"))
    assert (plan.steps, plan.upper_bound) == (57, False) and "Will train on 57 batches" in plan.source
    # supervised/train.py logs batches x epochs before max_steps applies
    plan = run_plan(steps, {"max_steps": 100}, events("Training for 780 batches x 1 epochs = 780 steps"))
    assert (plan.steps, plan.upper_bound) == (100, False)
    # an async loop's per-step line is not a plan
    assert classify_message("[training_loop] Step 3: Will train on batch, num groups: 4", "INFO", "x") is None


def test_a_trace_stopped_inside_a_million_open_spans_lists_their_ends(tmp_path):
    """One B event written over and over: the report names the outermost and innermost open spans of
    the track and how many lie between (it used to name every one: a 600 MB trace made a 1 GB report)."""
    run = tmp_path / "run"
    run.mkdir()
    b_line = json.dumps(
        {"name": "train_step", "ph": "B", "pid": 0, "tid": 1, "ts": 1.0, "args": {"track": "main"}, "cat": "async"}
    )
    (run / "trace_events.jsonl").write_text((b_line + "\n") * 5_000)
    end = run_end(load_run(run))
    assert len(end.open_spans) == 2 * OPEN_SPANS_LISTED and end.unlisted_open_spans == 5_000 - 2 * OPEN_SPANS_LISTED
    assert [s.depth for s in end.open_spans][OPEN_SPANS_LISTED - 1 : OPEN_SPANS_LISTED + 1] == [19, 4_980]
    assert end.to_dict()["unlisted_open_spans"] == 4_960
    result = analyze(load_run(run))
    text = json.dumps([f.to_dict() for f in result.findings], ensure_ascii=False)
    assert "… 4,960 more …" in text and len(text) < 20_000
