"""A JSON trace document cut into one line per event, without decoding it, a block at a time.

A converted `trace.json` (the cookbook's converter writes one line: `[{...}, {...}, ...]`) or a
Chrome/PyTorch-profiler object (`{"schemaVersion": 1, "deviceProperties": [...], "traceEvents":
[...], ...}`, the event array anywhere among its keys) can be hundreds of MB. Decoding it whole holds
the bytes, a Python object per value and then the table: ~14x the file. Instead the document is
scanned block by block for its structure only, and each event of the event array becomes one line
of JSONL text, so the line reader's machinery (layout fast path, typed reads, per-line fallback and
warnings) reads it a chunk at a time, the `line` of each event being its 1-based index in the array.

The scan is the first stage of a SIMD JSON parser written with numpy: a byte after an odd run of
backslashes is escaped; unescaped quotes open and close strings; brackets, commas, colons and
newlines outside strings are structure, and the nesting depth after each is a running sum. The
event array's elements are what lies between its commas at its own depth. Only those bytes change:
the separating commas become newlines (and the one space `json.dump` writes after them goes), and
a newline outside a string becomes a space; a raw newline inside a string (invalid JSON) becomes a
control byte, so that event stays one line that every reader refuses. State (inside a string, a
pending escape, the depth) carries from block to block, so no byte is scanned twice.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from trace_doctor.ingest.reading import jsonl
from trace_doctor.ingest.reading.jsonl import JSON_WHITESPACE, ByteStream, without_boms

# Bytes scanned at once: numpy's per-call cost vanishes, and the temporaries stay ~10x this.
BLOCK_BYTES = 8 * 1024 * 1024
TRACE_EVENTS_KEY = b'"traceEvents"'
# A key longer than this cannot be `"traceEvents"`; only this much of a key's text is carried over.
KEY_CARRY_BYTES = 64

# Byte classes: every byte the scan looks at has a non-zero class; bytes.translate maps a block to
# its classes at memory speed.
_OPEN, _CLOSE, _COMMA, _COLON, _NEWLINE, _QUOTE, _BACKSLASH = 1, 2, 3, 4, 5, 6, 7
_CLASSES = {b"[": _OPEN, b"{": _OPEN, b"]": _CLOSE, b"}": _CLOSE, b",": _COMMA, b":": _COLON}
_CLASSES.update({b"\n": _NEWLINE, b"\r": _NEWLINE, b'"': _QUOTE, b"\\": _BACKSLASH})
_TABLE = bytes(_CLASSES.get(bytes([byte]), 0) for byte in range(256))
_SPACE, _NEWLINE_BYTE = 0x20, 0x0A
# What a raw newline inside a string becomes: a control byte no JSON reader accepts in a string.
_INVALID_IN_STRING = 0x01


class Structure(NamedTuple):
    """A block's structural bytes outside strings, in order: positions, classes, depth after each."""

    positions: np.ndarray
    kinds: np.ndarray
    depth_after: np.ndarray
    string_newlines: np.ndarray  # positions of raw newlines inside strings
    block_size: int


class ScanState(NamedTuple):
    """What carries from one block to the next."""

    in_string: bool = False
    escaped_first: bool = False  # the block's first byte follows an odd run of backslashes
    depth: int = 0


def _escaped(slashes: np.ndarray, size: int, escaped_first: bool) -> tuple[np.ndarray, bool]:
    """Positions escaped by the backslashes at `slashes` (sorted), and whether the next block's first byte is.

    `escaped_first`: the previous block ended in an odd run of backslashes (its first byte is escaped).
    """
    breaks = np.flatnonzero(np.diff(slashes) != 1)
    starts = slashes[np.r_[0, breaks + 1]]
    ends = slashes[np.r_[breaks, slashes.size - 1]]
    lengths = ends - starts + 1
    if escaped_first and starts[0] == 0:
        lengths[0] += 1  # the previous block's odd run goes on: one more backslash
    escaped = ends[(lengths & 1) == 1] + 1
    carry = bool(escaped.size and escaped[-1] == size)
    return escaped[escaped < size], carry


