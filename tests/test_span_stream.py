"""Spans paired a chunk at a time are the spans of the whole file: the chunk size changes nothing,
even when every line is a chunk of its own, so every truncated line, unmatched E, still-open B and
resumed-process boundary falls on a chunk boundary. Likewise the spill's sizes: spans written to
disk a few at a time and sorted back in windows of a few spans give the same table as a file small
enough to be sorted in memory."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from trace_doctor.ingest.storage import cache, stored_table
from trace_doctor.ingest.trace import span_spill, span_stream, trace_document, trace_read
from trace_doctor.ingest.trace.span_pairing import pair_begin_end
from trace_doctor.ingest.trace.trace_events import parse_trace_files


def event(name: str, ph: str, ts: float, *, tid: int = 1, track: str = "main", step: int | None = None) -> str:
    args = {"track": track, "thread": "MainThread", **({"step": step} if step is not None else {})}
    return json.dumps({"name": name, "ph": ph, "pid": 0, "tid": tid, "ts": ts, "args": args, "cat": "async"})


def process(label: str) -> str:
    return json.dumps({"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "ts": 0, "args": {"name": label}})


def run_part(t0: float, steps: int) -> list[str]:
    """A few cookbook steps: a train step around concurrent sampling tasks, as the writer emits them."""
    lines = []
    for step in range(steps):
        t = t0 + step * 100
        lines.append(event("train_step", "B", t))
        lines += [event("sample_async", "B", t + 1 + k, tid=10 + k, track=f"Task-{k}") for k in range(3)]
        lines += [event("sample_async", "E", t + 20 + k, tid=10 + k, track=f"Task-{k}") for k in range(3)]
        lines.append(event("train_step", "E", t + 50, step=step))
    return lines


def damaged_trace() -> list[str]:
    first = run_part(0.0, 4)
    # The resumed process's first event is written before its process_name metadata.
    second = run_part(10_000.0, 3)
    # A span around the whole first process: its train steps nest inside it, chunks apart.
    outer = [event("outer", "B", -1.0), *first, event("outer", "E", 9_000.0)]
    lines = [process("MainThread Thread"), *outer, second[0], process("MainThread Thread"), *second[1:]]
    lines.insert(2, event("lonely", "E", 7.0, tid=11, track="Task-1"))  # an E with no open B
    lines.insert(9, '{"name": "cut", "ph": "B", "pid": 0, "ti')  # a line truncated mid-write
    lines.insert(12, "not json at all")
    lines.insert(14, json.dumps({"name": "tick", "ph": "C", "pid": 0, "tid": 1, "ts": 3, "args": {"v": 1}}))
    lines.insert(20, json.dumps({"name": "op", "ph": "X", "pid": 0, "tid": 5, "ts": 30.0, "dur": 4.0, "args": {}}))
    lines.append(event("never_closed", "B", 20_000.0, tid=12, track="Task-2"))
    lines.append('{"name": "train_step", "ph": "E", "pid": 0, "tid": 1, "ts": 2')  # the file ends mid-line
    return lines


def parse(path: Path) -> tuple:
    warnings: list = []
    spans, infos = parse_trace_files([path], warnings)
    return spans.read(), [vars(i) for i in infos], [(w.line, w.problem) for w in warnings]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace_events.jsonl"
    path.write_text("\n".join(damaged_trace()))
    return path


def test_the_whole_file_as_one_chunk_reads_the_damage(trace):
    spans, infos, warnings = parse(trace)
    problems = [problem for _, problem in warnings]
    assert any("unmatched E event 'lonely'" in p for p in problems)
    assert any("phase 'C'" in p for p in problems)
    assert sum("truncated" in p or "not valid JSON" in p or "not JSON" in p for p in problems) >= 2
    never = spans.filter(spans["name"] == "never_closed")
    assert never.height == 1 and not never["closed"][0]
    # The resumed process starts at its first event, written before its metadata.
    assert sorted(spans["segment"].unique().to_list()) == [0, 1]
    assert spans.filter(spans["start_us"] == 10_000.0)["segment"].to_list() == [1]
    assert spans.filter((spans["name"] == "sample_async") & (spans["segment"] == 0))["step"].null_count() == 0
    assert spans.filter(spans["name"] == "op")["depth"].to_list() == [0]
    outer = spans.filter(spans["name"] == "outer")
    assert outer["closed"].to_list() == [True] and outer["depth"].to_list() == [0]
    steps = spans.filter(spans["name"] == "train_step")
    assert steps.filter(steps["segment"] == 0)["depth"].unique().to_list() == [1]
    assert steps.filter(steps["segment"] == 1)["depth"].unique().to_list() == [0]


@pytest.mark.parametrize("chunk_bytes", [1, 97, 1024])
def test_any_chunk_size_gives_the_same_spans_and_warnings(trace, monkeypatch, chunk_bytes):
    """Every chunk paired as it arrives (the batch of one event), so every boundary is a pairing one."""
    whole = parse(trace)
    monkeypatch.setattr(trace_read, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(span_stream, "PAIR_BATCH_EVENTS", 1)  # pair every chunk
    chunked = parse(trace)
    assert chunked[0].equals(whole[0], null_equal=True)
    assert chunked[1:] == whole[1:]


@pytest.mark.parametrize(("buffer", "window", "sample"), [(1, 1, 1), (3, 4, 2), (7, 2, 3)])
def test_spans_spilled_and_sorted_back_in_small_windows_are_the_same_table(trace, monkeypatch, buffer, window, sample):
    whole = parse(trace)
    monkeypatch.setattr(trace_read, "CHUNK_BYTES", 211)
    monkeypatch.setattr(span_stream, "PAIR_BATCH_EVENTS", 1)  # pair every chunk
    monkeypatch.setattr(span_spill, "MEMORY_ROWS", 0)  # spilled however small
    monkeypatch.setattr(span_spill, "BUFFER_ROWS", buffer)
    monkeypatch.setattr(span_spill, "WINDOW_ROWS", window)
    monkeypatch.setattr(span_spill, "SAMPLE_EVERY", sample)
    monkeypatch.setattr(span_spill, "SCRATCH_ROW_GROUP", 2)
    spilled = parse(trace)
    assert spilled[0].equals(whole[0], null_equal=True)
    assert spilled[1:] == whole[1:]


def test_a_document_read_in_tiny_blocks_gives_the_same_spans(tmp_path, monkeypatch):
    path = tmp_path / "trace.json"
    lines = [line for line in damaged_trace() if line.startswith("{") and line.endswith("}")]
    path.write_text('{"traceEvents": [\n' + ",\n".join(lines) + "\n]}")
    whole = parse(path)
    assert whole[0].height > 20
    monkeypatch.setattr(trace_document, "BLOCK_BYTES", 64)
    monkeypatch.setattr(span_stream, "PAIR_BATCH_EVENTS", 1)  # pair every chunk
    chunked = parse(path)
    assert chunked[0].equals(whole[0], null_equal=True)
    assert chunked[1:] == whole[1:]


def deep_stack_trace() -> list[str]:
    """Never-closed B events pile up on one track while spans open and close on top of them (and an
    E too many at the end): the stack a chunk pairs again is only what its E events can reach."""
    lines = []
    for k in range(60):
        lines.append(event("leak", "B", 10.0 * k))
        lines.append(event("work", "B", 10.0 * k + 1))
        lines.append(event("inner", "B", 10.0 * k + 2, tid=2, track="other"))
        lines.append(event("inner", "E", 10.0 * k + 3, tid=2, track="other"))
        lines.append(event("work", "E", 10.0 * k + 4, step=k))
    lines += [event("leak", "E", 700.0 + k) for k in range(3)]
    lines.append(event("extra", "E", 800.0, tid=2, track="other"))
    return lines


@pytest.mark.parametrize("chunk_bytes", [1, 300, 4096])
def test_a_deep_stack_carried_across_chunks_pairs_like_the_whole_file(tmp_path, monkeypatch, chunk_bytes):
    path = tmp_path / "trace_events.jsonl"
    path.write_text("\n".join(deep_stack_trace()) + "\n")
    whole = parse(path)
    assert whole[0].filter(whole[0]["name"] == "leak")["closed"].sum() == 3
    assert whole[0].filter(whole[0]["name"] == "work")["depth"].to_list()[-1] == 60
    monkeypatch.setattr(span_stream, "DEEP_STACK", 0)
    monkeypatch.setattr(trace_read, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(span_stream, "PAIR_BATCH_EVENTS", 1)  # pair every chunk
    chunked = parse(path)
    assert chunked[0].equals(whole[0], null_equal=True)
    assert chunked[1:] == whole[1:]


def test_the_damaged_trace_pairs_alike_with_the_deep_stack_set_apart(trace, monkeypatch):
    whole = parse(trace)
    monkeypatch.setattr(span_stream, "DEEP_STACK", 0)
    monkeypatch.setattr(trace_read, "CHUNK_BYTES", 97)
    monkeypatch.setattr(span_stream, "PAIR_BATCH_EVENTS", 1)  # pair every chunk
    chunked = parse(trace)
    assert chunked[0].equals(whole[0], null_equal=True)
    assert chunked[1:] == whole[1:]


@pytest.mark.parametrize("batch", [2, 7, 40])
def test_pairing_in_batches_of_any_size_gives_the_same_spans(trace, monkeypatch, batch):
    whole = parse(trace)
    monkeypatch.setattr(trace_read, "CHUNK_BYTES", 150)
    monkeypatch.setattr(span_stream, "PAIR_BATCH_EVENTS", batch)
    batched = parse(trace)
    assert batched[0].equals(whole[0], null_equal=True)
    assert batched[1:] == whole[1:]


def small_spill(monkeypatch) -> None:
    """Spill however small the trace, a few spans at a time."""
    monkeypatch.setattr(span_spill, "MEMORY_ROWS", 0)
    monkeypatch.setattr(span_spill, "BUFFER_ROWS", 3)
    monkeypatch.setattr(span_spill, "WINDOW_ROWS", 4)
    monkeypatch.setattr(span_spill, "SAMPLE_EVERY", 2)
    monkeypatch.setattr(stored_table, "_scratch", None)
    monkeypatch.setattr(stored_table, "_disk_ok", True)
    monkeypatch.setattr(stored_table, "notes", [])
    # A refused cache folder turns the cache off for the process: for this test only.
    monkeypatch.setattr(cache, "_unwritable", None)
    # ...and its note with it: left queued, the next analysis in this process printed it.
    monkeypatch.setattr(cache, "_notes", [])


def test_no_disk_to_spill_to_keeps_the_spans_in_memory_with_a_note(trace, monkeypatch):
    whole = parse(trace)
    small_spill(monkeypatch)

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(stored_table.tempfile, "mkdtemp", no_space)
    monkeypatch.setattr(stored_table.tempfile, "mkstemp", no_space)
    kept = parse(trace)
    assert kept[0].equals(whole[0], null_equal=True)
    assert kept[1:] == whole[1:]
    assert any("No space left on device" in note for note in stored_table.notes)


def test_a_disk_that_fills_up_midway_loses_no_span(trace, monkeypatch):
    whole = parse(trace)
    small_spill(monkeypatch)
    real = pl.DataFrame.write_parquet
    written = []

    def fills_up(self, *args, **kwargs):
        if len(written) >= 2:
            raise OSError(28, "No space left on device")
        written.append(self.height)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", fills_up)
    kept = parse(trace)
    assert len(written) == 2
    assert kept[0].equals(whole[0], null_equal=True)
    assert kept[1:] == whole[1:]


def test_a_spilled_trace_writes_each_sorted_window_to_disk_as_it_goes(trace, monkeypatch):
    """A trace that spilled has more spans than the table keeps in memory: no sorted window is held
    back until that count is passed (they were, on top of the window being sorted)."""
    whole = parse(trace)
    small_spill(monkeypatch)
    on_disk = []
    real = stored_table.PartWriter.write

    def write(self, frame):
        real(self, frame)
        on_disk.append(self.on_disk)

    monkeypatch.setattr(stored_table.PartWriter, "write", write)
    spans, _ = parse_trace_files([trace], [])
    assert len(on_disk) > 1 and all(on_disk)
    assert all(isinstance(part, Path) for part in spans.parts)
    assert spans.read().equals(whole[0], null_equal=True)


def repeated_event_trace() -> list[str]:
    """One cookbook B event written over and over (a loop that never closes its span), then one X event
    repeated: every span starts at the same instant, and the B stack is as deep as the file is long."""
    b_line = event("train_step", "B", 1.0)
    x_line = json.dumps({"name": "gemm", "ph": "X", "pid": 1, "tid": 7, "ts": 1.0, "dur": 3.25, "args": {"s": 7}})
    return [b_line] * 150 + [x_line] * 50


def test_a_repeated_event_is_paired_and_sorted_a_bounded_part_at_a_time(tmp_path, monkeypatch):
    """The stack left open at the end becomes unclosed spans a carried frame at a time, and spans that
    share one start are sorted back in windows of their (start, line) order: never the whole file at
    once (a 2 GB trace of one B event held it four times over), and the same table as one pass."""
    path = tmp_path / "trace_events.jsonl"
    path.write_text("\n".join(repeated_event_trace()) + "\n")
    whole = parse(path)
    b_spans = whole[0].filter(whole[0]["name"] == "train_step")
    assert b_spans["depth"].to_list() == list(range(150)) and not b_spans["closed"].any()
    small_spill(monkeypatch)
    monkeypatch.setattr(span_stream, "DEEP_STACK", 0)
    monkeypatch.setattr(span_stream, "PAIR_BATCH_EVENTS", 10)
    monkeypatch.setattr(trace_read, "CHUNK_BYTES", 1024)
    attribute = span_spill.StepCovers.attribute
    paired: list[int] = []
    sorted_back: list[int] = []

    def pairing(holder, *args, **kwargs):
        paired.append(holder[0].height)
        return pair_begin_end(holder, *args, **kwargs)

    def attributing(covers, spans):
        sorted_back.append(spans.height)
        return attribute(covers, spans)

    monkeypatch.setattr(span_stream, "pair_begin_end", pairing)
    monkeypatch.setattr(span_spill.StepCovers, "attribute", attributing)
    parts = parse(path)
    assert parts[0].equals(whole[0], null_equal=True)
    assert parts[1:] == whole[1:]
    assert max(paired) < 40, paired  # a chunk's events and what the last pairing carried, not 150
    assert sum(sorted_back) == 200 and max(sorted_back) <= 20, sorted_back  # windows of a few spans
