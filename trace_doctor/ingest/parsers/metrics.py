"""`metrics.jsonl` -> the `steps` table: one row per logged record, one column per metric key.

The schema is built from every row, never inferred from the first few: keys that first appear
late (eval keys, `time/X:total` once a span runs twice) get their column all the same.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from trace_doctor.ingest.parsers.launches import MIN_RETURNS, WriterChains
from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.reading.input_stream import InputStream
from trace_doctor.ingest.reading.jsonl import as_int64, iter_json_records, json_text, shown
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
    key: str, numbers: int, text_rows: list[int], text_first: str, lines: list[int], warnings: FileWarnings
) -> str:
    """`number` or `text` for one key's column (`numbers` numeric values, text at `text_rows`).

    A key that is mostly text (a run name, a list per step) is a text column, numbers kept as
    their decimal text. A timer or loss with a stray string or object (a hand edit, a logging
    bug) stays a Float64 column, so one bad value cannot hide every good one from the rules; the
    stray values are reported, and nulled in place.
    """
    if not text_rows:
        return "number"
    if numbers < len(text_rows):
        return "text"
    warnings.add(
        lines[text_rows[0]],
        f"`{key}` is a number elsewhere but not in {len(text_rows)} row(s) (first: {text_first[:60]!r}); "
        "those values are null in its column",
    )
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
    """Parse one metrics file, a chunk of lines at a time: each row goes into the columns as it is read.

    `superseded_from`: for a 0.6.1 `metrics.jsonl.pre_resume_N` backup, N. Its rows are kept and
    marked `superseded` (rows with step >= N were rewritten by the resumed process; rows below N
    are duplicated in the live file), so that every record in every file is accounted for.
    """
    info = InputFile(kind="metrics", path=str(path))
    source = str(path)
    try:
        stream = InputStream(path)
    except OSError as exc:
        warnings.append(IngestWarning(source, None, f"cannot read file: {exc.strerror or exc}"))
        info.skipped = 1
        return pl.DataFrame(schema=STEPS_SCHEMA), info
    log = FileWarnings(source)
    steps = StepsBuilder(source, log, superseded_from=superseded_from)
    with stream:
        for parsed in iter_json_records(stream, source, log):
            steps.add(parsed.value, parsed.line)
        for problem in stream.problems():
            log.add(None, problem)
    info.records = steps.rows
    # The lines that could not be read (and the unreadable rest of a corrupt gzip file).
    info.skipped = log.lined + (stream.error is not None)
    if not steps.rows and not log.total:
        info.note = "empty file"  # a run that has not logged a step yet: nothing is wrong with it
        return pl.DataFrame(schema=STEPS_SCHEMA), info
    frame = steps.frame()
    warnings.extend(log.close())
    return frame, info


def _separate_concurrent_writers(
    chains: WriterChains,
    steps: list[int | None],
    segments: list[int],
    lines: list[int],
    warnings: FileWarnings,
) -> bool:
    """When two processes wrote the file at once, give each writer its own segment and say so."""
    owner, returns = chains.owner, chains.returns
    if returns < MIN_RETURNS:
        return False
    current = 0
    for i, chain in enumerate(owner):
        current = chain if chain >= 0 else current  # eval rows stay with the writer before them
        segments[i] = current
    first = next(i for i, chain in enumerate(owner) if chain > 0)
    writers = max(owner) + 1
    warnings.add(
        lines[first],
        f"steps go back and forth {returns} times (from line {lines[first]}: step {steps[first]} after a "
        f"later step): {writers} processes appear to have written this file at the same time; every row "
        "is kept, each writer's rows as their own launch",
    )
    return True


def _mark_rewritten(steps: list[int | None], training: list[bool], segments: list[int]) -> pl.Series:
    """Rows of an earlier launch whose step a later launch ran again: kept, marked superseded.

    Only the steps the later launch actually ran count as rewritten: when it stopped before the
    earlier one's last step, the earlier rows beyond it are still the only record of those steps.
    Column expressions, not a loop per row: a live metrics file's table is built again at each refresh.
    """
    rows = pl.DataFrame(
        {"step": steps, "training": training, "segment": segments},
        schema={"step": pl.Int64, "training": pl.Boolean, "segment": pl.Int64},
    )
    # The latest segment that ran each step, among its training rows.
    latest = pl.col("segment").filter(pl.col("training")).max().over("step")
    return rows.select((pl.col("training") & (latest > pl.col("segment"))).alias("superseded")).to_series()


class StepsBuilder:
    """Metric rows -> the typed `steps` table with segments, a row at a time.

    A row's dict is not kept: its step bookkeeping goes into per-row lists and each value into flat
    per-cell arrays (row, key, value), so memory follows the cells and time is linear in them, however
    many keys a row has (20,000) or how many distinct keys the rows add up to. The columns are built
    once at the end, a numpy pass per key.
    """

    def __init__(self, source: str, warnings: FileWarnings, *, superseded_from: int | None = None) -> None:
        self.source = source
        self.warnings = warnings
        # Warnings about rows that are kept, reported after those about lines that could not be read
        # (the file's reader reports those as it goes).
        self._row_warnings = FileWarnings(source)
        self.superseded_from = superseded_from
        self.lines: list[int] = []
        self.step_values: list[int | None] = []
        self.step_keys: list[str | None] = []
        self.eval_rows: list[bool] = []
        self.segments: list[int] = []
        self._segment = 0
        self._training_max: int | None = None
        self.keys: dict[str, int] = {}  # metric key -> its index, in order of first appearance
        self._cell_rows = array("q")
        self._cell_keys = array("q")
        self._cell_values = array("d")
        self._texts: dict[int, list[tuple[int, str]]] = {}  # key index -> (row, text) of non-numeric values
        self._chains = WriterChains()  # the training rows' writers, kept as rows come (launches.py)

    @property
    def rows(self) -> int:
        return len(self.lines)

    def add(self, row: dict[str, Any], line: int) -> None:
        """One decoded metrics record (a JSON object) read from `line`."""
        i = len(self.lines)
        self.lines.append(line)
        step, step_key = None, None
        for key in STEP_KEY_FALLBACKS:
            if key in row:
                step_key, step = key, as_int64(row[key])
                if step is None:
                    # shown(), not str(): str() of a value nested 1,000 deep raises RecursionError.
                    self._row_warnings.add(
                        line, f"`{key}` is not a 64-bit integer ({shown(row[key], 40)!r}); row kept without a step"
                    )
                break
        self.step_values.append(step)
        self.step_keys.append(step_key)
        is_eval = _is_eval_row(row)
        self.eval_rows.append(is_eval)
        if step is not None and not is_eval:
            # A training row at or below the previous maximum is a restarted process re-running
            # steps from its last checkpoint: a new segment.
            if self._training_max is not None and step <= self._training_max:
                self._segment += 1
                self._training_max = step
            else:
                self._training_max = step if self._training_max is None else max(self._training_max, step)
        self.segments.append(self._segment)
        self._chains.add(step, step is not None and not is_eval)
        keys = self.keys
        for key, value in row.items():
            if key == "step":
                continue
            k = keys.get(key)
            if k is None:
                k = keys[key] = len(keys)
            if value is None:
                continue
            if isinstance(value, (bool, int, float)):
                self._cell_rows.append(i)
                self._cell_keys.append(k)
                self._cell_values.append(float(value))
            else:
                self._texts.setdefault(k, []).append((i, value if isinstance(value, str) else json_text(value)))

    def frame(self) -> pl.DataFrame:
        """The `steps` table of every row added."""
        n = self.rows
        training = [
            step is not None and not is_eval for step, is_eval in zip(self.step_values, self.eval_rows, strict=True)
        ]
        segments = self.segments
        self.warnings.absorb(self._row_warnings)
        interleaved = _separate_concurrent_writers(self._chains, self.step_values, segments, self.lines, self.warnings)
        superseded: list[bool] | pl.Series = [self.superseded_from is not None] * n
        if self.superseded_from is None and not interleaved:
            superseded = _mark_rewritten(self.step_values, training, segments)
        columns = [
            pl.Series("step", self.step_values, dtype=pl.Int64),
            pl.Series("segment", segments, dtype=pl.Int32),
            pl.Series("line", self.lines, dtype=pl.Int64),
            pl.Series("source", [self.source] * n, dtype=pl.String),
            pl.Series("superseded", superseded, dtype=pl.Boolean),
            pl.Series("is_eval_row", self.eval_rows, dtype=pl.Boolean),
            pl.Series("step_key", self.step_keys, dtype=pl.String),
            pl.Series("interleaved", [interleaved] * n, dtype=pl.Boolean),
        ]
        taken = {column.name for column in columns}
        for key, (rows, values) in zip(self.keys, self._numeric_cells(), strict=True):
            texts = self._texts.get(self.keys[key], [])
            first = texts[0][1] if texts else ""
            kind = _column_kind(key, rows.size, [r for r, _ in texts], first, self.lines, self.warnings)
            name = _column_name(key)
            while name in taken:  # `segment` and a literal `metric:segment` in one file: keep both
                name = "metric:" + name
            taken.add(name)
            columns.append(
                _number_column(name, rows, values, n)
                if kind == "number"
                else _text_column(name, rows, values, texts, n)
            )
        return pl.DataFrame(columns)

    def _numeric_cells(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(rows, values) of each key's numeric cells, keys in order."""
        keys = np.frombuffer(self._cell_keys, dtype=np.int64)
        rows = np.frombuffer(self._cell_rows, dtype=np.int64)
        values = np.frombuffer(self._cell_values, dtype=np.float64)
        order = np.argsort(keys, kind="stable")
        bounds = np.searchsorted(keys[order], np.arange(len(self.keys) + 1))
        for k in range(len(self.keys)):
            picked = order[bounds[k] : bounds[k + 1]]
            yield rows[picked], values[picked]


