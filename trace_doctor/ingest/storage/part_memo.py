"""Per-part results of part-local queries over a stored table, kept across analyses in this process.

A stored table is a list of parts that never change once written: Parquet files (a cache entry's, a
scratch folder's) and frames held in memory. A grown trace's table keeps its unchanged parts and adds
new ones (trace/span_extend.py for `analyze` again, trace/span_live_table.py for the watch). A query
that is part-local gives on the whole table the concatenation, in part order, of its results on each
part: a row filter with a column selection, or a per-part aggregate that its caller combines (the
extent per segment is the min and max of the parts' extents). Kept per part, such a result is
computed once for each part, so the watch's findings refresh reads only the parts the run gained
since the last one, not the whole run again.

A part is known by what identifies its rows: a file by its device, inode, size, modification time and
last bytes (a Parquet footer: row counts and column statistics), so a file rewritten in place, or a new
file on a reused inode, is another part, while a hard link of it (a grown table's next generation links
its unchanged parts) is the same part; a slice of one by that and its rows; a frame by its identity
while it lives. The results are held up to a byte budget, least recently used first out.

A part of a table cache entry (a `.parts` folder, ingest/storage/cache.py) also keeps its results on
disk beside it, as Arrow IPC files named after the part, the rows of it read, and a digest of the
query: `analyze` run again on a grown trace resumes its table from that entry (its parts linked into
the new entry with their results, PartWriter.link), so it too reads only the parts the trace gained.
An entry's parts never change, so neither do their results; each is written whole under a temporary
name and renamed into place, and one that does not read back as the query's columns is not used.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from trace_doctor.ingest.storage.stored_table import FileRows

# What the kept results may hold. The largest subsets the rules read of a 12000-step trace (the result
# waits, the main task's spans) are ~20 MB each; a budget of a few of them keeps a watch's refresh
# incremental without letting a long watch's memory grow past it.
BUDGET_BYTES = 256 << 20
# A single result larger than this share of the budget is not kept: it would push every other one out.
MAX_SHARE = 0.25

Query = Callable[[pl.LazyFrame], pl.LazyFrame]


class _Kept:
    """Results by (part, query), least recently used first; a frame part's go when the frame does."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.bytes = 0
        self._results: OrderedDict[tuple, tuple[pl.DataFrame, int]] = OrderedDict()
        self._by_frame: dict[int, set[tuple]] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple) -> pl.DataFrame | None:
        with self._lock:
            found = self._results.get(key)
            if found is None:
                return None
            self._results.move_to_end(key)
            return found[0]

    def put(self, key: tuple, result: pl.DataFrame, frame: pl.DataFrame | None) -> None:
        size = int(result.estimated_size())
        if size > self.budget * MAX_SHARE:
            return
        with self._lock:
            if key in self._results:
                return
            self._results[key] = (result, size)
            self.bytes += size
            if frame is not None:
                keys = self._by_frame.get(id(frame))
                if keys is None:
                    keys = self._by_frame[id(frame)] = set()
                    # An id is reused once its frame is gone: the results go with the frame.
                    weakref.finalize(frame, self._forget_frame, id(frame))
                keys.add(key)
            while self.bytes > self.budget and self._results:
                old, (_, old_size) = self._results.popitem(last=False)
                self.bytes -= old_size

    def _forget_frame(self, frame_id: int) -> None:
        with self._lock:
            for key in self._by_frame.pop(frame_id, set()):
                dropped = self._results.pop(key, None)
                if dropped is not None:
                    self.bytes -= dropped[1]

    def clear(self) -> None:
        with self._lock:
            self._results.clear()
            self._by_frame.clear()
            self.bytes = 0


KEPT = _Kept(BUDGET_BYTES)


def part_identity(part: Path | FileRows | pl.DataFrame) -> Hashable | None:
    """What identifies a part's rows (see the module docstring); None for a file that cannot be read."""
    if isinstance(part, pl.DataFrame):
        return ("frame", id(part))
    path = part if isinstance(part, Path) else part.path
    try:
        stat = os.stat(path)
    except OSError:
        return None
    tail = _tail_digest(path, stat)
    if tail is None:
        return None
    file = ("file", stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, tail)
    return file if isinstance(part, Path) else (*file, part.start, part.rows)


# A file's last bytes (a Parquet file's footer: its row groups' row counts and column statistics) by its
# stat, ctime included, so each file is read once until it changes or is linked again.
TAIL_BYTES = 4096
_tails: OrderedDict[tuple, str] = OrderedDict()
MAX_TAILS = 65_536


