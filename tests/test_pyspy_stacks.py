"""`py-spy dump --pid N` printouts land in the stack table the thread-stack watchdog fills (FORMATS.md 5.2).

py-spy's text as src/dump.rs writes it: the `Process N: <command>` / `Python vX (<exe>)` header, every thread
as `Thread <id> (<state>): "<name>"` (the name left out when unknown, the id decimal or `0x..`), its frames
innermost first as `    func (file:line)` (`(file)` for a native frame), and `--locals`' `Arguments:` /
`Locals:` blocks. A dump saved as a file of its own, and one pasted at the end of a console capture, are both
read; a file that merely mentions threads is not. Everything that reads stacks sees it: run-stopped's
post-mortem (what was in flight on each thread, the SDK thread's last sign of life), and gil-stall's
[main]-busy-while-[holder]-polls reading.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

from trace_doctor.api import analyze, load_run
from trace_doctor.derive.run_end import run_end
from trace_doctor.ingest.live_readers import LiveDumps

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stopped_shapes import rl_log, run_stopped  # noqa: E402

HEADER = "Process 48121: python -m tinker_cookbook.recipes.math_rl.train\nPython v3.12.3 (/usr/bin/python3.12)\n\n"
MAIN_IN_REWARD = (
    'Thread 48121 (active+gil): "MainThread"\n'
    "    score (reward.py:212)\n"
    "        Arguments:\n"
    "            answer: 'x = 4'\n"
    "        Locals:\n"
    "            tokens: 812\n"
    "    compute_reward (env.py:77)\n"
    "    <module> (train.py:80)\n"
)
SDK_THREAD_IDLE = (
    'Thread 48170 (idle): "Thread-1 (_background_thread_func)"\n'
    "    select (selectors.py:468)\n"
    "    _run_once (asyncio/base_events.py:1949)\n"
    "    run_forever (asyncio/base_events.py:641)\n"
    "    _background_thread_func (tinker/lib/internal_client_holder.py:120)\n"
    "    _bootstrap (threading.py:1030)\n"
)
NATIVE_UNNAMED = "Thread 0x7F3A5C8F9740 (idle)\n    __poll (libc.so.6)\n    0x7f3a5c8f0a1b (?)\n"
DUMP = HEADER + MAIN_IN_REWARD + SDK_THREAD_IDLE + NATIVE_UNNAMED


def _stacks(folder: Path) -> pl.DataFrame:
    return load_run(str(folder)).stack_snapshots


def _frames(stacks: pl.DataFrame, label: str) -> list[tuple]:
    rows = stacks.filter(pl.col("label") == label).sort("frame_index")
    return list(rows.select("frame_index", "function", "file_path", "line_no").iter_rows())


def test_a_dump_alone_in_a_folder_fills_the_stack_table_with_every_thread_outermost_first(tmp_path):
    (tmp_path / "pyspy.txt").write_text(DUMP)
    run = load_run(str(tmp_path))
    stacks = run.stack_snapshots
    # Before: read only as log lines, the stack table stayed empty.
    assert set(stacks["label"]) == {"main", "holder", "Thread 0x7F3A5C8F9740"}
    assert _frames(stacks, "main") == [
        (0, "<module>", "train.py", 80),
        (1, "compute_reward", "env.py", 77),
        (2, "score", "reward.py", 212),
    ]
    assert _frames(stacks, "holder")[-1] == (4, "select", "selectors.py", 468)
    # A native frame has no line; an unnamed thread is known by its id (the hex read as a number).
    native = stacks.filter(pl.col("label") == "Thread 0x7F3A5C8F9740").sort("frame_index")
    assert native["function"].to_list() == ["0x7f3a5c8f0a1b", "__poll"] and native["line_no"].is_null().all()
    assert native["thread_ident"][0] == 0x7F3A5C8F9740
    main = stacks.filter(pl.col("label") == "main").sort("frame_index")
    assert main["thread_name"][0] == "MainThread" and main["thread_state"][0] == "active+gil"
    assert main["locals"][2] == "Arguments:\nanswer: 'x = 4'\nLocals:\ntokens: 812" and main["locals"][0] is None
    assert set(stacks["process_id"]) == {48121} and set(stacks["python_version"]) == {"3.12.3"}
    assert set(stacks["command"]) == {"python -m tinker_cookbook.recipes.math_rl.train"}
    assert stacks["snapshot"].n_unique() == 1 and stacks["timestamp"].is_null().all()
    # The file is a dump and still a log: run-stopped's live-stack reading is kept.
    assert {i.kind for i in run.inputs if i.path.endswith("pyspy.txt")} == {"dump", "log"}
    assert "live-stack" in run.log_events["kind"].to_list()


def test_a_dump_pasted_at_the_end_of_a_console_log_is_read_with_the_log(tmp_path):
    (tmp_path / "console.log").write_text(rl_log(40, 5, "") + "\n$ py-spy dump --pid 48121\n" + DUMP)
    run = load_run(str(tmp_path))
    assert set(run.stack_snapshots["label"]) == {"main", "holder", "Thread 0x7F3A5C8F9740"}
    events = run.log_events
    assert "plan" in events["kind"].to_list() and "live-stack" in events["kind"].to_list()
    first = run.stack_snapshots["line"].min()
    assert first > events.filter(pl.col("kind") == "plan")["line"].max()


def test_a_dump_pasted_at_the_end_of_a_long_console_capture_is_found_past_its_head(tmp_path):
    # 500 steps of log lines: the dump starts past the first 256 KB the file's kind is sniffed from.
    log = rl_log(500, 500, "")
    assert len(log.encode()) > 256 * 1024
    (tmp_path / "console.log").write_text(log + DUMP)
    run = load_run(str(tmp_path))
    assert set(run.stack_snapshots["label"]) == {"main", "holder", "Thread 0x7F3A5C8F9740"}
    assert {"dump", "log"} <= {i.kind for i in run.inputs}


def test_two_dumps_taken_one_after_the_other_are_two_snapshots(tmp_path):
    (tmp_path / "stacks.txt").write_text(DUMP + "\n" + HEADER + MAIN_IN_REWARD)
    stacks = _stacks(tmp_path)
    assert stacks.filter(pl.col("label") == "main")["snapshot"].unique().sort().to_list() == [0, 1]


def test_a_file_that_merely_mentions_threads_is_no_dump(tmp_path):
    # Thread and process lines of other tools: a name with no frame after it, a sentence, an indented line
    # that is no `func (file:line)`.
    (tmp_path / "notes.txt").write_text(
        'Thread 12 (idle): "worker"\n'
        "Thread 3 started for the data loader\n"
        "Process 48121: finished\n"
        "    see the notes (below)x\n"
        'Thread 0x1F (active): "x"\n'
        "  File train.py\n"
    )
    run = load_run(str(tmp_path))
    assert run.stack_snapshots.is_empty()
    assert {i.kind for i in run.inputs} == {"log"}


def test_a_dump_being_written_is_held_back_until_it_is_whole(tmp_path):
    dumps = LiveDumps("live.txt")
    lines = (HEADER + MAIN_IN_REWARD).encode().splitlines()
    dumps.feed(lines, 1, settled=False)
    # The file still grows: the dump may not be whole, nothing is scanned yet.
    assert dumps.frames == []
    rest = SDK_THREAD_IDLE.encode().splitlines()
    dumps.feed(rest, len(lines) + 1, settled=True)
    frames = dumps.tables()[1]
    assert set(frames["label"]) == {"main", "holder"} and frames["snapshot"].n_unique() == 1


def _hung_with_dump(folder: Path, dump: str) -> None:
    """RL, 5 of 40 steps logged, the log stops inside step 5's sampling; py-spy's dump saved beside it."""
    (folder / "config.json").write_text('{"model_name": "Qwen/Qwen3-8B"}')
    with open(folder / "metrics.jsonl", "w") as f:
        f.writelines(f'{{"step": {s}, "progress/done_frac": {(s + 1) / 40}, "time/total": 30.0}}\n' for s in range(5))
    (folder / "logs.log").write_text(rl_log(40, 5, "tinker_cookbook.utils.misc_utils:20 [INFO] Starting sample\n"))
    (folder / "py-spy-dump.txt").write_text(dump)


def test_run_stopped_says_what_each_thread_of_the_dump_was_in_and_the_sdk_threads_last_stack(tmp_path):
    _hung_with_dump(tmp_path, DUMP)
    finding, _, _ = run_stopped(tmp_path)
    assert finding is not None and finding.evidence["kind"] == "hung in user code", finding.message
    flight = finding.evidence["in_flight"]
    # Before: the post-mortem had only the log's live-stack line; each thread's stack was not in it.
    assert any(f.startswith("stacks [main] (") and "score (reward.py:212)" in f for f in flight), flight
    assert any(f.startswith("stacks [holder] (") and "idle in its event loop" in f for f in flight), flight
    assert (
        "its thread's last stack" in finding.evidence["sdk_thread"]
        and "idle in its event loop" in (finding.evidence["sdk_thread"])
    )
    assert "None" not in " ".join(flight)


def test_gil_stall_reads_main_in_cpu_code_while_the_sdk_thread_polls_from_a_pyspy_dump(tmp_path):
    main_in_torch = (
        'Thread 48121 (active+gil): "MainThread"\n'
        "    embedding (torch/nn/functional.py:2264)\n"
        "    score (reward.py:41)\n"
        "    <module> (train.py:80)\n"
    )
    (tmp_path / "metrics.jsonl").write_text("".join(f'{{"step": {s}, "time/total": 30.0}}\n' for s in range(3)))
    (tmp_path / "pyspy.txt").write_text(HEADER + main_in_torch + SDK_THREAD_IDLE)
    (tmp_path / "stdout.txt").write_text(
        "[GIL monitor] slept 3.47s instead of 2.0s (jitter: 1.47s) \u2014 likely GIL contention\n"
    )
    result = analyze(load_run(str(tmp_path)), select=["gil-stall"])
    # Before: the stack table was empty, and the GIL monitor's line was the only reading.
    [finding] = [f for f in result.findings if f.rule == "gil-stall"]
    [signal] = [s for s in finding.evidence["signals"] if s["kind"] == "stack-watchdog"]
    assert "torch (CPU)" in signal["summary"] and signal["blocks"][0]["main"]["function"] == "embedding"


def test_a_pyspy_dump_beside_a_watchdogs_capture_is_the_last_state(tmp_path):
    # The watchdog's blocks are numbered from 0 in its file, as the dump's are in its own: ordered by that
    # number, the dump's block (0) came first and the watchdog's last block was reported as the last state.
    _hung_with_dump(tmp_path, DUMP)
    watchdog = "".join(
        f"{'#' * 72}\n# 2026-03-05 12:00:0{s} stacks: main + holder threads only\n{'#' * 72}\n\n"
        "--- [main] ident=140719098776448 ---\n"
        '  File "train.py", line 80, in <module>\n'
        '  File "/home/u/tinker_cookbook/rl/train.py", line 300, in do_sample\n\n'
        for s in range(3)
    )
    (tmp_path / "stacks.txt").write_text(watchdog)
    end = run_end(load_run(str(tmp_path)))
    [main] = [s for s in end.stacks if s.label == "main"]
    assert "score (reward.py:212)" in " ".join(main.what), main
