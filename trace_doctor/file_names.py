"""File names that are not UTF-8: opened by their real bytes, shown with U+FFFD in their place.

POSIX file names are bytes; Python keeps the bytes that are not UTF-8 as lone surrogates, which
no table, JSON document or report can hold (polars refuses them outright). Every input path is
made by `input_path`: for an ordinary name it is a plain Path; for such a name it is a Path whose
text (`str()`, what tables, warnings and reports record) shows the bad bytes as U+FFFD, while the
operating system still gets the real bytes (`os.fspath()`, what open() and stat() use). Nothing
downstream of ingest re-opens a file from its recorded text, so the two never need to meet again.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePath

from trace_doctor.humanize import printable


class DisplayPath(type(Path())):
    """A path whose text is printable; the file system sees its real (non-UTF-8) bytes."""

    __slots__ = ()

    def __str__(self) -> str:
        return printable(super().__str__())

    def __fspath__(self) -> str:
        return super().__str__()

    # Two names that differ only in their bad bytes read the same, so equality goes by the real name
    # (Python 3.12+ compares paths by their text). The hash stays Path's: equal real names give
    # equal text, and a DisplayPath finds the plain Path of the same folder in a dict.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PurePath):
            return NotImplemented
        return os.fspath(self) == os.fspath(other)

    __hash__ = type(Path()).__hash__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


def is_printable(text: str) -> bool:
    """True when `text` holds no lone surrogate (a byte of a name that is not UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def input_path(path: str | os.PathLike[str]) -> Path:
    """`path` as a Path whose text every table and report can hold."""
    real = os.fspath(path)
    return Path(real) if is_printable(real) else DisplayPath(real)
