"""A command's process, set up before polars or numpy is first imported (they read these settings once).

Imports nothing heavy itself: the command line calls `prepare_process()` before its other imports.
"""

from __future__ import annotations

import os


def prepare_process() -> None:
    """Allocator and thread settings for an analysis; a user's own environment settings win."""
    # polars' allocator (jemalloc) keeps freed pages for 10 s by default; span pairing frees large
    # intermediates, so returning them after 200 ms lowers peak memory on big traces (~15% at
    # 3000x64). Shorter is leaner but slower, longer the reverse: pages reused right away are returned
    # and faulted in again (medians at 3000x64: 100 ms 1.56 s / 501 MB, 200 ms 1.58 s / 511 MB,
    # 500 ms 1.52 s / 551 MB).
    os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:200,muzzy_decay_ms:0")
    # numpy's OpenBLAS starts a spinning worker per core at import; nothing here does linear algebra
    # big enough to use them, and on a 2-core CI box they take CPU from polars' own threads.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
