"""TD115 run-stopped on stopped runs as real users pasted them (tests/stopped_shapes_pasted.py, each builder citing
the public report its shape comes from): what the user should read (kind, step, phase, decoded error, confidence)
as the files support it, and, for every line pattern read anew, lines that only look like it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stopped_shapes_pasted  # noqa: E402
from stopped_shapes import built, run_stopped, unreported_kill  # noqa: E402


def _stopped(tmp_path: Path, name: str):
    return run_stopped(built(tmp_path, stopped_shapes_pasted.CASES, name))[0]


def _kinds(lines: list[str]) -> list[tuple[str, str]]:
    from trace_doctor.ingest.parsers.logs import parse_lines

    rows, _ = parse_lines(lines, "console.log")
    return [(r["kind"], r["message"]) for r in rows]


def test_a_viewers_copy_with_each_lines_time_above_it_keeps_its_traceback(tmp_path):
    # tinker-cookbook#147. Before: the time lines broke the traceback, its final line was lost, and the run read
    # as 'killed ... no error'.
    finding = _stopped(tmp_path, "viewer_stamped_traceback")
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high", finding.message
    assert finding.steps == [12] and "No progress made in 7200.0s" in finding.message
    assert finding.evidence["error_cause"] is not None and "`Starting train` with no `took`" in finding.message


def test_a_pod_log_with_collector_times_reads_its_records_and_their_times(tmp_path):
    # `kubectl logs --timestamps`. Before: no record was read behind the times ('stopped early ... nothing left
    # open'); now the open `train` and two hours of heartbeat warnings after it make a hang on the service.
    finding = _stopped(tmp_path, "pod_log_hung_in_train")
    assert finding.evidence["kind"] == "hung on the service", finding.message
    assert finding.steps == [5] and "`Starting train` with no `took`" in finding.message
    assert finding.evidence["run_end"]["log_silence_s"] > 7200


def test_a_pod_log_that_ends_on_its_phase_line_does_not_claim_nothing_went_on(tmp_path):
    # The log's times end with its last line: they cannot say the process was gone right after it.
    finding = _stopped(tmp_path, "pod_log_killed_in_train")
    assert unreported_kill(finding) and finding.confidence == "medium", finding.message
    assert "the log cannot say" in finding.message and "too short a hold" not in finding.message


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        ("2026-03-05T10:00:01.123456789Z mod:20 [INFO] Starting train", "2026-03-05 10:00:01.123456"),
        ("2026-03-05T12:00:01+02:00 mod:20 [INFO] Starting train", "2026-03-05 10:00:01"),
        ("[2026-03-05 10:00:01,250] mod:20 [INFO] Starting train", "2026-03-05 10:00:01.250000"),
    ],
)
def test_a_collectors_time_before_a_record_is_its_time(line, kept):
    from trace_doctor.ingest.parsers.logs import parse_lines

    rows, _ = parse_lines([line], "pod.log")
    assert [(r["kind"], str(r["timestamp"])) for r in rows] == [("took", kept)]


@pytest.mark.parametrize(
    "line",
    [
        "2026-03-05 was the day mod:20 [INFO] Starting train",  # a date with no time: prose
        "2026-13-45 99:99:99 mod:20 [INFO] Starting train",  # no such time
        "20260305T100001 mod:20 [INFO] Starting train",  # not the form a collector writes
    ],
)
def test_only_a_real_time_in_front_is_taken_off(line):
    assert _kinds([line]) == []


def test_a_job_steps_oom_kill_names_the_oom_not_the_cancel_it_caused(tmp_path):
    # HAFS#101. Before: the step's `*** STEP ... CANCELLED` and srun's `task 4: Out Of Memory` were not read; the
    # OOM line must stay the reason when the scheduler's cancel follows it.
    finding = _stopped(tmp_path, "srun_step_oom")
    assert finding.evidence["kind"] == "killed" and finding.confidence == "high", finding.message
    assert "from the OOM killer" in finding.message and finding.fix.startswith("Give the process more memory")
    assert [k["text"][:12] for k in finding.evidence["run_end"]["kill_lines"]][-1] == "slurmstepd: "


def test_srun_reporting_a_tasks_crash_signal_is_a_native_crash(tmp_path):
    # HAFS#101 (log 2). Before: 'killed, medium, nothing says why'.
    finding = _stopped(tmp_path, "srun_step_bus_error")
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high", finding.message
    assert "task 289: Bus error" in finding.message and finding.steps == [8]


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("slurmstepd: error: *** STEP 3495064.0 ON orion-01-01 CANCELLED AT 2021-10-27T19:35:36 ***", "killed"),
        (
            "slurmstepd: error: *** STEP 191.batch ON c002 CANCELLED AT 2021-09-12T10:00:00 DUE TO TIME LIMIT ***",
            "killed",
        ),
        ("srun: error: Orion-01-01: task 4: Out Of Memory", "killed"),
        ("srun: error: node12: tasks 0-3: Killed", "killed"),
        ("srun: error: Orion-18-69: task 289: Bus error", "error"),
        # Lines that only look like them.
        ("srun: error: node12: task 0: Exited with exit code 1", None),
        ("srun: Terminating job step 3495064.0", None),
        ("srun: error: Unable to create step for job 12: Job/step already completing or completed", None),
        ("retrying after the task: Out Of Memory warning was logged", None),
    ],
)
def test_only_sruns_and_slurmstepds_stop_reports_are_read_as_one(line, kind):
    assert [k for k, _ in _kinds([line]) if k in ("killed", "error")] == ([kind] if kind else [])


def test_the_sdk_retrying_a_500_as_the_log_ends_is_a_wait_on_the_service(tmp_path):
    # tinker-feedback#80. Before: 'killed ... no error', the retries listed as mere activity after the phase line.
    finding = _stopped(tmp_path, "retrying_500_in_train")
    assert finding.evidence["kind"] == "hung on the service" and finding.confidence == "medium", finding.message
    assert finding.steps == [9] and "waiting on the service when the log ends: 6 line(s)" in finding.message
    assert "Retrying due to status code 500" in finding.message and "not recorded" in finding.message


def test_a_notebook_that_ends_paused_for_capacity_is_a_wait_on_the_service_not_a_pass(tmp_path):
    # tinker-cookbook#652. Before: passed ('nothing says the run stopped early'); and with no metrics, config or
    # phase line the step is not claimed ('before its first step').
    finding = _stopped(tmp_path, "notebook_paused_for_capacity")
    assert finding.evidence["kind"] == "hung on the service" and finding.confidence == "medium", finding.message
    assert "running short on capacity" in finding.message and finding.steps == []
    assert "before its first step" not in finding.message and "do not record" in finding.title


def _rl_tail(tmp_path: Path, tail: str) -> Path:
    from stopped_shapes import _phase, _rl_folder, rl_log

    _rl_folder(tmp_path, 40, 9)
    (tmp_path / "logs.log").write_text(rl_log(40, 9, _phase("sample", None) + tail))
    return tmp_path


@pytest.mark.parametrize(
    ("tail", "kind"),
    [
        # A judge's client (openai) retrying inside the user's reward: not the tinker SDK waiting on Tinker.
        ("openai._base_client:1037 [INFO] Retrying request to /chat/completions in 0.4 seconds\n", "killed"),
        # The SDK retried, then the run went on to its next phase: the retry is not where it stopped.
        (
            stopped_shapes_pasted.RETRY_500
            + "tinker_cookbook.utils.misc_utils:23 [INFO] sample took 9.00 seconds\n"
            + "tinker_cookbook.utils.misc_utils:20 [INFO] Starting train\n",
            "killed",
        ),
        # The terminal reports the kill after the retries: killed, for sure.
        (stopped_shapes_pasted.RETRY_500 * 2 + "Killed\n", "killed"),
    ],
)
def test_only_the_sdks_own_wait_that_ends_the_log_is_read_as_one(tmp_path, tail, kind):
    finding, _, _ = run_stopped(_rl_tail(tmp_path, tail))
    assert finding.evidence["kind"] == kind, finding.message
    assert finding.evidence.get("kill_reported", False) == tail.endswith("Killed\n")
    assert "service_waits" not in finding.evidence["run_end"] or tail.endswith("Killed\n")


def test_an_error_logged_with_no_traceback_does_not_claim_the_process_exited(tmp_path):
    # tinker-cookbook#372: the retry handler's ERROR inside `kl_vs_base`, then "it hangs indefinitely after the
    # error". Before: 'crashed' with nothing to say the process may still be there.
    finding = _stopped(tmp_path, "error_then_hang_in_kl_vs_base")
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "medium", finding.message
    assert finding.steps == [7] and "`Starting kl_vs_base` with no `took`" in finding.message
    assert "exhausting retries" in finding.message and "hung on" in finding.message
    assert finding.evidence["error_cause"] is not None


def test_a_raised_traceback_still_says_the_run_ended_with_it(tmp_path):
    finding = _stopped(tmp_path, "viewer_stamped_traceback")
    assert "No traceback follows it" not in finding.message


def test_richs_final_line_wrapped_at_its_width_is_decoded_whole(tmp_path):
    # rich word-wraps the `Type: message` line at the console's width. Before: only its first line was read, and
    # the context-window error was decoded as a generic malformed request.
    finding = _stopped(tmp_path, "rich_wrapped_final_line")
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high", finding.message
    assert finding.evidence["error_cause"] == "the prompt plus max_tokens exceeds the model's context window"
    assert "> 32768." in finding.message and "wandb" not in finding.message.split("It ended with", 1)[1]


def _rich_rows(final: str, after: list[str]) -> list[dict]:
    from trace_doctor.ingest.parsers.logs import parse_lines

    box = stopped_shapes_pasted._rich_box(stopped_shapes_pasted.RICH_FRAMES).splitlines()
    rows, _ = parse_lines([*box, final, *after], "output.log")
    return [r for r in rows if r["kind"] == "error"]


FULL_LINE = "ValueError: Loss is NaN at step 12 with the learning rate at 4e-4 and a batch"  # 77 wide


@pytest.mark.parametrize(
    ("final", "after"),
    [
        # A short final line: rich had room for the next line's first word, so that line is not its rest.
        ("ValueError: Loss is NaN at step 12", ["Sampling batch 8: 100%|██████████| 64/64"]),
        (FULL_LINE, ["tinker_cookbook.rl.train:300 [INFO] Resumed"]),  # a record starts
        (FULL_LINE, ["", "wandb:"]),  # a blank line ends it
    ],
)
def test_only_a_line_rich_had_to_wrap_is_taken_onto_the_error(final, after):
    [error] = _rich_rows(final, after)
    assert error["message"] == final


def test_a_kill_or_a_traceback_after_a_full_width_final_line_is_not_its_rest():
    # The shell's `Killed` and the next traceback have first words that would not fit after a 77-wide line:
    # still never the message's rest (before: the kill report was swallowed into the error's message).
    from trace_doctor.ingest.parsers.logs import parse_lines

    box = stopped_shapes_pasted._rich_box(stopped_shapes_pasted.RICH_FRAMES).splitlines()
    rows, _ = parse_lines([*box, FULL_LINE, "Killed"], "output.log")
    assert [r["message"] for r in rows if r["kind"] == "error"] == [FULL_LINE]
    assert [r["kind"] for r in rows if r["kind"] == "killed"] == ["killed"]
    second = ["Traceback (most recent call last):", '  File "t.py", line 1, in <module>', "RuntimeError: second"]
    rows, _ = parse_lines([*box, FULL_LINE, *second], "output.log")
    assert [r["message"] for r in rows if r["kind"] == "error"] == [FULL_LINE, "RuntimeError: second"]


def test_a_screen_of_full_width_lines_after_the_final_line_is_taken_only_so_far():
    # Each line taken decodes the joined message again: unbounded, 4,000 such lines took minutes to parse.
    from trace_doctor.ingest.parsers.logs import MAX_WRAPPED_CHARS, parse_lines

    box = stopped_shapes_pasted._rich_box(stopped_shapes_pasted.RICH_FRAMES).splitlines()
    filler = [
        "wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww"[:78]
    ] * 4000
    rows, _ = parse_lines([*box, FULL_LINE, *filler], "output.log")
    [error] = [r for r in rows if r["kind"] == "error"]
    assert len(error["_fields"]["exception_message"]) <= MAX_WRAPPED_CHARS


def test_a_final_line_wider_than_the_box_was_not_wrapped_at_it():
    # A console wider than the box (rich's traceback width) wraps the final line later, if at all: no join.
    wide = "RuntimeError: " + "x" * 90
    [error] = _rich_rows(wide, ["next line of the console"])
    assert error["message"] == wide


def test_hours_on_starting_train_names_the_phase_and_does_not_claim_the_kill(tmp_path):
    # tinker-cookbook#354: no times, no error, the log stops on `Starting train` after the user's trajectory
    # printout, and the user says it sat there for hours. Before: headlined 'Run killed at step 6' while its own
    # message said the files cannot tell a kill from a run still going.
    finding = _stopped(tmp_path, "hours_on_starting_train")
    assert unreported_kill(finding) and finding.confidence == "medium", finding.message
    assert finding.title == "Run killed or hung at step 6" and "(killed)" not in finding.message
    assert finding.steps == [6] and "`Starting train` with no `took`" in finding.message
    assert "is still running, stuck, the files cannot say" in finding.message
    # What would tell the two apart.
    assert all(said in finding.message for said in ("py-spy dump --pid", "task dump", "modification time"))
    assert finding.fix.startswith("Find out whether the process is still there")


@pytest.mark.parametrize(
    ("tail", "kind", "confidence"),
    [
        ("Killed\n", "killed", "high"),  # the shell's report after the phase line
        (
            "tinker_cookbook.utils.misc_utils:20 [INFO] Starting train\nTraceback (most recent call last):\n"
            '  File "/home/u/train.py", line 80, in <module>\n    main()\nValueError: boom\n',
            "crashed",
            "high",
        ),
    ],
)
def test_a_phase_line_followed_by_a_kill_report_or_a_traceback_still_says_so(tmp_path, tail, kind, confidence):
    finding, _, _ = run_stopped(_rl_tail(tmp_path, tail))
    assert finding.evidence["kind"] == kind and finding.confidence == confidence, finding.message
    assert "stopped there, or still running" not in finding.message


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("killed_then_prompt", "a SIGKILL, most often the kernel's OOM killer"),  # the shell's prompt after it
        ("batch_stderr_oom", "from the OOM killer"),  # bash's report, then slurmstepd's cgroup line
    ],
)
def test_a_terminal_pasted_with_its_prompt_or_a_batch_stderr_keeps_the_kill_sure(tmp_path, case, said):
    # ArjunaUsers#52's two captures (already read right; pinned).
    finding = _stopped(tmp_path, case)
    assert finding.evidence["kind"] == "killed" and finding.confidence == "high", finding.message
    assert finding.steps == [6] and said in finding.message and "`Starting sample` with no `took`" in finding.message


def test_a_stuck_request_one_rollout_caught_is_not_the_stop(tmp_path):
    # tinker-cookbook#234: the error and its traceback come before the step's later phases; the run went on and
    # was killed in `train`.
    finding = _stopped(tmp_path, "caught_stuck_rollout_then_killed")
    assert finding.evidence["kind"] == "killed" and finding.confidence == "high", finding.message
    assert finding.steps == [3] and "`Starting train` with no `took`" in finding.message
    assert "No progress made" not in finding.message


def test_a_cookbook_console_that_crashed_at_start_up_is_still_before_its_first_step(tmp_path):
    # The corpus' bash_codeforces first launch (wandb/.../output.log): cookbook records, then the SDK-too-old
    # traceback at client creation, no phase line: the cookbook logs its phases per step, so no step had begun.
    from stopped_shapes import ML_LOG, TRACEBACK, _line

    final = (
        "tinker.BadRequestError: Error code: 400 - {'detail': 'The version of the Tinker SDK you are using is no "
        "longer supported. Please update to the latest version.'}\n"
    )
    (tmp_path / "output.log").write_text(_line(ML_LOG, "Logging to: tmp/tinker-runs/x") + TRACEBACK + final)
    finding, _, _ = run_stopped(tmp_path)
    assert finding.evidence["kind"] == "crashed" and finding.title == "Run crashed before its first step"


# ---- Python's default logging layout (logging.basicConfig() with no format) -------------------------------------


def test_the_default_logging_layout_is_read_as_the_cookbooks_records():
    # The same launch in both layouts: every event the cookbook's layout gives (phases, plan, session, the SDK's
    # retries) comes out of the default one with the same kind, message, level and fields, and its logger.
    from stopped_shapes import _phase, rl_log

    from trace_doctor.ingest.parsers.logs import parse_lines

    text = rl_log(40, 2, _phase("train", None) + stopped_shapes_pasted.RETRY_500)
    cookbook, _ = parse_lines(text.splitlines(), "logs.log")
    default, _ = parse_lines(stopped_shapes_pasted._default_layout(text).splitlines(), "train.log")

    def seen(rows):
        return [(r["kind"], r["message"], r["level"], r["_fields"], (r["logger"] or "").split(":")[0]) for r in rows]

    assert len(cookbook) > 10 and seen(default) == seen(cookbook)


def test_a_console_in_the_default_layout_ending_on_the_sdks_retries_is_a_wait_on_the_service(tmp_path):
    # tinker-feedback#80's shape as logging.basicConfig() prints it. Before: no record was read, the run read as
    # stopped early with nothing open.
    finding = _stopped(tmp_path, "default_layout_retrying_500")
    assert finding.evidence["kind"] == "hung on the service" and finding.confidence == "medium", finding.message
    assert finding.steps == [9] and "`Starting train` with no `took`" in finding.message
    assert "Retrying due to status code 500" in finding.message


def test_an_error_record_in_the_default_layout_owns_its_traceback(tmp_path):
    finding = _stopped(tmp_path, "default_layout_crash")
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high", finding.message
    assert finding.steps == [12] and "No progress made in 7200.0s" in finding.message
    assert finding.evidence["error_cause"] is not None


@pytest.mark.parametrize(
    "line",
    [
        "WARNING: the config key `lr` is deprecated",  # a bare print: a space after the level
        "ERROR: Could not find a version that satisfies the requirement tinker==9.9",  # pip
        "INFO:https://wandb.ai/u/rl/runs/x",  # a URL is no logger
        "INFO:root",  # no message field
        "NOTICE:tinker_cookbook.rl.train:Starting train",  # no such level
    ],
)
def test_only_the_default_layout_itself_is_read_as_a_record(line):
    from trace_doctor.ingest.parsers.logs import parse_lines

    rows, _ = parse_lines([line], "console.log")
    assert [r for r in rows if r["logger"] is not None or r["level"] is not None] == []


# ---- logs pasted into GitHub markdown ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["quoted_issue", "fenced_issue", "quoted_and_fenced_issue"])
def test_a_log_pasted_into_an_issue_is_read_as_the_lines_it_quotes(tmp_path, case):
    # tinker-cookbook#147's step 12 and stuck-request traceback as an issue body, the log and the traceback in two
    # blocks. Before: quoted, no line was a record or a traceback (nothing read).
    folder = built(tmp_path, stopped_shapes_pasted.CASES, case)
    finding, _, _ = run_stopped(folder / "issue.md")
    assert finding.evidence["kind"] == "crashed" and finding.confidence == "high", finding.message
    assert finding.steps == [12] and "`Starting train` with no `took`" in finding.message
    assert "No progress made in 7200.0s" in finding.message and finding.evidence["error_cause"] is not None


@pytest.mark.parametrize(
    ("lines", "kinds"),
    [
        (["> Killed"], ["killed"]),  # a quoted kill report is one
        ([">>> Killed"], []),  # Python's prompt is no quote
        ([">Killed"], []),  # GFM takes `>Killed` as a quote too, but no one writes a quote so: left as it is
        (["Traceback (most recent call last):", "```", "  File 'x.py', line 1", "ValueError: x"], ["error"]),
        (["Traceback (most recent call last):", "``` not a fence", "ValueError: x"], []),
    ],
)
def test_only_markdowns_own_markers_are_taken_off(lines, kinds):
    assert [k for k, _ in _kinds(lines)] == kinds


# ---- moreutils ts ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["ts_default_hang", "ts_since_start_hang", "ts_microseconds_hang"])
def test_a_console_piped_through_ts_reads_its_records_and_their_times(tmp_path, case):
    # Before (`ts`, `ts -s`): no record was read behind the times; the run read as stopped early, nothing open.
    finding = _stopped(tmp_path, case)
    assert finding.evidence["kind"] == "hung on the service", finding.message
    assert finding.steps == [5] and "`Starting train` with no `took`" in finding.message
    assert finding.evidence["run_end"]["log_silence_s"] > 7200


@pytest.mark.parametrize(
    ("lines", "kept"),
    [
        (["Mar 05 10:00:01 mod:20 [INFO] Starting train"], ["1904-03-05 10:00:01"]),
        (["Feb 29 10:00:01 mod:20 [INFO] Starting train"], ["1904-02-29 10:00:01"]),
        # `ts -s` past a day, and `ts` past New Year: the clock goes round, the times between lines stay right.
        (
            ["23:59:59 mod:20 [INFO] Starting train", "00:00:02 mod:23 [INFO] train took 3.00 seconds"],
            ["1904-01-01 23:59:59", "1904-01-02 00:00:02"],
        ),
        (
            ["Dec 31 23:59:59 mod:20 [INFO] Starting train", "Jan 01 00:00:02 mod:23 [INFO] train took 3.00 seconds"],
            ["1904-12-31 23:59:59", "1905-01-01 00:00:02"],
        ),
        (["2026-03-05 10:00:01.250117 mod:20 [INFO] Starting train"], ["2026-03-05 10:00:01.250117"]),
    ],
)
def test_ts_times_before_a_record_are_its_time(lines, kept):
    from trace_doctor.ingest.parsers.logs import parse_lines

    rows, _ = parse_lines(lines, "train.log")
    assert [(r["kind"], str(r["timestamp"])) for r in rows] == [("took", k) for k in kept]


@pytest.mark.parametrize(
    "line",
    [
        "Mar 05 was the day mod:20 [INFO] Starting train",  # a date with no time: prose
        "10:00 mod:20 [INFO] Starting train",  # no seconds
        "1:02:03 mod:20 [INFO] Starting train",  # an hour of one digit: not ts's %H
        "25:61:00 mod:20 [INFO] Starting train",  # no such time
        "Mar 32 10:00:01 mod:20 [INFO] Starting train",  # no such day
    ],
)
def test_only_a_ts_time_in_front_is_taken_off(line):
    assert _kinds([line]) == []


def test_a_time_with_no_date_is_no_wall_clock_anchor(tmp_path):
    # `ts`'s default names no year: its times measure the holds, they place nothing on the calendar.
    from trace_doctor.derive.wall_clock import wall_clock

    folder = built(tmp_path, stopped_shapes_pasted.CASES, "ts_default_hang")
    _, _, result = run_stopped(folder)
    anchors = wall_clock(result.run, None, []).anchors
    assert not [a for a in anchors if a["what"] == "timed log lines"]
    dated = built(tmp_path, stopped_shapes_pasted.CASES, "ts_microseconds_hang")
    _, _, result = run_stopped(dated)
    assert [a["first"][:10] for a in wall_clock(result.run, None, []).anchors if a["what"] == "timed log lines"] == [
        "2026-03-05"
    ]


# ---- the log's last timed line -----------------------------------------------------------------------------------


def test_the_hold_is_measured_to_the_logs_last_timed_line_not_its_last_notable_one(tmp_path):
    # A pod log whose last two hours are httpx's 408 polls of the pending `train` (no line of interest). Before:
    # the log's times were read as ending at `Starting train` (0 s), and the run as killed with nothing held.
    finding = _stopped(tmp_path, "pod_log_polling_in_train")
    assert finding.evidence["run_end"]["log_silence_s"] == pytest.approx(7200 + 24 * 300 - 7200, abs=2)
    assert finding.evidence["kind"] == "hung on the service", finding.message
    assert re.search(r"720\d s of log after the last phase line", finding.message), finding.message


def test_the_last_timed_line_is_kept_only_when_it_says_more_than_the_events(tmp_path):
    from trace_doctor.ingest.parsers.logs import parse_lines

    stamped = "2026-03-05T10:00:0{}Z {}"
    # Its time is an event's already: nothing added.
    rows, _ = parse_lines([stamped.format(1, "mod:20 [INFO] Starting train"), stamped.format(1, "plain")], "p.log")
    assert [r["kind"] for r in rows] == ["took"]
    # Later than every event: kept, after them.
    rows, _ = parse_lines([stamped.format(1, "mod:20 [INFO] Starting train"), stamped.format(5, "plain")], "p.log")
    assert [(r["kind"], r["line"], str(r["timestamp"])) for r in rows] == [
        ("took", 1, "2026-03-05 10:00:01"),
        ("last-timed-line", 2, "2026-03-05 10:00:05"),
    ]
    # An untimed event after it (a traceback with no collector time): the timed line stays in its place.
    lines = [stamped.format(1, "mod:20 [INFO] Starting train"), stamped.format(5, "plain"), "Killed"]
    rows, _ = parse_lines(lines, "p.log")
    assert [(r["kind"], r["line"]) for r in rows] == [("took", 1), ("last-timed-line", 2), ("killed", 3)]
    # An untimed log has none.
    rows, _ = parse_lines(["mod:20 [INFO] Starting train", "plain"], "p.log")
    assert [r["kind"] for r in rows] == ["took"]
