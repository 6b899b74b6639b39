"""A followed trace's spans table, extended a refresh at a time and kept on disk, is at every refresh the
table a cold read of the same bytes gives: spans closing across refreshes, open spans, metadata that
starts a segment arriving after the event it moves, X spans, a file replaced or truncated mid-watch.
So are the step spans of a followed timing_spans.jsonl, checked a look at a time."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import polars as pl
import pytest

from trace_doctor.ingest.live_run import LiveRun
from trace_doctor.ingest.parsers.timing_spans import parse_timing_spans_files
from trace_doctor.ingest.trace import span_extend, span_live, span_live_table
from trace_doctor.ingest.trace.trace_events import parse_trace_files

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "runs"
# Open spans at the end, resumed segments, two writers (pids), a stopped run, a streamed RL trace.
TRACES = ["sl_stopped_user_hang", "sl_resumed", "rl_two_writers", "demo", "rl_async_stream_healthy"]
REFRESHES = 40


@pytest.fixture(autouse=True)
def cold_reads(monkeypatch):
    """No table cache (a cold read is a cold read), and parts small enough that a fixture's table has
    several, folds and merges happen, and refreshes link, split and rewrite parts."""
    monkeypatch.setenv("TRACE_DOCTOR_CACHE", "off")
    monkeypatch.setattr(span_live_table, "MEMORY_ROWS", 0)  # on disk from the first refresh
    monkeypatch.setattr(span_extend, "PART_ROWS", 64)
    monkeypatch.setattr(span_live_table, "PART_ROWS", 64)
    monkeypatch.setattr(span_live, "FOLD_ROWS", 50)


def cold(path: Path) -> pl.DataFrame:
    """A cold read's spans, without the source (the live table names the followed file)."""
    spans, _ = parse_trace_files([path], [])
    return spans.read().drop("source")


def live_spans(live: LiveRun) -> pl.DataFrame:
    spans = live.tables().scan("spans").collect()
    assert spans.get_column("source").unique().to_list() in ([], [str(live.path / "trace_events.jsonl")])
    return spans.drop("source")


def grow(live_file: Path, data: bytes, cuts: list[int], live: LiveRun, tmp_path: Path, every: int = 1) -> int:
    """Append `data` up to each cut (mid-line cuts included) and look; at every `every`-th cut compare the
    live table with a cold read of the complete lines written so far. Returns the comparisons made."""
    compared = 0
    written = 0
    for number, cut in enumerate(cuts):
        with open(live_file, "ab") as f:
            f.write(data[written:cut])
        written = cut
        live.look()
        if number % every:
            continue
        whole = data[: data.rfind(b"\n", 0, cut) + 1]
        if not whole:
            continue
        reference = tmp_path / "cold" / "trace_events.jsonl"
        reference.parent.mkdir(exist_ok=True)
        reference.write_bytes(whole)
        want, got = cold(reference), live_spans(live)
        assert got.schema == want.schema
        assert got.equals(want, null_equal=True), f"refresh at byte {cut} of {len(data)}"
        compared += 1
    return compared


