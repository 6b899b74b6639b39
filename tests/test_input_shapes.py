"""Time and memory follow the input's size, not its shape: a large log is read in bounded blocks, a huge
line costs its bytes, discovery is linear in the number of files; and a doubled byte-order mark loses
nothing. The big measurements are benchmarks/input_shapes.py's; these use sizes that run in seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

from trace_doctor.api import load_run
from trace_doctor.discover import discover
from trace_doctor.ingest.parsers.logs import parse_log_files
from trace_doctor.ingest.reading.textfile import text_lines

BOM = b"\xef\xbb\xbf"
MB = 1024 * 1024

# Run in a subprocess: parse one log with 1 MB read blocks and print the peak of Python allocations.
PEAK = """
import sys, tracemalloc
from pathlib import Path
from trace_doctor.ingest.reading import textfile
from trace_doctor.ingest.parsers.logs import parse_log_files
textfile.READ_BLOCK_BYTES = 1024 * 1024
warnings = []
tracemalloc.start()
table, [info] = parse_log_files([Path(sys.argv[1])], warnings)
print(tracemalloc.get_traced_memory()[1], info.records, table.height, len(warnings))
"""


def peak_of_parse(log: Path) -> tuple[int, int, int, int]:
    """(peak bytes traced, lines read, events, warnings) of parsing `log` in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", PEAK, str(log)], env=env, capture_output=True, text=True, check=True)
    peak, records, events, warnings = map(int, out.stdout.split())
    return peak, records, events, warnings


def test_a_large_log_is_parsed_in_bounded_memory(tmp_path):
    log = tmp_path / "logs.log"
    record = b"tinker_cookbook.rl.train:42 [INFO] Step %d: some ordinary progress text of a log line\n"
    with open(log, "wb") as out:
        for start in range(0, 240_000, 1000):
            out.write(b"".join(record % n for n in range(start, start + 1000)))
        out.write(b"tinker_cookbook.rl.train:7 [ERROR] the end\n")
    assert log.stat().st_size > 20 * MB
    peak, records, events, _ = peak_of_parse(log)
    assert records == 240_001 and events == 1
    # Read whole, the file's bytes alone were 20 MB and its lines list twice that.
    assert peak < 8 * MB, f"{peak / MB:.1f} MB held to parse a {log.stat().st_size / MB:.0f} MB log"


