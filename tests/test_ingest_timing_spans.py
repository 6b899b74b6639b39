"""timing_spans.jsonl -> step_spans: one row per span, one record per line, resumes as segments."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from trace_doctor.ingest.parsers.timing_spans import parse_timing_spans_files

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_FILES = sorted((ROOT / "fixtures" / "runs").glob("*/timing_spans.jsonl"))


def line(step, spans):
    return json.dumps(
        {"step": step, "spans": [{"name": n, "duration": d, "wall_start": s, "wall_end": s + d} for n, d, s in spans]}
    )


def parse(path: Path):
    warnings = []
    table, inputs = parse_timing_spans_files([path], warnings)
    return table.read(), inputs[0], warnings


def test_rows_per_span_with_wall_times_in_completion_order(tmp_path):
    path = tmp_path / "timing_spans.jsonl"
    path.write_text(
        line(0, [("sample_async", 0.5, 0.1), ("policy_sample", 0.7, 0.0)])
        + "\n"
        + line(1, [("train_step", 2.0, 0.0)])
        + "\n"
    )
    table, info, warnings = parse(path)
    assert warnings == [] and (info.records, info.skipped) == (2, 0)
    assert table.select("step", "name", "duration_s", "wall_start_s", "wall_end_s", "index").rows() == [
        (0, "sample_async", 0.5, 0.1, 0.6, 0),
        (0, "policy_sample", 0.7, 0.0, 0.7, 1),
        (1, "train_step", 2.0, 0.0, 2.0, 0),
    ]
    assert table.get_column("segment").to_list() == [0, 0, 0]


def test_resume_duplicates_start_a_segment_and_bad_input_is_accounted(tmp_path):
    path = tmp_path / "timing_spans.jsonl"
    rows = [
        line(0, [("a", 1.0, 0.0)]),
        line(1, [("a", 1.0, 0.0)]),
        '{"step": 2, "spans": [{"name": "a", "duration": NaN}, {"name": "b", "duration": 1.0}]}',
        "not json",
        '{"step": "x", "spans": []}',
        line(1, [("a", 3.0, 0.0)]),  # the resumed process re-logs step 1
        line(2, [("a", 1.0, 0.0)])[:30],
    ]
    path.write_text("\n".join(rows))
    table, info, warnings = parse(path)
    assert (info.records, info.skipped) == (4, 3)
    assert sorted(w.line for w in warnings) == [3, 4, 5, 7]
    assert "truncated" in [w for w in warnings if w.line == 7][0].problem
    resumed = table.filter(pl.col("line") == 6)
    assert resumed.get_column("segment").to_list() == [1] and resumed.get_column("duration_s").to_list() == [3.0]
    assert table.filter(pl.col("step") == 2).get_column("name").to_list() == ["b"]


@pytest.mark.skipif(not FIXTURE_FILES, reason="fixtures/runs/*/timing_spans.jsonl not generated yet")
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.parent.name)
def test_fixture_files_keep_every_span(path):
    lines = [raw for raw in path.read_bytes().splitlines() if raw.strip()]
    expected = 0
    readable = 0
    for raw in lines:
        try:
            expected += len(json.loads(raw)["spans"])
            readable += 1
        except ValueError:
            pass
    table, info, _ = parse(path)
    assert table.height == expected
    assert info.records == readable and info.records + info.skipped == len(lines)


def _rl_lines(steps: int, spans_per_step: int = 40) -> list[str]:
    return [
        line(step, [(f"sample_{i}", 0.5 + i / 100, i / 10) for i in range(spans_per_step)]) for step in range(steps)
    ]


def _parse_counting_decoded(tmp_path, lines, monkeypatch):
    """parse() of `lines`, plus the numbers of the lines that went through the per-line decoder."""
    from trace_doctor.ingest.parsers import timing_spans

    path = tmp_path / "timing_spans.jsonl"
    path.write_text("\n".join(lines) + "\n")
    decoded = []
    real = timing_spans.decode_line
    monkeypatch.setattr(
        timing_spans, "decode_line", lambda raw, number, *a, **k: decoded.append(number) or real(raw, number, *a, **k)
    )
    return (*parse(path), decoded)


def test_one_malformed_line_costs_only_that_line(tmp_path, monkeypatch):
    """A NaN, a null span and a step beyond 64 bits: each is reported, everything around them kept, and only
    their neighbourhoods (not the whole file) go through the per-line decoder."""
    from trace_doctor.ingest.parsers import timing_spans

    lines = _rl_lines(400)
    lines[17] = lines[17].replace('"duration": ', '"duration": NaN, "x": ', 1)
    lines[200] = lines[200].replace('"spans": [', '"spans": [null, ', 1)
    lines[301] = lines[301].replace('"step": 301', '"step": 99999999999999999999', 1)
    table, info, warnings, decoded = _parse_counting_decoded(tmp_path, lines, monkeypatch)
    assert [(w.line, w.problem.split(";")[0]) for w in warnings] == [
        (18, "span 0 of step 17 has no name or finite duration"),
        (201, "span 0 of step 200 has no name or finite duration"),
        (302, 'expected {"step": <int>, "spans": [...]}'),
    ]
    assert (info.records, info.skipped) == (399, 1)
    # 400 lines x 40 spans, minus the NaN span, minus the skipped line; the null entry was never a span.
    assert table.height == 400 * 40 - 1 - 40
    # Only small neighbourhoods of the bad lines were decoded one by one.
    assert {18, 201, 302} <= set(decoded) and len(decoded) <= 3 * timing_spans.MIN_BISECT_LINES
    assert all(min(abs(n - bad) for bad in (18, 201, 302)) < timing_spans.MIN_BISECT_LINES for n in decoded)
    assert table.filter(pl.col("line") == 201).get_column("index").to_list() == list(range(1, 41))


def test_lines_in_another_byte_layout_are_read_by_polars_in_pieces(tmp_path, monkeypatch):
    """Compact JSON (another writer) plus one bad line: halving isolates the bad line, the rest stays typed."""
    from trace_doctor.ingest.parsers import timing_spans

    lines = [json.dumps(json.loads(text), separators=(",", ":")) for text in _rl_lines(300, 5)]
    lines[150] = lines[150][:40]  # truncated mid-write, then the run went on
    table, info, warnings, decoded = _parse_counting_decoded(tmp_path, lines, monkeypatch)
    assert [w.line for w in warnings] == [151] and "not valid JSON" in warnings[0].problem
    assert (info.records, info.skipped) == (299, 1) and table.height == 299 * 5
    assert 151 in decoded and len(decoded) <= timing_spans.MIN_BISECT_LINES


def test_account_order_does_not_depend_on_thread_timing(tmp_path):
    """Trace and timing_spans are read on different threads; their warnings still come trace first, then spans."""
    from trace_doctor.api import load_run

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "loss": 1.0}) + "\n" for i in range(3)))
    trace_line = (
        '{"name": "s", "ph": "B", "pid": 0, "tid": 1, "ts": %d, '
        '"args": {"track": "main", "thread": "MainThread"}, "cat": "async"}'
    )
    (tmp_path / "trace_events.jsonl").write_text("\n".join([trace_line % 1, "not json", trace_line % 3]) + "\n")
    (tmp_path / "timing_spans.jsonl").write_text("\n".join(_rl_lines(3, 2) + ["{broken"]) + "\n")
    for _ in range(5):
        run = load_run(tmp_path)
        kinds = [w.path.rsplit("/", 1)[-1] for w in run.warnings]
        assert kinds == ["trace_events.jsonl", "timing_spans.jsonl"]
        assert [i.kind for i in run.inputs] == ["metrics", "trace", "spans"]


def test_spans_stay_in_file_order_when_lines_are_read_in_groups_by_layout(tmp_path):
    """Lines are read grouped by layout when one needs care (here the writer's own lines come after
    compact ones and garbage); the table still follows the file, even when no line was decoded alone."""
    from trace_doctor.ingest.parsers import timing_spans

    layout = _rl_lines(32, 3)
    half = timing_spans.MIN_BISECT_LINES
    compact = [json.dumps(json.loads(text), separators=(",", ":")) for text in layout[:half]]
    lines = compact + ["garbage"] * half + layout[2 * half :]
    path = tmp_path / "timing_spans.jsonl"
    path.write_text("\n".join(lines) + "\n")
    table, info, warnings = parse(path)
    assert [w.line for w in warnings] == list(range(half + 1, 2 * half + 1))
    assert (info.records, info.skipped) == (32 - half, half) and table.height == (32 - half) * 3
    assert table.get_column("line").is_sorted() and table.select(pl.struct("line", "index").is_unique().all()).item()
