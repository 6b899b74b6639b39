"""TD115 run-stopped on a second set of stop shapes (tests/stopped_shapes.py, second audit): a console
capture that is the run's only file and ends inside a tqdm sampling bar, a slurm time limit, the shells'
reports of a SIGTERM and of a SIGKILL in zsh, a CUDA OOM on the user's box, a bare KeyboardInterrupt, runs
complete without a progress key or a plan, a <=0.5.x resume killed again, a hang the SDK's heartbeat
warnings kept reporting, a stop in the final eval after the last planned row, a plan from config
max_steps only, a metrics row cut mid-append, two processes in one logs.log, and a sweep.

Each test states the reading a user should get (kind, step, phase, confidence) as the files support it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stopped_shapes  # noqa: E402
from stopped_shapes import built, run_stopped, unreported_kill  # noqa: E402


def _stopped(path: Path):
    return run_stopped(path)[:2]


def _build(tmp_path: Path, name: str) -> Path:
    return built(tmp_path, stopped_shapes.CASES, name)


def test_a_console_only_capture_that_ends_inside_a_sampling_bar_was_inside_that_sampling(tmp_path):
    # Only `train.out`: six step tables, then `Sampling batch 6: 37%| 3/8` redrawn with carriage returns and
    # never closed. The bar is the phase in flight: the files end mid-step (killed, or copied while it ran).
    capture = _build(tmp_path, "console_only_tqdm_killed") / "train.out"
    finding, _ = _stopped(capture)
    assert unreported_kill(finding) and finding.confidence == "medium", finding.message
    assert finding.steps == [6] and "step 6 of 40 planned" in finding.message
    assert "`Sampling batch 6` progress bar stopped at 3/8" in finding.message
    assert "nothing left open" not in finding.message


def test_a_slurm_time_limit_is_named_as_the_time_limit(tmp_path):
    finding, _ = _stopped(_build(tmp_path, "console_only_slurm_time_limit") / "slurm-4121.out")
    assert finding.evidence["kind"] == "killed" and finding.confidence == "high"
    assert finding.steps == [6] and "DUE TO TIME LIMIT" in finding.message
    assert "time limit" in finding.fix and "OOM killer" not in finding.message, finding.message


@pytest.mark.parametrize(
    ("case", "shown", "signal"),
    [("console_terminated", "`Terminated`", "SIGTERM"), ("console_killed_9", "`zsh: killed", "SIGKILL")],
)
def test_every_shells_report_of_a_signal_makes_the_stop_sure(tmp_path, case, shown, signal):
    finding, _ = _stopped(_build(tmp_path, case))
    assert finding.evidence["kind"] == "killed" and finding.confidence == "high", finding.message
    assert finding.steps == [5] and shown in finding.message and signal in finding.message
    assert "cannot say" not in finding.message


def test_a_cuda_oom_on_the_users_box_is_a_crash_and_the_traceback_is_not_listed_as_activity(tmp_path):
    finding, _ = _stopped(_build(tmp_path, "console_cuda_oom"))
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high"
    assert finding.steps == [5] and "CUDA out of memory" in finding.message
    # A site-packages path inside the traceback is a version reading, not something the run did after
    # its last phase line.
    assert "log after it" not in finding.message, finding.message


def test_a_bare_keyboard_interrupt_line_is_an_interrupt_not_a_kill(tmp_path):
    finding, _ = _stopped(_build(tmp_path, "console_bare_keyboard_interrupt"))
    assert finding.evidence["kind"] == "interrupted", finding.message
    # No traceback: the line alone says Ctrl-C, less surely than a traceback would.
    assert finding.confidence == "medium" and finding.steps == [5]


@pytest.mark.parametrize("case", ["completed_without_progress_key", "completed_final_checkpoint_no_plan"])
def test_complete_runs_without_a_progress_key_or_a_plan_stay_silent(tmp_path, case):
    finding, outcome = _stopped(_build(tmp_path, case))
    assert finding is None, finding.message
    assert outcome.status == "passed"


def test_a_legacy_resume_killed_again_stops_in_its_last_launch(tmp_path):
    finding, _ = _stopped(_build(tmp_path, "legacy_resume_then_killed"))
    assert unreported_kill(finding) and finding.steps == [18]
    assert "step 18 of 40 planned" in finding.message and "`Starting train` with no `took`" in finding.message


def test_heartbeat_warnings_after_the_last_phase_line_say_the_process_was_alive_and_stuck(tmp_path):
    # Five `Session heartbeat failed` warnings (130 s .. 1092 s) after `Starting sample`: the process lived
    # at least 962 s past its last phase line, 32 usual steps: hung, never "killed or copied".
    finding, _ = _stopped(_build(tmp_path, "heartbeat_hang_in_sampling"))
    kind = finding.evidence["kind"]
    assert kind == "hung on the service", finding.message
    assert finding.steps == [5] and finding.confidence == "medium"
    assert "962 s" in finding.message and "cannot say" not in finding.message
    # A failing heartbeat is a starved SDK thread or the network: the files do not say which.
    assert "(starved of the GIL)" not in finding.message
    assert "5f0c2a55-1d2e-5b8a-9c41-7a3e2d9b0c11" in finding.message


def test_a_stop_in_the_final_eval_after_every_planned_row_is_not_a_completed_run(tmp_path):
    # All 20 training rows, then `Starting run_evals` never ends, no final checkpoint: the training steps
    # are done, the run's wrap-up (final eval, final checkpoint) is not.
    finding, _ = _stopped(_build(tmp_path, "stopped_in_final_eval"))
    assert finding is not None
    assert unreported_kill(finding) and finding.confidence == "medium"
    assert finding.steps == [20] and "`Starting run_evals` with no `took`" in finding.message
    assert "all 20 planned training steps were logged" in finding.message
    assert "final checkpoint" in finding.message


def test_a_plan_from_config_max_steps_only_is_an_upper_bound(tmp_path):
    finding, _ = _stopped(_build(tmp_path, "plan_in_config_only"))
    assert unreported_kill(finding) and finding.steps == [12]
    assert "step 12 of at most 40 planned" in finding.message


def test_a_metrics_row_cut_mid_append_says_the_writer_died_mid_write(tmp_path):
    # FORMATS.md 1.2: an unterminated last line is a crash mid-append. Step 9's row was being written:
    # step 9's work was done, the process died in the write (or the file was copied mid-write).
    finding, _ = _stopped(_build(tmp_path, "half_written_last_row"))
    assert finding.evidence["kind"] == "killed" and finding.confidence == "medium", finding.message
    assert finding.steps == [9] and "cut mid-write" in finding.message


def test_two_processes_in_one_log_still_name_the_last_launchs_stop(tmp_path):
    finding, _ = _stopped(_build(tmp_path, "interleaved_launches"))
    assert unreported_kill(finding) and finding.steps == [8]


def test_a_sweep_names_the_run_that_stopped(tmp_path):
    import subprocess

    folder = _build(tmp_path, "sweep_one_stopped")
    out = subprocess.run(
        [sys.executable, "-m", "trace_doctor.cli", "analyze", str(folder), "--no-html"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("lr-")}
    assert "TD115 Run killed or hung at step 7" in rows["lr-2e-5"]
    assert "TD115" not in rows["lr-1e-5"] and "TD115" not in rows["lr-4e-5"]


@pytest.mark.parametrize(
    ("line", "signal"),
    [
        ("Killed", "SIGKILL"),
        ("Killed: 9", "SIGKILL"),
        ("Terminated", "SIGTERM"),
        ("Terminated: 15", "SIGTERM"),
        ("zsh: terminated  python train.py", "SIGTERM"),
        ("/var/spool/slurmd/job4121/slurm_script: line 12: 4121 Killed                  python train.py", "SIGKILL"),
        ("slurmstepd: error: *** JOB 4121 ON node07 CANCELLED AT 2026-11-27T03:12:44 ***", "scheduler"),
        ("Terminated successfully after 3 retries", None),
        ("Killed process tree of the evaluator", None),
        ("killed 3 workers", None),
    ],
)
def test_kill_reports_are_told_from_prose(line, signal):
    from trace_doctor.ingest.parsers.log_kinds import classify_message

    found = classify_message(line, None, None)
    assert (found.fields["signal"] if found is not None and found.kind == "killed" else None) == signal


def test_a_console_only_capture_whose_bars_all_closed_is_not_stopped(tmp_path):
    # Every `Sampling batch N` bar reached its total: a closed bar is not work in flight.
    run = tmp_path / "done.out"
    run.write_text(stopped_shapes._rl_console(6, 6), encoding="utf-8")
    finding, outcome = _stopped(run)
    assert finding is None, finding.message
    assert "all 6 planned steps" in outcome.reason


def test_the_trainers_own_last_line_says_it_completed_whatever_bar_came_before(tmp_path):
    # An eval bar closed short of its total (a loop that broke out), then `Training completed successfully`
    # (rl/train.py's last line): the run ended on its own, even with the last planned row one short.
    run = tmp_path / "done.out"
    text = stopped_shapes._rl_console(6, 5) + stopped_shapes._tqdm("Evaluating", 4, 10) + "\n"
    run.write_text(text + "tinker_cookbook.rl.train:2687 [INFO] Training completed successfully\n", encoding="utf-8")
    finding, outcome = _stopped(run)
    assert finding is None, finding.message
    assert "Training completed successfully" in outcome.reason


def test_heartbeat_warnings_with_no_phase_line_to_follow_are_not_read_as_a_hold(tmp_path):
    # Without a phase line, an outage the run recovered from cannot be told from one at its end.
    folder = tmp_path / "no_phases"
    folder.mkdir()
    stopped_shapes.heartbeat_hang_in_sampling(folder)
    log = (folder / "logs.log").read_text().splitlines(True)
    (folder / "logs.log").write_text("".join(line for line in log if "misc_utils" not in line))
    finding, _ = _stopped(folder)
    assert not finding.evidence["kind"].startswith("hung"), finding.message
    assert "heartbeat_alive_s" not in finding.evidence["run_end"]


def test_a_log_in_a_layout_of_its_own_is_said_unread_not_empty(tmp_path):
    # Every line has a timestamp in front: no phase, plan or error in it is read. The rows still fall short
    # of their done_frac plan (sure), but "nothing left open" would be a claim about a log not read.
    finding, _ = _stopped(_build(tmp_path, "timestamped_log"))
    assert finding.evidence["kind"] == "stopped early" and finding.steps == [5] and finding.confidence == "medium"
    assert "has no line in the cookbook's layout" in finding.message
    assert "nothing left open" not in finding.message


def test_a_plan_from_the_configs_n_batches_is_read(tmp_path):
    # No plan line, no progress key: config.json's dataset_builder.n_batches (the arithmetic builder's
    # length) x num_epochs is the plan; 12 rows of 30 stopped short, 30 of 30 completed.
    finding, _ = _stopped(_build(tmp_path, "plan_from_config_n_batches"))
    assert finding is not None and finding.evidence["kind"] == "stopped early" and finding.steps == [12]
    assert finding.confidence == "medium" and "step 12 of 30 planned" in finding.message
    finding, outcome = _stopped(_build(tmp_path, "completed_by_config_n_batches"))
    assert finding is None and "all 30 planned steps" in outcome.reason