def scan_block(block: bytes, state: ScanState) -> tuple[Structure, ScanState]:
    """The structure of one block given the state it starts in, and the state it ends in."""
    classes = np.frombuffer(block.translate(_TABLE), dtype=np.uint8)
    marked = np.flatnonzero(classes)
    kinds = classes[marked]
    slashes = marked[kinds == _BACKSLASH]
    escaped_next = False
    if state.escaped_first and marked.size and marked[0] == 0 and kinds[0] == _QUOTE:
        kinds = kinds.copy()
        kinds[0] = 0  # escaped by the backslash that ended the previous block
    if slashes.size:
        escaped, escaped_next = _escaped(slashes, len(block), state.escaped_first)
        # An escaped quote is string content (an escaped anything else is inside a string anyway).
        at = np.minimum(np.searchsorted(marked, escaped), marked.size - 1)
        at = at[(marked[at] == escaped) & (kinds[at] == _QUOTE)]
        if at.size:
            kinds = kinds.copy()
            kinds[at] = 0
    is_quote = kinds == _QUOTE
    # Inside a string when an odd number of string quotes precede (counting one open at the start).
    quotes_before = np.cumsum(is_quote, dtype=np.int64) - is_quote
    inside = ((quotes_before + state.in_string) & 1).astype(bool)
    structural = (kinds != 0) & (kinds < _QUOTE)
    string_newlines = marked[structural & inside & (kinds == _NEWLINE)]
    outside = structural & ~inside
    positions, kinds = marked[outside], kinds[outside]
    delta = (kinds == _OPEN).astype(np.int64) - (kinds == _CLOSE)
    depth_after = np.cumsum(delta) + state.depth
    quotes = int(quotes_before[-1] + is_quote[-1]) if marked.size else 0
    end = ScanState(
        in_string=bool((state.in_string + quotes) & 1),
        escaped_first=escaped_next,
        depth=int(depth_after[-1]) if depth_after.size else state.depth,
    )
    return Structure(positions, kinds, depth_after, string_newlines, len(block)), end


class Piece(NamedTuple):
    """Events as JSONL text (`data`, whole lines), or one event too long to hold (`oversized` bytes)."""

    data: bytes
    oversized: int = 0


class DocumentEvents:
    """Iterates the event array of a JSON trace document as pieces of JSONL text (see module docstring).

    After iteration, `problem` says what was wrong with the document as a whole (no event array, or
    it ended early), and `truncated` is the 1-based index of an event the document ended inside.
    """

    def __init__(self, stream: ByteStream, *, block_bytes: int | None = None, max_event: int | None = None):
        self._stream = stream
        self._block_bytes = BLOCK_BYTES if block_bytes is None else block_bytes
        self._max_event = jsonl.MAX_LINE_BYTES if max_event is None else max_event
        self.problem: str | None = None
        self.truncated: int | None = None
        self.found = False  # the event array was found (its elements may follow)
        self._lines = 0  # event lines handed out so far (oversized ones included)
        self._phase = "start"  # then "object" -> "value" -> "array", or "array" at once; "done"
        self._key_tail = b""  # object: the text after the last structural byte (a key may start there)
        self._depth = 0  # array: the depth of its elements
        self._carry = bytearray()  # array: the element read so far, already rewritten
        self._skipping = 0  # array: bytes of an over-long element being dropped

    def __iter__(self) -> Iterator[Piece]:
        state = ScanState()
        first_block = True
        while self._phase != "done":
            block = self._stream.read(self._block_bytes)
            if not block:
                break
            if first_block:
                block, first_block = without_boms(block), False
            structure, state_after = scan_block(block, state)
            start = 0
            if self._phase == "start":
                stripped = block.lstrip(JSON_WHITESPACE)
                if stripped[:1] == b"[":
                    self._phase, self._depth, self.found = "array", state.depth + 1, True
                elif stripped[:1] == b"{":
                    self._phase = "object"
                elif stripped:
                    self.problem = f"expected a JSON array or object, found {stripped[:20]!r}"
                    return
                start = len(block) - len(stripped) + 1
            if self._phase in ("object", "value"):
                start = self._find_array(block, structure, start)
            if self._phase == "array":
                yield from self._elements(block, structure, start)
            state = state_after
        self._finish()

    def _finish(self) -> None:
        """What the document's end leaves unsaid: an event cut short, or no event array at all."""
        if self._phase == "array":
            if self._skipping or bytes(self._carry).strip(JSON_WHITESPACE):
                self.truncated = self._lines + 1
            else:
                self.problem = "the document ends before its event array closes (truncated)"
        elif self._phase in ("object", "value"):
            self.problem = "JSON object without a `traceEvents` list"
        elif self._phase == "start":
            self.problem = "empty JSON trace document"

    def _find_array(self, block: bytes, structure: Structure, start: int) -> int:
        """In a top-level object: find the `"traceEvents": [` key and value from `start` on.

        Returns where the array's elements start (or the block's end while still looking).
        """
        positions, kinds, depth_after = structure.positions, structure.kinds, structure.depth_after
        previous = start  # the text between two structural bytes is a key, a scalar or whitespace
        for index in range(int(np.searchsorted(positions, start)), positions.size):
            at, kind = int(positions[index]), int(kinds[index])
            if kind == _NEWLINE:
                continue
            text = (self._key_tail + block[previous:at]).strip(JSON_WHITESPACE)
            self._key_tail, previous = b"", at + 1
            if self._phase == "value":
                if kind == _OPEN and block[at] == ord("[") and not text:
                    self._phase, self._depth, self.found = "array", int(depth_after[index]), True
                    return at + 1
                self.problem = "JSON object without a `traceEvents` list"
                self._phase = "done"
                return len(block)
            if kind == _COLON and int(depth_after[index]) == 1 and text == TRACE_EVENTS_KEY:
                self._phase = "value"
            elif kind == _CLOSE and int(depth_after[index]) == 0:
                self.problem = "JSON object without a `traceEvents` list"
                self._phase = "done"
                return len(block)
        tail = self._key_tail + block[previous:]
        # Longer text than a key with some space cannot be the key: carry something that never matches.
        self._key_tail = tail if len(tail) <= KEY_CARRY_BYTES else b"\x00"
        return len(block)

    def _elements(self, block: bytes, structure: Structure, start: int) -> Iterator[Piece]:
        """The array's elements from `start` to its end or the block's: whole ones as pieces, the last carried."""
        end, closed = _array_end(structure, start, self._depth)
        region, commas = _rewrite(block, structure, start, end, self._depth)
        if not commas.size:
            self._extend(region.tobytes())
        else:
            first, last = int(commas[0]) + 1, int(commas[-1]) + 1
            if self._skipping:
                # The over-long element ends at the first separator: one event, its text dropped.
                self._lines += 1
                yield Piece(b"", self._skipping + first)
                self._skipping, self._carry = 0, bytearray()
                data = region[first:last].tobytes()
                self._lines += commas.size - 1
            else:
                data = bytes(self._carry) + region[:last].tobytes()
                self._lines += commas.size
            if data:
                yield Piece(data)
            self._carry = bytearray()
            self._extend(region[last:].tobytes())
        if closed:
            if self._skipping:
                self._lines += 1
                yield Piece(b"", self._skipping)
            else:
                final = bytes(self._carry).strip(JSON_WHITESPACE)
                if final:
                    self._lines += 1
                    yield Piece(final + b"\n")
            self._phase = "done"

    def _extend(self, text: bytes) -> None:
        """Add `text` to the element being carried, or drop it once the element is too long to hold."""
        if self._skipping:
            self._skipping += len(text)
            return
        self._carry += text
        if len(self._carry) > self._max_event:
            self._skipping, self._carry = len(self._carry), bytearray()


