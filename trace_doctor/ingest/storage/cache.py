"""Content-keyed cache of parsed tables, so re-analysing an unchanged large run is near-instant.

Entries live outside the run directory (run directories may be read-only or under version
control): `$TRACE_DOCTOR_CACHE_DIR`, else `$XDG_CACHE_HOME/trace-doctor`, else
`~/.cache/trace-doctor`; one file per input path and table. `TRACE_DOCTOR_CACHE=off` disables it.

An entry answers only for the exact bytes it was parsed from:
- the file is hashed whole before it is parsed (xxh3 at several GB/s: ~0.06 s for a 156 MB trace
  that takes ~1.6 s to parse), and the table is stored only if the file is still the same
  afterwards (same hash, and the same inode, size, mtime and ctime: any write in between changes
  the ctime). A trace still being written (the main use: a run that is still going) grows while it
  is parsed, so that parse is not stored and the next analysis reads the longer file;
  A resumed read of a grown file (trace/trace_resume.py) hashes it once: the pass that hashes the
  whole also hashes the bytes before and after where the stored state stopped (Mark), and the check
  afterwards hashes only the bytes the read read (the rest of its table answers for the first hash);
- every lookup hashes the file again, so an edit that keeps the size and the mtime is a miss;
- whatever is in the cache folder (a truncated entry, another version's, garbage) is a miss, never
  a crash, and an entry is one file renamed into place, so concurrent writers cannot mix two.
A stored table's entry (a `.parts` folder) also holds what queries read of its parts (storage/part_memo.py:
Arrow IPC files beside each part, counted in its size and evicted with it); a resumed entry links them with
the parts it keeps. The folder is kept under `TRACE_DOCTOR_CACHE_MAX_MB` (default 1024 MB, ~70 entries of a
million-event trace), least recently used entries evicted first. A folder that cannot be written
turns the cache off for the process with one note. Small files are never cached: parsing them is
cheaper than the bookkeeping.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import xxhash

from trace_doctor.ingest.storage import digest_memo, package_digest, stored_table
from trace_doctor.ingest.storage.stored_table import (
    Facts,
    FileRows,
    PartWriter,
    StoredTable,
    paths_in_use,
    scratch_folder,
)
from trace_doctor.model import IngestWarning, InputFile

MIN_CACHED_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_MB = 1024
FORMAT_VERSION = "2"
# A table entry: one JSON line of metadata, then the table as Parquet. The result cache
# (trace_doctor/result_cache.py) keeps its `.json` entries in the same folder, under the same cap.
ENTRY = re.compile(r"[a-z_]+-[0-9a-f]{32}\.(?:parquet|json)")
# A stored table's entry: a folder of Parquet parts and the header (stored_table.PartWriter).
STORED_ENTRY = re.compile(r"[a-z_]+-[0-9a-f]{32}\.parts")
# Where a read of a file stopped, so a read of the grown file goes on from there (storage/resume_entry.py).
RESUME_ENTRY = re.compile(r"[a-z_]+-[0-9a-f]{32}\.resume")
PART_FILE = re.compile(r"part-[0-9]{5,}\.parquet")
MAX_META_BYTES = 64 * 1024 * 1024  # the warnings of a badly damaged file can be many
HASH_BLOCK = 8 * 1024 * 1024
# A temporary file this old is a writer's leftover (a killed process), not a write in progress.
STALE_TEMP_SECONDS = 3600
# Previous formats: one folder per entry, named by 24 hex digits, with a meta.json; the result
# cache's pickles (never read: a pickle can name code to run).
LEGACY_ENTRY = re.compile(r"[0-9a-f]{24}")
LEGACY_PICKLE = re.compile(r"analysis-[0-9a-f]{32}\.pickle")

_notes: list[str] = []
_unwritable: str | None = None  # why this process stopped writing entries
# A stored table is read lazily, maybe by another process that found the entry a moment ago: an
# entry used this recently is never evicted (nor one a table of this process reads).
RECENT_USE_SECONDS = 120


def enabled() -> bool:
    """False when the user turned the cache off with TRACE_DOCTOR_CACHE=off/0/no/false."""
    return os.environ.get("TRACE_DOCTOR_CACHE", "on").strip().lower() not in {"off", "0", "no", "false"}


def cache_root() -> Path:
    """Where cache entries are kept."""
    explicit = os.environ.get("TRACE_DOCTOR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trace-doctor"


def max_bytes() -> int:
    """The folder's size cap: TRACE_DOCTOR_CACHE_MAX_MB, or the default when unset or not a number."""
    raw = os.environ.get("TRACE_DOCTOR_CACHE_MAX_MB", "").strip()
    try:
        megabytes = float(raw) if raw else DEFAULT_MAX_MB
    except ValueError:
        _note_once(f"TRACE_DOCTOR_CACHE_MAX_MB={raw!r} is not a number of MB; using {DEFAULT_MAX_MB}")
        megabytes = DEFAULT_MAX_MB
    return max(0, int(megabytes * 1024 * 1024))


