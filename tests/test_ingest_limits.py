"""Hostile inputs (issue 14): garbage lines, gzip bombs, over-long lines, JSON documents read by parts,
deep nesting, huge integers and many-key metrics rows. Small inputs with the limits turned down:
behaviour (records, skipped, warnings, no crash), never timings (benchmarks/ingest_limits.py)."""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from trace_doctor.discover import classify
from trace_doctor.ingest.parsers.checkpoints import parse_checkpoint_files
from trace_doctor.ingest.parsers.launches import writer_chains
from trace_doctor.ingest.parsers.metrics import build_steps_frame, parse_metrics_file
from trace_doctor.ingest.parsers.timing_spans import parse_timing_spans_file
from trace_doctor.ingest.reading import file_warnings, input_stream, jsonl
from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.trace import trace_read
from trace_doctor.ingest.trace.chunk_lines import BLANK, GARBAGE, OBJECT, ChunkLines
from trace_doctor.ingest.trace.trace_document import DocumentEvents, has_trace_events
from trace_doctor.ingest.trace.trace_events import parse_trace_files
from trace_doctor.model import IngestWarning

DEEP = "[" * 1000 + "]" * 1000


def ev(name, ph, ts, track="main", tid=7, **extra):
    args = {"track": track, "thread": "MainThread", **extra}
    return json.dumps({"name": name, "ph": ph, "pid": 0, "tid": tid, "ts": ts, "args": args, "cat": "async"})


def pairs(count: int) -> list[str]:
    lines = []
    for i in range(count):
        lines += [ev("step", "B", 10.0 * i, step_hint=i), ev("step", "E", 10.0 * i + 5, step=i)]
    return lines


def parse_trace(path: Path):
    warnings: list[IngestWarning] = []
    spans, inputs = parse_trace_files([path], warnings)
    return spans.read(), inputs[0], warnings


@pytest.fixture
def few_listed(monkeypatch):
    """Ten warnings listed per file instead of a thousand."""
    monkeypatch.setattr(file_warnings, "MAX_LISTED", 10)


# -- the bounded warning list ----------------------------------------------------------------------


def test_file_warnings_list_the_first_and_count_all():
    log = FileWarnings("f", limit=3)
    for line in range(1, 8):
        log.add(line, f"bad {line}")
    log.add(None, "whole file")
    assert (len(log), log.lined, log.room) == (8, 7, 0)
    closed = log.close()
    assert [w.line for w in closed] == [1, 2, 3, None]
    assert "5 more warning(s)" in closed[-1].problem and "from line 4 on" in closed[-1].problem


def test_absorbed_chunk_warnings_shift_their_lines_and_keep_counting():
    chunk = FileWarnings("f", limit=2)
    for line in (1, 2, 3):
        chunk.add(line, "x")
    whole = FileWarnings("f", limit=3)
    whole.add(5, "first")
    whole.absorb(chunk, 100, prefix="event ")
    assert [(w.line, w.problem) for w in whole.listed] == [(5, "first"), (101, "event 101: x"), (102, "event 102: x")]
    assert (whole.total, whole.lined, whole.first_unlisted) == (4, 4, 103)


@pytest.mark.parametrize("chunk_bytes", [512, 8 * 1024 * 1024])
def test_garbage_lines_in_a_trace_are_counted_exactly_and_listed_briefly(
    tmp_path, monkeypatch, few_listed, chunk_bytes
):
    monkeypatch.setattr(trace_read, "CHUNK_BYTES", chunk_bytes)
    lines = pairs(30)
    for i in range(200):
        lines.insert(3 * i % len(lines), f"garbage line {i}")
    lines.insert(7, " \t")  # blank: neither a record nor a warning
    path = tmp_path / "trace_events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    spans, info, warnings = parse_trace(path)
    assert spans.height == 30 and bool(spans.get_column("closed").all())
    assert (info.records, info.skipped) == (60, 200)
    assert len(warnings) == 11 and all(w.line is not None for w in warnings[:10])
    assert [w.line for w in warnings[:10]] == sorted(w.line for w in warnings[:10])
    assert "190 more warning(s)" in warnings[-1].problem and warnings[-1].line is None


