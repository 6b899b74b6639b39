"""A table kept on disk as Parquet and read lazily: the spans of a large trace, or its step spans.

A trace of millions of events makes a spans table larger than everything else the analysis holds
together; kept in memory it sets the peak, and the peak grows with the run's length. Stored, the
table costs nothing until read, and each reader scans only the columns and rows it needs
(`scan().filter(...).select(...)`), so what is held at once is that reader's slice.

The files live in the table cache (they are its entries) or, with the cache off or unwritable, in
a scratch folder of this process. A table's files that are not a cache entry (the scratch folder's,
or a cache writer's `.tmp-` folder that lost a race) go when the last table reading them does, and
the scratch folder when it is empty: an analysis run in a process that goes on (the API, a test)
leaves nothing behind once its results are dropped. What is left at exit goes then.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.ingest.storage.part_memo import link_results, per_part

# A table of up to this many rows is kept in memory rather than on disk (~60 MB of spans): writing
# it and scanning it back would cost more time than its memory is worth.
MEMORY_ROWS = 500_000

_scratch: Path | None = None
# Held while the scratch folder is made or something is made in it, and while it is removed once
# empty: a folder is never removed between another thread's finding it and writing in it.
_scratch_lock = threading.RLock()
# Every scratch folder this process made and has not removed yet (one at a time, unless one was
# removed from under it): the exit removes them all.
_made: list[Path] = []
# A writer's folder in the cache folder, renamed into an entry when done (cache.py).
CACHE_TEMP_PREFIX = ".tmp-"
# Every stored table alive in this process: the cache never evicts a file one of them still reads.
_live: weakref.WeakSet[StoredTable] = weakref.WeakSet()


# Said once to the user (the CLI prints them as notes): no disk to spill to, tables kept in memory.
notes: list[str] = []


def why_write_failed(exc: BaseException) -> str:
    """A failed write in words. A full disk does not always arrive as an OSError: polars reports
    "No space left on device" inside a ComputeError, so every error class is a failed write here."""
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:157] + "..."


def disk_failed(exc: BaseException) -> None:
    """Tables are kept in memory from now on: the scratch folder cannot be made or written (no
    writable temporary folder, a full disk). The analysis goes on; only its memory is not bounded."""
    global _disk_ok
    _disk_ok = False
    note = (
        f"cannot write temporary files ({why_write_failed(exc)}): large tables are kept in memory "
        "(set TMPDIR to a writable folder with free space)"
    )
    if note not in notes:
        notes.append(note)


_disk_ok = True


def scratch_dir() -> Path | None:
    """This process's folder for stored tables that are not cache entries (removed once empty, and at
    exit), or None when none can be made."""
    global _scratch
    if not _disk_ok:
        return None
    with _scratch_lock:
        if _scratch is None or not _scratch.is_dir():
            try:
                _scratch = Path(tempfile.mkdtemp(prefix="trace-doctor-"))
            except OSError as exc:
                disk_failed(exc)
                return None
            _made.append(_scratch)
        return _scratch


def scratch_file(prefix: str) -> Path | None:
    """A new, unused file name in the scratch folder (None: no disk to write to)."""
    with _scratch_lock:
        folder = scratch_dir()
        if folder is None:
            return None
        try:
            handle, name = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".parquet")
        except OSError as exc:
            disk_failed(exc)
            return None
    os.close(handle)
    return Path(name)


def scratch_folder(prefix: str) -> Path | None:
    """A new, empty folder in the scratch folder (None: no disk to write to)."""
    with _scratch_lock:
        folder = scratch_dir()
        if folder is None:
            return None
        try:
            return Path(tempfile.mkdtemp(dir=folder, prefix=prefix))
        except OSError as exc:
            disk_failed(exc)
            return None


def _temporary(folder: Path) -> bool:
    """A folder of this process's own that goes once unused: in the scratch folder, or a cache writer's."""
    return folder.name.startswith(CACHE_TEMP_PREFIX) or folder.parent in _made


def release_scratch(paths: list[Path] | None = None) -> None:
    """Remove `paths` (a dropped table's parts, or a finished writer's empty folder) where they are
    temporary files no live table reads, their folder once empty, and the scratch folder once empty."""
    global _scratch
    with _scratch_lock:
        in_use = paths_in_use() if paths else set()
        for path in paths or []:
            folder = path if path.is_dir() else path.parent
            if not _temporary(folder):
                continue
            if path != folder and os.fspath(path) not in in_use:
                with contextlib.suppress(OSError):
                    path.unlink()
            with contextlib.suppress(OSError):
                if os.listdir(folder) == [PartWriter.HEADER]:  # a cache writer's that lost the rename
                    (folder / PartWriter.HEADER).unlink()
                folder.rmdir()  # only when empty: another table may read the rest
        for made in list(_made):
            try:
                made.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                continue  # not empty: in use
            _made.remove(made)
            if made == _scratch:
                _scratch = None


@atexit.register
def _remove_scratch() -> None:
    for made in _made:
        shutil.rmtree(made, ignore_errors=True)


def keep_in_memory(exc: BaseException) -> None:
    """A writer's answer to a failed write: no folder to go on in, the rows stay in memory."""
    disk_failed(exc)


