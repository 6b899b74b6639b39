"""The typed read with bisection shared by the trace and timing_spans readers: every line is read once,
in order, either typed or handed back refused in a small piece; a bad line costs only its neighbourhood."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from trace_doctor.ingest.parsers import timing_spans
from trace_doctor.ingest.reading.bisected_read import Refused, read_bisected
from trace_doctor.ingest.trace import trace_parse


class Reader:
    """A typed read that refuses any piece holding a line starting with `bad`; it records what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[bytes, list[int]]] = []

    def __call__(self, data: bytes, numbers: list[int]) -> list[int] | None:
        self.calls.append((data, list(numbers)))
        if any(line.startswith(b"bad") for line in data.split(b"\n")):
            return None
        return list(numbers)


def lines_with_bad(count: int, bad: set[int]) -> tuple[list[bytes], list[int]]:
    lines = [(b"bad %d" if i in bad else b"good %d") % i for i in range(count)]
    return lines, [10 + i for i in range(count)]  # numbers need not start at 1: a chunk's lines go on


def flatten(pieces: list[list[int] | Refused]) -> list[int]:
    return [n for piece in pieces for n in (piece.numbers if isinstance(piece, Refused) else piece)]


def test_clean_lines_are_one_read_of_the_joined_newline_terminated_bytes():
    lines, numbers = lines_with_bad(100, set())
    reader = Reader()
    assert read_bisected(lines, numbers, reader, min_lines=8) == [numbers]
    assert reader.calls == [(b"\n".join(lines) + b"\n", numbers)]


def test_no_lines_no_read():
    reader = Reader()
    assert read_bisected([], [], reader, min_lines=8) == []
    assert reader.calls == []


def test_a_bad_line_is_handed_back_with_a_few_neighbours_and_the_rest_stays_typed():
    lines, numbers = lines_with_bad(1000, {517})
    reader = Reader()
    pieces = read_bisected(lines, numbers, reader, min_lines=8)
    refused = [p for p in pieces if isinstance(p, Refused)]
    assert len(refused) == 1 and 10 + 517 in refused[0].numbers and len(refused[0].numbers) <= 8
    assert refused[0].lines == [lines[n - 10] for n in refused[0].numbers]
    assert flatten(pieces) == numbers
    # Halving: about two reads per level down to `min_lines`, not one per line.
    assert len(reader.calls) <= 2 * math.ceil(math.log2(1000 / 8)) + 1


def test_a_piece_refused_whole_comes_back_in_order_in_small_pieces():
    lines = [b"bad %d" % i for i in range(100)]
    pieces = read_bisected(lines, list(range(1, 101)), Reader(), min_lines=8)
    assert all(isinstance(p, Refused) and len(p.numbers) <= 8 for p in pieces)
    assert flatten(pieces) == list(range(1, 101))


@given(
    count=st.integers(min_value=0, max_value=400),
    bad=st.sets(st.integers(min_value=0, max_value=399), max_size=12),
    min_lines=st.integers(min_value=1, max_value=70),
)
def test_every_line_is_read_once_in_order_and_only_bad_neighbourhoods_are_refused(count, bad, min_lines):
    bad = {b for b in bad if b < count}
    lines, numbers = lines_with_bad(count, bad)
    pieces = read_bisected(lines, numbers, Reader(), min_lines=min_lines)
    assert flatten(pieces) == numbers
    for piece in pieces:
        if isinstance(piece, Refused):
            assert len(piece.numbers) <= min_lines and any(n - 10 in bad for n in piece.numbers)
        else:
            assert not any(n - 10 in bad for n in piece)
    refused = sum(len(p.numbers) for p in pieces if isinstance(p, Refused))
    assert refused <= len(bad) * min_lines


def test_the_trace_and_timing_spans_readers_share_it():
    assert trace_parse.read_bisected is read_bisected and timing_spans.read_bisected is read_bisected