def take_notes() -> list[str]:
    """Notes for the user about the cache and the disk (e.g. a folder that cannot be written), each
    given once."""
    notes = list(_notes) + list(stored_table.notes)
    _notes.clear()
    stored_table.notes.clear()
    return notes


def _note_once(text: str) -> None:
    if text not in _notes:
        _notes.append(text)


@dataclass(frozen=True)
class Snapshot:
    """A file as it was looked at: its length and xxh3-128 hash, and the stat fields any write changes."""

    size: int
    digest: str
    stamp: tuple[int, int, int, int]  # device, inode, mtime_ns, ctime_ns
    # Taken in the same pass when asked (snapshot's `mark`): the hashes of the bytes before and from it.
    mark: Mark | None = None


@dataclass(frozen=True)
class Mark:
    """A file's bytes hashed in two pieces, before `offset` and from it (xxh3-128, as the whole): a read
    that goes on from `offset` checks the first against a stored state and, once done, that the bytes it
    read are still the second (only they: the rest of its table answers for the first's hash)."""

    offset: int
    before: str
    after: str


def _stamp(stat: os.stat_result) -> tuple[int, int, int, int]:
    return (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns)


def snapshot(path: Path, *, min_bytes: int | None = None, mark: int | None = None) -> Snapshot | None:
    """The file's content now, when its table may be cached (None: cache off, file smaller than
    `min_bytes` (default MIN_CACHED_BYTES) or unreadable, or written to while it was being hashed).
    `mark`: an offset where a read may go on from; when the file is hashed (its hash not remembered),
    the snapshot's Mark hashes the bytes before and after it in the same pass."""
    if not enabled():
        return None
    try:
        before = path.stat()
        if before.st_size < (MIN_CACHED_BYTES if min_bytes is None else min_bytes):
            return None
        remembered = digest_memo.recall(cache_root(), before)
        if remembered is not None:
            return Snapshot(before.st_size, remembered, _stamp(before))
        split = mark if mark is not None and 0 < mark < before.st_size else None
        if split is None:
            digest = file_digest(path, before.st_size)
            hashed = None if digest is None else (digest, None)
        else:
            hashed = _file_digests(path, before.st_size, split)
        after = path.stat()
    except OSError:
        return None
    if hashed is None or _stamp(after) != _stamp(before) or after.st_size != before.st_size:
        return None
    digest, marked = hashed
    digest_memo.remember(cache_root(), before, digest)
    return Snapshot(before.st_size, digest, _stamp(before), marked)