def _tail_digest(path: Path, stat: os.stat_result) -> str | None:
    """A digest of the file's last TAIL_BYTES. An inode freed and reused for a new file of the same size
    within one tick of the clock (a small table's parts written and dropped in quick succession) has the
    same stat; its footer tells it apart."""
    key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    found = _tails.get(key)
    if found is not None:
        return found
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, stat.st_size - TAIL_BYTES))
            tail = handle.read(TAIL_BYTES)
    except OSError:
        return None
    found = _tails[key] = hashlib.sha1(tail, usedforsecurity=False).hexdigest()
    while len(_tails) > MAX_TAILS:
        _tails.popitem(last=False)
    return found


# A part's result beside it in a cache entry: `<part file>.<rows read>.<query digest>.arrow`, the rows
# read being `all` or `<start>-<rows>` (a slice, FileRows).
RESULT_FILE = re.compile(r"(?P<part>part-[0-9]{5,}\.parquet)\.(?P<view>all|[0-9]+-[0-9]+)\.[0-9a-f]{40}\.arrow")
ENTRY_FOLDER = re.compile(r"[a-z_]+-[0-9a-f]{32}\.parts")


def _result_file(part: Path | FileRows | pl.DataFrame, key: Hashable) -> Path | None:
    """Where a part of a cache entry keeps the result of query `key` (None: not an entry's part)."""
    if isinstance(part, pl.DataFrame):
        return None
    path = part if isinstance(part, Path) else part.path
    if ENTRY_FOLDER.fullmatch(path.parent.name) is None:
        return None
    view = "all" if isinstance(part, Path) else f"{part.start}-{part.rows}"
    digest = hashlib.sha1(repr(key).encode("utf-8", "surrogateescape"), usedforsecurity=False).hexdigest()
    return path.parent / f"{path.name}.{view}.{digest}.arrow"


def _read_result(file: Path, expected: Callable[[], pl.Schema]) -> pl.DataFrame | None:
    """A kept result read back, or None: missing, unreadable, or not the query's columns."""
    try:
        found = pl.read_ipc(file)
    except (OSError, ValueError, pl.exceptions.PolarsError):  # missing or damaged: a miss, never a crash
        return None
    return found if found.schema == expected() else None


def _write_result(file: Path, result: pl.DataFrame) -> None:
    """The result kept beside its part (whole or not at all); a disk that refuses it loses nothing."""
    if result.estimated_size() > BUDGET_BYTES * MAX_SHARE or file.exists():
        return
    temporary = file.with_name(f".tmp-{os.getpid()}-{file.name}")
    try:
        result.write_ipc(temporary, compression="lz4")
        os.replace(temporary, file)
    except Exception:  # noqa: BLE001 - a full or read-only disk: the next analysis computes it again
        with contextlib.suppress(OSError):
            temporary.unlink()


def link_results(source: Path, linked: Path, view: str) -> None:
    """Give the part `linked` (a hard link of `source` in another entry) the results `source` keeps
    for the same rows `view` (`all`, or a slice's `<start>-<rows>`)."""
    try:
        names = os.listdir(source.parent)
    except OSError:
        return
    for name in names:
        found = RESULT_FILE.fullmatch(name)
        if found is None or found["part"] != source.name or found["view"] != view:
            continue
        with contextlib.suppress(OSError):
            os.link(source.parent / name, linked.parent / (linked.name + name[len(source.name) :]))


# A part written as the concatenation of other parts (a live table's merge, trace/span_live_table.py): its
# identity -> its pieces' identities, in order. Bounded like the results.
_pieces: OrderedDict[Hashable, tuple[Hashable, ...]] = OrderedDict()
MAX_MERGES = 4096


def piece_identities(parts: list[Path | FileRows | pl.DataFrame]) -> tuple[Hashable, ...] | None:
    """The identities of file parts about to be merged (taken before the files go); None if one is unreadable,
    or is a frame (a frame's identity is reused once it is gone: it cannot name rows after the merge)."""
    if any(isinstance(part, pl.DataFrame) for part in parts):
        return None
    found = tuple(part_identity(part) for part in parts)
    return None if any(identity is None for identity in found) else found


def note_merged(merged: Path | pl.DataFrame, pieces: tuple[Hashable, ...] | None) -> None:
    """`merged` holds the rows of the parts `pieces` (piece_identities), in order: a query's results on them,
    concatenated, are its result on `merged`. That holds for the queries per_part runs: a row filter, or an
    aggregate its caller combines over the parts (min and max, unions, distinct values), which the pieces'
    results combine to as the merged part's would."""
    identity = part_identity(merged) if pieces and isinstance(merged, Path) else None
    if identity is None or pieces is None:
        return
    _pieces[identity] = pieces
    while len(_pieces) > MAX_MERGES:
        _pieces.popitem(last=False)