def _number_column(name: str, rows: np.ndarray, values: np.ndarray, n: int) -> pl.Series:
    """A Float64 column: `values` at `rows`, null elsewhere (NaN read from the file stays NaN)."""
    column = np.zeros(n, dtype=np.float64)
    column[rows] = values
    missing = np.ones(n, dtype=bool)
    missing[rows] = False
    return pl.Series(name, np.ma.MaskedArray(column, mask=missing), dtype=pl.Float64)


def _text_column(name: str, rows: np.ndarray, values: np.ndarray, texts: list[tuple[int, str]], n: int) -> pl.Series:
    """A String column: the text values, and the numbers among them as their decimal text."""
    column: list[str | None] = [None] * n
    for row, value in zip(rows.tolist(), values.tolist(), strict=True):
        column[row] = repr(value)
    for row, text in texts:
        column[row] = text
    return pl.Series(name, column, dtype=pl.String)


def build_steps_frame(
    rows: list[dict[str, Any]],
    lines: list[int],
    source: str,
    warnings: list[IngestWarning],
    *,
    superseded_from: int | None = None,
) -> pl.DataFrame:
    """Turn decoded metric rows into the typed `steps` table with segments."""
    log = FileWarnings(source)
    builder = StepsBuilder(source, log, superseded_from=superseded_from)
    for row, line in zip(rows, lines, strict=True):
        builder.add(row, line)
    frame = builder.frame()
    warnings.extend(log.close())
    return frame
