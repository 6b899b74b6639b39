"""Where a parse left off, kept in the table cache's folder, so a file that grew is read from there.

A large streamed file is mostly read again unchanged: a run still being written is analysed again
with a megabyte more. A reader that can go on from a byte offset stores its state there (ingest/trace/
span_resume.py) with the offset and the xxh3-128 of the bytes before it; a later analysis that
finds the file longer and its first `offset` bytes the same reads only the rest.

An entry is data only: one folder per input path and table (`<table>-<32 hex>.resume`, under the
folder's size cap and eviction as the stored tables' folders are), holding `entry.json` (what the
entry answers for and the reader's state as plain JSON values) and Arrow IPC files of the state's
tables. It is keyed by the path alone (the content is what changed), replaced whole by a rename, and
anything wrong with it (another version's, garbage, a table that does not read) is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import xxhash

from trace_doctor.ingest.storage import cache

HEADER = "entry.json"
FRAME_NAMES = frozenset({"open", "held", "covers"})
MAX_HEADER_BYTES = 64 * 1024 * 1024  # the listed warnings of a damaged file can be many


def entry_path(path: Path, table: str) -> Path:
    identity = f"{os.fspath(path.resolve())}\0{os.fspath(path)}\0{table}\0resume"
    name = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return cache.cache_root() / f"{table}-{name}.resume"


def prefix_digest(path: Path, length: int) -> str | None:
    """xxh3-128 of the file's first `length` bytes (the cache's file hash, of a prefix); None when shorter."""
    hashed = prefix_hash(path, length)
    return None if hashed is None else hashed.hexdigest()


def prefix_hash(path: Path, length: int) -> xxhash.xxh3_128 | None:
    """The xxh3-128 state after the file's first `length` bytes, to go on hashing what follows; None when
    the file is shorter or cannot be read."""
    try:
        return cache.range_hash(path, 0, length)
    except OSError:
        return None


def save(
    path: Path, table: str, offset: int, digest: str, state: dict[str, Any], frames: dict[str, pl.DataFrame]
) -> bool:
    """Store the state of a read of `path` that stopped at byte `offset` (the bytes before it hash to
    `digest`); False when nothing was stored (cache off or unwritable)."""
    if not cache.enabled() or cache.storage_refused():
        return False
    root = cache.cache_root()
    folder = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
        for name, frame in frames.items():
            frame.write_ipc(folder / f"{name}.arrow", compression="lz4")
        header = {
            "parser": cache.parser_fingerprint(),
            "table": table,
            "path": os.fsencode(path).hex(),
            "offset": offset,
            "digest": digest,
            "frames": sorted(frames),
            "state": state,
        }
        (folder / HEADER).write_text(json.dumps(header, ensure_ascii=True))
        entry = entry_path(path, table)
        _replace(folder, entry)
        folder = None
    except Exception as exc:  # noqa: BLE001 - a failed write turns the cache off, never the run
        cache.storage_failed(exc, root)
        return False
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    cache.evict(root, cache.max_bytes(), keep=entry)
    return True


def _replace(folder: Path, entry: Path) -> None:
    """Put `folder` in place of `entry`: a folder cannot be renamed over a full one, so the old entry is
    renamed away first (a reader that had it open misses)."""
    old = None
    if entry.exists():
        old = Path(tempfile.mkdtemp(dir=entry.parent, prefix=".tmp-"))
        os.replace(entry, old / "old")
    os.rename(folder, entry)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def stored_offset(path: Path, table: str) -> int | None:
    """Where the read whose state is stored for `path` stopped (its header only, unchecked: the hash
    pass of the file then hashes the bytes before it too, cache.snapshot's `mark`), or None."""
    if not cache.enabled():
        return None
    try:
        with open(entry_path(path, table) / HEADER, "rb") as fh:
            offset = json.loads(fh.read(MAX_HEADER_BYTES)).get("offset")
    except Exception:  # noqa: BLE001 - anything wrong with an entry is a miss
        return None
    return offset if isinstance(offset, int) and not isinstance(offset, bool) else None


def load(path: Path, table: str) -> tuple[int, str, dict[str, Any], dict[str, pl.DataFrame]] | None:
    """(offset, digest of the bytes before it, state, frames) stored for `path`, or None."""
    if not cache.enabled():
        return None
    entry = entry_path(path, table)
    try:
        with open(entry / HEADER, "rb") as fh:
            header = json.loads(fh.read(MAX_HEADER_BYTES))
        if not (
            isinstance(header, dict)
            and header.get("parser") == cache.parser_fingerprint()
            and header.get("table") == table
            and header.get("path") == os.fsencode(path).hex()
            and isinstance(header.get("offset"), int)
            and not isinstance(header.get("offset"), bool)
            and isinstance(header.get("digest"), str)
            and isinstance(header.get("state"), dict)
            and isinstance(header.get("frames"), list)
            and set(header["frames"]) <= FRAME_NAMES
        ):
            return None
        # Read whole from bytes: the entry may be replaced while the state is in use.
        frames = {name: pl.read_ipc((entry / f"{name}.arrow").read_bytes()) for name in header["frames"]}
    except Exception:  # noqa: BLE001 - anything wrong with an entry is a miss
        return None
    with contextlib.suppress(OSError):
        os.utime(entry / HEADER)  # recently used: evicted last
    return header["offset"], header["digest"], header["state"], frames


def discard(path: Path, table: str) -> None:
    """Remove the state stored for `path` (it no longer answers for the file)."""
    with contextlib.suppress(OSError):
        shutil.rmtree(entry_path(path, table))