def test_garbage_lines_in_metrics_spans_and_checkpoints(tmp_path, few_listed):
    garbage = [f"not json {i}" for i in range(50)]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join([json.dumps({"step": i, "time/total": 1.0}) for i in range(5)] + garbage) + "\n")
    warnings: list[IngestWarning] = []
    frame, info = parse_metrics_file(metrics, warnings)
    assert (frame.height, info.records, info.skipped, len(warnings)) == (5, 5, 50, 11)

    spans = tmp_path / "timing_spans.jsonl"
    good = json.dumps({"step": 0, "spans": [{"name": "a", "duration": 1.0, "wall_start": 0.0, "wall_end": 1.0}]})
    spans.write_text("\n".join([good, *garbage, good.replace('"step": 0', '"step": 1')]) + "\n")
    warnings = []
    table, info = parse_timing_spans_file(spans, warnings)
    frame = table.read()
    assert (frame.height, info.records, info.skipped, len(warnings)) == (2, 2, 50, 11)

    checkpoints = tmp_path / "checkpoints.jsonl"
    checkpoints.write_text("\n".join(['{"name": "000001", "batch": 1, "state_path": "tinker://a"}', *garbage]) + "\n")
    warnings = []
    frame, [info] = parse_checkpoint_files([checkpoints], warnings)
    assert (frame.height, info.records, info.skipped, len(warnings)) == (1, 1, 50, 11)


def test_chunk_lines_judge_each_line_as_the_decoder_would():
    rng = random.Random(3)
    pieces = [b"", b"  ", b"\t{}", b"{}", b"\xef\xbb\xbf{}", b"\xef\xbb\xbf", b"x", b"\x0b{}", b"\r", b" [1]", b"5"]
    lines = [rng.choice(pieces) for _ in range(300)]
    chunk = b"\n".join(lines)
    table = ChunkLines(chunk, unterminated=True)
    expected = [
        BLANK if not raw.strip() else GARBAGE if jsonl.certainly_not_an_object(raw) else OBJECT for raw in lines
    ]
    assert table.kinds.tolist() == expected
    assert [table.line(i) for i in range(table.count)] == lines


# -- over-long lines and compressed input ----------------------------------------------------------


def test_an_over_long_line_is_dropped_as_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_read, "CHUNK_BYTES", 256)
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1000)
    lines = pairs(3)
    lines.insert(2, "x" * 5000)
    path = tmp_path / "trace_events.jsonl"
    path.write_text("\n".join(lines) + "\n" + "y" * 3000)  # and an over-long unterminated last line
    spans, info, warnings = parse_trace(path)
    assert spans.height == 3 and (info.records, info.skipped) == (6, 2)
    assert [(w.line, "exceeds the 1,000-byte limit" in w.problem) for w in warnings] == [(3, True), (8, True)]


def test_a_gzip_bomb_stops_at_the_cap_and_keeps_what_came_before(tmp_path, monkeypatch):
    monkeypatch.setattr(input_stream, "MIN_CAP_BYTES", 64 * 1024)
    line = ev("step", "B", 1.0) + "\n"
    path = tmp_path / "trace_events.jsonl"
    path.write_bytes(gzip.compress(line.encode() * 20_000))  # 2.8 MB of events from ~10 kB
    assert path.stat().st_size * input_stream.MAX_EXPANSION < 2_000_000
    spans, info, warnings = parse_trace(path)
    cap = max(64 * 1024, input_stream.MAX_EXPANSION * path.stat().st_size)
    assert info.records == cap // len(line) and spans.height == info.records
    assert info.skipped == 1  # the line the cap cut in two
    assert "decompression stopped" in warnings[-1].problem and warnings[-1].line is None


def test_a_gzip_bomb_of_zeros_is_one_over_long_line(tmp_path, monkeypatch):
    monkeypatch.setattr(input_stream, "MIN_CAP_BYTES", 256 * 1024)
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 100 * 1024)
    path = tmp_path / "trace_events.jsonl"
    path.write_bytes(gzip.compress(b"\0" * 5_000_000))
    spans, info, warnings = parse_trace(path)
    assert spans.height == 0 and (info.records, info.skipped) == (0, 1)
    assert "exceeds" in warnings[0].problem and "decompression stopped" in warnings[1].problem