def _unchanged_since(path: Path, taken: Snapshot, read_from: int = 0) -> bool:
    """True when the file is still exactly what `taken` saw (so a parse in between read those bytes).
    `read_from`: the parse read only the bytes from there (it went on from a state of the bytes before,
    which `taken.mark` hashed): only they are hashed again."""
    try:
        stat = path.stat()
        if _stamp(stat) != taken.stamp or stat.st_size != taken.size:
            return False
        if read_from and taken.mark is not None and taken.mark.offset == read_from:
            return _range_digest(path, read_from, taken.size) == taken.mark.after
        return file_digest(path, taken.size) == taken.digest
    except OSError:
        return False


def file_digest(path: Path, expected_size: int) -> str | None:
    """xxh3-128 of the whole file, or None when it is not `expected_size` bytes long."""
    hashed = _file_digests(path, expected_size, None)
    return None if hashed is None else hashed[0]


def _file_digests(path: Path, expected_size: int, mark: int | None) -> tuple[str, Mark | None] | None:
    """xxh3-128 of the whole file, and with `mark` the Mark of its bytes before and from that offset,
    in one pass; None when the file is not `expected_size` bytes long."""
    digest = xxhash.xxh3_128()
    after = xxhash.xxh3_128() if mark is not None else None
    marked = None
    size = 0
    block = bytearray(HASH_BLOCK)  # one buffer, filled again and again: no copy per read
    view = memoryview(block)
    with open(path, "rb", buffering=0) as fh:
        while count := fh.readinto(block):
            if size > expected_size - count:
                return None
            if mark is not None and after is not None:
                cut = min(max(mark - size, 0), count)
                digest.update(view[:cut])
                if marked is None and size + cut == mark:
                    marked = digest.hexdigest()
                digest.update(view[cut:count])
                after.update(view[cut:count])
            else:
                digest.update(view[:count])
            size += count
    if size != expected_size:
        return None
    return digest.hexdigest(), (Mark(mark, marked, after.hexdigest()) if after is not None and marked else None)


def _range_digest(path: Path, start: int, end: int) -> str | None:
    """xxh3-128 of the file's bytes [start, end), or None when it is shorter."""
    hashed = range_hash(path, start, end)
    return None if hashed is None else hashed.hexdigest()


def range_hash(path: Path, start: int, end: int) -> xxhash.xxh3_128 | None:
    """The xxh3-128 state after the file's bytes [start, end), to go on hashing what follows; None when
    the file is shorter (raises OSError when it cannot be read)."""
    digest = xxhash.xxh3_128()
    block = bytearray(HASH_BLOCK)
    view = memoryview(block)
    left = end - start
    with open(path, "rb", buffering=0) as fh:
        fh.seek(start)
        while left and (count := fh.readinto(view[: min(left, len(block))])):
            digest.update(view[:count])
            left -= count
    return digest if left == 0 else None


def storage_refused() -> bool:
    """True once a write to the cache folder failed in this process (no entry is written since)."""
    return _unwritable is not None


def parser_fingerprint() -> str:
    """What an entry's reader code was: an entry made by other code is a miss."""
    return _parser_fingerprint()


@cache
def _parser_fingerprint() -> str:
    # Every module of the package, not a list of the parsers': a code change anywhere a table could
    # come from (a new parser, a helper one starts to import) invalidates every entry.
    return hashlib.sha256(f"{FORMAT_VERSION}\0{package_digest.source_digest()}".encode()).hexdigest()


def _entry_path(path: Path, table: str) -> Path:
    # The path as given is part of the key: the cached input record and warnings name the file
    # that way, and a file named two ways (relative, absolute) must not answer with the other name.
    identity = f"{os.fspath(path.resolve())}\0{os.fspath(path)}\0{table}"
    name = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return cache_root() / f"{table}-{name}.parquet"


