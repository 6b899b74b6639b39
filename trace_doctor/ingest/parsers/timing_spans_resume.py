"""A timing_spans.jsonl that grew since it was last checked clean: only the bytes it gained are checked.

The cookbook's file is only checked at analysis (timing_spans.py: no rule reads the step spans), but
the check still reads the whole file, the second largest of a run (57 MB at 3000 steps x 64 samples).
A clean check leaves its counts in the cache (storage/resume_entry.py: the byte offset it reached, the
xxh3 of the bytes before it, the lines and spans counted); a later analysis that finds the file longer
and those bytes the same checks only the rest and adds the counts. The sums are the whole file's check:
a line is clean or not on its own, and the chunks end at newlines. Anything else (a gzip file, no
entry, a changed prefix, a file now shorter) checks the whole file, as before.
"""

from __future__ import annotations

import os
from pathlib import Path

import xxhash

from trace_doctor.ingest.reading.input_stream import GZIP_MAGIC
from trace_doctor.ingest.storage import cache, resume_entry

TABLE = "spans-check"
# Smaller files are checked whole: the check costs less than the entry's write.
MIN_RESUMED_BYTES = cache.MIN_CACHED_BYTES


class Counts:
    """What a check found so far: its lines, spans and the bytes they took."""

    def __init__(self, lines: int = 0, spans: int = 0, size: int = 0) -> None:
        self.lines, self.spans, self.size = lines, spans, size


def resumed(path: Path) -> tuple[Counts, xxhash.xxh3_128] | None:
    """The counts of the file's first bytes, checked clean by an earlier analysis, and the hash of
    those bytes to go on from; None: check the file whole."""
    if not cache.enabled():
        return None
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as fh:
            if fh.read(2) == GZIP_MAGIC:
                return None
    except OSError:
        return None
    found = resume_entry.load(path, TABLE)
    if found is None:
        return None
    offset, digest, state, _ = found
    lines, spans = state.get("lines"), state.get("spans")
    if not (_count(lines) and _count(spans) and 0 < offset <= size):
        return None
    hashed = resume_entry.prefix_hash(path, offset)
    if hashed is None or hashed.hexdigest() != digest:
        return None
    return Counts(lines, spans, offset), hashed


def keep(path: Path, counts: Counts, hashed: xxhash.xxh3_128) -> None:
    """Store a clean check's counts of the file's first `counts.size` bytes (hashed to `hashed`)."""
    if counts.size < MIN_RESUMED_BYTES or not cache.enabled():
        return
    state = {"lines": counts.lines, "spans": counts.spans}
    resume_entry.save(path, TABLE, counts.size, hashed.hexdigest(), state, {})


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