class DeferredPart:
    """Rows written only when first read: a file checked at ingest (its rows counted, nothing in it
    to report) whose parse no analysis needs. `produce` makes the stored table then."""

    def __init__(self, produce: Callable[[], StoredTable], height: int, warnings: list | None = None) -> None:
        self.height = height  # the rows the check counted
        self._produce: Callable[[], StoredTable] | None = produce
        self._table: StoredTable | None = None
        # What `produce` found wrong (the file gone or rewritten since the check): the run's account
        # takes them when the table is read (RunTables), so no output claims rows it lacks unsaid.
        self.warnings: list = warnings if warnings is not None else []

    def table(self) -> StoredTable:
        if self._table is None:
            assert self._produce is not None
            self._table, self._produce = self._produce(), None
        return self._table


@dataclass(frozen=True)
class FileRows:
    """Rows [start, start + rows) of a Parquet part file: a part of which only some rows are still the
    table's (a grown trace's table cut where its new rows go, span_extend.py) is linked as it is rather
    than rewritten, and read as that slice."""

    path: Path
    start: int
    rows: int

    def scan(self) -> pl.LazyFrame:
        return pl.scan_parquet(self.path).slice(self.start, self.rows)


Part = Path | FileRows | pl.DataFrame | DeferredPart
# What is known of a file part without reading it (JSON values: its rows, and what the table's writer
# describes, e.g. the spans' first and last sort keys), kept with a cache entry's header.
Facts = dict[str, Any]


class StoredTable:
    """Rows kept in Parquet files, in frames held in memory (a small table), or both, in order; a
    deferred part is produced the first time the table is read."""

    def __init__(
        self,
        parts: list[Part],
        height: int,
        schema: dict[str, pl.DataType],
        facts: dict[Path | FileRows, Facts] | None = None,
    ) -> None:
        self.parts = list(parts)
        self.height = height
        self.schema = dict(schema)
        self.facts = dict(facts or {})  # by file part: what its writer knew of it (PartWriter.facts)
        self.late_warnings: list = []  # deferred parts' warnings, once produced (DeferredPart)
        # What must outlive the table for its files to stay: a folder removed when its owner goes
        # (a live trace's table generations, trace/span_live_table.py).
        self.keep: list[object] = []
        _live.add(self)
        # Its temporary files go with the last table that reads them (the list, not the table: a
        # produced deferred part extends it in place).
        weakref.finalize(self, _dropped, self.parts)

    @classmethod
    def of(cls, tables: list[StoredTable]) -> StoredTable:
        """Several stored tables (same columns) as one, in order."""
        schema = tables[0].schema if tables else {}
        facts = {part: known for t in tables for part, known in t.facts.items()}
        joined = cls([p for t in tables for p in t.parts], sum(t.height for t in tables), schema, facts)
        joined.keep = [kept for t in tables for kept in (t, *t.keep)]
        return joined

    @property
    def paths(self) -> list[Path]:
        return [p.path if isinstance(p, FileRows) else p for p in self.parts if isinstance(p, (Path, FileRows))]

    def read_parts(self) -> list[Path | FileRows | pl.DataFrame]:
        """The parts in order, files and frames (deferred ones produced)."""
        return self._produced()

    def _produced(self) -> list[Path | FileRows | pl.DataFrame]:
        """The parts, deferred ones produced (once: they replace themselves)."""
        if any(isinstance(part, DeferredPart) for part in self.parts):
            parts: list[Part] = []
            for part in self.parts:
                if isinstance(part, DeferredPart):
                    produced = part.table()
                    self.late_warnings += part.warnings
                    # The rows the check counted, unless the file was rewritten since (a file that
                    # only grew reads as checked: only the checked bytes are read).
                    self.height += produced.height - part.height
                    parts += produced.parts
                else:
                    parts.append(part)
            self.parts[:] = parts
        return [p for p in self.parts if not isinstance(p, DeferredPart)]

    def scan(self) -> pl.LazyFrame:
        scans: list[pl.LazyFrame] = []
        files: list[Path] = []
        for part in self._produced():
            if isinstance(part, Path):
                files.append(part)
                continue
            if files:
                scans.append(pl.scan_parquet(files).cast(self.schema))
                files = []
            scans.append(part.scan().cast(self.schema) if isinstance(part, FileRows) else part.lazy())
        if files:
            scans.append(pl.scan_parquet(files).cast(self.schema))
        if not scans:
            return pl.LazyFrame(schema=self.schema)
        return scans[0] if len(scans) == 1 else pl.concat(scans, how="vertical")

    def part_scans(self) -> list[tuple[Path | FileRows | pl.DataFrame, Callable[[], pl.LazyFrame]]]:
        """Each part with its scan (cast to the table's schema, as `scan` reads it), in order."""

        def scan_of(part: Path | FileRows | pl.DataFrame) -> Callable[[], pl.LazyFrame]:
            if isinstance(part, pl.DataFrame):
                return part.lazy
            read = part.scan if isinstance(part, FileRows) else lambda: pl.scan_parquet(part)
            return lambda: read().cast(self.schema)

        return [(part, scan_of(part)) for part in self._produced()]

    def per_part(self, key: Hashable, query: Callable[[pl.LazyFrame], pl.LazyFrame]) -> list[pl.DataFrame]:
        """A part-local `query` on each part, in order; each part's result kept across analyses (part_memo)."""
        return per_part(self.part_scans(), key, query, pl.LazyFrame(schema=self.schema))

    def where(self, where: pl.Expr, columns: list[str] | None = None) -> pl.DataFrame:
        """The rows matching the row-wise predicate `where`, with only `columns` if given: the rows
        `scan().filter(where).select(columns)` collects, each part's kept across analyses (part_memo)."""
        key = ("where", where.meta.serialize(), None if columns is None else tuple(columns))

        def query(scan: pl.LazyFrame) -> pl.LazyFrame:
            scan = scan.filter(where)
            return scan.select(columns) if columns else scan

        return concat_parts(self.per_part(key, query), query(pl.LazyFrame(schema=self.schema)))

    def read(self) -> pl.DataFrame:
        parts = self._produced()
        if len(parts) == 1 and isinstance(parts[0], pl.DataFrame):
            return parts[0]
        return self.scan().collect()

    def is_empty(self) -> bool:
        return self.height == 0