def load(
    path: Path, table: str, taken: Snapshot | None = None
) -> tuple[pl.DataFrame, InputFile, list[IngestWarning]] | None:
    """The cached table, input record and warnings for `path`, if its content (`taken`, or as it is
    now) is the one the entry was parsed from."""
    taken = taken or snapshot(path)
    if taken is None:
        return None
    entry = _entry_path(path, table)
    try:
        with open(entry, "rb") as fh:
            meta = json.loads(fh.readline(MAX_META_BYTES))
            if not _matches(meta, path, table, taken):
                return None
            info = InputFile(**_input_fields(meta["input"]))
            warnings = [_warning(w) for w in meta["warnings"]]
            frame = pl.read_parquet(io.BytesIO(fh.read()))
    except Exception:  # noqa: BLE001 - anything wrong with an entry is a miss
        return None
    touch(entry)
    return frame, info, warnings


def _matches(meta: Any, path: Path, table: str, taken: Snapshot) -> bool:
    return (
        isinstance(meta, dict)
        and meta.get("parser") == _parser_fingerprint()
        and meta.get("table") == table
        and meta.get("path") == os.fsencode(path).hex()
        and meta.get("size") == taken.size
        and meta.get("digest") == taken.digest
        and isinstance(meta.get("warnings"), list)
    )


def _input_fields(raw: Any) -> dict[str, Any]:
    fields = {
        "kind": str,
        "path": str,
        "records": int,
        "skipped": int,
        "note": (str, type(None)),
    }
    if not isinstance(raw, dict) or set(raw) != set(fields):
        raise ValueError("malformed input record")
    for key, kind in fields.items():
        if not isinstance(raw[key], kind) or isinstance(raw[key], bool):
            raise ValueError(f"malformed input record field {key}")
    return raw


def _warning(raw: Any) -> IngestWarning:
    if not (
        isinstance(raw, dict)
        and isinstance(raw.get("path"), str)
        and isinstance(raw.get("problem"), str)
        and (raw.get("line") is None or (isinstance(raw["line"], int) and not isinstance(raw["line"], bool)))
    ):
        raise ValueError("malformed warning")
    return IngestWarning(raw["path"], raw["line"], raw["problem"])


def store(
    path: Path,
    table: str,
    frame: pl.DataFrame,
    info: InputFile,
    warnings: list[IngestWarning],
    taken: Snapshot | None,
) -> bool:
    """Save the table parsed from `path` as `taken` saw it; False (nothing written) when the file has
    changed since (the parse may have read other bytes) or the entry cannot be written."""
    if taken is None or not enabled() or _unwritable is not None or not _unchanged_since(path, taken):
        return False
    meta = _header(path, table, info, warnings, taken)

    def write(out) -> None:
        out.write(json.dumps(meta, ensure_ascii=True).encode() + b"\n")
        frame.write_parquet(out, compression="lz4")

    return write_entry(_entry_path(path, table), write)


def write_entry(entry: Path, write) -> bool:
    """Write one entry of the cache folder with `write(binary file)`, whole or not at all, then keep the
    folder under its cap; False when nothing was written. A write that fails, whatever the error's
    class (a full disk reaches here as an OSError or as polars' ComputeError), turns the cache off for
    the process with one note: the next entry would fail the same way."""
    if not enabled() or _unwritable is not None:
        return False
    root = entry.parent
    temp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=entry.suffix)
        with os.fdopen(handle, "wb") as out:
            write(out)
        # Renamed into place whole: a concurrent reader sees the previous entry or this one.
        os.replace(temp, entry)
        temp = None
    except Exception as exc:  # noqa: BLE001 - any failed write turns the cache off, never the run
        storage_failed(exc, root)
        return False
    finally:
        _discard(temp)  # also on an interrupt: no partial entry is left behind
    evict(root, max_bytes(), keep=entry)
    return True


def storage_failed(exc: BaseException, root: Path | None = None) -> None:
    """The cache folder cannot take more (full, read-only, gone): no entry is written from now on,
    and the user is told once."""
    global _unwritable
    if _unwritable is None:
        _unwritable = f"{root or cache_root()}: {stored_table.why_write_failed(exc)}"
    _note_once(
        f"table cache disabled: cannot write to {_unwritable} "
        "(set TRACE_DOCTOR_CACHE_DIR to a writable folder with free space, or TRACE_DOCTOR_CACHE=off)"
    )