def _array_end(structure: Structure, start: int, depth: int) -> tuple[int, bool]:
    """Where the array whose elements are at `depth` closes in the block (its `]`), else the block's end."""
    positions, kinds, depth_after = structure.positions, structure.kinds, structure.depth_after
    lo = int(np.searchsorted(positions, start))
    closing = np.flatnonzero((kinds[lo:] == _CLOSE) & (depth_after[lo:] == depth - 1))
    if closing.size:
        return int(positions[lo + closing[0]]), True
    return int(structure.block_size), False


def _rewrite(block: bytes, structure: Structure, start: int, end: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """The bytes from `start` to `end` as JSONL (see module docstring), and where its separators are."""
    positions, kinds, depth_after = structure.positions, structure.kinds, structure.depth_after
    string_newlines = structure.string_newlines
    lo, hi = np.searchsorted(positions, [start, end])
    positions, kinds, depth_after = positions[lo:hi] - start, kinds[lo:hi], depth_after[lo:hi]
    region = np.frombuffer(block, dtype=np.uint8)[start:end].copy()
    region[positions[kinds == _NEWLINE]] = _SPACE
    inside = string_newlines[(string_newlines >= start) & (string_newlines < end)] - start
    region[inside] = _INVALID_IN_STRING
    commas = positions[(kinds == _COMMA) & (depth_after == depth)]
    region[commas] = _NEWLINE_BYTE
    # The space json.dump writes after each separator goes, so converted events keep the cookbook
    # writer's exact layout (the fast path).
    after = commas + 1
    after = after[after < region.size]
    after = after[region[after] == _SPACE]
    if after.size:
        keep = np.ones(region.size, dtype=bool)
        keep[after] = False
        region = region[keep]
        commas = commas - np.searchsorted(after, commas)
    return region, commas


def has_trace_events(head: bytes) -> bool:
    """True when `head`, the first bytes of a JSON object, reaches a top-level `traceEvents` list.

    The key may come after any other keys (a PyTorch profiler trace puts it after its device and
    distributed-run metadata), but it must be a key of the top-level object, not text or a nested key.
    """
    events = DocumentEvents(io.BytesIO(head), block_bytes=len(head) + 1)
    for _ in events:
        break
    return events.found
