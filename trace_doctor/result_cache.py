"""Cache of whole analyses, so re-analysing an unchanged run answers without reading its tables.

The table cache (ingest/storage/cache.py) spares the parse; this one spares the parse, the derivations and
the rules. An entry answers only when everything the analysis depends on is as it was:
- the inputs: the files discovery finds under the paths (and under the baseline's), named the same
  way, the same files passed over for the same reasons, each file with the same size and mtime and
  the same whole-content hash (the table cache's snapshot);
- the code: every file of the package (modules, templates, knowledge tables), the Python and the
  polars versions;
- the settings (rules selected and ignored, thresholds, gate) and the options that change the
  result: redaction, the baseline, how a fleet names the run.
Everything is looked at again after a fresh analysis, and the entry is stored only if nothing
changed meanwhile: a run still being written is analysed afresh every time.

An entry holds the Analysis without its tables (findings, outcomes, summary, verdict, gate, the
run's metadata, inputs and warnings) plus the two small tables the documents read (`steps`, and the
derived step times). A renderer that needs another table (the HTML report, the exports, the bundle,
the Parquet dataset) gets it on first use: the run is read again, through the table cache. The
text and JSON paths never read a table.

Entries live in the table cache's folder, under its size cap and eviction; small runs are not
cached (analysing them is about as quick as the bookkeeping). An entry is data, never code: a JSON
line naming the key it answers, checked before anything else is read, then the analysis as plain
data (trace_doctor/plain_data.py: result objects by a registered class name, tables as Arrow IPC).
Anything wrong with an entry (truncated, another version's, a key that is not the one looked up, a
class or form the codec does not know, garbage) is a miss, never a crash.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cache as once
from pathlib import Path
from typing import Any

from trace_doctor import plain_data
from trace_doctor.discover import discover
from trace_doctor.ingest.storage import cache
from trace_doctor.ingest.storage.package_digest import PACKAGE_ROOT, tree_digest
from trace_doctor.model import Analysis, RunTables
from trace_doctor.settings import Settings

FORMAT_VERSION = "2"
# Runs whose inputs total less than this are analysed afresh: it takes about as long as a lookup.
MIN_INPUT_BYTES = 4 * 1024 * 1024
# The libraries whose results the analysis is made of (parsing, statistics, version comparison); the
# renderers run afresh on every answer, so theirs (rich, jinja2, plotly) need not be in the key.
COMPUTING_LIBRARIES = ("polars", "pyarrow", "numpy", "scipy", "orjson", "packaging", "xxhash")
# What an entry keeps of the run's tables: the steps (the document counts them, SARIF points at
# their lines). Every other table is read again when a renderer asks for it.
KEPT_TABLES = ("steps",)


@dataclass(frozen=True)
class Request:
    """What an analysis is of and with what: the paths as named, the settings and the options."""

    paths: tuple[str | os.PathLike[str], ...]
    settings: Settings
    baseline: str | None = None
    redact: bool = False
    # How a fleet names the run in its document (the path shown, the files passed over), when it does.
    naming: tuple[Any, ...] = ()


def cached(request: Request, compute: Callable[[], Analysis], reload: Callable[[], RunTables]) -> Analysis:
    """The stored analysis of `request` when nothing it depends on changed, else `compute()`, stored.

    `reload()` reads the run's tables again; a stored analysis calls it on the first use of a table
    it does not keep.
    """
    taken = key(request)
    if taken is not None:
        stored = load(taken, reload)
        if stored is not None:
            return stored
    result = compute()
    if taken is not None and key(request) == taken:
        store(taken, result)
    return result


@once
def code_fingerprint() -> str:
    """The package's files, the interpreter's version and those of the libraries the analysis computes
    with: once per process (~10 ms)."""
    from importlib.metadata import PackageNotFoundError, version

    versions = [sys.version]
    for name in COMPUTING_LIBRARIES:
        try:
            versions.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            versions.append(f"{name} absent")
    return hashlib.sha256("\0".join([*versions, tree_digest(PACKAGE_ROOT)]).encode()).hexdigest()


def _discovered(paths: tuple[str | os.PathLike[str], ...]) -> tuple[list[tuple[str, Path]], list] | None:
    """(kind, file) for every input under `paths`, and what was passed over; None when there is nothing
    to analyse (the analysis itself says why)."""
    found = discover(list(paths))
    if found.missing or found.count == 0:
        return None
    files = [(kind, path) for kind, kind_paths in found.files.items() for path in kind_paths]
    return files, [(item.path, item.reason) for item in found.passed_over]


def _files_state(files: list[tuple[str, Path]]) -> list[tuple[Any, ...]] | None:
    """Each file's name (as found and resolved), size, mtime and content hash; None when one cannot be
    read or changed while it was hashed."""
    state = []
    for kind, path in files:
        taken = cache.snapshot(path, min_bytes=0)
        if taken is None:
            return None
        state.append((kind, str(path), os.fspath(path.resolve()), taken.size, taken.stamp[2], taken.digest))
    return state


def key(request: Request) -> str | None:
    """Everything the analysis of `request` depends on, as one string; None when it is not to be cached
    (cache off, nothing to analyse, a small run, an input that cannot be read whole)."""
    if not cache.enabled():
        return None
    run = _discovered(request.paths)
    base = _discovered((request.baseline,)) if request.baseline is not None else ([], [])
    if run is None or base is None:
        return None
    try:
        total = sum(path.stat().st_size for _, path in run[0] + base[0])
    except OSError:
        return None
    if total < MIN_INPUT_BYTES:
        return None
    run_files, base_files = _files_state(run[0]), _files_state(base[0])
    if run_files is None or base_files is None:
        return None
    return repr(
        (
            FORMAT_VERSION,
            code_fingerprint(),
            [str(path) for path in request.paths],
            run_files,
            run[1],
            request.baseline,
            base_files,
            base[1],
            repr(request.settings),
            request.redact,
            request.naming,
        )
    )


def _entry_path(taken: str) -> Path:
    name = hashlib.sha256(taken.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return cache.cache_root() / f"analysis-{name}.json"


def store(taken: str, result: Analysis) -> bool:
    """Save `result` as the analysis of what `taken` describes; False when nothing was written (a value
    with no plain form is not cached)."""
    run = result.run
    payload = {
        "run": {
            f.name: getattr(run, f.name)
            for f in fields(RunTables)
            if f.name not in RunTables.TABLE_NAMES or f.name in KEPT_TABLES
        },
        "analysis": {f.name: getattr(result, f.name) for f in fields(Analysis) if f.name != "run"},
    }
    try:
        body = plain_data.dumps(payload)
    except (plain_data.NotPlainData, ValueError, RecursionError):
        return False
    header = json.dumps({"format": FORMAT_VERSION, "key": taken}, ensure_ascii=True).encode("ascii")

    def write(out) -> None:
        out.write(header + b"\n")
        out.write(body)

    return cache.write_entry(_entry_path(taken), write)


def load(taken: str, reload: Callable[[], RunTables]) -> Analysis | None:
    """The analysis stored for `taken`, its run reading its other tables with `reload()`; None on a miss."""
    entry = _entry_path(taken)
    try:
        with open(entry, "rb") as fh:
            # The key first, alone: an entry for other inputs is not read any further.
            header = json.loads(fh.readline(len(taken) * 12 + 4096))
            if not (isinstance(header, dict) and header.get("format") == FORMAT_VERSION and header.get("key") == taken):
                return None
            payload = plain_data.loads(fh.read())
        if not (
            isinstance(payload, dict)
            and isinstance(payload.get("run"), dict)
            and isinstance(payload.get("analysis"), dict)
        ):
            return None
        run = StoredRun(payload["run"], reload)
        result = Analysis(run=run, **payload["analysis"])
        if not isinstance(result.findings, list) or result.gate is None or result.verdict is None:
            return None
    except Exception:  # noqa: BLE001 - anything wrong with an entry is a miss
        return None
    cache.touch(entry)
    return result


class StoredRun(RunTables):
    """A run answered from the result cache: its metadata and kept tables at hand, every other table
    read again (all at once, by `reload`) the first time one is asked for."""

    def __init__(self, kept: dict[str, Any], reload: Callable[[], RunTables]) -> None:
        names = {f.name for f in fields(RunTables)}
        missing = names - set(RunTables.TABLE_NAMES) - set(kept)
        if missing or not set(kept) <= names:
            raise ValueError(f"malformed stored run: missing {sorted(missing)}")
        self.__dict__.update(kept)
        self.__dict__["_reload"] = reload

    def __getattr__(self, name: str) -> Any:
        # Called only for what is not set: the tables the entry did not keep.
        if name not in RunTables.TABLE_NAMES or "_reload" not in self.__dict__:
            raise AttributeError(name)
        self.ensure_tables()
        return getattr(self, name)

    def ensure_tables(self) -> None:
        reload = self.__dict__.pop("_reload", None)
        if reload is None:
            return
        fresh = reload()
        for table in RunTables.TABLE_NAMES:
            # A stored table (the spans of a large trace) is taken over as stored, not read.
            key = f"_{table}" if table in RunTables.STORED_TABLES else table
            if key not in self.__dict__ and (table not in KEPT_TABLES):
                self.__dict__[key] = fresh.__dict__[key] if key in fresh.__dict__ else getattr(fresh, table)
