"""A gzip file decompressed as far as it goes: a stream cut short or corrupt midway yields every byte before the break.

Files are cut short in practice (`head -c`, a copy interrupted mid-transfer, a writer killed before
it wrote the end marker). Python's gzip module raises there, and through its buffered reader a read
that meets the break loses what it had decompressed in that call: up to a whole read-ahead chunk,
all of it for a file missing only its 8-byte trailer. Here zlib is fed directly and each read hands
out what it produced; the break is kept as a `GzipBreak` for the reader to report once, with where
it came (in decompressed bytes) and why.

Concatenated members (`cat a.gz b.gz`) and zero padding after a member are read as gzip reads them.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import BinaryIO

GZIP_MAGIC = b"\x1f\x8b"
# zlib's window bits for a gzip wrapper (header and CRC-32/length trailer checked by zlib itself).
GZIP_WBITS = 31
READ_BLOCK_BYTES = 64 * 1024


@dataclass(frozen=True)
class GzipBreak:
    """Where and why a gzip stream stopped before its end: `truncated` (the file ends inside a member),
    `corrupt` (zlib refused the data) or `trailing` (bytes after the last member that are not gzip)."""

    kind: str
    detail: str
    at: int  # decompressed bytes produced before the break
    file_bytes: int  # the compressed file's size

    # How the warnings of a stream that broke before its end begin (truncated or corrupt midway): what was read
    # of such a file ends where the copy broke, not where its writer stopped.
    BROKE_EARLY = ("the gzip stream ends", "the gzip stream is corrupt")

    def problem(self) -> str:
        """What to tell the user: what happened, where, and what of the file is kept."""
        if self.kind == "trailing":
            return (
                f"the file goes on after its gzip data ({self.at:,} decompressed bytes) with bytes that are "
                f"not gzip ({self.detail}); they are not read"
            )
        if self.kind == "truncated" and not self.at:
            return f"the gzip stream ends after {self.file_bytes:,} bytes, before any data (a copy cut short?)"
        if self.kind == "truncated":
            return (
                f"the gzip stream ends early (truncated after {self.at:,} decompressed bytes; the file is "
                f"{self.file_bytes:,} bytes: a copy cut short or a writer stopped mid-write?); "
                "the records before it are kept"
            )
        if not self.at:
            return f"{self.detail} (the gzip data is corrupt from its start)"
        return (
            f"the gzip stream is corrupt after {self.at:,} decompressed bytes ({self.detail}); "
            "the records before it are kept"
        )


class Gunzip:
    """The decompressed bytes of a gzip file, read forward from its first byte; never raises for
    damaged data (`broken` says where it stopped), only OSError for a failing read of the file."""

    def __init__(self, raw: BinaryIO, file_bytes: int) -> None:
        self._raw = raw
        self._file_bytes = file_bytes
        self._inflate = zlib.decompressobj(wbits=GZIP_WBITS)
        self._input = b""  # compressed bytes read from the file and not yet taken by zlib
        self._in_member = True  # False once a member ended: what follows is padding, a member or garbage
        self._member_fed = False  # the current member has had bytes: the file ending now cuts it short
        self._may_hold_output = False  # zlib filled the last output: it may hold more without new input
        self.produced = 0
        self.broken: GzipBreak | None = None
        self.done = False

    def read(self, size: int) -> bytes:
        """Up to `size` decompressed bytes; b"" at the end of the data or at a break."""
        blocks: list[bytes] = []
        wanted = size
        while wanted > 0 and self._fill():
            if not self._in_member:
                self._next_member()
                continue
            block, refusal = self._inflate_held(wanted)
            self.produced += len(block)
            wanted -= len(block)
            blocks.append(block)
            if refusal is not None:
                self._stop("corrupt", refusal)
        return b"".join(blocks)

    def _inflate_held(self, wanted: int) -> tuple[bytes, str | None]:
        """Up to `wanted` bytes out of the held input, and zlib's refusal if it refused the input."""
        before = self._inflate.copy()
        try:
            block = self._inflate.decompress(self._input, wanted)
        except zlib.error as exc:
            # A call that raises loses its whole output: the input is fed again from the state before.
            return self._salvage(before, wanted, str(exc))
        self._took(self._inflate, block, wanted, self._inflate.unconsumed_tail)
        return block, None

    def _salvage(self, inflate: zlib._Decompress, wanted: int, refusal: str) -> tuple[bytes, str | None]:
        """The output zlib gives before the byte it refuses, the held input fed to it one byte at a time.
        When the output fills `wanted` first, the refusal lies beyond it and the next read meets it."""
        data = self._input
        blocks: list[bytes] = []
        for index in range(len(data)):
            try:
                block = inflate.decompress(data[index : index + 1], wanted)
            except zlib.error:
                break
            blocks.append(block)
            wanted -= len(block)
            if wanted <= 0:
                self._took(inflate, block, len(block), inflate.unconsumed_tail + data[index + 1 :])
                return b"".join(blocks), None
        else:  # every byte taken a piece at a time: nothing refused after all
            self._took(inflate, b"", wanted, b"")
            return b"".join(blocks), None
        return b"".join(blocks), refusal

    def _took(self, inflate: zlib._Decompress, block: bytes, wanted: int, rest: bytes) -> None:
        """After zlib gave `block` for a request of `wanted` bytes: the input it left, and the member's end."""
        self._inflate = inflate
        self._member_fed = True
        self._input = rest
        # Output cut at `wanted`: zlib may hold more of it with no input left to feed.
        self._may_hold_output = len(block) == wanted
        if inflate.eof:
            self._input = inflate.unused_data
            self._in_member = False
            self._may_hold_output = False

    def _fill(self) -> bool:
        """Whether there is something to give zlib: held input, output zlib may hold, or more of the file."""
        if self.done:
            return False
        if self._input or self._may_hold_output:
            return True
        self._input = self._raw.read(READ_BLOCK_BYTES)
        if self._input:
            return True
        self.done = True
        if self._in_member and self._member_fed:
            self.broken = GzipBreak("truncated", "no end-of-stream marker", self.produced, self._file_bytes)
        return False

    def _next_member(self) -> None:
        """After a member's end: zero padding is skipped; a gzip header starts the next member; anything
        else is garbage after the data. (A lone first magic byte at the end of a read is taken as a header.)"""
        self._input = self._input.lstrip(b"\0")
        if not self._input:
            return
        if not GZIP_MAGIC.startswith(self._input[:2]):
            self._stop("trailing", "no gzip header")
            return
        self._inflate = zlib.decompressobj(wbits=GZIP_WBITS)
        self._in_member = True
        self._member_fed = False

    def _stop(self, kind: str, detail: str) -> None:
        self.done = True
        self._input = b""
        self.broken = GzipBreak(kind, detail, self.produced, self._file_bytes)
