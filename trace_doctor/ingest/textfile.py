"""Reading diagnostic text files: decode leniently, warn once about bytes that are not UTF-8."""

from __future__ import annotations

import re
from pathlib import Path

from trace_doctor.ingest.jsonl import read_bytes
from trace_doctor.model import IngestWarning

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def read_text_lines(path: Path, warnings: list[IngestWarning]) -> list[str] | None:
    """The file's lines (no line endings); invalid UTF-8 becomes U+FFFD with one warning per file."""
    data = read_bytes(path, warnings)
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", errors="replace")
        line = data.count(b"\n", 0, exc.start) + 1
        warnings.append(IngestWarning(str(path), line, "bytes that are not UTF-8 (binary garbage?) were replaced with U+FFFD; first at this line"))
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def strip_ansi(text: str) -> str:
    """Text without terminal colour and cursor escape sequences."""
    return ANSI_ESCAPE.sub("", text) if "\x1b" in text else text