def concat_parts(results: list[pl.DataFrame], empty: pl.LazyFrame) -> pl.DataFrame:
    """Per-part results as one frame (`empty`: the query on no rows, for its schema when no part had any)."""
    results = [r for r in results if r.height]
    if not results:
        return empty.collect()
    return results[0] if len(results) == 1 else pl.concat(results, how="vertical")


def _dropped(parts: list[Part]) -> None:
    release_scratch([p.path if isinstance(p, FileRows) else p for p in parts if isinstance(p, (Path, FileRows))])


def _counted(part: Path | FileRows) -> int:
    """The rows of a file part (its writer knows them: read only for one it was not told of)."""
    return part.rows if isinstance(part, FileRows) else int(pl.scan_parquet(part).select(pl.len()).collect().item())


def paths_in_use() -> set[str]:
    """The files the stored tables alive in this process read."""
    return {os.fspath(path) for table in list(_live) for path in table.paths}


class PartWriter:
    """Writes frames with the same columns as numbered Parquet files in one folder, in order; a
    table of at most `memory_rows` rows stays in memory instead (unless persisted).

    Files rather than row groups of one file: polars writes a frame several times faster than
    pyarrow's incremental writer does, and a scan reads a list of files as one table."""

    ROW_GROUP_ROWS = 65_536
    HEADER = "entry.json"

    def __init__(
        self,
        folder: Path | None,
        schema: dict[str, pl.DataType],
        memory_rows: int = 0,
        on_failure: Callable[[BaseException], Path | None] | None = None,
        describe: Callable[[pl.DataFrame], Facts] | None = None,
    ) -> None:
        # No folder (nowhere to write): every row stays in memory.
        self.folder = folder
        # Told when a write fails (a full disk); returns a folder to go on writing in, or None (the
        # rows stay in memory). By default the scratch folder is given up (keep_in_memory).
        self.on_failure = on_failure or keep_in_memory
        self.schema = schema
        self.memory_rows = memory_rows
        self.height = 0
        self.parts: list[Path | FileRows | pl.DataFrame] = []
        self._held: list[pl.DataFrame] = []
        # Each file part's facts: its rows, and what `describe` says of its rows (StoredTable.facts).
        self.describe = describe
        self.facts: dict[Path | FileRows, Facts] = {}
        self._linked: dict[str, Path] = {}  # another table's files linked in, by their path there

    def write(self, frame: pl.DataFrame) -> None:
        if frame.height == 0:
            return
        self.height += frame.height
        self._held.append(frame)
        if self.height > self.memory_rows:
            self.persist()

    @property
    def on_disk(self) -> bool:
        """Every row is in the folder's files (what a cache entry needs)."""
        return self.folder is not None and not self._held and all(isinstance(p, (Path, FileRows)) for p in self.parts)

    def persist(self) -> None:
        """Every row on disk from now on (in memory instead if the disk refuses them)."""
        self.memory_rows = -1
        if self.folder is None:
            return
        while self._held:
            part = self.folder / f"part-{len(self.parts):05d}.parquet"
            try:
                self._held[0].write_parquet(
                    part, compression="lz4", row_group_size=self.ROW_GROUP_ROWS, statistics=True
                )
            except Exception as exc:  # noqa: BLE001 - a full disk is a polars ComputeError too
                with contextlib.suppress(OSError):
                    part.unlink()
                refused, self.folder = self.folder, self.on_failure(exc)
                release_scratch([refused])  # a temporary folder left empty goes now
                if self.folder is None:
                    self.memory_rows = 1 << 62
                    return
                continue
            self.parts.append(part)
            self.facts[part] = self._facts(self._held.pop(0))

    def _facts(self, frame: pl.DataFrame) -> Facts:
        return {"rows": frame.height, **(self.describe(frame) if self.describe is not None else {})}

    def link(self, source: Path | FileRows, rows: int, facts: Facts | None = None) -> None:
        """Add the Parquet file `source` of `rows` rows (another table's part, left as it is), or the rows
        of one it names, as the next part: hard-linked into the folder (once however many slices of it
        are taken), else copied; read into memory with no folder to put it in. `facts`: what is known
        of those rows (StoredTable.facts), when known."""
        self.persist()
        path = source.path if isinstance(source, FileRows) else source
        if self.folder is not None:
            linked = self._linked.get(os.fspath(path))
            if linked is None:
                linked = self.folder / f"part-{len(self.parts):05d}.parquet"
                try:
                    os.link(path, linked)
                except OSError:
                    with contextlib.suppress(OSError):
                        linked.unlink()
                    linked = None
                else:
                    self._linked[os.fspath(path)] = linked
            if linked is not None:
                part = FileRows(linked, source.start, source.rows) if isinstance(source, FileRows) else linked
                # What was computed of those rows comes along (part_memo: a grown trace's analysis reads
                # only its new parts).
                link_results(path, linked, f"{source.start}-{source.rows}" if isinstance(source, FileRows) else "all")
                self.parts.append(part)
                self.height += rows
                self.facts[part] = facts if facts is not None else {"rows": rows}
                return
        self.write(source.scan().collect() if isinstance(source, FileRows) else pl.read_parquet(path))

    def close(self, header: bytes | None = None) -> bool:
        """Finish the folder (with `header`, the cache's record of what it holds, written last);
        False when the rows could not all be written."""
        if header is None:
            return self.on_disk
        folder = self.folder
        self.persist()
        if not self.on_disk or self.folder is None or self.folder != folder:
            return False  # (a folder the writer moved to when the disk refused rows is no entry)
        try:
            (self.folder / self.HEADER).write_bytes(header)
        except OSError as exc:
            self.on_failure(exc)
            return False
        return True

    def moved(self, folder: Path) -> None:
        def there(part):
            if isinstance(part, FileRows):
                return FileRows(folder / part.path.name, part.start, part.rows)
            return folder / part.name if isinstance(part, Path) else part

        self.facts = {there(part): facts for part, facts in self.facts.items()}
        self.parts = [there(p) for p in self.parts]
        self.folder = folder

    def cut(self, part: Path, slices: list[tuple[int, int, Facts]]) -> None:
        """Name the file part `part` as consecutive slices of its rows instead: (start, rows, facts) each,
        covering its rows in order (no row is written: span_settle.py)."""
        at = self.parts.index(part)
        pieces = [FileRows(part, start, rows) for start, rows, _ in slices]
        self.parts[at : at + 1] = pieces
        self.facts.pop(part, None)
        for piece, (_, _, facts) in zip(pieces, slices, strict=True):
            self.facts[piece] = facts

    def listing(self) -> list[Facts]:
        """The file parts in order as JSON values (a cache entry's header): each file's name and size,
        its slice when it is one (`start`), and its facts."""
        listed = []
        for part in self.parts:
            if isinstance(part, (Path, FileRows)):
                path = part.path if isinstance(part, FileRows) else part
                facts = self.facts.get(part) or {"rows": _counted(part)}
                item = {"file": path.name, "bytes": path.stat().st_size, "facts": facts}
                listed.append({**item, "start": part.start} if isinstance(part, FileRows) else item)
        return listed

    def stored(self) -> StoredTable:
        held = [pl.concat(self._held, how="vertical")] if self._held else []
        table = StoredTable([*self.parts, *held], self.height, self.schema, self.facts)
        if self.folder is not None:
            release_scratch([self.folder])  # a temporary folder no row was written to goes now
        return table

    def abandon(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        release_scratch()
