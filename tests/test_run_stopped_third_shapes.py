"""TD115 run-stopped on a third set of stop shapes (tests/stopped_shapes_third.py): how tools outside the trainer
print a run's end. rich's boxed traceback, a Windows (CRLF) capture, faulthandler's dump of a native crash and
the shell's crash-signal report alone, the tinker SDK's errors raised at the end (decoded, with their own fix and
the session id when the service's side failed), a container's, the kernel cgroup's, a launcher's and GNU
timeout's kill reports, a kill during start-up, W&B's end-of-run summary after a clean end, a traceback and a
SIGTERM, metrics-only SFT and DPO runs cut mid-epoch, and a sweep of a crash, a hang and a completed run.

Each test states the reading a user should get (kind, step, phase, confidence) as the files support it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trace_doctor.api import analyze, load_run

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stopped_shapes_third  # noqa: E402
from stopped_shapes import built, run_stopped, unreported_kill  # noqa: E402


def _stopped(path: Path):
    return run_stopped(path)[:2]


def _build(tmp_path: Path, name: str) -> Path:
    return built(tmp_path, stopped_shapes_third.CASES, name)


def test_richs_boxed_traceback_is_a_decoded_crash_with_its_own_fix(tmp_path):
    # Before: the box hid the traceback, and the run read as 'stopped early ... no error'.
    finding, _ = _stopped(_build(tmp_path, "rich_traceback_crash"))
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high", finding.message
    assert finding.steps == [7] and "BadRequestError: Error code: 400" in finding.message
    assert finding.evidence["error_cause"] == "the prompt plus max_tokens exceeds the model's context window"
    assert finding.fix.startswith("To fix it: shorten the prompt or lower max_tokens.")


def test_a_nan_guard_raised_in_richs_box_with_colour_codes_is_the_crash_in_train(tmp_path):
    finding, _ = _stopped(_build(tmp_path, "rich_traceback_nan"))
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high", finding.message
    assert finding.steps == [12] and "`ValueError: Loss is NaN at step 12" in finding.message
    assert "`Starting train` with no `took`" in finding.message and "\x1b" not in finding.message


@pytest.mark.parametrize(
    ("case", "kind", "shown"),
    [("crlf_console_traceback", "crashed", "BadRequestError"), ("crlf_console_killed", "killed", "`Killed`")],
)
def test_a_windows_capture_reads_as_its_unix_twin(tmp_path, case, kind, shown):
    finding, _ = _stopped(_build(tmp_path, case))
    assert finding.evidence["kind"] == kind and finding.confidence == "high", finding.message
    assert shown in finding.message and "\r" not in finding.message


@pytest.mark.parametrize("case", ["faulthandler_segfault", "faulthandler_abort"])
def test_faulthandlers_fatal_error_is_a_native_crash_naming_the_crashing_threads_frames(tmp_path, case):
    # Before: killed, medium, 'the files cannot say'.
    finding, _ = _stopped(_build(tmp_path, case))
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high", finding.message
    assert finding.steps == [9] and "`Starting sample` with no `took`" in finding.message
    assert "crash in native code" in finding.message
    # The current thread's frames, innermost first; the SDK thread's idle loop is not the crash.
    assert "embedding (torch/nn/functional.py:2264) ← score (reward_model.py:41)" in finding.message
    assert "selectors" not in finding.message
    assert "faulthandler" in finding.fix


def test_the_shells_segfault_report_alone_is_a_sure_native_crash(tmp_path):
    finding, _ = _stopped(_build(tmp_path, "shell_segfault_only") / "slurm-4121.out")
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high", finding.message
    assert finding.steps == [9] and "Segmentation fault" in finding.message
    assert "crash in native code" in finding.message and "The thread that crashed" not in finding.message


@pytest.mark.parametrize(
    ("case", "cause", "session"),
    [
        ("sdk_rate_limited", "too many concurrent requests", False),
        ("sdk_internal_server_error", "a server-side bug", True),
        ("sdk_connection_error", "the service is down", True),
        ("sdk_stuck_requests", "stuck-request limit", True),
    ],
)
def test_sdk_errors_raised_at_the_end_are_decoded_with_their_advice(tmp_path, case, cause, session):
    finding, _ = _stopped(_build(tmp_path, case))
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high", finding.message
    assert finding.steps == [5] and cause in finding.message
    assert "decoded cause is above" not in finding.fix  # the error's own fix, not the generic one
    quoted = stopped_shapes_third.SESSION_ID in finding.message
    assert quoted == session, finding.message


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("cgroup_oom", "OOM killer"),
        ("container_oomkilled", "OOM killer"),
        ("exit_code_137", "SIGKILL"),
        ("gnu_timeout_term", "SIGTERM at the job's time limit"),
    ],
)
def test_a_containers_or_launchers_report_makes_the_kill_sure(tmp_path, case, said):
    # Before: none of these was read as a kill report: killed, medium, 'the files cannot say'.
    finding, _ = _stopped(_build(tmp_path, case))
    assert finding.evidence["kind"] == "killed" and finding.confidence == "high", finding.message
    assert finding.steps == [5] and said in finding.message and "cannot say" not in finding.message


def test_a_kill_during_start_up_is_before_the_first_step_not_mid_step(tmp_path):
    finding, _ = _stopped(_build(tmp_path, "startup_killed"))
    assert finding.evidence["kind"] == "killed" and finding.confidence == "high"
    assert finding.steps == [] and "before its first step" in finding.message
    assert "mid-step" not in finding.message and "Run killed before its first step" == finding.title


def test_a_start_up_with_nothing_after_it_is_a_low_confidence_stop_at_step_0_of_its_plan(tmp_path):
    # Still starting up, or stopped: nothing says which, so the stop is low-confidence and says both; the config's
    # max_steps places it at step 0 of at most 40 (tests/test_run_stopped_unstarted.py; it passed with 'no planned
    # length to fall short of' before).
    finding, _ = _stopped(_build(tmp_path, "startup_silent"))
    assert finding.evidence["kind"] == "stopped early" and finding.confidence == "low"
    assert "at step 0 of at most 40 planned" in finding.message and "still running" in finding.message


def test_wandbs_summary_after_a_completed_run_stays_silent(tmp_path):
    finding, outcome = _stopped(_build(tmp_path, "wandb_summary_completed"))
    assert finding is None and outcome.status == "passed"


@pytest.mark.parametrize(
    ("case", "kind"), [("wandb_summary_after_traceback", "crashed"), ("wandb_summary_after_kill", "killed")]
)
def test_wandbs_summary_after_the_end_does_not_hide_it(tmp_path, case, kind):
    finding, _ = _stopped(_build(tmp_path, case))
    assert finding.evidence["kind"] == kind and finding.confidence == "high", finding.message
    assert finding.steps == [5] and "wandb:" not in finding.message


@pytest.mark.parametrize(
    ("case", "step", "planned"), [("sft_metrics_only_killed", 37, 120), ("dpo_metrics_only_killed", 23, 60)]
)
def test_metrics_only_runs_cut_mid_epoch_are_short_of_their_plan(tmp_path, case, step, planned):
    finding, _ = _stopped(_build(tmp_path, case))
    assert finding.evidence["kind"] == "stopped early" and finding.confidence == "medium", finding.message
    assert finding.steps == [step] and f"step {step} of {planned} planned" in finding.message


def test_a_sweep_of_a_crash_a_hang_and_a_completed_run_reads_each(tmp_path):
    sweep = _build(tmp_path, "sweep_crash_hang_done")
    done, _ = _stopped(sweep / "lr-1e-5")
    crashed, _ = _stopped(sweep / "lr-2e-5")
    hung, _ = _stopped(sweep / "lr-4e-5")
    assert done is None
    assert crashed.evidence["kind"] == "crashed" and crashed.steps == [7] and "a server-side bug" in crashed.message
    assert hung.evidence["kind"] == "hung on the service" and hung.steps == [4]
    assert stopped_shapes_third.SESSION_ID in hung.message


def test_the_final_checkpoint_save_after_every_row_is_the_wrap_up(tmp_path):
    finding, _ = _stopped(_build(tmp_path, "sft_eval_after_last_row"))
    assert unreported_kill(finding) and finding.steps == [20], finding.message
    assert "wrap-up" in finding.message and "`Starting save_checkpoint` with no `took`" in finding.message


@pytest.mark.parametrize(
    ("case", "kind", "frame"),
    [
        ("pyspy_dump_hang", "hung in user code", "score (reward.py:212)"),
        ("pyspy_dump_in_sdk", "hung on the service", "result (tinker/lib/public_interfaces/api_future.py:132)"),
        ("faulthandler_watchdog_hang", "hung in user code", "score (reward_model.py:41)"),
        (
            "faulthandler_watchdog_in_sdk",
            "hung on the service",
            "result (tinker/lib/public_interfaces/api_future.py:132)",
        ),
    ],
)
def test_a_stack_dump_of_the_live_process_is_a_hang_where_its_main_thread_was(tmp_path, case, kind, frame):
    # Before: killed, 'the files cannot say' — yet the dump was taken of the process, alive, sitting there.
    finding, _ = _stopped(_build(tmp_path, case))
    assert finding.evidence["kind"] == kind and finding.confidence == "medium", finding.message
    assert frame in finding.message and "dump of the live process, main thread" in finding.message
    assert "killed" not in finding.message and stopped_shapes_third.SESSION_ID in finding.message
    # The SDK's idle thread is not the main thread.
    assert "select (selectors.py" not in finding.message and "_run (tinker" not in finding.message


def test_the_watchdogs_timer_is_the_least_the_state_held(tmp_path):
    finding, _ = _stopped(_build(tmp_path, "faulthandler_watchdog_hang"))
    assert finding.evidence["stuck_s"] == 600 and "600 s timer had run out" in finding.message


def test_a_watchdog_dump_the_run_moved_on_from_is_not_where_it_stopped(tmp_path):
    finding, _ = _stopped(_build(tmp_path, "faulthandler_watchdog_then_progress"))
    assert unreported_kill(finding) and finding.steps == [8], finding.message
    assert "dump of the live process" not in finding.message


@pytest.mark.parametrize("case", ["exception_group_crash", "loguru_traceback_crash", "ipython_traceback_crash"])
def test_a_traceback_in_another_layout_is_the_decoded_crash(tmp_path, case):
    # Before: killed, medium. An exception group's sub-exception is the cause, not the group that wraps it;
    # loguru's `> File` marker and IPython's `File ...:120, in f` / `--> 120` lines are frames, not the end.
    finding, _ = _stopped(_build(tmp_path, case))
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high", finding.message
    assert finding.steps in ([5], [7]) and "BadRequestError: Error code: 400" in finding.message
    assert finding.evidence["error_cause"] == "the prompt plus max_tokens exceeds the model's context window"


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("Memory cgroup out of memory: Killed process 4121 (python) total-vm:812kB", "killed"),
        ("ERROR: Job 1 failed with return code list: [137]", "killed"),
        ("timeout: sending signal KILL to command 'python'", "killed"),
        ("Segmentation fault (core dumped)", "error"),
        ("zsh: segmentation fault  python train.py", "error"),
        # Lines that only look like them.
        ("Processed 137 examples in 143 s", None),
        ("Aborted request 3, retrying", None),
        ("Process 3: started worker", None),
        ("Thread 3 (idle) waiting for work", None),
        ("Timeout (0:00:05)!", None),
    ],
)
def test_only_a_stop_report_is_read_as_one(line, kind):
    from trace_doctor.ingest.parsers.logs import parse_lines

    rows, _ = parse_lines([line], "console.log")
    assert [r["kind"] for r in rows if r["kind"] in ("killed", "error", "live-stack")] == ([kind] if kind else [])


def test_a_watched_hang_placed_only_by_its_open_phase_is_not_sure_of_the_side(tmp_path):
    # RL, 5 of 40 steps, the log ends inside step 5's `train` (a phase that waits on the service) and the
    # watch saw it hold: the hold is sure, which side held it is not (no dump, no SDK task, no live stack).
    from stopped_shapes import _phase, _rl_folder, rl_log

    _rl_folder(tmp_path, 40, 5)
    tail = _phase("sample", 5.0) + _phase("assemble_training_data", 1.0) + _phase("train", None)
    (tmp_path / "logs.log").write_text(rl_log(40, 5, tail))
    run = load_run(str(tmp_path))
    run.meta.watched_stall_s = 0.4
    [finding] = [f for f in analyze(run).findings if f.rule == "run-stopped"]
    assert finding.evidence["kind"] in ("hung on the service", "hung in user code", "hung")
    assert finding.confidence == "medium"
    assert "saw nothing written for 0.40 s" in finding.message
