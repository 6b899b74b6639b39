"""A chunk's lines located and sorted without a Python object per line.

The general reader needs, for the lines the fast path did not take, which are blank (no event, no
problem), which may be JSON objects (worth a typed read) and which certainly are not (garbage: a
warning each). A damaged or hostile file can hold millions of garbage lines; splitting a chunk into
a list of bytes costs ~150 bytes of Python objects per line, and a test per line costs a Python call.
Here the newlines are found with numpy and a line is judged by its first byte, so a run of garbage
costs a few array operations; only lines that start with whitespace or a byte-order mark (rare)
are judged one by one.
"""

from __future__ import annotations

import numpy as np

from trace_doctor.ingest.reading.jsonl import UTF8_BOM, certainly_not_an_object

BLANK, OBJECT, GARBAGE = 0, 1, 2
# Bytes Python's bytes.strip() removes (what makes a line blank), and the first byte of a BOM.
_SPACE_OR_BOM = np.zeros(256, dtype=bool)
_SPACE_OR_BOM[list(b" \t\n\r\x0b\x0c")] = True
_SPACE_OR_BOM[UTF8_BOM[0]] = True


class ChunkLines:
    """Where each line of a chunk is, and its kind (BLANK, OBJECT: may be a JSON object, GARBAGE)."""

    def __init__(self, chunk: bytes, unterminated: bool) -> None:
        self.chunk = chunk
        data = np.frombuffer(chunk, dtype=np.uint8)
        newlines = np.flatnonzero(data == ord("\n"))
        self.ends = np.append(newlines, len(chunk)) if unterminated else newlines
        self.starts = np.concatenate([np.zeros(1, dtype=np.int64), newlines + 1])[: self.ends.size]
        empty = self.starts == self.ends
        first = data[np.minimum(self.starts, max(len(chunk) - 1, 0))] if len(chunk) else np.zeros(0, dtype=np.uint8)
        kinds = np.where(first == ord("{"), OBJECT, GARBAGE).astype(np.int8)
        kinds[empty] = BLANK
        # A line that starts with whitespace or a byte-order mark is judged as the decoder would.
        for index in np.flatnonzero(~empty & _SPACE_OR_BOM[first]).tolist():
            raw = self.line(index)
            kinds[index] = BLANK if not raw.strip() else GARBAGE if certainly_not_an_object(raw) else OBJECT
        self.kinds = kinds

    @property
    def count(self) -> int:
        return int(self.ends.size)

    def line(self, index: int) -> bytes:
        """The bytes of line `index` (0-based), without its newline."""
        return self.chunk[int(self.starts[index]) : int(self.ends[index])]


def runs(indices: np.ndarray, kinds: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, stop, kind) of each run of equal kinds along `indices` (positions into `indices`)."""
    if not indices.size:
        return []
    along = kinds[indices]
    breaks = np.flatnonzero(along[1:] != along[:-1]) + 1
    starts = np.concatenate([np.zeros(1, dtype=np.int64), breaks])
    stops = np.append(breaks, indices.size)
    return [(int(a), int(b), int(along[a])) for a, b in zip(starts, stops, strict=True)]
