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
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from trace_doctor.ingest.reading.textfile import strip_ansi

VERTICALS = "│┃|"
HEADER = re.compile(r"^[│┃|]\s*Metric\s*[│┃|]\s*Value\s*[│┃|]$")
TITLE = re.compile(r"^\s*Step (?P<step>-?\d{1,18})\s*$")
# Border and separator lines: box-drawing characters (and their ASCII stand-ins) only.
BORDER = re.compile(r"^[\u2500-\u257f+\-=|]+$")
BOTTOM_CORNERS = "└┗+"
CUT_MARK = "…"
# Lines above a header that belong to its table: the `Step N` title, a blank line, the top border.
LINES_ABOVE_HEADER = 3
# What a line inside a table is to it (TableScanner._row).
ROW, LAST_ROW, AFTER = "row", "last row", "after"


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


class TableScanner:
    """The tables of a capture's lines taken one at a time, in file order (line numbers count from 1).

    What it holds is the table being read and the three lines above the current one (a header is known
    by the top border above it and the `Step N` title above that), so a capture of any size costs the
    tables it holds. `take` gives each table as it ends: at its bottom border, at a row cut short, or at
    the first line after it that is not a row (that line is then looked at as a header of its own)."""

    def __init__(self) -> None:
        self.open: ConsoleTable | None = None  # the table whose rows are being read
        self.end = 0  # the index of the first line after the table `take` last gave
        self._above: deque[str] = deque(maxlen=LINES_ABOVE_HEADER)
        self._index = 0  # the index of the next line

    def take(self, raw: str) -> ConsoleTable | None:
        """Read the next line; the table it ends, if any."""
        index = self._index
        self._index += 1
        ended = self.open
        if ended is not None:
            read = self._row(ended, strip_ansi(raw).strip(), index)
            if read == ROW:
                self._above.append(raw)
                return None
            self.open = None
            if read == LAST_ROW:
                self.end = index + 1
                self._above.append(raw)
                return ended
            self.end = index
        if "Metric" in raw and "Value" in raw and HEADER.match(strip_ansi(raw).strip()) and self._border_above():
            self.open = ConsoleTable(line=index + 1, step=self._title_step())
        self._above.append(raw)
        return ended

    def finish(self) -> ConsoleTable | None:
        """The table the lines ended in (without its bottom border), if any."""
        table, self.open = self.open, None
        if table is not None:
            self.end = self._index
        return table

    @staticmethod
    def _row(table: ConsoleTable, text: str, index: int) -> str:
        """Take the line `text` into `table`: ROW, LAST_ROW (its bottom border or a row cut short), or
        AFTER (a line that is not the table's: the table ended above it)."""
        if BORDER.match(text) and not text.startswith(tuple(BOTTOM_CORNERS)):
            return ROW  # the line under the header, or a row separator
        if BORDER.match(text):
            table.closed = True
            return LAST_ROW
        cells = _cells(text)
        if cells is None:
            if text and text[0] in VERTICALS:
                table.cut_line = index + 1  # a row that stops short: the write was cut
                return LAST_ROW
            return AFTER
        key, value = cells
        previous = table.cells[-1] if table.cells else None
        if previous is not None and not key and value:
            previous.value = f"{previous.value} {value}"  # a value wrapped onto the next line
        elif previous is not None and key and not value:
            previous.key = f"{previous.key} {key}"  # a key (with spaces) wrapped onto the next line
        elif key:
            table.cells.append(Cell(key, value, index + 1))
        return ROW

    def _border_above(self) -> bool:
        """Rich draws a border above the header; a markdown `| Metric | Value |` table (model output
        printed to the same console) has none."""
        if not self._above:
            return False
        text = strip_ansi(self._above[-1]).strip()
        return bool(BORDER.match(text)) and text[0] in "┏┌╭+"

    def _title_step(self) -> int | None:
        """The step in the `Step N` title above the table's top border."""
        for back in (2, 3):  # title, top border, header; a blank line may sit under the title
            if len(self._above) < back:
                return None
            text = strip_ansi(self._above[-back])
            found = TITLE.match(text)
            if found is not None:
                return int(found["step"])
            if text.strip():
                return None
        return None


def metric_tables(lines: Iterable[str]) -> list[ConsoleTable]:
    """Every metrics table in `lines`, in file order (line numbers count from 1)."""
    scanner = TableScanner()
    tables = [table for raw in lines if (table := scanner.take(raw)) is not None]
    last = scanner.finish()
    return tables if last is None else [*tables, last]


def whole_tables(lines: list[str]) -> tuple[list[ConsoleTable], int]:
    """The tables of `lines` (the text so far of a file still being written) that are whole, and the index
    of the first line to keep for the next look: a table that runs to the end of `lines` may still gain
    rows, and the last lines may be the title and top border of a table whose header is not written yet."""
    scanner = TableScanner()
    tables: list[ConsoleTable] = []
    keep = max(0, len(lines) - LINES_ABOVE_HEADER)
    for raw in lines:
        table = scanner.take(raw)
        if table is not None:
            tables.append(table)
            keep = max(keep, scanner.end)
    if scanner.open is not None:
        return tables, max(0, scanner.open.line - 1 - LINES_ABOVE_HEADER)
    return tables, keep


def is_cut_key(key: str) -> bool:
    """A key the table cut to fit its column (`prefix…`)."""
    return key.endswith(CUT_MARK)
