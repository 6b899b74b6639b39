"""Task dumps, stack-watchdog blocks and `asyncio ps` tables, alone and interleaved with logs."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, fixture_run
from trace_doctor.ingest.parsers.dumps import parse_dump_files, scan_dump_lines

HOLDER_DUMP = """
===== 2026-03-05 12:00:01 asyncio task dump [holder] 4 task(s) @ interval=1.0s =====
  'Task-1': pending  <coroutine object InternalClientHolder._session_heartbeat at 0x7ffbb682dcb0>
  'Task-2': pending  <coroutine object TrainingClient._run_fwd_bwd.<locals>._run_async at 0x7ffbb69e6380>
  'Task-3': pending  <coroutine object _APIFuture._result_async at 0x7ffbb682df20>
  'periodic-task-dump-holder': pending  <coroutine object _periodic_dump_tasks at 0x7ffbb6858430>
===== 2026-03-05 12:00:01 end [holder] =====
"""

STACKS = """
########################################################################
# 2026-03-05 12:00:02 stacks: main + holder threads only
########################################################################

--- [holder] ident=140719074940608 ---
  File "/usr/lib/python3.11/threading.py", line 1002, in _bootstrap
    self._bootstrap_inner()
  File "/venv/lib/python3.11/site-packages/tinker/_compat.py", line 120, in model_dump
    return model.model_dump(
  File "/venv/lib/python3.11/site-packages/pydantic/main.py", line 463, in model_dump
    return self.__pydantic_serializer__.to_python(

--- [main] ident=140719098776448 ---
  File "train.py", line 77, in <module>
    main()

--- [sampler] ident=140719098776999 (no frame) ---
"""

SIMPLE = """
[12:00:04] main:
  File "train.py", line 77, in <module>
    main()
  File "train.py", line 50, in main
    time.sleep(1)

[12:00:04] holder:
  File "/usr/lib/python3.11/selectors.py", line 468, in select
    fd_event_list = self._selector.poll(timeout, max_ev)
"""

PS = (
    "tid        task id              task name            coroutine stack                                    awaiter "
    "chain                                      awaiter name    awaiter id     \n"
    "------------------------------------------------------------------------------------------------------------------"
    "------------------------------------------------------------------\n"
    "12345      0x7f3a2c1b4e80       Task-1               "
    "main                                                                                                              "
    "    0x0            \n"
    "12345      0x7f3a2c1b5040       Task-2               TrainingClient._run_fwd_bwd.<locals>._run_async -> "
    "_APIFuture._result_async -> sleep main                                               Task-1          "
    "0x7f3a2c1b4e80 \n"
)

LOG_LINES = (
    "tinker_cookbook.utils.ml_log:236 [INFO] Wrote metrics to /tmp/run/metrics.jsonl\n"
    "[GIL monitor] slept 3.47s instead of 2.0s (jitter: 1.47s) — likely GIL contention\n"
)


def _parse(tmp_path: Path, text: str, name: str = "stdout.txt"):
    path = tmp_path / name
    path.write_text(text)
    warnings: list = []
    tasks, stacks, inputs = parse_dump_files([path], warnings)
    return tasks, stacks, inputs[0], warnings


def test_task_dump_rows(tmp_path: Path) -> None:
    tasks, _, info, warnings = _parse(tmp_path, HOLDER_DUMP)
    assert warnings == [] and info.records == 4
    assert tasks["task_name"].to_list() == ["Task-1", "Task-2", "Task-3", "periodic-task-dump-holder"]
    row = tasks.row(1, named=True)
    assert (row["label"], row["state"], row["task_count"], row["interval_s"], row["line"]) == (
        "holder",
        "pending",
        4,
        1.0,
        4,
    )
    assert str(row["timestamp"]) == "2026-03-05 12:00:01"
    assert "_run_fwd_bwd" in row["coroutine"]


def test_watchdog_stack_frames_in_order(tmp_path: Path) -> None:
    _, stacks, info, warnings = _parse(tmp_path, STACKS)
    assert warnings == []
    holder = stacks.filter(pl.col("label") == "holder")
    assert holder["function"].to_list() == ["_bootstrap", "model_dump", "model_dump"]
    assert holder["frame_index"].to_list() == [0, 1, 2]
    assert holder["code"].to_list()[-1] == "return self.__pydantic_serializer__.to_python("
    assert holder["thread_ident"].unique().to_list() == [140719074940608]
    sampler = stacks.filter(pl.col("label") == "sampler").row(0, named=True)
    assert sampler["no_frame"] and sampler["function"] is None
    assert info.records == 4  # frames; the no-frame marker is a row but not a frame


def test_simplified_watchdog_keeps_time_of_day_and_borrows_the_date(tmp_path: Path) -> None:
    _, alone, _, warnings = _parse(tmp_path, SIMPLE)
    assert warnings == []
    assert alone["time_of_day"].unique().to_list() == ["12:00:04"]
    assert alone["timestamp"].null_count() == alone.height  # no date anywhere in the file
    assert alone["snapshot"].unique().to_list() == [0]  # both threads printed in the same second
    _, stacks, _, _ = _parse(tmp_path, HOLDER_DUMP + SIMPLE, "both.txt")
    assert str(stacks["timestamp"][0]) == "2026-03-05 12:00:04"


def test_asyncio_ps_table(tmp_path: Path) -> None:
    tasks, _, info, warnings = _parse(tmp_path, PS, "ps.txt")
    assert warnings == [] and info.records == 2
    first, second = tasks.iter_rows(named=True)
    assert (first["label"], first["task_name"], first["coroutine"], first["awaiter_id"]) == (
        "ps",
        "Task-1",
        "main",
        "0x0",
    )
    assert first["awaiter_name"] is None
    # an overlong coroutine stack pushes the later columns right; they are still read
    assert second["coroutine"] == "TrainingClient._run_fwd_bwd.<locals>._run_async -> _APIFuture._result_async -> sleep"
    assert (second["awaiter_chain"], second["awaiter_name"], second["awaiter_id"]) == (
        "main",
        "Task-1",
        "0x7f3a2c1b4e80",
    )
    assert second["task_id"] == "0x7f3a2c1b5040" and second["thread_id"] == 12345


def test_interleaved_stdout_lines_outside_blocks_are_silent(tmp_path: Path) -> None:
    tasks, stacks, info, warnings = _parse(tmp_path, LOG_LINES + HOLDER_DUMP + LOG_LINES + STACKS + LOG_LINES + SIMPLE)
    assert warnings == []
    assert tasks.height == 4 and stacks.filter(~pl.col("no_frame")).height == 4 + 3
    assert info.records == 4 + 4 + 3


def test_cut_off_dump_and_malformed_line_inside_a_block(tmp_path: Path) -> None:
    broken = HOLDER_DUMP.replace("  'Task-3': pending", "  'Task-3' pending")
    cut = (
        "\n"
        "===== 2026-03-05 12:00:02 asyncio task dump [main] 2 task(s) @ interval=1.0s =====\n"
        "  'Task-1': pending  <coroutine object main at 0x1>\n"
    )
    tasks, _, info, warnings = _parse(tmp_path, broken + LOG_LINES + cut)
    assert tasks["task_name"].to_list() == ["Task-1", "Task-2", "periodic-task-dump-holder", "Task-1"]
    problems = [(w.line, w.problem) for w in warnings]
    assert any(line == 5 and "unreadable line inside task dump [holder]" in p for line, p in problems)
    assert any("announced 4 task(s), 3 were read" in p for _, p in problems)
    assert any("has no end line" in p and "1 task(s) are kept" in p for _, p in problems)
    assert info.skipped == 1


def test_fixture_dumps() -> None:
    run = fixture_run("sl_gil_stall")
    warnings: list = []
    tasks, stacks, inputs = parse_dump_files([run / "task_dump.txt", run / "stacks.txt", run / "stdout.txt"], warnings)
    assert warnings == []
    assert set(tasks["label"]) >= {"main", "holder"}
    assert stacks.height > 0 and stacks["file_path"].drop_nulls().len() > 0
    ps = ROOT / "fixtures" / "dumps" / "asyncio_ps.txt"
    if ps.exists():
        table, _, _ = parse_dump_files([ps], warnings)
        assert warnings == [] and table.height == sum(1 for line in ps.read_text().splitlines() if line[:1].isdigit())


GOOD_BLOCKS = [HOLDER_DUMP, STACKS]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    garbage=st.text(min_size=1, max_size=200),
    cut=st.integers(min_value=0, max_value=len(HOLDER_DUMP)),
)
def test_mutations_never_raise_and_keep_untouched_blocks(garbage: str, cut: int) -> None:
    # a damaged copy (truncated mid-block) followed by garbage, then an untouched block
    text = HOLDER_DUMP[:cut] + "\n" + garbage + "\n" + HOLDER_DUMP
    scan = scan_dump_lines(text.split("\n"), "mutated", [])
    intact_start = text.count("\n", 0, len(text) - len(HOLDER_DUMP)) + 1
    intact = [row["task_name"] for row in scan.tasks if row["line"] > intact_start]
    assert intact == ["Task-1", "Task-2", "Task-3", "periodic-task-dump-holder"]
