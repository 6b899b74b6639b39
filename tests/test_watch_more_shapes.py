"""`trace-doctor watch` on live shapes beyond the cookbook writer's own (tests/test_watch.py): a metrics-only run,
a console-only one, a log rotated mid-watch, a relaunch in the same folder, a resume's rewrite of metrics.jsonl,
a folder still empty, a crash, a sweep whose runs start late, hooks that fail or hang, very fast steps.

A writer thread appends cookbook lines as the watch reaches the points a script names (it waits on the
watch's state, never on a bare sleep); the watch runs in the test's thread with short policy bounds.
"""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from trace_doctor.errors import RequestError
from trace_doctor.ingest.live_run import LiveRun
from trace_doctor.policy.live import WatchPolicy
from trace_doctor.watch import EXIT_DONE, EXIT_STALLED, EXIT_STOPPED, Watch, follow
from trace_doctor.watch_sweep import WatchSweep

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "fixtures"))
from sim.textlog import metrics_table_record  # noqa: E402

# A stall bound well above a loaded box's scheduling hiccups, well below a test's time.
QUIET = WatchPolicy(min_stall_s=1.0, analysis_interval_s=0.5, first_step_stall_s=1.5)
PHASE = "tinker_cookbook.utils.misc_utils:42 [INFO] "


def _row(step: int, planned: int, step_s: float = 0.05) -> bytes:
    return (
        json.dumps(
            {"step": step, "progress": (step + 1) / planned, "train_mean_nll": 0.5, "time/step": step_s}
        ).encode()
        + b"\n"
    )


def _launch(planned: int) -> bytes:
    return (
        "root:791 [INFO] Command line invocation: python -m tinker_cookbook.recipes.sl_basic log_path=/tmp/run\n"
        f"tinker_cookbook.supervised.train:431 [INFO] Training for {planned} batches x 1 epochs = {planned} steps\n"
    ).encode()


def _phase(text: str) -> bytes:
    return (PHASE + text + "\n").encode()


def _console_step(step: int, planned: int) -> bytes:
    """One step of a console-only run: its timed phases, then the metrics table the cookbook prints."""
    table = metrics_table_record({"progress": (step + 1) / planned, "train_mean_nll": 0.5, "time/step": 0.05}, step)
    return b"".join(
        [
            _phase("Starting get_batch"),
            _phase("get_batch took 0.01 seconds"),
            _phase("Starting train_step"),
            _phase("train_step took 0.04 seconds"),
            table.encode() + b"\n",
        ]
    )


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


class _Script(threading.Thread):
    """Writes each action once its condition on the watch holds (a condition, not a sleep: a loaded box only
    makes it later). A script that cannot go on within `timeout_s` stops; the test's asserts then fail."""

    def __init__(self, watch, steps: list[tuple[Callable[[], bool], Callable[[], None]]], timeout_s: float = 8.0):
        super().__init__(daemon=True)
        self.watch, self.steps, self.deadline = watch, steps, time.monotonic() + timeout_s

    def run(self) -> None:
        for ready, act in self.steps:
            while not ready():
                if time.monotonic() > self.deadline:
                    return
                time.sleep(0.01)
            act()


def _follow(watch, **options) -> tuple[int, list[dict]]:
    out = io.StringIO()
    code = follow(watch, fmt="jsonl", interval=0.02, out=out, max_looks=options.pop("max_looks", 600), **options)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def _steps(events: list[dict]) -> list[int]:
    return [e["step"] for e in events if e["event"] == "progress"]


def test_a_metrics_only_run_that_goes_quiet_is_stalled_at_its_next_step_with_no_phase_invented(tmp_path):
    (tmp_path / "metrics.jsonl").write_bytes(b"".join(_row(step, 20) for step in range(5)))
    code, events = _follow(Watch(tmp_path, policy=QUIET), exit_on_stall=True)
    assert code == EXIT_STALLED and _steps(events) == [0, 1, 2, 3, 4]
    [stalled] = [e for e in events if e["event"] == "stalled"]
    # No trace, no log: the step after the last row is in flight, and what it is inside is not known.
    assert stalled["step"] == 5 and stalled["phase"] is None and stalled["in_flight"] == []
    assert "the files do not say" in stalled["message"]
    assert [e["planned"] for e in events if e["event"] == "progress"] == [20] * 5