def cut_points(data: bytes, count: int) -> list[int]:
    step = max(1, len(data) // count)
    return [*range(step // 3, len(data), step), len(data)]


@pytest.mark.parametrize("held_rows", [0, 300])
@pytest.mark.parametrize("name", TRACES)
def test_every_refresh_equals_a_cold_read(name, held_rows, tmp_path, monkeypatch):
    # held_rows: the table stays in memory up to that many rows, then goes to disk (most fixtures cross it).
    monkeypatch.setattr(span_live_table, "MEMORY_ROWS", held_rows)
    data = (FIXTURES / name / "trace_events.jsonl").read_bytes()
    folder = tmp_path / "live"
    folder.mkdir()
    live = LiveRun(folder)
    assert grow(folder / "trace_events.jsonl", data, cut_points(data, REFRESHES), live, tmp_path) > REFRESHES // 2


def test_looks_between_refreshes_and_folds_equal_a_cold_read(tmp_path):
    # Several looks' spans wait for one refresh, and the ones past FOLD_ROWS are folded in by the look itself.
    data = (FIXTURES / "rl_async_stream_healthy" / "trace_events.jsonl").read_bytes()
    folder = tmp_path / "live"
    folder.mkdir()
    live = LiveRun(folder)
    assert grow(folder / "trace_events.jsonl", data, cut_points(data, 60), live, tmp_path, every=7) >= 8


def _event(ph: str, name: str, ts: float, pid: int = 1, step: int | None = None, **extra) -> bytes:
    args: dict = {"track": "main", "thread": "MainThread"}
    if step is not None:
        args["step"] = step
    event = {"ph": ph, "name": name, "ts": ts, "pid": pid, "tid": 1, "args": args, **extra}
    return json.dumps(event).encode() + b"\n"


def _meta(pid: int = 1) -> bytes:
    return json.dumps({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "trainer"}}).encode() + b"\n"


def synthetic_trace() -> bytes:
    """Steps whose inner spans get their step by containment, a span open across many steps, a writer that
    restarts with its clock started again (its repeated process_name arrives after the B event it moves
    to the new segment, where it sorts first), X spans."""
    lines = [_meta(), _event("B", "main", 0.0)]
    for segment in range(3):
        ts = 1.0 + segment / 10
        if segment:
            lines += [_event("B", "restarted", ts), _meta()]  # the B belongs to the new segment
            ts += 1
        lines.append(_event("B", "eval", ts))
        for step in range(6):
            lines.append(_event("B", "train_step", ts))
            lines.append(_event("B", "forward", ts + 1))
            lines.append(_event("E", "forward", ts + 2))
            lines.append(_event("X", "data", ts + 0.5, dur=0.25))
            lines.append(_event("E", "train_step", ts + 3, step=step))
            ts += 4
            if step == 3:
                lines.append(_event("E", "eval", ts))
    lines.append(_event("E", "main", ts + 1))
    return b"".join(lines)


def test_late_metadata_x_spans_and_open_spans_at_every_line(tmp_path):
    data = synthetic_trace()
    folder = tmp_path / "live"
    folder.mkdir()
    live = LiveRun(folder)
    ends = [i + 1 for i, byte in enumerate(data) if byte == 0x0A]
    assert grow(folder / "trace_events.jsonl", data, ends, live, tmp_path) == len(ends)


def test_a_replaced_or_truncated_trace_is_read_afresh(tmp_path):
    data = (FIXTURES / "demo" / "trace_events.jsonl").read_bytes()
    other = (FIXTURES / "sl_stopped_user_hang" / "trace_events.jsonl").read_bytes()
    folder = tmp_path / "live"
    folder.mkdir()
    path = folder / "trace_events.jsonl"
    live = LiveRun(folder)
    grow(path, data, cut_points(data, 10)[:6], live, tmp_path)
    path.write_bytes(b"")  # truncated
    assert live.look().read_afresh == [str(path)]
    assert live_spans(live).height == 0
    grow(path, other, cut_points(other, 10), live, tmp_path)
    replacement = folder / "replacement.tmp"
    replacement.write_bytes(data[: len(data) // 3])
    replacement.replace(path)  # replaced by a shorter file
    live.look()
    reference = tmp_path / "cold" / "trace_events.jsonl"
    reference.write_bytes(data[: data.rfind(b"\n", 0, len(data) // 3) + 1])
    assert live_spans(live).equals(cold(reference), null_equal=True)


def test_a_table_stays_readable_while_held_and_its_folder_goes_after(tmp_path):
    data = (FIXTURES / "demo" / "trace_events.jsonl").read_bytes()
    folder = tmp_path / "live"
    folder.mkdir()
    path = folder / "trace_events.jsonl"
    path.write_bytes(data[: len(data) // 2])
    live = LiveRun(folder)
    live.look()
    held = live.tables()
    first = held.scan("spans").collect()
    assert first.height
    folders = {p.parent for p in held._raw("spans").paths}
    assert folders and all(f.is_dir() for f in folders)
    with open(path, "ab") as f:
        f.write(data[len(data) // 2 :])
    live.look()
    assert live.tables().height("spans") > first.height
    assert held.scan("spans").collect().equals(first, null_equal=True)  # an older refresh still reads
    del held
    gc.collect()
    assert not any(f.exists() for f in folders)


def test_memory_holds_only_the_spans_closed_since_the_last_fold(tmp_path):
    # Looks with no findings refresh in between: the closed spans go to disk as they pass FOLD_ROWS, so
    # what the reader holds does not grow with the run; the table's rows are all in Parquet parts.
    data = (FIXTURES / "rl_async_stream_healthy" / "trace_events.jsonl").read_bytes()
    folder = tmp_path / "live"
    folder.mkdir()
    path = folder / "trace_events.jsonl"
    live = LiveRun(folder)
    held = []
    written = 0
    for cut in cut_points(data, 30):
        with open(path, "ab") as f:
            f.write(data[written:cut])
        written = cut
        live.look()
        [reader] = [f.spans for f in live._followed.values()]
        held.append(sum(frame.height for frame in reader._closed))
    assert max(held) < span_live.FOLD_ROWS + len(data) // 30  # at most one look's spans past the bound
    table = reader.table()
    assert table.height > 10 * span_live.FOLD_ROWS
    assert table.parts and all(isinstance(part, Path) for part in table.parts)
    assert len(table.parts) <= 2 * (table.height // span_live_table.PART_ROWS) + 8  # merged as they accumulate


@pytest.mark.parametrize("bad_line", [None, b'{"step": 3, "spans": "not a list"}\n'])
def test_followed_step_spans_equal_a_cold_read_at_every_look(bad_line, tmp_path):
    data = (FIXTURES / "rl_async_stream_healthy" / "timing_spans.jsonl").read_bytes()
    if bad_line is not None:  # a line not in the cookbook's layout: read whole from then on, for its warning
        middle = data.index(b"\n", len(data) // 2) + 1
        data = data[:middle] + bad_line + data[middle:]
    folder = tmp_path / "live"
    folder.mkdir()
    path = folder / "timing_spans.jsonl"
    live = LiveRun(folder)
    written = 0
    for cut in cut_points(data, 12):
        with open(path, "ab") as f:
            f.write(data[written:cut])
        written = cut
        live.look()
        whole = data[: data.rfind(b"\n", 0, cut) + 1]
        if b"\n" not in whole or (bad_line is not None and len(whole) < len(data) and bad_line in whole):
            continue  # a half-written line after the bad one: the cold read of the file now sees it too
        reference = tmp_path / "cold" / "timing_spans.jsonl"
        reference.parent.mkdir(exist_ok=True)
        reference.write_bytes(whole)
        warnings: list = []
        want, inputs = parse_timing_spans_files([reference], warnings)
        run = live.tables()
        got = run.scan("step_spans").collect()
        assert got.drop("source").equals(want.read().drop("source"), null_equal=True)
        [info] = [i for i in run.inputs if i.kind == "spans"]
        assert (info.records, info.skipped) == (inputs[0].records, inputs[0].skipped)
        assert [w.problem for w in run.warnings] == [w.problem for w in warnings]