def _header(path: Path, table: str, info: InputFile, warnings: list[IngestWarning], taken: Snapshot) -> dict[str, Any]:
    return {
        "parser": _parser_fingerprint(),
        "table": table,
        "path": os.fsencode(path).hex(),
        "size": taken.size,
        "digest": taken.digest,
        "input": {
            "kind": info.kind,
            "path": info.path,
            "records": info.records,
            "skipped": info.skipped,
            "note": info.note,
        },
        "warnings": [w.to_dict() for w in warnings],
    }


def new_entry_writer(
    table: str,
    schema: dict[str, pl.DataType],
    memory_rows: int,
    describe: Callable[[pl.DataFrame], Facts] | None = None,
) -> PartWriter:
    """A writer of the stored table `table` as it is built: in the cache folder (so that it becomes the
    entry by a rename), else in this process's scratch folder. A cache folder that fills up midway
    turns the cache off and the writer goes on in the scratch folder. `describe`: the facts kept of
    each part besides its rows (PartWriter)."""

    writer = PartWriter(_new_entry_folder(table), schema, memory_rows, describe=describe)

    def cache_full(exc: BaseException) -> Path | None:
        storage_failed(exc)
        writer.on_failure = stored_table.keep_in_memory  # a second failure is the scratch disk's: no retry
        return scratch_folder(f"{table}-")

    writer.on_failure = cache_full
    return writer


def _new_entry_folder(table: str) -> Path | None:
    if enabled() and _unwritable is None:
        root = cache_root()
        try:
            root.mkdir(parents=True, exist_ok=True)
            folder = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
        except OSError as exc:
            storage_failed(exc, root)
        else:
            # Renamed into an entry when the table is done; still here at exit (an error, an
            # interrupt, a lost race), it goes.
            atexit.register(shutil.rmtree, os.fspath(folder), True)
            return folder
    return scratch_folder(f"{table}-")


def adopt(
    path: Path,
    table: str,
    out: PartWriter,
    info: InputFile,
    warnings: list[IngestWarning],
    taken: Snapshot | None,
    read_from: int = 0,
    *,
    settle: Callable[[PartWriter], None] | None = None,
) -> StoredTable:
    """Finish the stored table `out` built from `path` as `taken` saw it: it becomes the cache entry
    when the file is unchanged since and the cache takes it, else it stays a folder of this process.
    `read_from`: the table was built reading only the bytes from there (_unchanged_since).
    `settle`: called with `out` once its rows are all on disk, before an entry lists its parts (how the
    parts are cut: span_settle.py)."""
    cacheable = (
        taken is not None
        and enabled()
        and _unwritable is None
        and out.folder is not None
        and out.folder.parent == cache_root()
        and _unchanged_since(path, taken, read_from)
    )
    if cacheable and taken is not None:
        out.persist()
        if settle is not None and out.on_disk:
            settle(out)
        listed = {"parts": out.listing()}
        header = json.dumps({**_header(path, table, info, warnings, taken), **listed}, ensure_ascii=True).encode()
        cacheable = out.close(header)  # False: the disk refused some rows, kept in memory
        # Writing the last rows may have filled the cache's disk: the writer went on elsewhere.
        cacheable = cacheable and _unwritable is None and out.folder is not None and out.folder.parent == cache_root()
    if not cacheable or taken is None or out.folder is None:
        out.close()  # this process's copy only: its folder goes at exit (_new_entry_folder)
        return out.stored()
    entry = _stored_entry_path(path, table, taken)
    try:
        # Entries never change once in place (another process may be reading one): the same
        # content parsed by someone else meanwhile stays, and this copy goes when the process ends.
        os.rename(out.folder, entry)
    except OSError:
        return out.stored()  # its folder goes at exit (_new_entry_folder)
    out.moved(entry)
    evict(cache_root(), max_bytes(), keep=entry)
    return out.stored()


