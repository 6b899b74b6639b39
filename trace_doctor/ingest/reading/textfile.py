"""Reading diagnostic text files: decode leniently, warn once about bytes that are not UTF-8.

A gzipped log (`logs.log.gz`, a folder shared after `gzip -r`) is read through its decompression,
as every input is (input_stream.py): cut short, its lines before the cut are kept with a warning.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from pathlib import Path

from trace_doctor.ingest.reading.file_warnings import WarningSink
from trace_doctor.ingest.reading.input_stream import InputStream
from trace_doctor.model import IngestWarning

INT64_MAX = 2**63 - 1
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


# Byte-order marks of UTF-16: Windows PowerShell (`python train.py > out.log`, Out-File) and some
# editors write logs in UTF-16 with one. Read as UTF-8 they are a NUL every other byte.
UTF16_BOMS = ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
UTF16_SNIFF_BYTES = 4098
# Decoders that stop before a character cut by the end of a block (final=False) and say how far they got.
DECODERS = {"utf-8": codecs.utf_8_decode, "utf-16-le": codecs.utf_16_le_decode, "utf-16-be": codecs.utf_16_be_decode}
READ_BLOCK_BYTES = 8 * 1024 * 1024
# A longer line is cut here: a log message is never this long (a printed tensor or JSON blob is), and
# the classifiers' cost then stops growing with the line (a 300 MB line took 86 s, read whole).
MAX_TEXT_LINE_CHARS = 1024 * 1024


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
    """The file's lines (no line endings) as a list; see `text_lines`. For the readers that look back and
    ahead (dump blocks); a reader that goes forward once takes `text_lines`."""
    lines = text_lines(path, warnings)
    return None if lines is None else list(lines)


def text_lines(path: Path, warnings: WarningSink, *, max_line: int = MAX_TEXT_LINE_CHARS) -> Iterator[str] | None:
    """The file's lines (no line endings), read in blocks of READ_BLOCK_BYTES: the memory held is a block
    and a line, whatever the file's size. None (with a warning) when it cannot be opened.

    Invalid UTF-8 becomes U+FFFD with one warning per file; UTF-16 with a byte-order mark is decoded as
    such; the byte-order marks a file starts with are dropped (two when two tools wrote it in turn). A line
    longer than `max_line` characters is cut there (one warning per file): the cost of a line is then
    the reading of its bytes, and no log message is that long (it is printed data)."""
    try:
        stream = InputStream(path)
    except OSError as exc:
        warnings.append(IngestWarning(str(path), None, f"cannot read file: {exc.strerror or exc}"))
        return None
    return _lines(stream, str(path), warnings, max_line)


def _lines(stream: InputStream, source: str, warnings: WarningSink, max_line: int) -> Iterator[str]:
    with stream:
        yield from _split(_decoded(stream, source, warnings), source, warnings, max_line)
        # A read error or a gzip stream cut short ends the bytes early: the lines so far stand.
        for problem in stream.problems():
            warnings.append(IngestWarning(source, None, problem))


def _decoded(handle: InputStream, source: str, warnings: WarningSink) -> Iterator[str]:
    """The file's text in pieces of about a block (a character cut by a block's end goes to the next)."""
    head = handle.read(UTF16_SNIFF_BYTES)
    codec = utf16_encoding(head) or "utf-8"
    decode = DECODERS[codec]
    data = head[2:] if codec != "utf-8" else head
    lines_before = 0
    warned = False
    final = False
    while not final:
        block = handle.read(READ_BLOCK_BYTES)
        final = not block
        data += block
        try:
            text, used = decode(data, "strict", final)
        except UnicodeDecodeError as exc:
            text, used = decode(data, "replace", final)
            if not warned:
                warned = True
                line = lines_before + decode(data[: exc.start], "replace", True)[0].count("\n") + 1
                name = "UTF-8" if codec == "utf-8" else codec.upper()
                why = "binary garbage?" if codec == "utf-8" else "binary garbage or a cut file?"
                warnings.append(
                    IngestWarning(
                        source, line, f"bytes that are not {name} ({why}) were replaced with U+FFFD; first at this line"
                    )
                )
        data = data[used:]
        if text:
            yield text
            lines_before += text.count("\n")


def _split(pieces: Iterator[str], source: str, warnings: WarningSink, max_line: int) -> Iterator[str]:
    """Lines out of text pieces; a line's text beyond `max_line` characters is dropped as it comes."""
    held = ""  # the start of the line that goes on in the next piece (at most `max_line` characters)
    held_chars = 0  # that line's length so far, the dropped part included
    number = 0  # lines given so far
    cut = False  # a cut line was warned about

    def warn_cut(line: int, length: int) -> None:
        nonlocal cut
        if not cut:
            cut = True
            warnings.append(
                IngestWarning(
                    source,
                    line,
                    f"a line of {length:,} characters: lines are read up to {max_line:,} characters, "
                    "the rest of each longer line is not read",
                )
            )

    for index, text in enumerate(pieces):
        if index == 0:
            text = text.lstrip("\ufeff")  # byte-order marks are encoding markers, not text
        lines = text.split("\n")
        tail = lines.pop()  # goes on in the next piece
        if lines:
            first_length = held_chars + len(lines[0])
            if held_chars:
                lines[0] = held + lines[0][: max(0, max_line - len(held))]
            # One pass in C finds whether any line is too long; only then are they looked at one by one.
            if first_length > max_line or max(map(len, lines)) > max_line:
                for offset, line in enumerate(lines):
                    length = first_length if offset == 0 else len(line)
                    if length > max_line:
                        lines[offset] = line[:max_line]
                        warn_cut(number + offset + 1, length)
            if "\r" in text or "\x00" in text:
                lines = [_clean(line) for line in lines]
            else:
                lines[0] = _clean(lines[0])  # its carriage return may have ended the previous piece
            number += len(lines)
            yield from lines
            held, held_chars = "", 0
        if held_chars < max_line:
            held += tail[: max_line - held_chars]
        held_chars += len(tail)
    if held_chars:
        if held_chars > max_line:
            warn_cut(number + 1, held_chars)
        yield _clean(held)


def _clean(line: str) -> str:
    if line.endswith("\r"):
        line = line[:-1]
    return line.replace("\x00", "\ufffd") if "\x00" in line else line


def strip_ansi(text: str) -> str:
    """Text without terminal colour and cursor escape sequences."""
    return ANSI_ESCAPE.sub("", text) if "\x1b" in text else text


def int64(digits: str) -> int | None:
    """A non-negative integer read from text, or None when it does not fit a 64-bit column."""
    if len(digits.lstrip("0")) > 19:  # also keeps int() clear of its 4,300-digit limit
        return None
    value = int(digits)
    return value if value <= INT64_MAX else None