def test_a_metrics_only_run_that_completes_is_done(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(_row(0, 8))
    watch = Watch(tmp_path, policy=QUIET)
    script = _Script(
        watch, [(lambda s=s: watch.last_step == s - 1, lambda s=s: _append(metrics, _row(s, 8))) for s in range(1, 8)]
    )
    script.start()
    code, events = _follow(watch, exit_on_stall=True)
    assert code == EXIT_DONE and _steps(events) == list(range(8))
    assert events[-1] == {"event": "done", "steps": 8, "planned": 8}


def test_a_console_only_run_hung_inside_a_phase_is_stalled_naming_it(tmp_path):
    log = tmp_path / "logs.log"
    log.write_bytes(_launch(20) + b"".join(_console_step(step, 20) for step in range(4)))
    _append(log, _phase("Starting get_batch") + _phase("get_batch took 0.01 seconds") + _phase("Starting train_step"))
    code, events = _follow(Watch(tmp_path, policy=QUIET), exit_on_stall=True)
    assert code == EXIT_STALLED and _steps(events) == [0, 1, 2, 3]
    [stalled] = [e for e in events if e["event"] == "stalled"]
    assert stalled["step"] == 4 and "train_step" in stalled["phase"], stalled


def test_a_log_rotated_mid_watch_is_followed_in_its_new_file(tmp_path):
    log, metrics = tmp_path / "logs.log", tmp_path / "metrics.jsonl"
    log.write_bytes(_launch(20))
    metrics.write_bytes(b"".join(_row(step, 20) for step in range(3)))
    watch = Watch(tmp_path, policy=QUIET)

    def rotate() -> None:
        log.rename(tmp_path / "logs.log.1")  # the old file keeps its name out of the run's files
        _append(metrics, _row(3, 20))
        log.write_bytes(_phase("Starting save_checkpoint"))

    _Script(watch, [(lambda: watch.last_step == 2, rotate)]).start()
    code, events = _follow(watch, exit_on_stall=True)
    assert code == EXIT_STALLED and _steps(events) == [0, 1, 2, 3]
    [stalled] = [e for e in events if e["event"] == "stalled"]
    assert stalled["step"] == 4 and "save_checkpoint" in stalled["phase"], stalled


def test_a_relaunch_in_the_same_folder_resumes_progress_under_its_own_plan(tmp_path):
    log, metrics = tmp_path / "logs.log", tmp_path / "metrics.jsonl"
    log.write_bytes(_launch(10))
    metrics.write_bytes(b"".join(_row(step, 10) for step in range(6)))
    watch = Watch(tmp_path, policy=QUIET)
    # The second launch plans 20 steps and resumes from the checkpoint at step 4 (≤0.5.x: rows appended).
    script = [(lambda: watch.last_step == 5, lambda: (_append(log, _launch(20)), _append(metrics, _row(4, 20))))]
    script += [(lambda s=s: watch.last_step == s - 1, lambda s=s: _append(metrics, _row(s, 20))) for s in range(5, 20)]
    _Script(watch, script).start()
    code, events = _follow(watch, exit_on_stall=True)
    assert code == EXIT_DONE, events
    assert _steps(events) == [*range(6), *range(4, 20)]
    relaunched = [e for e in events if e["event"] == "progress"][6:]
    assert {e["planned"] for e in relaunched} == {20}, [e["planned"] for e in relaunched]
    assert [e["event"] for e in events].count("done") == 1 and events[-1]["steps"] == 20


def _relaunch_fresh(how: str, log: Path, metrics: Path) -> None:
    """A fresh launch of 20 steps in the same folder, before the watch's next look: its log lines, then
    metrics.jsonl deleted (or truncated in place) and its first rows written."""
    _append(log, _launch(20))
    first = b"".join(_row(step, 20) for step in range(8 if how == "truncated, 8 steps" else 1))
    if how == "deleted":
        metrics.unlink()
    metrics.write_bytes(first)  # truncates in place when the file is there


@pytest.mark.parametrize("how", ["deleted", "truncated", "truncated, 8 steps"])
def test_a_fresh_relaunch_that_rewrites_metrics_before_the_next_look_gets_every_step(tmp_path, how):
    # Before: the file read afresh made its rows read as copies: the new launch's step 0 had no progress event
    # (and 8 steps written past the old end of a file truncated in place were read from its old offset).
    log, metrics = tmp_path / "logs.log", tmp_path / "metrics.jsonl"
    log.write_bytes(_launch(10))
    metrics.write_bytes(b"".join(_row(step, 10) for step in range(6)))
    watch = Watch(tmp_path, policy=QUIET)
    first = 8 if how == "truncated, 8 steps" else 1
    script = [(lambda: watch.last_step == 5, lambda: _relaunch_fresh(how, log, metrics))]
    script += [
        (lambda s=s: watch.last_step == s - 1, lambda s=s: _append(metrics, _row(s, 20))) for s in range(first, 20)
    ]
    _Script(watch, script).start()
    code, events = _follow(watch, exit_on_stall=True)
    assert code == EXIT_DONE, events
    assert _steps(events) == [*range(6), *range(20)]
    relaunched = [e for e in events if e["event"] == "progress"][6:]
    assert {e["planned"] for e in relaunched} == {20}


def test_a_resumes_rewrite_of_metrics_is_not_read_as_new_steps(tmp_path):
    # 0.6.1 copies metrics.jsonl to metrics.jsonl.pre_resume_N and rewrites it with the rows before N.
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(b"".join(_row(step, 12) for step in range(6)))
    watch = Watch(tmp_path, policy=WatchPolicy(min_stall_s=3600.0, analysis_interval_s=3600.0))
    assert _steps([e.to_dict() for e in watch.look()]) == list(range(6))
    (tmp_path / "metrics.jsonl.pre_resume_000004").write_bytes(metrics.read_bytes())
    rewritten = tmp_path / "rewrite.tmp"
    rewritten.write_bytes(b"".join(_row(step, 12) for step in range(4)))
    rewritten.replace(metrics)
    assert _steps([e.to_dict() for e in watch.look()]) == []
    _append(metrics, _row(4, 12))
    assert [(e.data["step"], e.data["planned"]) for e in watch.look() if e.event == "progress"] == [(4, 12)]
    # A cold read's steps: the rewrite's, the backup's superseded rows set apart as a cold read sets them.
    cold = LiveRun(tmp_path)
    cold.look()
    assert cold.tables().steps.equals(watch.live.tables().steps)


def test_a_folder_still_empty_is_waited_on_and_a_missing_path_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    watch = Watch(run, policy=QUIET)
    # Files appear once the watch has looked at the empty folder a few times: nothing concluded meanwhile.
    looks = []
    original = watch.look

    def counted():
        looks.append(1)
        return original()

    watch.look = counted  # type: ignore[method-assign]
    metrics = run / "metrics.jsonl"
    script = [(lambda: len(looks) >= 5, lambda: metrics.write_bytes(_row(0, 3)))]
    script += [(lambda s=s: watch.last_step == s - 1, lambda s=s: _append(metrics, _row(s, 3))) for s in (1, 2)]
    _Script(watch, script).start()
    code, events = _follow(watch, exit_on_stall=True)
    assert code == EXIT_DONE and _steps(events) == [0, 1, 2] and events[-1]["event"] == "done"
    for missing in (Watch, WatchSweep):
        with pytest.raises(RequestError, match="does not exist"):
            missing(tmp_path / "nope")


def test_a_crash_while_watched_is_stopped_with_exit_5(tmp_path):
    log, metrics = tmp_path / "logs.log", tmp_path / "metrics.jsonl"
    log.write_bytes(_launch(20))
    metrics.write_bytes(b"".join(_row(step, 20) for step in range(3)))
    watch = Watch(tmp_path, policy=WatchPolicy(min_stall_s=60.0, analysis_interval_s=0.2))
    traceback = (
        b'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    main()\nRuntimeError: boom\n'
    )
    _Script(
        watch, [(lambda: watch.last_step == 2 and watch._analysed_at is not None, lambda: _append(log, traceback))]
    ).start()
    code, events = _follow(watch, exit_on_stall=True)
    assert code == EXIT_STOPPED and _steps(events) == [0, 1, 2]
    assert events[-1]["event"] == "stopped" and events[-1]["kind"] == "crashed", events[-1]
    assert "RuntimeError: boom" in events[-1]["message"]


def test_a_sweep_follows_a_run_that_starts_after_the_watch(tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "early").mkdir(parents=True)
    (sweep / "early" / "metrics.jsonl").write_bytes(_row(0, 4))
    watch = WatchSweep(sweep, policy=QUIET)

    def early() -> Watch | None:
        return watch.watches.get("early")

    def start_late() -> None:
        (sweep / "late").mkdir()
        (sweep / "late" / "metrics.jsonl").write_bytes(_row(0, 3))

    script = [(lambda: early() is not None and early().last_step == 0, start_late)]
    script += [(lambda: "late" in watch.watches, lambda: _append(sweep / "early" / "metrics.jsonl", _row(1, 4)))]
    for run, planned in (("early", 4), ("late", 3)):
        for s in range(1 if run == "late" else 2, planned):
            script.append(
                (
                    lambda run=run, s=s: run in watch.watches and watch.watches[run].last_step == s - 1,
                    lambda run=run, s=s, planned=planned: _append(sweep / run / "metrics.jsonl", _row(s, planned)),
                )
            )
    _Script(watch, script).start()
    code, events = _follow(watch, exit_on_stall=True)
    assert code == EXIT_DONE, events
    assert [e["step"] for e in events if e["event"] == "progress" and e["run"] == "late"] == [0, 1, 2]
    assert [e["step"] for e in events if e["event"] == "progress" and e["run"] == "early"] == [0, 1, 2, 3]
    assert {(e["run"], e["steps"]) for e in events if e["event"] == "done"} == {("early", 4), ("late", 3)}


@pytest.mark.parametrize("hook", ["exit 3", "sleep 15", "sleep 15 < /dev/null"])
def test_a_failing_or_hanging_hook_never_holds_the_watch(tmp_path, hook, capfd):
    # Two stalls (the run writes once in between): the hook runs once per stall, and the watch goes on
    # whatever the hook does, to the second stall and past the run's end.
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(b"".join(_row(step, 4) for step in range(2)))
    policy = WatchPolicy(min_stall_s=0.3, analysis_interval_s=0.2, stall_step_times=3.0)
    watch = Watch(tmp_path, policy=policy)
    marker = tmp_path / "hooks"
    script = [(lambda: watch.stalls == 1, lambda: _append(metrics, _row(2, 4)))]
    script += [(lambda: watch.stalls == 2, lambda: _append(metrics, _row(3, 4)))]
    _Script(watch, script).start()
    started = time.monotonic()
    code, events = _follow(watch, on_stall=f"echo x >> {marker}; {hook}")
    assert time.monotonic() - started < 8.0
    assert code == EXIT_DONE and [e["event"] for e in events].count("stalled") == 2
    assert marker.read_text().splitlines() == ["x", "x"]
    if hook == "exit 3":
        assert "exited with 3" in capfd.readouterr().err


def test_jsonl_events_carry_their_documented_types_and_plain_text_has_no_redraws(tmp_path):
    log, metrics = tmp_path / "logs.log", tmp_path / "metrics.jsonl"
    log.write_bytes(_launch(6))
    metrics.write_bytes(b"".join(_row(step, 6) for step in range(6)))
    out = io.StringIO()
    assert follow(Watch(tmp_path, policy=QUIET), fmt="jsonl", interval=0.02, out=out, max_looks=50) == EXIT_DONE
    types = {"step": int, "planned": int, "step_s": float, "steady_s": float, "rate_steps_per_s": float, "eta_s": float}
    for line in out.getvalue().splitlines():
        event = json.loads(line)
        assert event["event"] in ("progress", "finding", "stalled", "stopped", "done")
        if event["event"] == "progress":
            for key, kind in types.items():
                assert isinstance(event[key], kind), (key, event)
    text = io.StringIO()  # not a terminal: every event a line of its own, no cursor movement
    assert follow(Watch(tmp_path, policy=QUIET), interval=0.02, out=text, max_looks=50) == EXIT_DONE
    assert "\x1b" not in text.getvalue() and "\r" not in text.getvalue()
    assert text.getvalue().splitlines()[-1] == "done: 6 step(s) of 6 planned"


def test_hundreds_of_steps_a_second_each_get_their_progress(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(b"")
    watch = Watch(tmp_path, policy=QUIET)

    def burst(first: int) -> Callable[[], None]:
        return lambda: _append(metrics, b"".join(_row(s, 600, step_s=0.002) for s in range(first, first + 100)))

    script = [(lambda f=f: (watch.last_step or -1) >= f - 1 if f else True, burst(f)) for f in range(0, 600, 100)]
    _Script(watch, script).start()
    code, events = _follow(watch, exit_on_stall=True)
    assert code == EXIT_DONE and _steps(events) == list(range(600))
    assert events[-1] == {"event": "done", "steps": 600, "planned": 600}
    last = [e for e in events if e["event"] == "progress"][-1]
    assert last["steady_s"] == pytest.approx(0.002) and last["rate_steps_per_s"] == pytest.approx(500)


def test_a_console_only_runs_progress_names_the_phase_its_log_has_open(tmp_path):
    # No trace: what the run is inside is the log's `Starting X` with no `X took` yet (the next step's
    # get_batch here), on the progress events as on the status line.
    log = tmp_path / "logs.log"
    log.write_bytes(_launch(20) + b"".join(_console_step(step, 20) for step in range(4)) + _phase("Starting get_batch"))
    code, events = _follow(Watch(tmp_path, policy=QUIET), exit_on_stall=True)
    progress = [e for e in events if e["event"] == "progress"]
    assert [e["step"] for e in progress] == [0, 1, 2, 3]
    assert progress[-1]["phase"] == "get_batch"


def test_a_row_nested_past_orjsons_depth_is_followed_like_any_other(tmp_path):
    # A metrics value nested 300 deep (orjson stops at 255): the watch's fingerprint of each row raised on it.
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(b"".join(_row(step, 4) for step in range(2)))
    watch = Watch(tmp_path, policy=WatchPolicy(min_stall_s=3600.0, analysis_interval_s=3600.0))
    assert _steps([e.to_dict() for e in watch.look()]) == [0, 1]
    deep = "[" * 300 + "]" * 300
    _append(metrics, f'{{"step": 2, "progress/done_frac": 0.75, "extra": {deep}}}\n'.encode())
    assert _steps([e.to_dict() for e in watch.look()]) == [2]
