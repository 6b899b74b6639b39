"""An input file's bytes as a stream: gunzipped when compressed, with a cap on what decompression yields.

Readers take a file a chunk at a time, so memory follows what they keep, never the file's size. A
gzip stream is decompressed as it is read; a "gzip bomb" (a megabyte that inflates to gigabytes)
would still cost the time to inflate it all, so decompression stops once it has produced more than
MAX_EXPANSION times the compressed file's size (and at least MIN_CAP_BYTES), and the reader reports
how much it read. What was read before the cap is kept like any truncated file's records, and so
is what a gzip stream cut short or corrupt midway gave before its break (gunzip.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from trace_doctor.ingest.reading.gunzip import GZIP_MAGIC, Gunzip

# Real traces and metrics compress 5-15:1 (a cookbook trace_events.jsonl: 13:1); a bomb, ~1000:1.
MAX_EXPANSION = 100
# Below this, no file is cut short whatever its ratio: small, very repetitive files are not bombs.
MIN_CAP_BYTES = 64 * 1024 * 1024


class InputStream:
    """The (decompressed) bytes of one file, read forward; `head()` peeks without consuming.

    Raises OSError when the file cannot be opened. A corrupt or truncated gzip stream ends the bytes
    where it breaks, and a failing read where it fails (`error` says why): what was read before is kept.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_expansion: int | None = None,
        min_cap: int | None = None,
        limit: int | None = None,
        start: int = 0,
    ) -> None:
        self._raw: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed by close() / the context manager
        try:
            self.size = os.fstat(self._raw.fileno()).st_size
            self.compressed = self._raw.read(2) == GZIP_MAGIC
            # `start`: a plain file read from that byte on (what a grown file added since a read).
            self._raw.seek(start if not self.compressed else 0)
        except OSError:
            self._raw.close()
            raise
        self._gunzip = Gunzip(self._raw, self.size) if self.compressed else None
        self.max_expansion = MAX_EXPANSION if max_expansion is None else max_expansion
        floor = MIN_CAP_BYTES if min_cap is None else min_cap
        self.cap = max(floor, self.max_expansion * self.size) if self.compressed else None
        # The bytes read at most, as an earlier read of the file saw them (it may have grown since).
        self.limit = limit
        self.produced = 0  # bytes handed out (decompressed)
        self.capped = False  # reading stopped at the cap with more data left
        self.error: str | None = None  # reading stopped at a corrupt or truncated compressed stream
        self._pending = b""  # bytes peeked by head() and not yet read

    def __enter__(self) -> InputStream:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._raw.close()

    def position(self) -> int:
        """Bytes of the file on disk consumed so far (for progress against `size`)."""
        try:
            return self._raw.tell()
        except (OSError, ValueError):
            return self.size

    def head(self, size: int) -> bytes:
        """Up to `size` first bytes, left in the stream for the next `read`."""
        if len(self._pending) < size:
            self._pending += self._read(size - len(self._pending))
        return self._pending[:size]

    def read(self, size: int) -> bytes:
        """Up to `size` bytes; b"" at the end of the file or at the decompression cap."""
        if self._pending:
            block, self._pending = self._pending[:size], self._pending[size:]
            return block
        return self._read(size)

    def _read(self, size: int) -> bytes:
        if self.error is not None:
            return b""
        try:
            if self.limit is not None:
                size = min(size, self.limit - self.produced)
                if size <= 0:
                    return b""
            if self.cap is not None:
                size = min(size, self.cap - self.produced)
                if size <= 0:
                    self.capped = self.capped or bool(self._read_file(1))
                    return b""
            block = self._read_file(size)
        except OSError as exc:
            self.error = exc.strerror or str(exc) or type(exc).__name__
            return b""
        self.produced += len(block)
        return block

    def _read_file(self, size: int) -> bytes:
        if self._gunzip is None:
            return self._raw.read(size)
        block = self._gunzip.read(size)
        if self._gunzip.broken is not None:
            self.error = self._gunzip.broken.detail
        return block

    def problems(self) -> list[str]:
        """What to tell the user about how reading ended: at the decompression cap, or at a corrupt stream."""
        found = []
        if self.capped:
            found.append(self.cap_problem())
        broken = self._gunzip.broken if self._gunzip is not None else None
        if broken is not None:
            found.append(broken.problem() if broken.at else f"cannot read file: {broken.problem()}")
        elif self.error is not None:
            found.append(
                f"cannot read file: {self.error}"
                if not self.produced
                else f"cannot read the rest of the file after {self.produced:,} bytes: {self.error}; "
                "the records before were kept"
            )
        return found

    def cap_problem(self) -> str:
        """What to tell the user when reading stopped at the cap."""
        return (
            f"decompression stopped after {self.produced:,} bytes from a {self.size:,}-byte gzip file (more than "
            f"{self.max_expansion}:1: a decompression bomb?); the records before that point are kept"
        )