def test_a_huge_line_is_cut_and_held_no_longer_than_the_cut(tmp_path):
    log = tmp_path / "logs.log"
    with open(log, "wb") as out:
        out.write(b"tinker_cookbook.rl.train:1 [INFO] start\ntinker_cookbook.rl.train:2 [INFO] ")
        out.write(b"abc def " * (24 * MB // 8))
        out.write(b"\ntinker_cookbook.rl.train:3 [ERROR] after the long line\n")
    peak, records, events, warnings = peak_of_parse(log)
    assert (records, events, warnings) == (3, 1, 1)  # the error after it is read; the cut is said once
    assert peak < 12 * MB, f"{peak / MB:.1f} MB held for a 24 MB line"


def test_a_cut_line_is_said_with_its_length(tmp_path):
    log = tmp_path / "out.log"
    log.write_bytes(b"short\n" + b"x" * 5000 + b"\nlast\n")
    warnings: list = []
    lines = list(text_lines(log, warnings, max_line=1000))
    assert lines == ["short", "x" * 1000, "last"]
    assert [(w.line, "5,000 characters" in w.problem) for w in warnings] == [(2, True)]


def test_lines_read_in_blocks_are_the_lines_of_the_whole_file(tmp_path, monkeypatch):
    """Blocks cut characters, CRLF pairs and lines anywhere: the lines are those of the file read whole."""
    from trace_doctor.ingest.reading import textfile

    text = "".join(f"línea {n} ✓ {'é' * (n % 7)}\r\n" if n % 3 else f"plain {n}\n" for n in range(500)) + "tail"
    log = tmp_path / "logs.log"
    log.write_bytes(BOM + text.encode("utf-8") + b"\xff\n")
    monkeypatch.setattr(textfile, "READ_BLOCK_BYTES", 7)
    warnings: list = []
    lines = list(text_lines(log, warnings))
    whole = (text + "\ufffd").split("\n")
    assert lines == [line.removesuffix("\r") for line in whole]
    assert [(w.line, "not UTF-8" in w.problem) for w in warnings] == [(501, True)]
    utf16 = tmp_path / "console.log"
    utf16.write_bytes("\ufeffhello ✓\r\nworld\n".encode("utf-16-le") * 1)
    assert list(text_lines(utf16, [])) == ["hello ✓", "world"]


def _discovery_seconds(folder: Path, count: int) -> float:
    folder.mkdir()
    for i in range(count):
        (folder / f"f{i:05d}.log").write_bytes(b"x")
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        found = discover([folder])
        best = min(best, time.perf_counter() - started)
    assert sum(len(paths) for paths in found.files.values()) + len(found.passed_over) == count
    return best


def test_discovery_is_linear_in_the_number_of_files(tmp_path):
    small = _discovery_seconds(tmp_path / "small", 1000)
    large = _discovery_seconds(tmp_path / "large", 8000)
    # 8x the files: ~8x the time when linear, ~64x when quadratic (the list membership test it had).
    assert large / small < 24, f"1,000 files {small:.3f} s, 8,000 files {large:.3f} s"


@pytest.mark.parametrize("marks", [2, 3])
def test_a_trace_starting_with_several_byte_order_marks_loses_no_event(marks, tmp_path):
    events = [
        {"name": "a", "ph": "X", "ts": 1, "dur": 5, "pid": 1, "tid": 1},
        {"name": "b", "ph": "X", "ts": 10, "dur": 5, "pid": 1, "tid": 1},
    ]
    (tmp_path / "trace_events.jsonl").write_bytes(
        BOM * marks + b"".join(json.dumps(e).encode() + b"\n" for e in events)
    )
    run = load_run(tmp_path)
    assert run.spans["name"].to_list() == ["a", "b"]
    assert run.warnings == []


def test_cookbook_trace_and_metrics_with_a_doubled_mark_lose_no_record(tmp_path):
    begin = {
        "name": "train_step",
        "ph": "B",
        "pid": 0,
        "tid": 1,
        "ts": 1.0,
        "args": {"track": "main", "thread": "MainThread"},
        "cat": "async",
    }
    end = dict(begin, ph="E", ts=9.0, args={"track": "main", "thread": "MainThread", "step": 0})
    (tmp_path / "trace_events.jsonl").write_bytes(
        BOM * 2 + (json.dumps(begin) + "\n" + json.dumps(end) + "\n").encode()
    )
    (tmp_path / "metrics.jsonl").write_bytes(BOM * 2 + b'{"step": 0, "loss": 1.5}\n{"step": 1, "loss": 1.0}\n')
    (tmp_path / "logs.log").write_bytes(BOM * 2 + b"tinker_cookbook.rl.train:7 [ERROR] first line\n")
    run = load_run(tmp_path)
    assert run.spans.height == 1 and run.steps["loss"].to_list() == [1.5, 1.0]
    assert run.log_events["line"].to_list() == [1]
    assert run.warnings == []


def test_parse_log_files_reads_every_line_of_a_file_with_dumps(tmp_path):
    """Lines are held from the first dump block on only; the count and events match the file's."""
    log = tmp_path / "logs.log"
    dump = (
        "===== 2026-03-05 12:00:01 asyncio task dump [main] 2 task(s) @ interval=1.0s =====\n"
        "  'Task-1': pending  <coroutine object A.run at 0x7ffbb682dcb0>\n"
        "  'Task-2': pending  <coroutine object B.run at 0x7ffbb69e6380>\n"
        "===== 2026-03-05 12:00:01 end [main] =====\n"
    )
    log.write_text(
        "[prefix line]\n"
        + "tinker_cookbook.rl.train:7 [ERROR] before\n"
        + dump
        + "tinker_cookbook.rl.train:8 [ERROR] after\n"
    )
    warnings: list = []
    table, [info] = parse_log_files([log], warnings)
    assert table["line"].to_list() == [2, 7]
    assert info.records == 3
