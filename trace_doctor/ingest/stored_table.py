"""A table kept on disk as Parquet and read lazily: the spans of a large trace, or its step spans.

A trace of millions of events makes a spans table larger than everything else the analysis holds
together; kept in memory it sets the peak, and the peak grows with the run's length. Stored, the
table costs nothing until read, and each reader scans only the columns and rows it needs
(`scan().filter(...).select(...)`), so what is held at once is that reader's slice.

The files live in the table cache (they are its entries) or, with the cache off or unwritable, in
a scratch folder of this process that is removed when it exits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import weakref
from pathlib import Path

import polars as pl

# A table of up to this many rows is kept in memory rather than on disk (~60 MB of spans): writing
# it and scanning it back would cost more time than its memory is worth.
MEMORY_ROWS = 500_000

_scratch: Path | None = None
# Every stored table alive in this process: the cache never evicts a file one of them still reads.
_live: weakref.WeakSet[StoredTable] = weakref.WeakSet()


def scratch_dir() -> Path:
    """This process's folder for stored tables that are not cache entries (removed at exit)."""
    global _scratch
    if _scratch is None or not _scratch.is_dir():
        _scratch = Path(tempfile.mkdtemp(prefix="trace-doctor-"))
        atexit.register(shutil.rmtree, _scratch, True)
    return _scratch


def scratch_file(prefix: str) -> Path:
    """A new, unused file name in the scratch folder."""
    handle, name = tempfile.mkstemp(dir=scratch_dir(), prefix=prefix, suffix=".parquet")
    os.close(handle)
    return Path(name)


def scratch_folder(prefix: str) -> Path:
    """A new, empty folder in the scratch folder."""
    return Path(tempfile.mkdtemp(dir=scratch_dir(), prefix=prefix))


class StoredTable:
    """Rows kept in Parquet files, in frames held in memory (a small table), or both, in order."""

    def __init__(self, parts: list[Path | pl.DataFrame], height: int, schema: dict[str, pl.DataType]) -> None:
        self.parts = list(parts)
        self.height = height
        self.schema = dict(schema)
        _live.add(self)

    @classmethod
    def of(cls, tables: list[StoredTable]) -> StoredTable:
        """Several stored tables (same columns) as one, in order."""
        schema = tables[0].schema if tables else {}
        return cls([p for t in tables for p in t.parts], sum(t.height for t in tables), schema)

    @property
    def paths(self) -> list[Path]:
        return [p for p in self.parts if isinstance(p, Path)]

    def scan(self) -> pl.LazyFrame:
        scans: list[pl.LazyFrame] = []
        files: list[Path] = []
        for part in self.parts:
            if isinstance(part, Path):
                files.append(part)
                continue
            if files:
                scans.append(pl.scan_parquet(files).cast(self.schema))
                files = []
            scans.append(part.lazy())
        if files:
            scans.append(pl.scan_parquet(files).cast(self.schema))
        if not scans:
            return pl.LazyFrame(schema=self.schema)
        return scans[0] if len(scans) == 1 else pl.concat(scans, how="vertical")

    def read(self) -> pl.DataFrame:
        if len(self.parts) == 1 and isinstance(self.parts[0], pl.DataFrame):
            return self.parts[0]
        return self.scan().collect()

    def is_empty(self) -> bool:
        return self.height == 0


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

    def __init__(self, folder: Path, schema: dict[str, pl.DataType], memory_rows: int = 0) -> None:
        self.folder = folder
        self.schema = schema
        self.memory_rows = memory_rows
        self.height = 0
        self.parts: list[Path] = []
        self._held: list[pl.DataFrame] = []

    def write(self, frame: pl.DataFrame) -> None:
        if frame.height == 0:
            return
        self.height += frame.height
        self._held.append(frame)
        if self.height > self.memory_rows:
            self.persist()

    def persist(self) -> None:
        """Every row on disk from now on."""
        self.memory_rows = -1
        for frame in self._held:
            part = self.folder / f"part-{len(self.parts):05d}.parquet"
            frame.write_parquet(part, compression="lz4", row_group_size=self.ROW_GROUP_ROWS, statistics=True)
            self.parts.append(part)
        self._held = []

    def close(self, header: bytes | None = None) -> None:
        """Finish the folder (with `header`, the cache's record of what it holds, written last)."""
        if header is not None:
            self.persist()
            (self.folder / self.HEADER).write_bytes(header)

    def moved(self, folder: Path) -> None:
        self.parts = [folder / p.name for p in self.parts]
        self.folder = folder

    def stored(self) -> StoredTable:
        held = [pl.concat(self._held, how="vertical")] if self._held else []
        return StoredTable([*self.parts, *held], self.height, self.schema)

    def abandon(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
