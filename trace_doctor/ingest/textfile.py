"""Reading diagnostic text files: decode leniently, warn once about bytes that are not UTF-8."""

from __future__ import annotations

import re
from pathlib import Path

from trace_doctor.ingest.file_warnings import WarningSink
from trace_doctor.ingest.jsonl import read_bytes
from trace_doctor.model import IngestWarning

INT64_MAX = 2**63 - 1
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def read_text_lines(path: Path, warnings: WarningSink) -> list[str] | None:
    """The file's lines (no line endings); invalid UTF-8 becomes U+FFFD with one warning per file."""
    data = read_bytes(path, warnings)
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", errors="replace")
        line = data.count(b"\n", 0, exc.start) + 1
        warnings.append(
            IngestWarning(
                str(path),
                line,
                "bytes that are not UTF-8 (binary garbage?) were replaced with U+FFFD; first at this line",
            )
        )
    if text.startswith("\ufeff"):
        text = text[1:]  # a byte-order mark is an encoding marker, not text
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def strip_ansi(text: str) -> str:
    """Text without terminal colour and cursor escape sequences."""
    return ANSI_ESCAPE.sub("", text) if "\x1b" in text else text


def int64(digits: str) -> int | None:
    """A non-negative integer read from text, or None when it does not fit a 64-bit column."""
    if len(digits.lstrip("0")) > 19:  # also keeps int() clear of its 4,300-digit limit
        return None
    value = int(digits)
    return value if value <= INT64_MAX else None
