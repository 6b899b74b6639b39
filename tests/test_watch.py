"""`trace-doctor watch` against runs the cookbook's own writers produce while it watches.

The writer (fixtures/generate.py's training process: tinker-cookbook 0.6.1's trace collector and
metrics store, the simulated service) runs in a subprocess; the watch follows its folder in-process
with a short interval. A run whose service stops answering must be reported `stalled`, naming the
phase in flight, within five steady step times of its last write, and `--on-stall` run once.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from trace_doctor.cli import main
from trace_doctor.ingest.live_run import LiveRun
from trace_doctor.ingest.reading.tail import FileTail
from trace_doctor.policy.live import WatchPolicy
from trace_doctor.watch import EXIT_DONE, EXIT_STALLED, Watch, follow

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
ROW = b'{"step": %d, "progress": %f, "loss": 1.0}\n'


def _writer(tmp_path: Path, **opts) -> subprocess.Popen:
    pytest.importorskip("tinker_cookbook")
    sys.path.insert(0, str(FIXTURES))
    from sim.loops import Opts

    options = Opts(name="live", dumps=True, **opts)
    return subprocess.Popen(
        [sys.executable, str(FIXTURES / "generate.py"), "--child", json.dumps(asdict(options)), "--out", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@contextlib.contextmanager
def _writing(tmp_path: Path, **opts) -> Iterator[subprocess.Popen]:
    """A simulated cookbook writer (`_writer`), killed and reaped however the test ends."""
    writer = _writer(tmp_path, **opts)
    try:
        yield writer
    finally:
        writer.kill()
        writer.wait()


def _wait_for_files(*folders: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(any(folder.iterdir()) for folder in folders) and time.monotonic() < deadline:
        time.sleep(0.05)


def _events(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_hung_run_is_reported_stalled_in_flight_while_it_hangs(tmp_path):
    hook = tmp_path / "hook.jsonl"
    run = tmp_path / "run"
    run.mkdir()
    with _writing(run, n_steps=40, cycle_s=0.2, service_hangs_at_step=8, kill_after_s=30) as writer:
        watch = Watch(run, policy=WatchPolicy(min_stall_s=0.3, analysis_interval_s=1.0))
        out = io.StringIO()
        code = follow(watch, fmt="jsonl", interval=0.05, on_stall=f"cat >> {hook}", exit_on_stall=True, out=out)
        still_running = writer.poll() is None
    events = _events(out)
    assert code == EXIT_STALLED
    assert still_running, "the stall is reported while the run still hangs"
    steps = [e["step"] for e in events if e["event"] == "progress"]
    assert steps == list(range(8)), steps  # every step, once, in order
    [stalled] = [e for e in events if e["event"] == "stalled"]
    # The latest step in flight: 8, or 9 once the pipelined loop has opened the next step's submission.
    assert stalled["step"] in (8, 9)
    assert "finish_batch" in stalled["phase"] and "step 8" in stalled["phase"]
    assert stalled["silent_s"] <= 5 * stalled["steady_s"], stalled
    # run-stopped's post-mortem of the files so far: what each thread is inside, the SDK's pending calls.
    assert any("_APIFuture._result_async" in text for text in stalled["in_flight"]), stalled["in_flight"]
    # The watch's silence is the hold (run-stopped's own 10-step-time bound is not reached yet): an SDK call in
    # flight while the SDK loop kept dumping is a service hang, escalated with the session id — never "killed".
    assert stalled["kind"] == "hung on the service", stalled
    assert stalled["session_ids"] and stalled["session_ids"][0] in stalled["message"]
    assert "`trace-doctor watch` saw nothing written for" in stalled["message"]
    # The hook ran once, the event as JSON on its stdin.
    [hooked] = [json.loads(line) for line in hook.read_text().splitlines()]
    assert hooked["event"] == "stalled" and hooked["step"] == 8


def test_a_hang_in_user_code_is_named_with_its_frame_and_session_id_while_it_hangs(tmp_path):
    with _writing(tmp_path, n_steps=40, cycle_s=0.2, user_hang_at_step=6, kill_after_s=30) as writer:
        watch = Watch(tmp_path, policy=WatchPolicy(min_stall_s=0.3, analysis_interval_s=1.0))
        out = io.StringIO()
        code = follow(watch, fmt="jsonl", interval=0.05, exit_on_stall=True, out=out)
        still_running = writer.poll() is None
    [stalled] = [e for e in _events(out) if e["event"] == "stalled"]
    assert code == EXIT_STALLED and still_running
    assert stalled["step"] == 6 and stalled["kind"] == "hung in user code", stalled
    # The innermost open span is user code (the stack watchdog may not have caught the frame yet: the
    # regex holds the GIL).
    assert "get_batch (step 6)" in stalled["phase"]
    assert stalled["session_ids"] and stalled["session_ids"][0] in stalled["message"]


def test_a_completed_run_ends_with_done_and_exit_0(tmp_path):
    with _writing(tmp_path, n_steps=10, cycle_s=0.05):
        out = io.StringIO()
        code = follow(Watch(tmp_path, policy=WatchPolicy(min_stall_s=30.0)), fmt="jsonl", interval=0.05, out=out)
    events = _events(out)
    assert code == EXIT_DONE and events[-1] == {"event": "done", "steps": 10, "planned": 10}
    assert [e["step"] for e in events if e["event"] == "progress"] == list(range(10))


def test_a_half_written_line_waits_for_its_end(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    line = ROW % (0, 0.5)
    metrics.write_bytes(line[:20])
    live = LiveRun(tmp_path)
    assert live.look().new_rows == []
    with open(metrics, "ab") as f:
        f.write(line[20:] + (ROW % (1, 1.0))[:5])
    assert [r["step"] for r in live.look().new_rows] == [0]
    with open(metrics, "ab") as f:
        f.write((ROW % (1, 1.0))[5:])
    assert [r["step"] for r in live.look().new_rows] == [1]
    assert live.tables().steps["step"].to_list() == [0, 1]
    assert not live.tables().warnings


def test_a_replaced_or_truncated_file_is_read_afresh(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(ROW % (0, 0.25) + ROW % (1, 0.5))
    live = LiveRun(tmp_path)
    assert len(live.look().new_rows) == 2
    replacement = tmp_path / "new.tmp"
    replacement.write_bytes(ROW % (5, 0.25))
    os.replace(replacement, metrics)  # another inode
    look = live.look()
    assert look.read_afresh == [str(metrics)] and [r["step"] for r in look.new_rows] == [5]
    metrics.write_bytes(b"")  # truncated in place
    assert live.look().read_afresh == [str(metrics)]
    metrics.write_bytes(ROW % (7, 0.5))
    assert [r["step"] for r in live.look().new_rows] == [7]
    assert live.tables().steps["step"].to_list() == [7]


def test_the_tail_keeps_only_offset_and_partial_line(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"a\nb\nc")
    tail = FileTail(path)
    read = tail.look()
    assert read.lines == [b"a", b"b"] and read.first_line == 1 and tail.partial == b"c"
    with open(path, "ab") as f:
        f.write(b"d\n")
    read = tail.look()
    assert read.lines == [b"cd"] and read.first_line == 3 and tail.partial == b""


def test_cli_watch_of_a_finished_run_and_usage_errors(tmp_path):
    runner = CliRunner()
    done = runner.invoke(main, ["watch", str(FIXTURES / "runs" / "sl_healthy_pipelined"), "--format", "jsonl"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output.splitlines()[-1])["event"] == "done"
    text = runner.invoke(main, ["watch", str(FIXTURES / "runs" / "sl_healthy_pipelined")])
    assert text.exit_code == 0 and "\x1b" not in text.output and text.output.splitlines()[-1].startswith("done: 30")
    assert runner.invoke(main, ["watch", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(main, ["watch", str(tmp_path), "--interval", "0"]).exit_code == 2


def test_the_config_files_watch_table_sets_the_stall_bound(tmp_path):
    from trace_doctor.policy import PolicyError
    from trace_doctor.settings import load_settings

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes(b"".join(ROW % (step, (step + 1) / 50) for step in range(3)))
    config = tmp_path / "trace-doctor.toml"
    config.write_text("[tool.trace-doctor.watch]\nmin_stall_s = 5.0\nstall_step_times = 2\n")
    settings = load_settings(str(config))
    assert settings.policy.watch == WatchPolicy(min_stall_s=5.0, stall_step_times=2.0)

    def stalls_after(seconds: float, settings) -> list[str]:
        offset = [0.0]
        watch = Watch(run, settings, clock=lambda: time.monotonic() + offset[0])
        watch.look()
        offset[0] = seconds
        return [e.event for e in watch.look()]

    # 10 s of silence: a stall under the configured 5 s floor, not under the default 60 s one.
    assert "stalled" in stalls_after(10.0, settings)
    assert "stalled" not in stalls_after(10.0, None)
    config.write_text("[tool.trace-doctor.watch]\nmin_stall_s = -1\n")
    with pytest.raises(PolicyError, match=r"\[tool.trace-doctor.watch\] `min_stall_s`"):
        load_settings(str(config))


def test_a_sweep_follows_each_run_and_ends_when_all_are_done(tmp_path):
    from trace_doctor.watch_sweep import WatchSweep

    sweep = tmp_path / "sweep"
    (sweep / "lr_a").mkdir(parents=True)
    (sweep / "lr_b").mkdir()
    writers = [_writer(sweep / "lr_a", n_steps=8, cycle_s=0.05), _writer(sweep / "lr_b", n_steps=12, cycle_s=0.05)]
    try:
        # The sweep ends when every run found so far has ended: wait until both runs exist.
        _wait_for_files(sweep / "lr_a", sweep / "lr_b")
        out = io.StringIO()
        watch = WatchSweep(sweep, policy=WatchPolicy(min_stall_s=30.0))
        code = follow(watch, fmt="jsonl", interval=0.05, out=out)
    finally:
        for writer in writers:
            writer.kill()
            writer.wait()
    events = _events(out)
    assert code == EXIT_DONE, events
    assert {e["run"] for e in events} == {"lr_a", "lr_b"}, [e for e in events if e["event"] != "progress"]
    # Each run's own steps, in order, once: the two runs' files are never merged.
    for run, steps in (("lr_a", 8), ("lr_b", 12)):
        assert [e["step"] for e in events if e["event"] == "progress" and e["run"] == run] == list(range(steps))
        assert {"event": "done", "run": run, "steps": steps, "planned": steps} in events
    assert events[-1]["event"] == "done"


def test_a_sweep_reports_the_stalled_run_by_its_id(tmp_path):
    from trace_doctor.watch_sweep import WatchSweep

    sweep = tmp_path / "sweep"
    (sweep / "ok").mkdir(parents=True)
    (sweep / "hangs").mkdir()
    writers = [
        _writer(sweep / "ok", n_steps=6, cycle_s=0.1),
        _writer(sweep / "hangs", n_steps=40, cycle_s=0.1, service_hangs_at_step=5, kill_after_s=30),
    ]
    try:
        _wait_for_files(sweep / "ok", sweep / "hangs")
        # The finished run is whole before the watch starts: the watch ends at the first stall, and on a
        # loaded machine the short run could otherwise still be writing when the other one stalls.
        writers[0].wait(timeout=60)
        out = io.StringIO()
        watch = WatchSweep(sweep, policy=WatchPolicy(min_stall_s=0.5, analysis_interval_s=1.0))
        code = follow(watch, fmt="text", interval=0.05, exit_on_stall=True, out=out, live_display=False)
    finally:
        for writer in writers:
            writer.kill()
            writer.wait()
    lines = out.getvalue().splitlines()
    assert code == EXIT_STALLED
    [stalled] = [line for line in lines if "STALLED" in line]
    assert stalled.startswith("[hangs] STALLED at step 5"), stalled
    assert "[ok] done: 6 step(s) of 6 planned" in lines
    assert all(line.startswith(("[ok] ", "[hangs] ")) for line in lines), lines


def test_a_console_only_run_is_followed_through_its_printed_metric_tables(tmp_path):
    # No metrics.jsonl: the cookbook's console tables (ANSI colour, keys cut at 30 columns) are the steps.
    # The log grows in chunks that cut tables and lines anywhere; each table is taken once it is whole.
    sys.path.insert(0, str(REPO / "tests"))
    from test_ingest_console_metrics import _console_pair

    from trace_doctor.api import load_run

    source = FIXTURES / "runs" / "rl_async_stream_starved"
    _, console = _console_pair(source, tmp_path, colour=True, metric_width=30)
    cold = tmp_path / "cold"
    cold.mkdir()
    (cold / "logs.log").write_bytes((console / "logs.log").read_bytes())
    live = tmp_path / "live"
    live.mkdir()
    data = (console / "logs.log").read_bytes()
    watch = Watch(live, policy=WatchPolicy(min_stall_s=3600.0, analysis_interval_s=3600.0))
    events = []
    for start in range(0, len(data), 997):
        with open(live / "logs.log", "ab") as f:
            f.write(data[start : start + 997])
        events += watch.look()
    expected = load_run(str(cold)).steps
    assert [e.data["step"] for e in events if e.event == "progress"] == expected["step"].to_list()
    assert watch.live.tables().steps.drop("source").equals(expected.drop("source"))
    assert events[-1].event == "done" and events[-1].data["steps"] == expected.height


def test_the_findings_refresh_waits_in_proportion_to_its_cost(tmp_path):
    # The rules' cost grows with the run; a look's reading does not. A refresh that cost 2 s is not run
    # again within 40 s (5% of the watch's time), though the 10 s interval has passed and steps arrived.
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(ROW % (0, 0.01))
    offset = [0.0]
    watch = Watch(tmp_path, clock=lambda: time.monotonic() + offset[0])
    watch.look()
    first = watch._analysed_at
    assert first is not None
    watch.analysis_s = 2.0
    for step, later in ((1, 15.0), (2, 30.0)):
        with open(metrics, "ab") as f:
            f.write(ROW % (step, (step + 1) / 100))
        offset[0] = later
        assert [e.event for e in watch.look()] == ["progress"] and watch._analysed_at == first
    offset[0] = 45.0
    with open(metrics, "ab") as f:
        f.write(ROW % (3, 0.04))
    watch.look()
    assert watch._analysed_at is not None and watch._analysed_at > first


def test_a_slow_but_progressing_run_is_never_stalled(tmp_path):
    # Steps of ~0.5 s, a stall floor far below them: the bound follows the steady step time, not the floor.
    with _writing(tmp_path, n_steps=8, cycle_s=0.25):
        out = io.StringIO()
        watch = Watch(tmp_path, policy=WatchPolicy(min_stall_s=0.05, analysis_interval_s=1.0))
        code = follow(watch, fmt="jsonl", interval=0.05, exit_on_stall=True, out=out)
    events = _events(out)
    assert code == EXIT_DONE and not [e for e in events if e["event"] == "stalled"], events
    assert [e["step"] for e in events if e["event"] == "progress"] == list(range(8))


def test_a_long_first_step_is_warm_up_not_a_stall(tmp_path):
    # Step 0 spends 3 s loading its batch (a dataset build, a cold start): with no step logged there is no steady
    # step time, so only the first-step bound applies, however low the floor for later steps is.
    with _writing(tmp_path, n_steps=6, cycle_s=0.05, get_batch_sleep={0: 3.0}):
        out = io.StringIO()
        watch = Watch(tmp_path, policy=WatchPolicy(min_stall_s=0.3, first_step_stall_s=60.0))
        code = follow(watch, fmt="jsonl", interval=0.05, exit_on_stall=True, out=out)
    events = _events(out)
    assert code == EXIT_DONE and not [e for e in events if e["event"] == "stalled"], events
    # Past the first-step bound it is a stall all the same (the absolute floor for a launch that never logs).
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    (quiet / "logs.log").write_text(
        "tinker_cookbook.supervised.train:432 [INFO] Training for 20 batches x 1 epochs = 20 steps\n"
    )
    offset = [0.0]
    watch = Watch(
        quiet, policy=WatchPolicy(min_stall_s=0.3, first_step_stall_s=60.0), clock=lambda: time.monotonic() + offset[0]
    )
    watch.look()
    offset[0] = 30.0
    assert "stalled" not in [e.event for e in watch.look()]
    offset[0] = 90.0
    assert "stalled" in [e.event for e in watch.look()]


def test_the_plan_is_read_from_dpo_progress_written_before_the_step(tmp_path):
    # preference/train_dpo.py logs progress = step / total (SFT and RL: (step + 1) / total).
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(b"")
    watch = Watch(tmp_path, policy=WatchPolicy(min_stall_s=3600.0, analysis_interval_s=3600.0))
    planned = []
    for step in range(1, 6):
        with open(metrics, "ab") as f:
            f.write(b'{"step": %d, "progress": %f, "dpo_loss": 0.6}\n' % (step, step / 20))
        planned += [e.data["planned"] for e in watch.look() if e.event == "progress"]
    assert planned[1:] == [20, 20, 20, 20], planned


def test_a_large_run_is_caught_up_with_before_anything_is_concluded(tmp_path, monkeypatch):
    """A run larger than one look (16 MB a file; here 20 kB) is read over several looks, one after the
    other with no wait, and nothing is concluded from a part of it: the demo run has a final checkpoint,
    and its first 27 rows read with the checkpoints file once said "done: 27 of 30"."""
    import trace_doctor.ingest.reading.tail as tail
    import trace_doctor.watch as watch_module

    run = tmp_path / "demo"
    run.mkdir()
    for path in (FIXTURES / "runs" / "demo").iterdir():
        if path.is_file():
            (run / path.name).write_bytes(path.read_bytes())

    def watched() -> list[dict]:
        out = io.StringIO()
        code = follow(Watch(run, policy=WatchPolicy(min_stall_s=1e6)), fmt="jsonl", interval=60, out=out, max_looks=50)
        assert code == EXIT_DONE
        return _events(out)

    whole = watched()
    monkeypatch.setattr(tail, "READ_LIMIT", 20_000)
    assert (run / "trace_events.jsonl").stat().st_size > 2 * tail.READ_LIMIT  # several looks
    slept: list[float] = []
    monkeypatch.setattr(watch_module.time, "sleep", slept.append)
    in_looks = watched()
    assert slept == [], "catching up waits for nothing"
    assert in_looks[-1] == whole[-1] == {"event": "done", "steps": 30, "planned": 30}
    # The same findings as a watch that read each file in one look.
    assert [e for e in in_looks if e["event"] == "finding"] == [e for e in whole if e["event"] == "finding"]
    assert [e["step"] for e in in_looks if e["event"] == "progress"] == list(range(30))


def test_a_run_in_its_wrap_up_is_not_done_until_it_ends(tmp_path):
    """Every planned row logged, the final `run_evals` still open, no final checkpoint: the watch and
    run-stopped read the same end (RunEnd.ended_normally); the run is done once its final checkpoint is."""
    sys.path.insert(0, str(REPO / "tests"))
    import stopped_shapes

    stopped_shapes.stopped_in_final_eval(tmp_path)
    watch = Watch(tmp_path, policy=WatchPolicy(min_stall_s=1e6))
    out = io.StringIO()
    assert follow(watch, fmt="jsonl", interval=0.01, out=out, max_looks=3) == EXIT_DONE  # max_looks, not done
    assert watch.ended is None and "done" not in [e["event"] for e in _events(out)]
    with open(tmp_path / "checkpoints.jsonl", "a") as f:
        f.write(json.dumps({"name": "final", "batch": 20, "state_path": "tinker://run/weights/final"}) + "\n")
    with open(tmp_path / "logs.log", "a") as f:
        f.write("tinker_cookbook.utils.misc_utils [INFO] run_evals took 12.00 seconds\n")
    out = io.StringIO()
    assert follow(watch, fmt="jsonl", interval=0.01, out=out, max_looks=3) == EXIT_DONE
    assert watch.ended == EXIT_DONE and _events(out)[-1]["event"] == "done"