def test_a_truncated_gzip_keeps_the_records_before_the_break(tmp_path):
    data = gzip.compress(("\n".join(pairs(2000)) + "\n").encode())
    path = tmp_path / "trace_events.jsonl"
    path.write_bytes(data[: len(data) // 2])
    spans, info, warnings = parse_trace(path)
    assert 0 < spans.height < 2000 and info.records > 0
    assert any(w.problem.startswith("the gzip stream ends early (truncated after ") for w in warnings)


# -- JSON documents read by parts ------------------------------------------------------------------


def test_document_events_split_like_a_json_decoder_at_any_block_size():
    rng = random.Random(7)
    texts = ["a,b", 'q"u\\"o', "]}[{", "back\\\\", "\\", "é", "x\u2028y", ""]

    def value(depth=0):
        if depth > 2 or rng.random() < 0.4:
            return rng.choice([1, -2.5e3, None, True, *texts])
        if rng.random() < 0.5:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(["k", "traceEvents", "a]"]): value(depth + 1) for _ in range(rng.randint(0, 3))}

    for _ in range(40):
        events = [{"name": value(), "ph": "X", "args": value()} for _ in range(rng.randint(0, 5))]
        indent = rng.choice([None, 2])
        document = (
            json.dumps(events, indent=indent)
            if rng.random() < 0.5
            else json.dumps({"before": value(), "traceEvents": events, "after": 1}, indent=indent)
        ).encode()
        for block in (5, 64, 4096):
            reader = DocumentEvents(io.BytesIO(document), block_bytes=block)
            text = b"".join(piece.data for piece in reader)
            assert reader.problem is None and reader.truncated is None
            assert [json.loads(line) for line in text.split(b"\n")[:-1]] == events


def test_converted_trace_keeps_the_writer_layout_and_reads_by_chunks(tmp_path):
    lines = pairs(50)
    document = tmp_path / "trace.json"
    document.write_text("[" + ", ".join(lines) + "]")  # what json.dump writes
    reader = DocumentEvents(io.BytesIO(document.read_bytes()), block_bytes=333)
    assert b"".join(piece.data for piece in reader).decode().splitlines() == lines
    spans, info, warnings = parse_trace(document)
    jsonl_spans, _, _ = parse_trace_file_lines(tmp_path, lines)
    assert warnings == [] and info.records == 100
    assert spans.drop("source").equals(jsonl_spans.drop("source"))


def parse_trace_file_lines(tmp_path: Path, lines: list[str]):
    path = tmp_path / "trace_events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return parse_trace(path)


def test_a_truncated_document_keeps_its_complete_events(tmp_path):
    path = tmp_path / "trace.json"
    lines = pairs(10)
    text = "[" + ", ".join(lines) + "]"
    path.write_text(text[: len("[" + ", ".join(lines[:10]) + ", ") + 30])  # cut inside event 11
    spans, info, warnings = parse_trace(path)
    assert spans.height == 5 and (info.records, info.skipped) == (10, 1)
    assert [(w.line, w.problem) for w in warnings] == [
        (11, "event 11: the document ends inside this event (truncated); skipped")
    ]


def test_bad_events_inside_a_document_are_named_by_index(tmp_path):
    path = tmp_path / "trace.json"
    events = [json.loads(line) for line in pairs(2)]
    path.write_text(json.dumps({"traceEvents": [events[0], 5, {"ph": "B", "pid": 0, "tid": 7}, *events[1:]]}))
    spans, info, warnings = parse_trace(path)
    assert (info.records, info.skipped) == (4, 2)
    assert [(w.line, w.problem) for w in warnings] == [
        (2, "event 2: expected a JSON object, got int"),
        (3, "event 3: `ts` is missing"),
    ]


def test_pytorch_trace_with_trace_events_after_its_metadata(tmp_path):
    header = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": i, "name": "GPU", "note": "traceEvents" * 20} for i in range(40)],
        "distributedInfo": {"rank": 3, "ranks": list(range(2000))},
    }
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 2, "ts": 10.0 * i, "dur": 4.0}
        for i in range(100)
    ]
    text = json.dumps(header, indent=2)[:-2] + ',\n  "traceEvents": ' + json.dumps(events, indent=2) + "\n}\n"
    assert text.index('"traceEvents": [') > 8192  # past discovery's first look
    path = tmp_path / "rank-3.pt.trace.json.gz"
    path.write_bytes(gzip.compress(text.encode()))
    assert classify(path) == ("trace", "")
    spans, info, warnings = parse_trace(path)
    assert spans.height == 100 and info.records == 100 and warnings == []


def test_trace_events_must_be_a_top_level_key():
    assert has_trace_events(b'{"a": 1, "traceEvents": [')
    assert not has_trace_events(b'{"a": {"traceEvents": [1]}, "b": "\\"traceEvents\\": ["}')
    assert not has_trace_events(b'{"traceEvents": 5}')


# -- deep nesting and huge integers ----------------------------------------------------------------


