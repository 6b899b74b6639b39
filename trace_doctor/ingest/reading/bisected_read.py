"""Typed reading of many JSON lines at once that isolates, by halving, the lines the typed read refuses.

A typed read (polars with an explicit schema) takes thousands of lines in one call, but refuses
the whole call for a single line it cannot take. A refused piece is halved, and each refused half
halved again, until pieces are small; those go back to the caller, whose per-line decoder reports
each bad line as an ingest warning. A bad line thus costs itself, a few neighbours decoded one by
one and about one more read of its chunk, never the fast path for the rest of the file. The trace
reader and the timing_spans reader both read this way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeVar

T = TypeVar("T")


class Refused(NamedTuple):
    """Lines the typed read refused, few enough to be decoded one by one (1-based file line `numbers`)."""

    lines: list[bytes]
    numbers: list[int]


def read_bisected(
    lines: list[bytes],
    numbers: list[int],
    read: Callable[[bytes, list[int]], T | None],
    *,
    min_lines: int,
) -> list[T | Refused]:
    """`read` the lines, halving every refused piece of more than `min_lines` lines: the pieces in line order.

    `read` gets the lines joined and newline-terminated, with their file line `numbers`, and returns
    its typed rows or None to refuse them.
    """
    pieces: list[T | Refused] = []
    _read_into(pieces, lines, numbers, read, min_lines)
    return pieces


def _read_into(
    pieces: list[T | Refused],
    lines: list[bytes],
    numbers: list[int],
    read: Callable[[bytes, list[int]], T | None],
    min_lines: int,
) -> None:
    if not lines:
        return
    typed = read(b"\n".join(lines) + b"\n", numbers)
    if typed is not None:
        pieces.append(typed)
    elif len(lines) <= min_lines:
        pieces.append(Refused(lines, numbers))
    else:
        half = len(lines) // 2
        _read_into(pieces, lines[:half], numbers[:half], read, min_lines)
        _read_into(pieces, lines[half:], numbers[half:], read, min_lines)
