"""A log's excerpt for a human: its last lines and the lines around chosen ones, numbered, bounded.

Read in one forward pass (gzip included, as every input), holding only the lines kept: a log of
gigabytes costs the lines shown, not the file. Lines are whole (the caller redacts them before it
cuts them for display: a cut could split a credential from the shape that names it); one longer than
HELD_LINE_BYTES is shown as its length. Lines are numbered from 1 as the log parser numbers them, so
an excerpt's numbers are those the findings quote.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from trace_doctor.ingest.reading.input_stream import InputStream
from trace_doctor.ingest.reading.jsonl import iter_line_chunks

CHUNK_BYTES = 1 << 20
# The longest line held (a longer one is skipped as it is read): 200 tail lines cost at most 13 MB.
HELD_LINE_BYTES = 64 * 1024


@dataclass
class Excerpt:
    """What was kept of one file: `tail` (its last lines) and `around` (each chosen line with its
    neighbours), as (line number, text); `lines` counts every line of the file."""

    lines: int = 0
    tail: list[tuple[int, str]] = field(default_factory=list)
    # (the chosen lines in it, its lines): neighbourhoods that touch are one block.
    around: list[tuple[list[int], list[tuple[int, str]]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _shown(raw: bytes, oversized: int) -> str:
    if oversized:
        return f"[a line of {oversized:,} bytes, not shown]"
    return raw.decode("utf-8", errors="replace").rstrip("\r")


def _blocks(near: list[tuple[int, str]], centres: list[int]) -> list[tuple[list[int], list[tuple[int, str]]]]:
    """The lines kept around the chosen ones, cut where the numbering skips, each with its chosen lines."""
    blocks: list[list[tuple[int, str]]] = []
    for number, text in near:
        if blocks and blocks[-1][-1][0] == number - 1:
            blocks[-1].append((number, text))
        else:
            blocks.append([(number, text)])
    return [([c for c in centres if block[0][0] <= c <= block[-1][0]], block) for block in blocks]


def read_excerpt(path: Path, *, last: int, around: list[int], context: int, max_line_chars: int) -> Excerpt | None:
    """The `last` lines of the file at `path`, and `context` lines either side of each line in
    `around`; None when the file cannot be opened."""
    wanted = {n for centre in around for n in range(max(1, centre - context), centre + context + 1)}
    tail: deque[tuple[int, bytes, int]] = deque(maxlen=max(0, last))  # decoded only once kept
    near: list[tuple[int, str]] = []
    number = 0
    try:
        stream = InputStream(path)
    except OSError:
        return None
    with stream:
        for chunk in iter_line_chunks(stream, CHUNK_BYTES, max_line=HELD_LINE_BYTES):
            pieces = [(b"", chunk.oversized)] if chunk.oversized else [(p, 0) for p in chunk.data.split(b"\n")]
            if not chunk.oversized and chunk.data.endswith(b"\n"):
                pieces.pop()  # the empty piece after the last newline is no line
            for raw, oversized in pieces:
                number += 1
                if last > 0:
                    tail.append((number, raw, oversized))
                if number in wanted:
                    near.append((number, _shown(raw, oversized)))
        problems = stream.problems()
    return Excerpt(
        lines=number,
        tail=[(n, _shown(raw, oversized)) for n, raw, oversized in tail],
        around=_blocks(near, sorted(set(around))),
        problems=problems,
    )
