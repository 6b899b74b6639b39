"""Line-oriented JSON reading that keeps every valid record and accounts for every bad one.

The cookbook writes with Python's `json.dumps` (so `NaN`/`Infinity` appear bare) and appends,
so a crash can leave an unterminated last line. orjson is the fast path; Python's json is the
fallback that accepts the non-finite literals; anything else becomes an IngestWarning.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from trace_doctor.model import IngestWarning

# A line this long is almost certainly not a metrics or trace record; report it rather than
# spending memory on it. Real RL timing_spans lines reach a few MB.
MAX_LINE_BYTES = 64 * 1024 * 1024


@dataclass
class ParsedLine:
    line: int  # 1-based line number in the file
    value: Any


def decode_json(raw: bytes) -> Any:
    """Decode one JSON document, accepting Python's bare NaN / Infinity literals."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        # Python's json accepts NaN/Infinity/-Infinity, which the cookbook writes for
        # non-finite metrics; it raises on anything else, which the caller reports.
        return json.loads(raw.decode("utf-8"))


def _describe(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def iter_json_lines(
    data: bytes, path: str, warnings: list[IngestWarning], *, expect_object: bool = True
) -> Iterator[ParsedLine]:
    """Yield each decodable line of a JSONL byte string; report the others as warnings.

    An unterminated final line is kept if it decodes (a file edited by hand) and reported as a
    truncated write if it does not (the writer crashed mid-append).
    """
    if not data:
        return
    lines = data.split(b"\n")
    terminated = data.endswith(b"\n")
    if terminated:
        lines.pop()
    last = len(lines)
    for index, raw in enumerate(lines, start=1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if not raw.strip():
            continue
        if len(raw) > MAX_LINE_BYTES:
            warnings.append(IngestWarning(path, index, f"line of {len(raw):,} bytes exceeds the {MAX_LINE_BYTES:,}-byte limit; skipped"))
            continue
        try:
            value = decode_json(raw)
        except Exception as exc:  # noqa: BLE001 - any undecodable line is one warning, never a crash
            if index == last and not terminated:
                problem = f"truncated last line (no newline; the writer stopped mid-append): {_describe(exc)}"
            else:
                problem = f"not valid JSON: {_describe(exc)}"
            warnings.append(IngestWarning(path, index, problem))
            continue
        if expect_object and not isinstance(value, dict):
            warnings.append(IngestWarning(path, index, f"expected a JSON object, got {type(value).__name__}"))
            continue
        yield ParsedLine(index, value)


def read_bytes(path: Path, warnings: list[IngestWarning]) -> bytes | None:
    """Read a file whole, turning OS errors into a warning."""
    try:
        return path.read_bytes()
    except OSError as exc:
        warnings.append(IngestWarning(str(path), None, f"cannot read file: {exc.strerror or exc}"))
        return None


def count_nonblank_lines(data: bytes) -> int:
    """Number of non-blank lines, for checking that records + skipped add up."""
    return sum(1 for raw in data.split(b"\n") if raw.strip())
