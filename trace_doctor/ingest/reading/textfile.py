"""Reading diagnostic text files: decode leniently, warn once about bytes that are not UTF-8."""

from __future__ import annotations

import re
from pathlib import Path

from trace_doctor.ingest.reading.file_warnings import WarningSink
from trace_doctor.ingest.reading.jsonl import read_bytes
from trace_doctor.model import IngestWarning

INT64_MAX = 2**63 - 1
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


# Byte-order marks of UTF-16: Windows PowerShell (`python train.py > out.log`, Out-File) and some
# editors write logs in UTF-16 with one. Read as UTF-8 they are a NUL every other byte.
UTF16_BOMS = ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def utf16_encoding(data: bytes) -> str | None:
    """The UTF-16 codec whose byte-order mark starts `data`, or None. A log is mostly ASCII, which UTF-16
    writes with a NUL byte beside each character: without a quarter of NULs after the mark, the two
    bytes are garbage at the start of a UTF-8 file (which never holds NULs), not a mark."""
    codec = next((codec for bom, codec in UTF16_BOMS if data.startswith(bom)), None)
    sample = data[2:4098]
    return codec if codec and sample and sample.count(0) * 4 >= len(sample) else None


def utf16_as_utf8(data: bytes) -> bytes:
    """`data` (a whole file or its first bytes) as UTF-8 when it is UTF-16 with a byte-order mark, else as is.
    A head cut inside a character loses only that character."""
    codec = utf16_encoding(data)
    if codec is None:
        return data
    return data[2 : len(data) - (len(data) % 2)].decode(codec, errors="replace").encode("utf-8")


def read_text_lines(path: Path, warnings: WarningSink) -> list[str] | None:
    """The file's lines (no line endings); invalid UTF-8 becomes U+FFFD with one warning per file.
    UTF-16 with a byte-order mark is decoded as such (bytes that are not UTF-16 warned about the same way)."""
    data = read_bytes(path, warnings)
    if data is None:
        return None
    codec = utf16_encoding(data)
    if codec is not None:
        return _utf16_lines(path, data, codec, warnings)
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
    return _lines(text)


def _utf16_lines(path: Path, data: bytes, codec: str, warnings: WarningSink) -> list[str]:
    body = data[2:]
    try:
        text = body.decode(codec)
    except UnicodeDecodeError as exc:
        text = body.decode(codec, errors="replace")
        line = body[: exc.start].decode(codec, errors="replace").count("\n") + 1
        warnings.append(
            IngestWarning(
                str(path),
                line,
                f"bytes that are not {codec.upper()} (binary garbage or a cut file?) were replaced with U+FFFD; "
                "first at this line",
            )
        )
    return _lines(text)


def _lines(text: str) -> list[str]:
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