def test_deep_values_are_rejected_or_kept_as_text_never_a_recursion_error(tmp_path):
    lines = [
        ev("ok", "B", 1.0),
        '{"name": "p", "ph": "B", "pid": DEEP, "tid": 1, "ts": 2.0}'.replace("DEEP", DEEP),
        '{"name": "t", "ph": "B", "pid": 0, "tid": 1, "ts": DEEP}'.replace("DEEP", DEEP),
        '{"name": "d", "ph": "X", "pid": 0, "tid": 1, "ts": 2.0, "dur": DEEP}'.replace("DEEP", DEEP),
        '{"name": DEEP, "cat": DEEP, "ph": "X", "pid": 0, "tid": 1, "ts": 2.0, "dur": 1}'.replace("DEEP", DEEP),
        ev("ok", "E", 9.0),
    ]
    path = tmp_path / "trace_events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    spans, info, warnings = parse_trace(path)
    # pid, ts and dur place an event: without them it is rejected; a name or category is only text.
    assert (info.records, info.skipped) == (3, 3) and [w.line for w in warnings] == [2, 3, 4]
    named = spans.filter(pl.col("name").str.starts_with("[[[")).row(0, named=True)
    assert named["cat"] == DEEP and named["name"] == DEEP


def test_deep_checkpoint_name_and_metric_value_are_kept_as_json_text(tmp_path):
    checkpoints = tmp_path / "checkpoints.jsonl"
    checkpoints.write_text('{"name": DEEP, "batch": 1, "state_path": "tinker://x"}\n'.replace("DEEP", DEEP))
    warnings: list[IngestWarning] = []
    frame, [info] = parse_checkpoint_files([checkpoints], warnings)
    assert info.records == 1 and warnings == [] and frame["name"][0] == DEEP
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 0, "x": DEEP}\n{"step": DEEP, "x": 1.0}\n'.replace("DEEP", DEEP))
    frame, info = parse_metrics_file(metrics, warnings)
    assert info.records == 2 and frame["step"].to_list() == [0, None]
    assert "`step` is not a 64-bit integer" in warnings[0].problem


def test_integers_beyond_64_bits_are_no_crash(tmp_path):
    big = str(2**63)
    lines = [
        ev("a", "B", 1.0),
        ev("a", "E", 2.0).replace('"thread": "MainThread"', f'"thread": "MainThread", "step": {big}'),
        '{"name": "x", "ph": "X", "pid": BIG, "tid": BIG, "ts": BIG, "dur": BIG}'.replace("BIG", big),
    ]
    path = tmp_path / "trace_events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    spans, info, warnings = parse_trace(path)
    assert (spans.height, info.records, info.skipped) == (2, 3, 0)
    assert spans.filter(pl.col("name") == "a")["step"].to_list() == [None]


# -- many-key metrics rows -------------------------------------------------------------------------


def reference_steps(rows: list[dict]) -> dict[str, list]:
    """The obvious row-by-row table: each key's values, None where a row lacks it."""
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(k for k in row if k != "step"))
    return {k: [row.get(k) for row in rows] for k in keys}


def test_many_keys_per_row_and_across_rows_build_the_same_table_as_row_by_row(tmp_path):
    rng = random.Random(11)
    rows = [{"step": 0, **{f"env/{i}/reward": i / 7 for i in range(5000)}}]
    rows += [{"step": s, "loss": rng.random(), f"task_{s}/n": s, "nan": float("nan")} for s in range(1, 300)]
    rows[5]["mixed"] = "text"
    rows[6]["mixed"] = 2.0
    rows[7]["mixed"] = "more"
    frame = build_steps_frame(rows, list(range(1, len(rows) + 1)), "m", [])
    assert frame.width == 8 + 5000 + 1 + 299 + 2 and frame.height == 300
    for key, values in reference_steps(rows).items():
        column = frame.get_column(key).to_list()
        if key == "mixed":
            assert column[5:8] == ["text", "2.0", "more"]
        elif key == "nan":
            assert column[0] is None and all(np.isnan(v) for v in column[1:])
        else:
            assert column == [None if v is None else float(v) for v in values], key


def test_writer_chains_agree_with_the_scan_over_every_sequence():
    def scan(steps, training):
        chains, owner, previous, returns = [], [-1] * len(steps), -1, 0
        for i, (step, is_training) in enumerate(zip(steps, training, strict=True)):
            if step is None or not is_training:
                continue
            best = -1
            for c, last in enumerate(chains):
                if last < step and (best < 0 or last >= chains[best]):
                    best = c
            if best < 0:
                chains.append(step)
                best = len(chains) - 1
            else:
                chains[best] = step
            returns += previous >= 0 and best != previous and best < previous
            owner[i], previous = best, best
        return owner, returns

    rng = random.Random(5)
    for _ in range(300):
        steps = [rng.choice([None, rng.randint(0, 15)]) for _ in range(rng.randint(0, 60))]
        training = [rng.random() < 0.8 for _ in steps]
        assert writer_chains(steps, training) == scan(steps, training)
