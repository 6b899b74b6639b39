"""Discovered files -> one RunTables: every registered kind's parser run, its fields filled.

The trace is by far the largest input: a `background` kind (the trace) is parsed on a worker thread
(polars releases the GIL) while the other kinds are parsed on the calling thread, in ingest order. An
`after_background_read` kind (timing_spans.jsonl, the next largest) waits until the workers' bytes are
read, so it shares the machine with span building (which leaves part of it idle) rather than with
the read (which does not). Each kind gets its own warning list, and the run's inputs and warnings are
put together in the kinds' order: the account never depends on thread timing.
"""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.ingest.kinds.registry import InputKind, Parsed, Reading, registered
from trace_doctor.model import IngestWarning, RunTables


def read_run(files: dict[str, list[Path]], *, progress: Any = None) -> RunTables:
    """Parse the files of every registered kind (`files` by kind name, as discovered) into one run."""
    kinds = [kind for kind in registered() if kind.parse is not None]
    warnings: dict[str, list[IngestWarning]] = {kind.name: [] for kind in kinds}
    parsed: dict[str, Parsed] = {}

    def parse(kind: InputKind, reading: Reading) -> Parsed:
        by_kind = {name: list(files.get(name, [])) for name in kind.files_read}
        paths = [path for name in kind.files_read for path in by_kind[name]]
        reading = dataclasses.replace(reading, files=by_kind)
        return kind.parse(paths, warnings[kind.name], reading)  # type: ignore[misc]  # kinds with a parser

    background = [kind for kind in kinds if kind.schedule == "background"]
    with ThreadPoolExecutor(max_workers=max(1, len(background)), thread_name_prefix="ingest") as pool:
        read_events: list[threading.Event] = []
        futures: dict[str, Future[Parsed]] = {}
        for kind in background:
            read = threading.Event()
            read_events.append(read)
            futures[kind.name] = pool.submit(_parse_then_set, parse, kind, Reading(progress, read.set), read)
        for kind in kinds:
            if kind.schedule == "main":
                parsed[kind.name] = parse(kind, Reading(progress))
        for read in read_events:
            read.wait()
        for kind in kinds:
            if kind.schedule == "after_background_read":
                parsed[kind.name] = parse(kind, Reading(progress))
        for name, future in futures.items():
            parsed[name] = future.result()

    return assemble_run(kinds, parsed, warnings)


def assemble_run(
    kinds: list[InputKind], parsed: dict[str, Parsed], warnings: dict[str, list[IngestWarning]]
) -> RunTables:
    """One RunTables of each kind's parse (`parsed` and `warnings` by kind name), in the kinds' order;
    then each kind's `complete`. A cold read and a live run's refresh (live_run.py) both end here."""
    run = RunTables()
    filled: set[str] = set()
    for kind in kinds:
        result = parsed.get(kind.name)
        if result is None:
            continue
        undeclared = set(result.values) - set(kind.fills)
        if undeclared:
            raise ValueError(
                f"input kind {kind.name} filled {', '.join(sorted(undeclared))}, which it does not declare"
            )
        for name, value in result.values.items():
            _fill(run, name, value, appended=name in filled)
            filled.add(name)
        run.inputs += result.inputs
        run.warnings += warnings.get(kind.name, [])
    for kind in kinds:
        if kind.complete is not None:
            kind.complete(run)
    return run


def _parse_then_set(parse, kind: InputKind, reading: Reading, read: threading.Event) -> Parsed:
    # Set even when the parser fails before it read its bytes: the calling thread waits for it.
    try:
        return parse(kind, reading)
    finally:
        read.set()


def _fill(run: RunTables, name: str, value: Any, *, appended: bool) -> None:
    """Set one field (`meta.<field>`: of the run's metadata); a table a previous kind filled gets
    these rows after its own."""
    owner, _, attr = name.rpartition(".")
    target = run.meta if owner == "meta" else run
    if appended:
        value = pl.concat([getattr(target, attr), value], how="diagonal_relaxed")
    setattr(target, attr, value)
