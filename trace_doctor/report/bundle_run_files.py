"""The run's own records in the escalation bundle: its metric rows, its logs' last lines and the lines
around their errors, and when the slow steps ran (UTC). Each is bounded, redacted, and says what it cut.

Metric rows come from the analysis's steps table (already redacted, metric names included), so a
console capture's steps travel the same way as metrics.jsonl. Log excerpts are the one thing the bundle
reads from the run's files again (the tables keep the records a rule needs, not every line): each
run of consecutive lines is redacted as one text, so a private key logged over several lines is seen whole.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

import orjson
import polars as pl

from trace_doctor.derive.wall_clock import WallClock, wall_clock
from trace_doctor.ingest.parsers.metrics import RESERVED
from trace_doctor.ingest.reading.excerpts import read_excerpt
from trace_doctor.model import Analysis
from trace_doctor.redact import redact_text
from trace_doctor.redact.local_paths import Localizer
from trace_doctor.redact.shapes import KEY_BLOCK as KEY_BLOCK_PATTERN
from trace_doctor.redact.shapes import KEY_BLOCK_TAIL as KEY_BLOCK_TAIL_PATTERN

# Metric rows copied, in bytes. A 10,000-step RL run with a hundred metrics writes ~15 MB of rows;
# support reads the slow steps and the trend around them, and 4 MiB (about 1 MB deflated) holds every
# row of most runs. Past it: the slow steps' rows, the first rows (a quarter: warm-up), the last rows.
METRICS_MAX_BYTES = 4 * 1024 * 1024
METRICS_HEAD_SHARE = 0.25
METRICS_BATCH_ROWS = 1000
# Log lines: a cookbook step logs 5-20 lines, so the last 200 hold the last ten or more steps and how
# the run ended; 5 either side of an error hold its traceback's head and what led to it; 20 errors per
# log (the first 10 and the last 10: a run failing every step repeats one block); lines cut at 2,000
# characters; at most 20 logs. Worst case ~20 x (200 + 20 x 11) x 2 KB = 17 MB, in practice KBs.
LOG_TAIL_LINES = 200
ERROR_CONTEXT_LINES = 5
MAX_ERRORS_PER_LOG = 20
LOG_LINE_CHARS = 2000
MAX_LOGS = 20
LOG_KINDS = ("log", "dump")
ERROR_LEVELS = ("ERROR", "CRITICAL", "FATAL")
KEY_BLOCK = re.compile(KEY_BLOCK_PATTERN)
KEY_BLOCK_TAIL = re.compile(KEY_BLOCK_TAIL_PATTERN)


def _row_bytes(row: dict[str, Any], where: str | None) -> bytes:
    kept = {k: v for k, v in row.items() if v is not None}
    if where is not None:
        kept["_source"] = where
    return orjson.dumps(kept, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def metric_rows(result: Analysis, local: Localizer, slow: list[int]) -> tuple[bytes, str]:
    """metrics.jsonl (one row per steps-table row, file order, nulls left out) and what it holds."""
    table = result.run.steps
    if table.is_empty():
        return b"", "no metric rows were read"
    order = [c for c in ("source", "line") if c in table.columns]
    table = table.sort(order, nulls_last=True) if order else table
    sources = table["source"].drop_nulls().unique().to_list() if "source" in table.columns else []
    # Rows from one metrics.jsonl are written as the file had them; rows from several files or a console
    # capture say where each came from (`_source`: file:line).
    plain = len(sources) <= 1 and all(PurePosixPath(str(s).replace("\\", "/")).name == "metrics.jsonl" for s in sources)
    metrics = [c for c in table.columns if c == "step" or c not in RESERVED]

    def rows(start: int, stop: int) -> list[tuple[int, bytes]]:
        part = table.slice(start, stop - start)
        out = []
        for offset, row in enumerate(part.iter_rows(named=True)):
            where = None if plain else f"{local.text(row.get('source'))}:{row.get('line')}"
            out.append((start + offset, _row_bytes({c: row[c] for c in metrics}, where)))
        return out

    height = table.height
    total_bytes, kept = 0, {}
    for start in range(0, height, METRICS_BATCH_ROWS):  # the whole table when it fits
        for index, data in rows(start, min(height, start + METRICS_BATCH_ROWS)):
            kept[index] = data
            total_bytes += len(data)
        if total_bytes > METRICS_MAX_BYTES:
            break
    names = [local.text(str(s)) for s in sources]
    origin = f"from {', '.join(names)}" if names else "from the run's steps table"
    if total_bytes <= METRICS_MAX_BYTES and len(kept) == height:
        return b"".join(kept[i] for i in range(height)), f"all {height:,} rows {origin}"
    # Over the budget: the slow steps' rows, then the head's share, then rows from the end.
    chosen: dict[int, bytes] = {}
    budget = METRICS_MAX_BYTES
    if slow and "step" in table.columns:
        for index in table.with_row_index("_i").filter(pl.col("step").is_in(slow))["_i"].to_list():
            data = rows(index, index + 1)[0][1]
            chosen[index] = data
            budget -= len(data)
    head_budget = int(budget * METRICS_HEAD_SHARE)
    for index in range(height):
        data = kept.get(index) or rows(index, index + 1)[0][1]
        if len(data) > head_budget:
            break
        chosen.setdefault(index, data)
        head_budget -= len(data)
        budget -= len(data)
    start = height
    while start > 0 and budget > 0:
        batch = rows(max(0, start - METRICS_BATCH_ROWS), start)
        for index, data in reversed(batch):
            if index in chosen:
                continue
            if len(data) > budget:
                budget = 0
                break
            chosen[index] = data
            budget -= len(data)
        start -= METRICS_BATCH_ROWS
    body = b"".join(chosen[i] for i in sorted(chosen))
    note = (
        f"{len(chosen):,} of {height:,} rows {origin}: cut at {METRICS_MAX_BYTES // 2**20} MiB "
        "(the slow steps' rows, the first rows, then the last ones)"
    )
    return body, note


def _cut(text: str) -> str:
    if len(text) <= LOG_LINE_CHARS:
        return text
    return f"{text[:LOG_LINE_CHARS]} [line cut: {len(text):,} characters]"


def _groups(texts: list[str]) -> list[tuple[int, int]]:
    """[start, stop) runs of lines redacted together: a private-key block from its BEGIN line to its END
    line (or the excerpt's end) is one text, so its body is seen whole; every other line is its own."""
    groups, index = [], 0
    while index < len(texts):
        stop = index + 1
        begin = KEY_BLOCK.search(texts[index])
        if begin is not None and not KEY_BLOCK_TAIL.search(texts[index], begin.end()):
            while stop < len(texts) and not KEY_BLOCK_TAIL.search(texts[stop]):
                stop += 1
            stop = min(stop + 1, len(texts))
        groups.append((index, stop))
        index = stop
    return groups


def _redacted_lines(lines: list[tuple[int, str]]) -> str:
    """The lines redacted (a private key over several lines as one text), cut for display, numbered as
    in the file; a key block redacted to fewer lines shows the range of lines it held."""
    out = []
    for start, stop in _groups([text for _, text in lines]):
        clean = redact_text("\n".join(text for _, text in lines[start:stop])).split("\n")
        if len(clean) == stop - start:
            out += [f"{lines[start + k][0]:>7}| {_cut(text)}" for k, text in enumerate(clean)]
        else:
            where = f"{lines[start][0]}-{lines[stop - 1][0]}"
            out += [f"{where:>7}| {_cut(text)}" for text in clean]
    return "\n".join(out)


def log_excerpts(result: Analysis, local: Localizer) -> tuple[dict[str, str], list[str]]:
    """One text per log (display name -> text): the lines around the errors found in it and its last
    lines, numbered as the findings quote them, redacted."""
    logs = [i for i in result.run.inputs if i.kind in LOG_KINDS]
    notes = []
    if len(logs) > MAX_LOGS:
        notes.append(f"log excerpts of the first {MAX_LOGS} of {len(logs)} logs")
        logs = logs[:MAX_LOGS]
    events = result.run.log_events
    texts: dict[str, str] = {}
    for info in logs:
        name = local.text(info.path) or info.path
        errors: list[int] = []
        if not events.is_empty() and {"source", "line", "level"} <= set(events.columns):
            errors = (
                events.filter(
                    (pl.col("source") == info.path)
                    & (pl.col("level").is_in(ERROR_LEVELS) | (pl.col("kind") == "error"))
                    & pl.col("line").is_not_null()
                )["line"]
                .unique()
                .sort()
                .to_list()
            )
        cut_errors = len(errors) > MAX_ERRORS_PER_LOG
        if cut_errors:
            half = MAX_ERRORS_PER_LOG // 2
            errors = errors[:half] + errors[-half:]
        excerpt = read_excerpt(
            Path(info.path),
            last=LOG_TAIL_LINES,
            around=errors,
            context=ERROR_CONTEXT_LINES,
            max_line_chars=LOG_LINE_CHARS,
        )
        if excerpt is None:
            notes.append(f"{name}: not readable now (moved, or its name held a secret and was redacted)")
            continue
        parts = [f"# {name}: {excerpt.lines:,} lines; redacted; line numbers as in the file", ""]
        if excerpt.around:
            shown = "the first and last " + str(MAX_ERRORS_PER_LOG // 2) if cut_errors else "each of the"
            parts += [f"## {ERROR_CONTEXT_LINES} lines either side of {shown} error lines", ""]
            for centres, lines in excerpt.around:
                label = "line" if len(centres) == 1 else "lines"
                parts += [f"--- error at {label} {', '.join(map(str, centres))} ---", _redacted_lines(lines), ""]
        tail_from = excerpt.tail[0][0] if excerpt.tail else 0
        parts += [
            f"## the last {len(excerpt.tail)} lines (from line {tail_from})",
            "",
            _redacted_lines(excerpt.tail),
            "",
        ]
        parts += [f"reading stopped early: {p}" for p in excerpt.problems]
        texts[name] = "\n".join(parts)
    return texts, notes


def slow_steps_window(result: Analysis, slow: list[int]) -> WallClock:
    step_times = result.derived.get("step_times") if result.derived else None
    return wall_clock(result.run, step_times if isinstance(step_times, pl.DataFrame) else None, slow)
