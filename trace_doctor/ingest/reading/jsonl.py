"""Line-oriented JSON reading that keeps every valid record and accounts for every bad one.

The cookbook writes with Python's `json.dumps` (so `NaN`/`Infinity` appear bare) and appends,
so a crash can leave an unterminated last line. orjson is the fast path; Python's json is the
fallback that accepts the non-finite literals; anything else becomes an IngestWarning.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import orjson

from trace_doctor.ingest.reading.deep_json import dumps_deep, loads_deep
from trace_doctor.ingest.reading.file_warnings import FileWarnings, WarningSink
from trace_doctor.model import IngestWarning

# The problem an unterminated last line that does not decode is reported with: the writer stopped mid-append.
TRUNCATED_LAST_LINE = "truncated last line (no newline; the writer stopped mid-append)"
# A line this long is almost certainly not a metrics or trace record; report it rather than
# spending memory on it. Real RL timing_spans lines reach a few MB.
MAX_LINE_BYTES = 64 * 1024 * 1024
# Editors on Windows start files with a byte-order mark; it is an encoding marker, not data.
UTF8_BOM = b"\xef\xbb\xbf"
# Bytes per read of a line-oriented file: one chunk's lines are in memory at a time, never the file.
CHUNK_BYTES = 8 * 1024 * 1024
# JSON's own whitespace (what may precede a document's first character).
JSON_WHITESPACE = b" \t\r\n"
# JSON's integer and number grammar (RFC 8259), as regex text: the fixed-layout readers match
# values with it, and a number written as a string is recognised by it.
JSON_INT = r"-?(?:0|[1-9][0-9]*)"
JSON_NUMBER = JSON_INT + r"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"


@dataclass
class ParsedLine:
    line: int  # 1-based line number in the file
    value: Any


def without_boms(raw: bytes) -> bytes:
    """`raw` without the byte-order marks it starts with: a file written by two tools in turn (an editor,
    then a converter) can start with two, and a mark is an encoding marker, never part of a record."""
    while raw.startswith(UTF8_BOM):
        raw = raw[len(UTF8_BOM) :]
    return raw


def decode_json(raw: bytes) -> Any:
    """Decode one JSON document, accepting Python's bare NaN / Infinity literals."""
    raw = without_boms(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        # Python's json accepts NaN/Infinity/-Infinity, which the cookbook writes for
        # non-finite metrics; it raises on anything else, which the caller reports.
        return decode_json_text(raw.decode("utf-8"))


def decode_json_text(text: str) -> Any:
    """The lenient decoder: non-finite literals, any nesting depth, values every table can hold."""
    text = text.lstrip("\ufeff")
    try:
        value = json.loads(text)
    except RecursionError:
        value = loads_deep(text)
    # orjson refuses what Python's json lets through: integers beyond 64 bits (polars and the
    # JSON writer cannot hold them) and lone surrogates (not encodable as UTF-8).
    if NEEDS_NORMALIZING.search(text):
        value = _normalized(value)
    return value


NEEDS_NORMALIZING = re.compile(r"\d{19}|\\u[dD][89a-fA-F]")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def as_int64(value: Any) -> int | None:
    """`value` as a 64-bit integer column value, else None: bools, fractions, and integers beyond
    64 bits (JSON allows any size) are not integers a typed column can hold."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and INT64_MIN <= value <= INT64_MAX else None


def finite_float(value: Any) -> float | None:
    """`value` as a finite float column value, else None (bools are not numbers, though Python says so)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _scalar(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        try:
            return float(value)  # what orjson does with such a number
        except OverflowError:
            return float("inf") if value > 0 else float("-inf")
    if isinstance(value, str):
        return (
            value.encode("utf-8", "replace").decode("utf-8") if any("\ud800" <= c <= "\udfff" for c in value) else value
        )
    return value


def _normalized(value: Any) -> Any:
    """The value with out-of-range integers as floats and lone surrogates as '?', without recursion."""
    if not isinstance(value, (dict, list)):
        return _scalar(value)
    pending: list[Any] = [value]
    while pending:
        container = pending.pop()
        if isinstance(container, dict):
            for key in list(container):
                item = container.pop(key)
                container[_scalar(key)] = item if isinstance(item, (dict, list)) else _scalar(item)
                if isinstance(item, (dict, list)):
                    pending.append(item)
        else:
            for i, item in enumerate(container):
                if isinstance(item, (dict, list)):
                    pending.append(item)
                else:
                    container[i] = _scalar(item)
    return value


def json_text(value: Any, *, sort_keys: bool = False) -> str:
    """JSON text of a decoded value, however deeply nested (orjson stops at depth 255)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else 0).decode()
    except (orjson.JSONEncodeError, TypeError):
        return dumps_deep(value, sort_keys=sort_keys)


def shown(value: Any, limit: int | None = None) -> str:
    """`str(value)` (its first `limit` characters) for a message or a text column, at any nesting depth.

    str() of a list nested 1,000 deep raises RecursionError; such a value is shown as JSON text.
    """
    try:
        text = str(value)
    except RecursionError:
        text = json_text(value)
    return text if limit is None else text[:limit]


def _describe(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


class ByteStream(Protocol):
    """What the line readers read from: an open binary file or an InputStream."""

    def read(self, size: int, /) -> bytes: ...


class LineChunk(NamedTuple):
    """Whole lines of a file (`data`), or one line too long to hold (`oversized`: its length; `data` empty).

    `unterminated`: the piece ends the file without a newline.
    """

    data: bytes
    unterminated: bool
    oversized: int = 0

    @property
    def lines(self) -> int:
        """How many lines the piece holds."""
        if self.oversized:
            return 1
        return self.data.count(b"\n") + (1 if self.unterminated else 0)


def oversized_problem(length: int) -> str:
    return f"line of {length:,} bytes exceeds the {MAX_LINE_BYTES:,}-byte limit; skipped"


def iter_json_records(stream: ByteStream, path: str, warnings: FileWarnings) -> Iterator[ParsedLine]:
    """Yield each decodable line of a JSONL stream, a chunk at a time; report the others as warnings.

    An unterminated final line is kept if it decodes (a file edited by hand) and reported as a
    truncated write if it does not (the writer crashed mid-append).
    """
    index = 0
    for chunk in iter_line_chunks(stream, CHUNK_BYTES):
        if chunk.oversized:
            index += 1
            warnings.add(index, oversized_problem(chunk.oversized))
            continue
        lines = chunk.data.split(b"\n")
        if not chunk.unterminated:
            lines.pop()  # the empty piece after the final newline
        last = len(lines) - 1
        for i, raw in enumerate(lines):
            index += 1
            parsed = decode_line(raw, index, path, warnings, truncated=chunk.unterminated and i == last)
            if parsed is not None:
                yield parsed


def certainly_not_an_object(raw: bytes) -> bool:
    """True when a non-blank line cannot decode to a JSON object (it does not start with `{`)."""
    return not without_boms(raw).lstrip(JSON_WHITESPACE).startswith(b"{")


def decode_line(
    raw: bytes,
    index: int,
    path: str,
    warnings: FileWarnings,
    *,
    truncated: bool = False,
    expect_object: bool = True,
) -> ParsedLine | None:
    """One line of a JSONL file (1-based `index`) decoded, or None: blank, or reported as a warning.

    `truncated` marks an unterminated final line, whose failure to decode is a crashed append.
    """
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if not raw.strip():
        return None
    if len(raw) > MAX_LINE_BYTES:
        warnings.add(index, oversized_problem(len(raw)))
        return None
    if not warnings.room and certainly_not_an_object(raw):
        # Past the listed warnings, a line that is no object (every reader wants one) is only
        # counted: a file of garbage costs a test per line, not a decode and a message.
        warnings.count_unlisted(1, index)
        return None
    try:
        value = decode_json(raw)
    except Exception as exc:  # noqa: BLE001 - any undecodable line is one warning, never a crash
        if truncated:
            problem = f"{TRUNCATED_LAST_LINE}: {_describe(exc)}"
        else:
            problem = f"not valid JSON: {_describe(exc)}"
        warnings.add(index, problem)
        return None
    if expect_object and not isinstance(value, dict):
        warnings.add(index, f"expected a JSON object, got {type(value).__name__}")
        return None
    return ParsedLine(index, value)


def read_bytes(path: Path, warnings: WarningSink) -> bytes | None:
    """Read a file whole, turning OS errors into a warning."""
    try:
        return path.read_bytes()
    except OSError as exc:
        warnings.append(IngestWarning(str(path), None, f"cannot read file: {exc.strerror or exc}"))
        return None


def iter_line_chunks(stream: ByteStream, size: int, *, max_line: int | None = None) -> Iterator[LineChunk]:
    """The stream as pieces of whole lines of about `size` bytes (a longer line is one piece).

    A line longer than `max_line` is not held: its bytes are dropped as they are read and it comes
    as one `oversized` piece, so a file without newlines (a bomb of zeros) costs no memory.
    """
    max_line = MAX_LINE_BYTES if max_line is None else max_line
    leftover = b""
    skipping = 0  # inside an over-long line: its bytes so far
    while True:
        block = stream.read(size)
        if not block:
            break
        if skipping:
            cut = block.find(b"\n")
            if cut < 0:
                skipping += len(block)
                continue
            yield LineChunk(b"", False, skipping + cut)
            skipping = 0
            block = block[cut + 1 :]
            if not block:
                continue
        block = leftover + block if leftover else block
        cut = block.rfind(b"\n")
        if cut < 0:
            leftover = block
        else:
            yield LineChunk(block[: cut + 1], False)
            leftover = block[cut + 1 :]
        if len(leftover) > max_line:
            skipping, leftover = len(leftover), b""
    if skipping:
        yield LineChunk(b"", True, skipping)
    elif leftover:
        yield LineChunk(leftover, True)
