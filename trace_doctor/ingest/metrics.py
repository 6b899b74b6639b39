"""`metrics.jsonl` -> the `steps` table: one row per logged record, one column per metric key.

The schema is built from every row, never inferred from the first few: keys that first appear
late (eval keys, `time/X:total` once a span runs twice) get their column all the same.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.ingest.jsonl import as_int64, iter_json_lines, json_text, read_bytes
from trace_doctor.ingest.launches import MIN_RETURNS, writer_chains
from trace_doctor.knowledge.tinker import EVAL_KEY_PREFIXES, RL_BATCH_KEY, TIME_PREFIX
from trace_doctor.model import STEPS_SCHEMA, IngestWarning, InputFile

# Where a custom trainer keeps its step counter when there is no `step` key (act-prm-tinker logs
# `progress/batch` for RL and `global_step`/`grad_step` for SL; async RL `training_client/step`).
STEP_KEY_FALLBACKS = ("step", RL_BATCH_KEY, "training_client/step", "global_step", "grad_step")

# A row whose only content keys carry EVAL_KEY_PREFIXES (besides these neutral ones) is an
# evaluation row: async RL logs those separately, out of order, reusing a training step number, so
# they never start a new segment.
NEUTRAL_PREFIXES = (TIME_PREFIX, "eval/timing/", "progress/", "optim/lr", "training_client/", "sampling_client/")

PRE_RESUME_RE = re.compile(r"\.pre_resume_(\d+)$")

RESERVED = set(STEPS_SCHEMA) | {"step_key", "interleaved"}


def _is_eval_row(row: dict[str, Any]) -> bool:
    content = [k for k in row if k not in STEP_KEY_FALLBACKS and not k.startswith(NEUTRAL_PREFIXES)]
    return bool(content) and all(k.startswith(EVAL_KEY_PREFIXES) for k in content)


def _column_name(key: str) -> str:
    # Metric columns keep the file's key; a metric that collides with a bookkeeping column
    # (e.g. a trainer logging its own `segment`) is kept under a prefixed name.
    return f"metric:{key}" if key in RESERVED and key != "step" else key


def _column_kind(
    key: str, values: list[Any], text_rows: list[int], lines: list[int], source: str, warnings: list[IngestWarning]
) -> str:
    """`number` or `text` for one key's column; stray non-numbers in a numeric column become warnings.

    A key that is mostly text (a run name, a list per step) is a text column, numbers kept as
    their decimal text. A timer or loss with a stray string or object (a hand edit, a logging
    bug) stays a Float64 column, so one bad value cannot hide every good one from the rules; the
    stray values are reported, and nulled in place.
    """
    if not text_rows:
        return "number"
    numbers = sum(1 for v in values if v is not None) - len(text_rows)
    if numbers < len(text_rows):
        return "text"
    first = values[text_rows[0]]
    warnings.append(
        IngestWarning(
            source,
            lines[text_rows[0]],
            f"`{key}` is a number elsewhere but not in {len(text_rows)} row(s) (first: {first[:60]!r}); "
            "those values are null in its column",
        )
    )
    for i in text_rows:
        values[i] = None
    return "number"


def parse_metrics_files(paths: list[Path], warnings: list[IngestWarning]) -> tuple[pl.DataFrame, list[InputFile]]:
    """Parse metrics.jsonl (and its `.pre_resume_N` backups) into one `steps` table."""
    current = [p for p in paths if not PRE_RESUME_RE.search(p.name)]
    backups = sorted(
        (p for p in paths if PRE_RESUME_RE.search(p.name)), key=lambda p: int(PRE_RESUME_RE.search(p.name).group(1))
    )
    frames: list[pl.DataFrame] = []
    inputs: list[InputFile] = []
    for path in backups:
        resume_step = int(PRE_RESUME_RE.search(path.name).group(1))
        frame, info = parse_metrics_file(path, warnings, superseded_from=resume_step)
        frames.append(frame)
        inputs.append(info)
    for path in current:
        frame, info = parse_metrics_file(path, warnings)
        frames.append(frame)
        inputs.append(info)
    if not frames:
        return pl.DataFrame(schema=STEPS_SCHEMA), inputs
    return pl.concat(frames, how="diagonal_relaxed"), inputs


def parse_metrics_file(
    path: Path, warnings: list[IngestWarning], *, superseded_from: int | None = None
) -> tuple[pl.DataFrame, InputFile]:
    """Parse one metrics file.

    `superseded_from`: for a 0.6.1 `metrics.jsonl.pre_resume_N` backup, N. Its rows are kept and
    marked `superseded` (rows with step >= N were rewritten by the resumed process; rows below N
    are duplicated in the live file), so that every record in every file is accounted for.
    """
    info = InputFile(kind="metrics", path=str(path))
    before = len(warnings)
    data = read_bytes(path, warnings)
    if data is None:
        info.skipped = len(warnings) - before
        return pl.DataFrame(schema=STEPS_SCHEMA), info

    if not data.strip():
        info.note = "empty file"  # a run that has not logged a step yet: nothing is wrong with it
        return pl.DataFrame(schema=STEPS_SCHEMA), info
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    for parsed in iter_json_lines(data, str(path), warnings):
        rows.append(parsed.value)
        lines.append(parsed.line)
    info.records = len(rows)
    info.skipped = len(warnings) - before
    frame = build_steps_frame(rows, lines, str(path), warnings, superseded_from=superseded_from)
    return frame, info


def _separate_concurrent_writers(
    steps: list[int | None],
    training: list[bool],
    segments: list[int],
    lines: list[int],
    source: str,
    warnings: list[IngestWarning],
) -> bool:
    """When two processes wrote the file at once, give each writer its own segment and say so."""
    owner, returns = writer_chains(steps, training)
    if returns < MIN_RETURNS:
        return False
    current = 0
    for i, chain in enumerate(owner):
        current = chain if chain >= 0 else current  # eval rows stay with the writer before them
        segments[i] = current
    first = next(i for i, chain in enumerate(owner) if chain > 0)
    writers = max(owner) + 1
    warnings.append(
        IngestWarning(
            source,
            lines[first],
            f"steps go back and forth {returns} times (from line {lines[first]}: step {steps[first]} after a "
            f"later step): {writers} processes appear to have written this file at the same time; every row "
            "is kept, each writer's rows as their own launch",
        )
    )
    return True


def _mark_rewritten(steps: list[int | None], training: list[bool], segments: list[int], superseded: list[bool]):
    """Rows of an earlier launch whose step a later launch ran again: kept, marked superseded.

    Only the steps the later launch actually ran count as rewritten: when it stopped before the
    earlier one's last step, the earlier rows beyond it are still the only record of those steps.
    """
    ran: dict[int, set[int]] = {}
    for step, is_training, segment in zip(steps, training, segments, strict=True):
        if is_training:
            ran.setdefault(segment, set()).add(step)
    for i, (step, is_training, segment) in enumerate(zip(steps, training, segments, strict=True)):
        if is_training and any(later > segment and step in done for later, done in ran.items()):
            superseded[i] = True


def build_steps_frame(
    rows: list[dict[str, Any]],
    lines: list[int],
    source: str,
    warnings: list[IngestWarning],
    *,
    superseded_from: int | None = None,
) -> pl.DataFrame:
    """Turn decoded metric rows into the typed `steps` table with segments."""
    n = len(rows)
    step_values: list[int | None] = [None] * n
    step_keys: list[str | None] = [None] * n
    eval_rows: list[bool] = [False] * n
    segments: list[int] = [0] * n
    superseded: list[bool] = [superseded_from is not None] * n

    segment = 0
    training_max: int | None = None
    for i, row in enumerate(rows):
        for key in STEP_KEY_FALLBACKS:
            if key in row:
                step = as_int64(row[key])
                if step is None:
                    # json_text, not str(): str() of a value nested 1,000 deep raises RecursionError.
                    shown = row[key] if isinstance(row[key], str) else json_text(row[key])
                    warnings.append(
                        IngestWarning(
                            source,
                            lines[i],
                            f"`{key}` is not a 64-bit integer ({shown[:40]!r}); row kept without a step",
                        )
                    )
                step_values[i] = step
                step_keys[i] = key
                break
        eval_rows[i] = _is_eval_row(row)
        step = step_values[i]
        if step is not None and not eval_rows[i]:
            # A training row at or below the previous maximum is a restarted process re-running
            # steps from its last checkpoint: a new segment.
            if training_max is not None and step <= training_max:
                segment += 1
                training_max = step
            else:
                training_max = step if training_max is None else max(training_max, step)
        segments[i] = segment

    training = [step is not None and not is_eval for step, is_eval in zip(step_values, eval_rows, strict=True)]
    interleaved = _separate_concurrent_writers(step_values, training, segments, lines, source, warnings)
    if superseded_from is None and not interleaved:
        _mark_rewritten(step_values, training, segments, superseded)

    columns: dict[str, list[Any]] = {}
    text_lines: dict[str, list[int]] = {}  # rows whose value of the key is not a number
    for i, row in enumerate(rows):
        for key, value in row.items():
            if key == "step":
                continue
            column = columns.get(key)
            if column is None:
                column = columns[key] = [None] * n
            if value is None:
                continue
            if isinstance(value, (bool, int, float)):
                column[i] = float(value)
            else:
                text_lines.setdefault(key, []).append(i)
                column[i] = value if isinstance(value, str) else json_text(value)
    kinds = {key: _column_kind(key, columns[key], text_lines.get(key, []), lines, source, warnings) for key in columns}

    data: dict[str, pl.Series] = {
        "step": pl.Series("step", step_values, dtype=pl.Int64),
        "segment": pl.Series("segment", segments, dtype=pl.Int32),
        "line": pl.Series("line", lines, dtype=pl.Int64),
        "source": pl.Series("source", [source] * n, dtype=pl.String),
        "superseded": pl.Series("superseded", superseded, dtype=pl.Boolean),
        "is_eval_row": pl.Series("is_eval_row", eval_rows, dtype=pl.Boolean),
        "step_key": pl.Series("step_key", step_keys, dtype=pl.String),
        "interleaved": pl.Series("interleaved", [interleaved] * n, dtype=pl.Boolean),
    }
    for key, values in columns.items():
        name = _column_name(key)
        while name in data:  # `segment` and a literal `metric:segment` in one file: keep both
            name = "metric:" + name
        if kinds[key] == "number":
            data[name] = pl.Series(name, values, dtype=pl.Float64, strict=False)
        else:
            # A key with any non-numeric value becomes text so no value is lost; numbers keep
            # their decimal representation.
            data[name] = pl.Series(
                name, [None if v is None else (v if isinstance(v, str) else repr(v)) for v in values], dtype=pl.String
            )
    return pl.DataFrame(data)
