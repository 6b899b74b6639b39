"""A trace that grew since it was analysed is read from where the last read stopped, and the result is
exactly a cold read's of the grown file: spans, warnings and input counts, cut anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from conftest import isolated_cache

from trace_doctor.ingest.storage import cache, resume_entry
from trace_doctor.ingest.trace import trace_events, trace_resume
from trace_doctor.ingest.trace.trace_events import parse_trace_files

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "runs"
# Open spans at the end, resumed segments, two writers (pids), a stopped run, a streamed RL trace.
TRACES = ["sl_stopped_user_hang", "sl_resumed", "rl_two_writers", "demo", "rl_async_stream_healthy"]
CUTS = 7


@pytest.fixture
def resumes(tmp_path, monkeypatch):
    """A cache that takes any file; returns the list of resumed reads (True: resumed, False: read whole)."""
    isolated_cache(tmp_path, monkeypatch)
    monkeypatch.setattr(cache, "MIN_CACHED_BYTES", 0)
    seen: list[bool] = []
    original = trace_resume.resume_trace_file

    def spy(*args, **kwargs):
        result = original(*args, **kwargs)
        seen.append(result is not None)
        return result

    monkeypatch.setattr(trace_events, "resume_trace_file", spy)
    return seen


def parse(path: Path):
    warnings: list = []
    spans, inputs = parse_trace_files([path], warnings)
    return spans.read(), inputs, warnings


def cold(path: Path, monkeypatch) -> tuple:
    with monkeypatch.context() as m:
        m.setenv("TRACE_DOCTOR_CACHE", "off")
        return parse(path)


def same(got: tuple, want: tuple) -> None:
    spans, inputs, warnings = got
    want_spans, want_inputs, want_warnings = want
    assert spans.schema == want_spans.schema
    assert spans.equals(want_spans, null_equal=True)
    assert inputs == want_inputs
    assert warnings == want_warnings


def line_ends(data: bytes) -> list[int]:
    return [i + 1 for i, byte in enumerate(data) if byte == 0x0A]


def cut_points(data: bytes, count: int) -> list[int]:
    ends = line_ends(data)[:-1]
    step = max(1, len(ends) // (count + 1))
    return ends[step::step][:count]


@pytest.mark.parametrize("run", TRACES)
def test_resumed_read_equals_cold_read_at_every_cut(run, tmp_path, monkeypatch, resumes):
    data = (FIXTURES / run / "trace_events.jsonl").read_bytes()
    for number, cut in enumerate(cut_points(data, CUTS)):
        path = tmp_path / f"cut{number}" / "trace_events.jsonl"
        path.parent.mkdir()
        path.write_bytes(data[:cut])
        same(parse(path), cold(path, monkeypatch))  # the cold read that leaves its state
        # Grown by part of the rest (ending mid-line: the half-written last line of a live writer), then whole.
        middle = cut + (len(data) - cut) // 2
        for end in (middle, len(data)):
            with open(path, "ab") as out:
                out.write(data[path.stat().st_size : end])
            resumes.clear()
            got = parse(path)
            assert resumes == [True], (run, cut, end)
            same(got, cold(path, monkeypatch))


def test_chained_resumes_equal_cold_reads(tmp_path, monkeypatch, resumes):
    """Each resumed read leaves the state the next one goes on from."""
    data = (FIXTURES / "sl_stopped_user_hang" / "trace_events.jsonl").read_bytes()
    path = tmp_path / "trace_events.jsonl"
    cuts = cut_points(data, 6)
    path.write_bytes(data[: cuts[0]])
    parse(path)
    for end in [*cuts[1:], len(data)]:
        with open(path, "ab") as out:
            out.write(data[path.stat().st_size : end])
        resumes.clear()
        got = parse(path)
        assert resumes == [True]
        same(got, cold(path, monkeypatch))


def damaged() -> bytes:
    """A cookbook trace with garbage lines, an unmatched E, ignored phases, blank lines and an oversized
    number, spread through the file."""
    lines = (FIXTURES / "sl_stopped_user_hang" / "trace_events.jsonl").read_bytes().splitlines()
    bad = [
        b"not json at all",
        json.dumps(
            {"name": "lonely", "ph": "E", "pid": 0, "tid": 1, "ts": 5.0, "args": {"track": "x", "thread": "t"}}
        ).encode(),
        json.dumps({"name": "mark", "ph": "i", "pid": 0, "tid": 1, "ts": 6.0}).encode(),
        b"",
        b'{"name": "big", "ph": "B", "pid": 0, "tid": 1, "ts": 1e999, "args": {"track": "t", "thread": "t"}}',
        b'{"truncated": ',
    ]
    out = []
    for index, line in enumerate(lines):
        out.append(line)
        if index % 37 == 5:
            out.append(bad[index % len(bad)])
    return b"\n".join(out) + b"\n"


def test_damaged_trace_resumes_with_the_cold_reads_warnings(tmp_path, monkeypatch, resumes):
    data = damaged()
    for number, cut in enumerate(cut_points(data, 5)):
        path = tmp_path / f"cut{number}" / "trace_events.jsonl"
        path.parent.mkdir()
        path.write_bytes(data[:cut])
        parse(path)
        path.write_bytes(data)
        resumes.clear()
        got = parse(path)
        assert resumes == [True]
        want = cold(path, monkeypatch)
        same(got, want)
        assert want[2], "the damaged trace has warnings"


def grown(tmp_path: Path) -> tuple[Path, bytes, int]:
    data = (FIXTURES / "sl_stopped_user_hang" / "trace_events.jsonl").read_bytes()
    path = tmp_path / "trace_events.jsonl"
    cut = cut_points(data, 3)[1]
    path.write_bytes(data[:cut])
    parse(path)
    return path, data, cut


def test_a_file_replaced_by_a_longer_one_is_read_whole(tmp_path, monkeypatch, resumes):
    path, data, cut = grown(tmp_path)
    other = data[:cut].replace(b'"ts": 62', b'"ts": 72', 1) + data[cut:]
    assert len(other) > cut and other[:cut] != data[:cut]
    path.write_bytes(other)
    resumes.clear()
    got = parse(path)
    assert resumes == [False]
    same(got, cold(path, monkeypatch))


def test_a_truncated_file_is_read_whole(tmp_path, monkeypatch, resumes):
    path, data, cut = grown(tmp_path)
    path.write_bytes(data[: cut // 2])
    resumes.clear()
    got = parse(path)
    assert resumes == [False]
    same(got, cold(path, monkeypatch))


@pytest.mark.parametrize(
    "damage",
    ["garbage_header", "wrong_types", "garbage_frame", "missing_frame", "foreign_frame", "wrong_frame_schema"],
)
def test_a_tampered_state_is_a_miss(tmp_path, monkeypatch, resumes, damage):
    path, data, _ = grown(tmp_path)
    entry = resume_entry.entry_path(path, "spans")
    header = json.loads((entry / "entry.json").read_text())
    if damage == "garbage_header":
        (entry / "entry.json").write_bytes(b"\x00garbage{")
    elif damage == "wrong_types":
        header["state"]["boundaries"] = "many"
        header["state"]["bad"]["listed"] = [[None, 5]]
        (entry / "entry.json").write_text(json.dumps(header))
    elif damage == "garbage_frame":
        (entry / "open.arrow").write_bytes(b"ARROW1 not really")
    elif damage == "missing_frame":
        (entry / "held.arrow").unlink()
    elif damage == "foreign_frame":
        header["frames"].append("../../elsewhere")
        (entry / "entry.json").write_text(json.dumps(header))
    else:
        pl.DataFrame({"line": ["a"], "ph": [1]}).write_ipc(entry / "held.arrow")
    path.write_bytes(data)
    resumes.clear()
    got = parse(path)
    assert resumes == [False]
    same(got, cold(path, monkeypatch))


def test_no_state_without_the_cache(tmp_path, monkeypatch, resumes):
    monkeypatch.setenv("TRACE_DOCTOR_CACHE", "off")
    path, data, _ = grown(tmp_path)
    assert not resume_entry.entry_path(path, "spans").exists()
    path.write_bytes(data)
    resumes.clear()
    got = parse(path)
    assert resumes == [False]
    monkeypatch.delenv("TRACE_DOCTOR_CACHE")
    same(got, cold(path, monkeypatch))


def test_state_is_data_only(tmp_path, monkeypatch, resumes):
    path, _, _ = grown(tmp_path)
    entry = resume_entry.entry_path(path, "spans")
    names = sorted(p.name for p in entry.iterdir())
    assert names == ["covers.arrow", "entry.json", "held.arrow", "open.arrow"]
    json.loads((entry / "entry.json").read_text())
    for name in names:
        if name.endswith(".arrow"):
            pl.read_ipc((entry / name).read_bytes())
