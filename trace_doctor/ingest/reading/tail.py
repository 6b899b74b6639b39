"""Following a file as a live run appends to it: each look reads only the bytes added since the last.

A tail remembers where it stopped (offset), which file it read (device and inode), the last bytes it
read, and the bytes of a last line not yet ended by a newline: that line waits for its end, so a
half-written record is never parsed. A file replaced (another inode: a writer that re-creates it),
truncated (smaller than what was read), or either and written past the old offset between two looks
(the bytes before the offset are no longer the ones read: a relaunch that deletes metrics.jsonl and
logs its steps, or a deleted file's inode number reused) is read again from its start, and the caller
is told so it can drop what it built from the old bytes. The state is a few numbers, a few bytes and at
most one partial line, however long the run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

# A look reads at most this much: a run that wrote gigabytes before the watch started is caught up
# over several looks, each of bounded memory. What a look parses is held until it is folded into the
# tables: 64 MB looks made catching up with a 611 MB trace peak at 1037 MB (a cold analysis: 503 MB);
# 16 MB looks peak at 605 MB for 4% more time (the folds cost what the spans cost, not what the looks do).
READ_LIMIT = 16 * 1024 * 1024
# A partial line longer than this is no line a reader keeps (the JSONL readers refuse longer ones):
# it is dropped, and the bytes up to its newline skipped.
MAX_PARTIAL = 256 * 1024 * 1024
# How many of the last bytes read are kept to tell an appended file from one rewritten past the old offset.
SEAM_BYTES = 64


@dataclass
class TailRead:
    """What one look found: the complete new lines (without their newline), and whether the file was
    read afresh (replaced or truncated), so everything built from its old bytes is void."""

    lines: list[bytes] = field(default_factory=list)
    first_line: int = 1  # the 1-based line number of lines[0] in the file
    reset: bool = False
    grew: bool = False  # any byte was added (a partial line included)
    more: bool = False  # the look stopped at READ_LIMIT: the file already holds more


@dataclass
class FileTail:
    """One followed file (see the module docstring)."""

    path: Path
    offset: int = 0
    identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file read so far
    partial: bytes = b""
    lines_read: int = 0  # complete lines handed out so far
    dropping: bool = False  # inside an over-long line: skip to its newline
    seam: bytes = b""  # the last bytes read (up to SEAM_BYTES), ending at offset

    def look(self) -> TailRead:
        """Read what was appended since the last look (nothing, when the file is gone for now)."""
        try:
            with open(self.path, "rb") as handle:
                stat = os.fstat(handle.fileno())
                identity = (stat.st_dev, stat.st_ino)
                reset = self.identity is not None and (
                    identity != self.identity or stat.st_size < self.offset or not self._same_seam(handle)
                )
                if reset:
                    self._restart()
                self.identity = identity
                if stat.st_size == self.offset:
                    return TailRead(first_line=self.lines_read + 1, reset=reset)
                handle.seek(self.offset)
                data = handle.read(READ_LIMIT)
        except OSError:
            return TailRead(first_line=self.lines_read + 1)
        self.offset += len(data)
        self.seam = (self.seam + data)[-SEAM_BYTES:]
        read = self._split(data, reset)
        read.more = self.offset < stat.st_size
        return read

    def _restart(self) -> None:
        self.offset, self.partial, self.lines_read, self.dropping, self.seam = 0, b"", 0, False, b""

    def _same_seam(self, handle) -> bool:
        """Whether the bytes before the offset are still the ones read last (an appended file's are)."""
        if not self.seam:
            return True
        handle.seek(self.offset - len(self.seam))
        return handle.read(len(self.seam)) == self.seam

    def _split(self, data: bytes, reset: bool) -> TailRead:
        first = self.lines_read + 1
        end = data.rfind(b"\n")
        if end < 0:
            self._keep_partial(data)
            return TailRead(first_line=first, reset=reset, grew=bool(data))
        lines = (self.partial + data[:end]).split(b"\n")
        self.partial = b""
        if self.dropping:
            lines[0] = b""  # the end of an over-long line: counted, not read
            self.dropping = False
        self._keep_partial(data[end + 1 :])
        self.lines_read += len(lines)
        return TailRead(lines, first, reset, True)

    def _keep_partial(self, rest: bytes) -> None:
        if self.dropping:
            return
        if len(self.partial) + len(rest) > MAX_PARTIAL:
            self.partial, self.dropping = b"", True
            return
        self.partial += rest