def adopted(out: PartWriter) -> bool:
    """True when `adopt` made the table `out` wrote a cache entry."""
    return (
        out.folder is not None
        and out.folder.parent == cache_root()
        and STORED_ENTRY.fullmatch(out.folder.name) is not None
    )


def _stored_entry_path(path: Path, table: str, taken: Snapshot) -> Path:
    """A stored table's entry is named by the file's content too: a new version of the file gets a
    new entry instead of replacing one that a reader may be scanning."""
    identity = f"{os.fspath(path.resolve())}\0{os.fspath(path)}\0{table}\0{taken.size}\0{taken.digest}"
    name = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return cache_root() / f"{table}-{name}.parts"


def load_stored(
    path: Path, table: str, taken: Snapshot | None = None
) -> tuple[StoredTable, InputFile, list[IngestWarning]] | None:
    """The stored table, input record and warnings cached for `path`, if its content (`taken`, or as
    it is now) is the one the entry was built from. The rows are not read."""
    from trace_doctor.ingest.trace.span_build import SPAN_COLUMNS

    taken = taken or snapshot(path)
    if taken is None:
        return None
    entry = _stored_entry_path(path, table, taken)
    try:
        meta = json.loads((entry / PartWriter.HEADER).read_bytes())
        if not _matches(meta, path, table, taken):
            return None
        info = InputFile(**_input_fields(meta["input"]))
        warnings = [_warning(w) for w in meta["warnings"]]
        parts, facts = _listed_parts(entry, meta["parts"])
    except Exception:  # noqa: BLE001 - anything wrong with an entry is a miss
        return None
    with contextlib.suppress(OSError):  # a read-only cache still answers
        os.utime(entry / PartWriter.HEADER)  # recently used: evicted last
    schema = {"spans": SPAN_COLUMNS}[table]
    return StoredTable(parts, sum(known["rows"] for known in facts.values()), schema, facts), info, warnings


def _listed_parts(entry: Path, listed: Any) -> tuple[list[Path | FileRows], dict[Path | FileRows, dict[str, Any]]]:
    """A stored entry's parts and their facts, as its header lists them (PartWriter.listing): the rows
    are counted there, not by reading every part (raises on a malformed listing or a missing file)."""
    parts: list[Path | FileRows] = []
    facts: dict[Path | FileRows, dict[str, Any]] = {}
    for item in listed:
        name, known = item["file"], item["facts"]
        rows, start = known["rows"], item.get("start")
        if not (isinstance(name, str) and PART_FILE.fullmatch(name) and _parquet_file(entry / name, item["bytes"])):
            raise ValueError("malformed part")
        if not (_count(rows) and (start is None or _count(start))):
            raise ValueError("malformed part rows")
        part = entry / name if start is None else FileRows(entry / name, start, rows)
        parts.append(part)
        facts.setdefault(part, known)
    return parts, facts


def _parquet_file(path: Path, size: Any) -> bool:
    """The part is a whole Parquet file of the size listed: its magic at both ends, nothing cut or
    replaced (its rows are read only when the table is; a part not read at all costs a stat and 8 bytes)."""
    if not _count(size) or size < 12 or path.stat().st_size != size:
        return False
    with open(path, "rb") as fh:
        head = fh.read(4)
        fh.seek(size - 4)
        return head == b"PAR1" and fh.read(4) == b"PAR1"


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _folder_entry(folder: str) -> tuple[float, int, str]:
    """(last use, bytes, path) of a stored table's folder: its header is touched when used."""
    size = sum(part.stat().st_size for part in os.scandir(folder) if part.is_file(follow_symlinks=False))
    return os.stat(os.path.join(folder, PartWriter.HEADER)).st_mtime, size, folder