def _from_pieces(identity: Hashable, key: Hashable) -> pl.DataFrame | None:
    """A merged part's result from its pieces' kept results (note_merged), or None when one is not kept."""
    pieces = _pieces.get(identity)
    if pieces is None:
        return None
    found = [KEPT.get((piece, key)) for piece in pieces]
    if any(result is None for result in found):
        return None
    return pl.concat(found, how="vertical") if len(found) > 1 else found[0]


# A file part up to this size is read whole the first time a query misses it, and its rows kept apart
# (SMALL_ROWS, a budget of their own: a catch-up's parts do not push the results out): the queries of one
# analysis that follow read them from memory. Scanning a small Parquet file costs its setup more than its
# rows (~2-3 ms a query), and a refresh's new parts are small (1 MB appended: ~2,000 spans, ~0.1 MB).
SMALL_PART_BYTES = 512 << 10
# A slice of a file part of up to this many rows is small too (~0.5 MB of spans).
SMALL_SLICE_ROWS = 16_384
SMALL_ROWS = _Kept(32 << 20)
_ROWS = "rows"


def _rows_of(
    part: tuple[Path | FileRows | pl.DataFrame, Callable[[], pl.LazyFrame]], identity: Hashable
) -> pl.LazyFrame:
    """The part's scan, or its rows read whole and kept when it is a small file (SMALL_PART_BYTES) or a short
    slice of one (SMALL_SLICE_ROWS)."""
    held, scan = part
    if isinstance(held, pl.DataFrame) or identity is None:
        return scan()
    try:
        # A slice of a file is small by its rows (a cold read's parts are cut around its open rows and
        # before its last rows: span_settle.py), a file by its size.
        small = os.stat(held).st_size <= SMALL_PART_BYTES if isinstance(held, Path) else held.rows <= SMALL_SLICE_ROWS
    except OSError:
        return scan()
    if not small:
        return scan()
    rows = SMALL_ROWS.get((identity, _ROWS))
    if rows is None:
        rows = scan().collect()
        with contextlib.suppress(TypeError):
            SMALL_ROWS.put((identity, _ROWS), rows, None)
    return rows.lazy()


def per_part(
    parts: list[tuple[Path | FileRows | pl.DataFrame, Callable[[], pl.LazyFrame]]],
    key: Hashable,
    query: Query,
    empty: pl.LazyFrame,
    *,
    parallel: bool = True,
) -> list[pl.DataFrame]:
    """`query` on each part (given as the part and its scan), in part order: the kept result of a part
    it already ran on (or of the pieces it was merged from, note_merged), else a fresh one (kept). `key`
    names the query: equal keys, equal queries; a query is part-local (see note_merged).
    `empty`: the table with no rows (what a result read back must have the columns of, once queried).
    The parts not kept are collected together, so polars reads them in parallel as one scan would."""
    results: list[pl.DataFrame | None] = []
    missing: list[int] = []
    identities = []
    for index, (part, _) in enumerate(parts):
        identity = part_identity(part)
        identities.append(identity)
        found = KEPT.get((identity, key)) if identity is not None else None
        results.append(found)
        if found is None:
            missing.append(index)
    schema: list[pl.Schema] = []

    def expected() -> pl.Schema:
        if not schema:
            schema.append(query(empty).collect_schema())
        return schema[0]

    for index in list(missing):
        file = _result_file(parts[index][0], key)
        found = _read_result(file, expected) if file is not None else None
        if found is None and identities[index] is not None:
            found = _from_pieces(identities[index], key)
        if found is not None:
            results[index] = found
            missing.remove(index)
            if identities[index] is not None:
                KEPT.put((identities[index], key), found, None)
    if missing:
        queries = [query(_rows_of(parts[index], identities[index])) for index in missing]
        fresh = pl.collect_all(queries) if parallel and len(queries) > 1 else [q.collect() for q in queries]
        for index, result in zip(missing, fresh, strict=True):
            results[index] = result
            identity = identities[index]
            if identity is not None:
                part = parts[index][0]
                with contextlib.suppress(TypeError):  # a result polars cannot size is simply not kept
                    KEPT.put((identity, key), result, part if isinstance(part, pl.DataFrame) else None)
            file = _result_file(parts[index][0], key)
            if file is not None:
                _write_result(file, result)
    return [r for r in results if r is not None]
