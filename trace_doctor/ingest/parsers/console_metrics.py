"""Console captures as a metrics source: the `steps` table of a run that has no metrics.jsonl.

A run whose only artifact is its console (`logs.log`, a redirected stdout, W&B's
`wandb/run-*/files/output.log`) still holds every metrics row: the cookbook prints each one as a
table (console_tables.py). Those tables become the steps table, one row per table, read by the same
StepsBuilder as metrics.jsonl (segments, eval rows, text values). Without tables, the legacy
`Starting`/`took` lines give a coarse per-step phase timeline (console_timeline.py).

The capture is then named in `run.inputs` as a `metrics` input with the capture's path (beside its
`log` input). When the run has a metrics.jsonl, nothing is read here: the tables are a second copy
of its rows, printed with 6 decimals and without the `:total`/`:count` keys, and the caller notes that
on the capture's `log` input.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.file_names import input_path
from trace_doctor.ingest.parsers.console_keys import resolve_cut_keys
from trace_doctor.ingest.parsers.console_tables import ConsoleTable, TableScanner
from trace_doctor.ingest.parsers.console_timeline import TimelineReader, TimelineStep
from trace_doctor.ingest.parsers.metrics import StepsBuilder
from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.reading.textfile import text_lines
from trace_doctor.model import STEPS_SCHEMA, IngestWarning, InputFile

# Files discovery files as logs that are never a console: pip freeze and the code diff.
NOT_CONSOLE = frozenset({"requirements.txt", "code.diff"})
SECOND_COPY_NOTE = "its console metric tables, if any, are not read: the run's metrics.jsonl holds the same rows"
BOOLEANS = {"True": True, "False": False}


def console_value(text: str) -> Any:
    """A printed cell as its value: a float (ints, scientific notation, nan, inf), a bool, else the text."""
    if text in BOOLEANS:
        return BOOLEANS[text]
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return text


@dataclass
class _Capture:
    path: Path
    tables: list[ConsoleTable]
    timeline: list[TimelineStep] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(len(table.cells) for table in self.tables)


def _captures(paths: Iterable[Path]) -> list[_Capture]:
    """Each console capture's tables, read forward once in blocks: what is held is the tables (and a
    capture's timeline while no capture so far has a metrics row, the only case it is used in)."""
    captures: list[_Capture] = []
    for path in sorted({input_path(p) for p in paths}):
        if path.name in NOT_CONSOLE:
            continue
        # The log parser reads the same file and reports its decoding problems: not repeated here.
        lines = text_lines(path, [])
        if lines is None:
            continue
        scanner = TableScanner()
        timeline = None if any(c.rows for c in captures) else TimelineReader()
        tables: list[ConsoleTable] = []
        for raw in lines:
            table = scanner.take(raw)
            if table is not None:
                tables.append(table)
                if table.cells:
                    timeline = None  # this capture's tables are the steps
            if timeline is not None:
                timeline.take(raw)
        last = scanner.finish()
        tables += [last] if last is not None else []
        captures.append(_Capture(path, tables, timeline.steps() if timeline is not None else []))
    return captures


def _preferred(capture: _Capture) -> tuple[int, bool, str]:
    # The most metric rows; on a tie the cookbook's own logs.log (a console capture beside it, such as
    # W&B's output.log, repeats what the logger wrote).
    return (capture.rows, capture.path.name == "logs.log", str(capture.path))


