"""`timing_spans.jsonl` -> the `step_spans` table: one row per span of each logged step.

A line is `{"step": N, "spans": [{"name", "duration", "wall_start", "wall_end"}, ...]}`; wall times
are relative to the step's earliest span, so they compare only within a line. The file is appended
on resume, so a step can appear again: each repeat of an already-seen step starts a new `segment`.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.ingest.jsonl import iter_json_lines, read_bytes
from trace_doctor.model import STEP_SPANS_SCHEMA, IngestWarning, InputFile

SCHEMA: dict[str, pl.DataType] = {**STEP_SPANS_SCHEMA, "index": pl.Int32, "segment": pl.Int32, "source": pl.String}


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _step(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def parse_timing_spans_files(
    paths: list[Path], warnings: list[IngestWarning]
) -> tuple[pl.DataFrame, list[InputFile]]:
    """Parse every timing_spans file into one `step_spans` table."""
    frames: list[pl.DataFrame] = []
    inputs: list[InputFile] = []
    for path in paths:
        frame, info = parse_timing_spans_file(path, warnings)
        frames.append(frame)
        inputs.append(info)
    frames = [f for f in frames if f.height]
    if not frames:
        return pl.DataFrame(schema=SCHEMA), inputs
    return pl.concat(frames, how="vertical"), inputs


LINE_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int64,
    "spans": pl.List(pl.Struct({"name": pl.String, "duration": pl.Float64, "wall_start": pl.Float64, "wall_end": pl.Float64})),
}


def _segments(steps: list[int]) -> list[int]:
    """Segment per line: a step already logged in the current segment starts a new one."""
    segments, seen, segment = [], set(), 0
    for step in steps:
        if step in seen:
            segment += 1
            seen = set()
        seen.add(step)
        segments.append(segment)
    return segments


def _read_typed(data: bytes, source: str) -> pl.DataFrame | None:
    """The whole file through polars with an explicit schema, or None if any line needs care."""
    try:
        lines = pl.read_ndjson(io.BytesIO(data), schema=LINE_SCHEMA)
    except Exception:  # noqa: BLE001 - any refusal means the careful per-line path
        return None
    line_count = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    if lines.height != line_count or lines.get_column("step").null_count() or lines.get_column("spans").null_count():
        return None  # blank lines, or lines that are not {"step", "spans"}: number and report them one by one
    lines = lines.with_columns(
        pl.int_range(1, lines.height + 1, dtype=pl.Int64).alias("line"),
        pl.Series("segment", _segments(lines.get_column("step").to_list()), dtype=pl.Int32),
    )
    spans = lines.with_columns(pl.col("spans").list.eval(pl.int_range(pl.len(), dtype=pl.Int32)).alias("index")).explode(["spans", "index"])
    spans = spans.filter(pl.col("spans").is_not_null()).unnest("spans")
    if spans.get_column("name").null_count() or spans.get_column("duration").null_count():
        return None
    return spans.select(
        "step", "name", pl.col("duration").alias("duration_s"), pl.col("wall_start").alias("wall_start_s"),
        pl.col("wall_end").alias("wall_end_s"), "line", "index", "segment", pl.lit(source).alias("source"),
    ).cast(SCHEMA)


def parse_timing_spans_file(path: Path, warnings: list[IngestWarning]) -> tuple[pl.DataFrame, InputFile]:
    """Parse one file; a line (= one step) counts as one record, a bad span inside it as a warning."""
    info = InputFile(kind="spans", path=str(path))
    source = str(path)
    before = len(warnings)
    data = read_bytes(path, warnings)
    if data is None:
        info.skipped = len(warnings) - before
        return pl.DataFrame(schema=SCHEMA), info
    typed = _read_typed(data, source) if data.strip() else None
    if typed is not None:
        info.records = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        return typed, info

    columns: dict[str, list[Any]] = {name: [] for name in SCHEMA}
    seen_steps: set[int] = set()
    segment = 0
    span_warnings = 0
    for parsed in iter_json_lines(data, source, warnings):
        row = parsed.value
        step = _step(row.get("step"))
        spans = row.get("spans")
        if step is None or not isinstance(spans, list):
            warnings.append(IngestWarning(source, parsed.line, "expected {\"step\": <int>, \"spans\": [...]}; line skipped"))
            continue
        if step in seen_steps:
            # A resumed process re-logs steps from its checkpoint: a new segment, as in metrics.
            segment += 1
            seen_steps = set()
        seen_steps.add(step)
        info.records += 1
        for index, span in enumerate(spans):
            name = span.get("name") if isinstance(span, dict) else None
            duration = _finite(span.get("duration")) if isinstance(span, dict) else None
            if not isinstance(name, str) or duration is None:
                warnings.append(IngestWarning(source, parsed.line, f"span {index} of step {step} has no name or finite duration; span skipped"))
                span_warnings += 1
                continue
            columns["step"].append(step)
            columns["name"].append(name)
            columns["duration_s"].append(duration)
            columns["wall_start_s"].append(_finite(span.get("wall_start")))
            columns["wall_end_s"].append(_finite(span.get("wall_end")))
            columns["line"].append(parsed.line)
            columns["index"].append(index)
            columns["segment"].append(segment)
            columns["source"].append(source)
    # Skipped records are whole lines; a bad span inside a kept line is a warning, not a record.
    info.skipped = len(warnings) - before - span_warnings
    return pl.DataFrame(columns, schema=SCHEMA), info
