"""The cookbook's console metric tables, read back from a log or a console capture.

`PrettyPrintLogger.log_metrics` renders every metrics row with rich and logs it as one record
(message = newline + table): an optional centred title `Step N`, a heavy-head box with the header
`Metric │ Value`, one `key │ value` row per metric (keys sorted, `:total`/`:count` keys hidden,
floats with 6 decimals, keys wider than the column cut to `prefix…`), and a bottom border. In a
terminal capture every cell carries ANSI colour codes; they are removed before a line is looked at.
Rich falls back to ASCII boxes (`|`, `+`, `-`) on a terminal that cannot show the box characters.

Only the rows are read here, as text; what the keys and values mean is console_metrics.py's job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trace_doctor.ingest.reading.textfile import strip_ansi

VERTICALS = "│┃|"
HEADER = re.compile(r"^[│┃|]\s*Metric\s*[│┃|]\s*Value\s*[│┃|]$")
TITLE = re.compile(r"^\s*Step (?P<step>-?\d{1,18})\s*$")
# Border and separator lines: box-drawing characters (and their ASCII stand-ins) only.
BORDER = re.compile(r"^[\u2500-\u257f+\-=|]+$")
BOTTOM_CORNERS = "└┗+"
CUT_MARK = "…"


@dataclass
class Cell:
    """One metric row as printed: the key cell and value cell text, and the line it starts on."""

    key: str
    value: str
    line: int


@dataclass
class ConsoleTable:
    """One printed metrics table: its `Step N` title (None without one) and its whole rows."""

    line: int  # the header line
    step: int | None
    cells: list[Cell] = field(default_factory=list)
    closed: bool = False  # its bottom border was read
    cut_line: int | None = None  # a row line that stops before its last border (a write cut short)


def _cells(text: str) -> tuple[str, str] | None:
    """The two cells of a whole table row, or None when the line is not one."""
    if len(text) < 3 or text[0] not in VERTICALS or text[-1] not in VERTICALS:
        return None
    inner = text[1:-1]
    bar = next((ch for ch in VERTICALS if ch in inner), None)
    if bar is None:
        return None
    parts = inner.split(bar)
    if len(parts) != 2:
        return None
    return parts[0].strip(), parts[1].strip()


def _top_border_above(lines: list[str], header: int) -> bool:
    """Rich draws a border above the header; a markdown `| Metric | Value |` table (model output
    printed to the same console) has none."""
    if header == 0:
        return False
    text = strip_ansi(lines[header - 1]).strip()
    return bool(BORDER.match(text)) and text[0] in "┏┌╭+"


def _title_step(lines: list[str], header: int) -> int | None:
    """The step in the `Step N` title above the table's top border (index `header` is the header)."""
    for back in (2, 3):  # title, top border, header; a blank line may sit under the title
        index = header - back
        if index < 0:
            return None
        text = strip_ansi(lines[index])
        found = TITLE.match(text)
        if found is not None:
            return int(found["step"])
        if text.strip():
            return None
    return None


def _read_rows(lines: list[str], table: ConsoleTable, start: int) -> int:
    """Fill `table` with the rows from index `start`; the index of the first line after the table."""
    index = start
    while index < len(lines):
        text = strip_ansi(lines[index]).strip()
        if BORDER.match(text) and not text.startswith(tuple(BOTTOM_CORNERS)):
            index += 1  # the line under the header, or a row separator
            continue
        if BORDER.match(text):
            table.closed = True
            return index + 1
        cells = _cells(text)
        if cells is None:
            if text and text[0] in VERTICALS:
                table.cut_line = index + 1  # a row that stops short: the write was cut
                return index + 1
            return index
        key, value = cells
        previous = table.cells[-1] if table.cells else None
        if previous is not None and not key and value:
            previous.value = f"{previous.value} {value}"  # a value wrapped onto the next line
        elif previous is not None and key and not value:
            previous.key = f"{previous.key} {key}"  # a key (with spaces) wrapped onto the next line
        elif key:
            table.cells.append(Cell(key, value, index + 1))
        index += 1
    return index


def metric_tables(lines: list[str]) -> list[ConsoleTable]:
    """Every metrics table in `lines`, in file order (line numbers count from 1)."""
    return [table for table, _, _ in _scan(lines)]


def _scan(lines: list[str]):
    """Each table with the index of its header line and of the first line after it."""
    index = 0
    while index < len(lines):
        raw = lines[index]
        if "Metric" not in raw or "Value" not in raw:
            index += 1
            continue
        if HEADER.match(strip_ansi(raw).strip()) is None or not _top_border_above(lines, index):
            index += 1
            continue
        header = index
        table = ConsoleTable(line=index + 1, step=_title_step(lines, index))
        index = _read_rows(lines, table, index + 1)
        yield table, header, index


# Lines above a header that belong to its table: the `Step N` title, a blank line, the top border.
LINES_ABOVE_HEADER = 3


def whole_tables(lines: list[str]) -> tuple[list[ConsoleTable], int]:
    """The tables of `lines` (the text so far of a file still being written) that are whole, and the index
    of the first line to keep for the next look: a table that runs to the end of `lines` may still gain
    rows, and the last lines may be the title and top border of a table whose header is not written yet."""
    tables: list[ConsoleTable] = []
    keep = max(0, len(lines) - LINES_ABOVE_HEADER)
    for table, header, end in _scan(lines):
        if end >= len(lines) and not table.closed and table.cut_line is None:
            return tables, max(0, header - LINES_ABOVE_HEADER)
        tables.append(table)
        keep = max(keep, end)
    return tables, keep


def is_cut_key(key: str) -> bool:
    """A key the table cut to fit its column (`prefix…`)."""
    return key.endswith(CUT_MARK)
