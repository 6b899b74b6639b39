"""A gzip stream that ends where its data is corrupt or cut off, keeping everything before that point.

`gzip.GzipFile` raises at the first bad byte (zlib.error for a corrupt deflate stream, EOFError
for a truncated file, BadGzipFile for trailing garbage) and hands out nothing of the block it was
decompressing, so a reader would lose a whole small file, or the rest of a large one, for one
damaged byte. This stream inflates small pieces itself and simply ends at the damage, with one
ingest warning that says where; every byte before it is read.
"""

from __future__ import annotations

import io
import zlib
from typing import BinaryIO

from trace_doctor.model import IngestWarning

# Compressed bytes inflated at a time: at most this much is lost before a corrupt byte.
INPUT_PIECE = 1024
# Decompressed bytes produced per step, so a highly compressed piece never inflates all at once.
OUTPUT_PIECE = 1024 * 1024
GZIP_WINDOW = 16 + zlib.MAX_WBITS  # a gzip header and trailer around the deflate stream


class GzipUntilCorrupt:
    """The decompressed bytes of `raw` (one or more gzip members) up to the first corrupt or missing byte."""

    def __init__(self, raw: BinaryIO, source: str, bad: list[IngestWarning]):
        self._raw = raw
        self._source = source
        self._bad = bad
        self._warned = False
        self.seek(0)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Only a rewind to the start is supported (what a format sniff needs): it reads up to the damage again."""
        if offset != 0 or whence != io.SEEK_SET:
            raise io.UnsupportedOperation("GzipUntilCorrupt only rewinds to the start")
        self._raw.seek(0)
        self._inflate = zlib.decompressobj(GZIP_WINDOW)
        self._in_member = False
        self._buffer = b""
        self._ended = False
        self._offset = 0
        return 0

    def tell(self) -> int:
        return self._offset

    def read(self, size: int | None = -1) -> bytes:
        whole = size is None or size < 0
        out = bytearray()
        while whole or len(out) < size:
            if self._buffer:
                take = self._buffer if whole else self._buffer[: size - len(out)]
                out += take
                self._offset += len(take)
                self._buffer = self._buffer[len(take) :]
            elif self._ended:
                break
            else:
                self._fill()
        return bytes(out)

    def _fill(self) -> None:
        """Inflate the next piece into the buffer, or end the stream."""
        try:
            if self._inflate.unconsumed_tail:
                self._buffer = self._inflate.decompress(self._inflate.unconsumed_tail, OUTPUT_PIECE)
                return
            pending = b""
            if self._inflate.eof:
                # A member ended: what follows is another member (concatenated gzip) or the end.
                pending = self._inflate.unused_data
                self._inflate = zlib.decompressobj(GZIP_WINDOW)
                self._in_member = False
            compressed = pending or self._raw.read(INPUT_PIECE)
            if not compressed:
                if self._in_member:
                    self._end("the file ends inside the compressed data (cut off)")
                self._ended = True
                return
            self._in_member = True
            self._buffer = self._inflate.decompress(compressed, OUTPUT_PIECE)
        except zlib.error as exc:
            self._end(str(exc))

    def _end(self, reason: str) -> None:
        self._ended = True
        if not self._warned:
            self._warned = True
            where = f"after {self._offset:,} decompressed bytes"
            self._bad.append(
                IngestWarning(self._source, None, f"corrupt gzip data {where} ({reason}): the lines before it are read")
            )
