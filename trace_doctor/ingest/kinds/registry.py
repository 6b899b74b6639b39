"""The registry of input kinds: InputKind (what a kind declares), register(), and registered().

Every module of this package but this one is a built-in kind that calls register() when imported;
they are imported the first time the registry is read, so a new module needs no list updated.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from trace_doctor.model import IngestWarning, InputFile, RunMeta, RunTables

# The content families a file is sniffed as, by its name: `.jsonl` (its first line decides),
# `.json` (the start of the document), and anything else that is text (after archives and binaries
# are set aside).
Shape = Literal["jsonl", "json", "text"]
# When a kind's parser runs: on the calling thread; on a worker thread of its own, started first
# (a large input read while the others are); or on the calling thread once every worker's bytes are
# read (a large input that would otherwise compete with those reads).
Schedule = Literal["main", "background", "after_background_read"]


@dataclass(frozen=True)
class Sniffed:
    """What content recognition looks at: a file's name and its first bytes (decompressed when gzipped)."""

    name: str
    suffix: str
    head: bytes
    # `.jsonl`: the first non-blank line, stripped. `.json`: the head without leading whitespace.
    first_line: bytes = b""
    document: bytes = b""
    # Text longer than the head: its last bytes (discover.TAIL_BYTES), where a dump pasted at its end is.
    tail: bytes = b""


@dataclass(frozen=True)
class ContentTest:
    """A kind recognised by content within one shape.

    Tests of a shape are tried by `rank`, lowest first; a `fallback` test (a kind that takes what no
    other claims) after every other. `noun` names the kind in the reason a file of the shape is not
    read ("JSONL that is not metrics, trace, ..."): fallbacks first, then by rank.
    """

    shape: Shape
    test: Callable[[Sniffed], bool]
    rank: int = 50
    noun: str = ""
    fallback: bool = False


@dataclass(frozen=True)
class Reading:
    """What a parser is given besides its files and warning list."""

    progress: Any = None  # a progress printer for long reads, or None
    on_read: Callable[[], None] = lambda: None  # a background kind: call when the files' bytes are read
    # The files of each kind the parser reads, by kind name: a kind that reads other kinds' files (the
    # metrics kind falls back on the console captures) tells them apart here.
    files: Mapping[str, list[Path]] = field(default_factory=dict)


@dataclass
class Parsed:
    """A kind's parse: a value for each field it fills, and one input record per file read."""

    values: dict[str, Any]
    inputs: list[InputFile]


@dataclass(frozen=True)
class InputKind:
    """One kind of input file.

    `name` is the kind's key (Discovered.files, InputFile.kind). `order` places its input records and
    warnings in the run's account (`run.inputs`, `ingest_warnings`): the JSON document lists them in
    that order, whatever thread parsed what first. `fills` names the RunTables fields its parse sets
    (`meta.<field>` for a RunMeta field); a data table two kinds fill holds both kinds' rows, in order.
    """

    name: str
    order: int
    fills: tuple[str, ...] = ()
    parse: Callable[[list[Path], list[IngestWarning], Reading], Parsed] | None = None
    # The kinds whose files the parser reads (default: its own); a kind read only by another kind's
    # parser has no parser of its own.
    reads: tuple[str, ...] = ()
    schedule: Schedule = "main"
    # By name: exact file names, and a test for names that follow a pattern.
    file_names: frozenset[str] = frozenset()
    name_test: Callable[[str], bool] | None = None
    # Its parser reads `<name>.gz` of a name it recognises, too.
    reads_gzip: bool = False
    content: tuple[ContentTest, ...] = ()
    # Run facts settled once every kind is in (the trainer from the metric keys when the config
    # did not say): called in `order` after every field is filled.
    complete: Callable[[RunTables], None] | None = None

    @property
    def files_read(self) -> tuple[str, ...]:
        return self.reads or ((self.name,) if self.parse else ())

    def known_by_name(self, name: str) -> bool:
        return name in self.file_names or (self.name_test is not None and self.name_test(name))


_kinds: dict[str, InputKind] = {}
_builtins: Literal["unloaded", "loading", "loaded"] = "unloaded"
# Re-entrant: loading the built-ins imports modules that register themselves.
_lock = threading.RLock()
# Fields two kinds may fill: the data tables held in memory (rows appended); a stored table, the
# run's metadata or a list is one kind's.
SHAREABLE = frozenset(set(RunTables.TABLE_NAMES) - set(RunTables.STORED_TABLES))
_RUN_FIELDS = frozenset(f.name for f in fields(RunTables))
_META_FIELDS = frozenset(f.name for f in fields(RunMeta))


def register(kind: InputKind) -> InputKind:
    """Add `kind` to the registry (replacing a kind of the same name); a declaration that cannot
    work raises ValueError here rather than midway through an ingest."""
    for name in kind.fills:
        target, _, attr = name.rpartition(".")
        if not (name in _RUN_FIELDS if not target else target == "meta" and attr in _META_FIELDS):
            raise ValueError(f"input kind {kind.name}: {name} is not a RunTables field (nor meta.<field>)")
        if kind.parse is None:
            raise ValueError(f"input kind {kind.name}: fills {name} but has no parser")
    _load_builtins()  # a kind registered first is checked against the built-ins all the same
    with _lock:
        for other in _kinds.values():
            shared = (set(kind.fills) & set(other.fills)) - SHAREABLE if other.name != kind.name else set()
            if shared:
                raise ValueError(f"input kind {kind.name}: {', '.join(sorted(shared))} already filled by {other.name}")
        _kinds[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove the kind called `name` (a test's own kind, once the test is done)."""
    with _lock:
        _kinds.pop(name, None)


def registered() -> list[InputKind]:
    """Every registered kind, in ingest order (then by name)."""
    _load_builtins()
    return sorted(_kinds.values(), key=lambda kind: (kind.order, kind.name))


def _load_builtins() -> None:
    global _builtins
    if _builtins == "loaded":
        return
    with _lock:
        if _builtins != "unloaded":  # loaded meanwhile, or being loaded by this thread (a built-in registering)
            return
        _builtins = "loading"
        try:
            package = importlib.import_module(__package__)
            for module in pkgutil.iter_modules(package.__path__):
                if module.name != "registry":
                    importlib.import_module(f"{__package__}.{module.name}")
        except BaseException:
            _builtins = "unloaded"  # said by the import's own error, and tried again next time
            raise
        _builtins = "loaded"