def _is_state(entry: str) -> bool:
    return RESUME_ENTRY.fullmatch(os.path.basename(entry)) is not None


def touch(entry: Path) -> None:
    """Mark an entry recently used, so eviction takes it last (a read-only cache still answers)."""
    with contextlib.suppress(OSError):
        os.utime(entry)


def _discard(temp: str | None) -> None:
    if temp is not None:
        with contextlib.suppress(OSError):
            os.unlink(temp)


def _temporary_item(item: os.DirEntry, now: float) -> int:
    """A `.tmp-` file or folder of the cache folder: removed when stale (a killed writer's, or a
    table of a process that died), else the bytes it holds (a write in progress, or the table of a
    process that lost a race to write the same entry and still reads it)."""
    if item.is_dir(follow_symlinks=False):
        parts = [part for part in os.scandir(item.path) if part.is_file(follow_symlinks=False)]
        stats = [part.stat(follow_symlinks=False) for part in parts]
        newest = max([item.stat(follow_symlinks=False).st_mtime, *(st.st_mtime for st in stats)])
        if now - newest > STALE_TEMP_SECONDS:
            shutil.rmtree(item.path, ignore_errors=True)
            return 0
        return sum(st.st_size for st in stats)
    stat = item.stat(follow_symlinks=False)
    if now - stat.st_mtime > STALE_TEMP_SECONDS:
        os.unlink(item.path)
        return 0
    return stat.st_size


def evict(root: Path, limit: int, *, keep: Path | None = None) -> None:
    """Delete the least recently used entries until the folder's entries total at most `limit` bytes.

    Only trace-doctor's own files are touched (the folder may be one the user shares): entries,
    temporary files left by a killed writer, and the previous format's entry folders. Temporary files
    still being written count against the limit: older entries make room for them.
    """
    entries: list[tuple[float, int, str]] = []
    in_progress = 0  # bytes of writes in progress: not evictable, but they count against the cap
    now = time.time()
    try:
        listing = list(os.scandir(root))
    except OSError:
        return
    for item in listing:
        try:
            if ENTRY.fullmatch(item.name) and item.is_file(follow_symlinks=False):
                stat = item.stat(follow_symlinks=False)
                entries.append((stat.st_mtime, stat.st_size, item.path))
            elif (STORED_ENTRY.fullmatch(item.name) or RESUME_ENTRY.fullmatch(item.name)) and item.is_dir(
                follow_symlinks=False
            ):
                entries.append(_folder_entry(item.path))
            elif item.name.startswith(".tmp-"):
                in_progress += _temporary_item(item, now)
            elif LEGACY_ENTRY.fullmatch(item.name) and os.path.isfile(os.path.join(item.path, "meta.json")):
                shutil.rmtree(item.path, ignore_errors=True)
            elif LEGACY_PICKLE.fullmatch(item.name) and item.is_file(follow_symlinks=False):
                os.unlink(item.path)
        except OSError:
            continue  # removed by another process meanwhile
    total = in_progress + sum(size for _, size, _ in entries)
    keep_path = os.fspath(keep) if keep is not None else None
    used = {os.path.dirname(p) for p in paths_in_use()}
    # A resume state is read whole at once (a reader that loses it misses), so any may go; they go
    # first: each is worth something only next to its table's entry.
    entries = [
        e
        for e in entries
        if e[2] == keep_path or _is_state(e[2]) or (e[2] not in used and now - e[0] > RECENT_USE_SECONDS)
    ]
    # Oldest first; the entry just written goes last, and only if it alone is over the limit.
    for _, size, entry in sorted(entries, key=lambda e: (e[2] == keep_path, not _is_state(e[2]), e[0])):
        if total <= limit:
            break
        try:
            if os.path.isdir(entry):
                shutil.rmtree(entry)
            else:
                os.unlink(entry)
        except OSError:
            continue
        total -= size
