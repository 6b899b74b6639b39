"""Content-keyed cache of parsed tables, so re-analysing an unchanged large run is near-instant.

Entries live outside the run directory (run directories may be read-only or under version
control): `$TRACE_DOCTOR_CACHE_DIR`, else `$XDG_CACHE_HOME/trace-doctor`, else
`~/.cache/trace-doctor`, one folder per input path. An entry is valid only while the file's
size, mtime, first and last 64 KiB, and the parser's own source are unchanged. Set
`TRACE_DOCTOR_CACHE=off` to disable. Small files are never cached: parsing them is cheaper
than the bookkeeping. Any cache failure falls back to parsing; the cache never loses a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import polars as pl

from trace_doctor.model import IngestWarning, InputFile

MIN_CACHED_BYTES = 4 * 1024 * 1024
EDGE_BYTES = 64 * 1024
FORMAT_VERSION = "1"


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


def _parser_fingerprint() -> str:
    # The parsers' source text: a code change invalidates every entry without a version bump.
    digest = hashlib.sha256(FORMAT_VERSION.encode())
    here = Path(__file__).resolve().parent
    for name in (
        "trace_events.py",
        "trace_read.py",
        "trace_parse.py",
        "trace_layout.py",
        "bisected_read.py",
        "span_build.py",
        "span_pairing.py",
        "span_args.py",
        "span_steps.py",
        "jsonl.py",
        "cache.py",
    ):
        try:
            digest.update((here / name).read_bytes())
        except OSError:
            digest.update(name.encode())
    return digest.hexdigest()


def fingerprint(path: Path) -> str | None:
    """Key of the file's current content, or None when it is too small or unreadable."""
    try:
        stat = path.stat()
        if stat.st_size < MIN_CACHED_BYTES:
            return None
        with open(path, "rb") as fh:
            head = fh.read(EDGE_BYTES)
            fh.seek(max(0, stat.st_size - EDGE_BYTES))
            tail = fh.read(EDGE_BYTES)
    except OSError:
        return None
    digest = hashlib.sha256()
    for part in (str(path.resolve()), str(stat.st_size), str(stat.st_mtime_ns), _parser_fingerprint()):
        digest.update(part.encode())
        digest.update(b"\0")
    digest.update(head)
    digest.update(tail)
    return digest.hexdigest()


def _entry_dir(path: Path, table: str) -> Path:
    name = hashlib.sha256(f"{path.resolve()}\0{table}".encode()).hexdigest()[:24]
    return cache_root() / name


def load(path: Path, table: str) -> tuple[pl.DataFrame, InputFile, list[IngestWarning]] | None:
    """The cached table, input record and warnings for `path`, if its content is unchanged."""
    if not enabled():
        return None
    key = fingerprint(path)
    if key is None:
        return None
    entry = _entry_dir(path, table)
    try:
        meta = json.loads((entry / "meta.json").read_text())
        if meta.get("key") != key:
            return None
        frame = pl.read_parquet(entry / f"{table}.parquet")
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None
    info = InputFile(**meta["input"])
    warnings = [IngestWarning(w["path"], w["line"], w["problem"]) for w in meta["warnings"]]
    return frame, info, warnings


def store(path: Path, table: str, frame: pl.DataFrame, info: InputFile, warnings: list[IngestWarning]) -> bool:
    """Save a parsed table for `path`; False (and nothing written) when that is not possible."""
    if not enabled():
        return False
    key = fingerprint(path)
    if key is None:
        return False
    entry = _entry_dir(path, table)
    meta = {
        "key": key,
        "path": str(path.resolve()),
        "input": {
            "kind": info.kind,
            "path": info.path,
            "records": info.records,
            "skipped": info.skipped,
            "note": info.note,
        },
        "warnings": [w.to_dict() for w in warnings],
    }
    try:
        entry.mkdir(parents=True, exist_ok=True)
        # Write then rename: a concurrent reader sees the old entry or the new one, never half.
        with tempfile.NamedTemporaryFile(dir=entry, suffix=".parquet", delete=False) as tmp:
            frame.write_parquet(tmp.name, compression="lz4")
        os.replace(tmp.name, entry / f"{table}.parquet")
        with tempfile.NamedTemporaryFile("w", dir=entry, suffix=".json", delete=False) as tmp:
            json.dump(meta, tmp)
        os.replace(tmp.name, entry / "meta.json")
    except (OSError, pl.exceptions.PolarsError):
        return False
    return True