def _table_rows(capture: _Capture, log: FileWarnings) -> tuple[list[dict[str, Any]], list[int], int]:
    """Metric rows of the capture's tables, their lines, and the count of cut rows that were dropped."""
    for key in resolve_cut_keys(capture.tables):
        fits = (
            f"{len(key.candidates)} full keys fit it ({', '.join(key.candidates[:4])})"
            if key.candidates
            else ("no key seen whole in the capture or known from the cookbook fits it")
        )
        log.add(key.line, f"metric key `{key.shown}` was cut by the console table and {fits}; kept as written")
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    dropped = 0
    for table in capture.tables:
        row: dict[str, Any] = {} if table.step is None else {"step": table.step}
        for cell in table.cells:
            row.setdefault(cell.key, console_value(cell.value))  # an ambiguous cut key twice: the first kept
        title = f"`Step {table.step}`" if table.step is not None else "without a step title"
        if table.cut_line is not None:
            dropped += 1
            log.add(
                table.cut_line,
                f"metrics table {title} is cut in the middle of a row (an interrupted write?); "
                f"its {len(table.cells)} whole row(s) are kept",
            )
        elif not table.closed:
            log.add(table.line, f"metrics table {title} ends without its bottom border; its rows are kept")
        if table.cells:
            rows.append(row)
            lines.append(table.line)
    return rows, lines, dropped


def note_second_copies(log_inputs: Iterable[InputFile]) -> None:
    """Say on each console capture's `log` input that its metric tables were not read (metrics.jsonl was)."""
    for info in log_inputs:
        if info.kind == "log" and Path(info.path).name not in NOT_CONSOLE and not info.note:
            info.note = SECOND_COPY_NOTE


def _timeline_rows(steps: list[TimelineStep]) -> tuple[list[dict[str, Any]], list[int]]:
    return [{"step": s.step, **s.times} for s in steps], [s.line for s in steps]


def parse_console_metrics(paths: Iterable[Path], warnings: list[IngestWarning]) -> tuple[pl.DataFrame, list[InputFile]]:
    """The steps table from the console captures among `paths` (logs, captured stdout): the metric
    tables of the capture with the most rows, else the phase timeline of the one with the most steps.
    Empty (and no input) when no capture holds either."""
    captures = _captures(paths)
    with_tables = [c for c in captures if c.rows]
    if with_tables:
        return _steps_of_tables(with_tables, warnings)
    timelines = [(c.timeline, c) for c in captures]
    steps, chosen = max(timelines, key=lambda t: (len(t[0]), str(t[1].path)), default=([], None))
    if chosen is None or not steps:
        return pl.DataFrame(schema=STEPS_SCHEMA), []
    log = FileWarnings(str(chosen.path))
    rows, lines = _timeline_rows(steps)
    note = f"{len(rows)} step(s) cut from `Starting`/`took` lines (coarse phase timeline)"
    return _steps_frame(chosen.path, log, rows, lines, 0, note, warnings)


def console_table_steps(
    tables_by_file: dict[Path, list[ConsoleTable]], warnings: list[IngestWarning]
) -> tuple[pl.DataFrame, list[InputFile]]:
    """The steps table from console metric tables already read (a live run's whole tables, per file), as
    parse_console_metrics makes it from the same captures read from the start."""
    with_tables = [_Capture(path, tables) for path, tables in sorted(tables_by_file.items())]
    with_tables = [c for c in with_tables if c.rows]
    if not with_tables:
        return pl.DataFrame(schema=STEPS_SCHEMA), []
    return _steps_of_tables(with_tables, warnings)


def _steps_of_tables(
    with_tables: list[_Capture], warnings: list[IngestWarning]
) -> tuple[pl.DataFrame, list[InputFile]]:
    chosen = max(with_tables, key=_preferred)
    log = FileWarnings(str(chosen.path))
    rows, lines, skipped = _table_rows(chosen, log)
    copies = len(with_tables) - 1
    note = f"{len(rows)} console metric table(s)" + (f"; {copies} other capture(s) repeat them" if copies else "")
    return _steps_frame(chosen.path, log, rows, lines, skipped, note, warnings)


def _steps_frame(
    path: Path,
    log: FileWarnings,
    rows: list[dict[str, Any]],
    lines: list[int],
    skipped: int,
    note: str,
    warnings: list[IngestWarning],
) -> tuple[pl.DataFrame, list[InputFile]]:
    builder = StepsBuilder(str(path), log)
    for row, line in zip(rows, lines, strict=True):
        builder.add(row, line)
    frame = builder.frame()
    warnings.extend(log.close())
    return frame, [InputFile("metrics", str(path), records=len(rows), skipped=skipped, note=note)]
