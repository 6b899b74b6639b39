"""A trace whose timestamps are too large for a double to hold microseconds is read whole, and says
so: its durations and gaps are rounded (1e300 rounds every one of them to zero), which otherwise
shows up only as a run of 0.0 ms with nothing to find."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_doctor.ingest.trace.trace_events import parse_trace_files
from trace_doctor.ingest.trace.trace_read import CHUNK_BYTES

TEMPLATE = Path(__file__).parent.parent / "fixtures" / "runs" / "sl_healthy_pipelined" / "trace_events.jsonl"


def shifted_trace(tmp_path: Path, offset: float) -> Path:
    """The fixture's cookbook trace with every span event's ts moved by `offset` microseconds."""
    out = tmp_path / "trace_events.jsonl"
    with out.open("w") as f:
        for line in TEMPLATE.read_text().splitlines():
            event = json.loads(line)
            if event["ph"] != "M":
                event["ts"] = offset + event["ts"]
            f.write(json.dumps(event) + "\n")
    return out


def parse(path: Path) -> tuple[int, int, list[str]]:
    warnings: list = []
    spans, infos = parse_trace_files([path], warnings)
    return spans.height, infos[0].records, [w.problem for w in warnings]


def clock_warnings(problems: list[str]) -> list[str]:
    return [p for p in problems if "beyond 2^53 us" in p]


def test_a_clock_beyond_double_precision_is_read_whole_with_one_warning(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "huge").mkdir()
    plain = parse(shifted_trace(tmp_path / "plain", 0.0))
    huge = parse(shifted_trace(tmp_path / "huge", 1e300))
    assert huge[:2] == plain[:2]  # every event and span kept
    assert clock_warnings(plain[2]) == []
    (warning,) = clock_warnings(huge[2])
    assert "reach 1e+300 us" in warning and "nearest 1.49e+284 us" in warning


@pytest.mark.parametrize(("offset", "warned"), [(2.0**53 - 1e12, False), (2.0**53, True), (1.7e18, True)])
def test_the_warning_starts_where_microseconds_stop_fitting(tmp_path, offset, warned):
    # 1.7e18: epoch nanoseconds written where microseconds belong.
    assert bool(clock_warnings(parse(shifted_trace(tmp_path, offset))[2])) is warned


def test_negative_timestamps_count_by_size(tmp_path):
    assert clock_warnings(parse(shifted_trace(tmp_path, -1e17))[2])


def test_one_huge_event_in_a_late_chunk_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr("trace_doctor.ingest.trace.trace_read.CHUNK_BYTES", 4096, raising=False)
    path = shifted_trace(tmp_path, 0.0)
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    last["ts"] = 3e16
    path.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    assert CHUNK_BYTES > 4096
    assert clock_warnings(parse(path)[2])
