"""`timing_spans.jsonl` -> the `step_spans` table: one row per span of each logged step.

A line is `{"step": N, "spans": [{"name", "duration", "wall_start", "wall_end"}, ...]}`; wall times
are relative to the step's earliest span, so they compare only within a line. The file is appended
on resume, so a step can appear again: each repeat of an already-seen step starts a new `segment`.
"""

from __future__ import annotations

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


def parse_timing_spans_file(path: Path, warnings: list[IngestWarning]) -> tuple[pl.DataFrame, InputFile]:
    """Parse one file; a line (= one step) counts as one record, a bad span inside it as a warning."""
    info = InputFile(kind="spans", path=str(path))
    source = str(path)
    before = len(warnings)
    data = read_bytes(path, warnings)
    if data is None:
        info.skipped = len(warnings) - before
        return pl.DataFrame(schema=SCHEMA), info

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
