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


# The exit status of a command stopped by SIGTERM or SIGHUP: what a shell reports for it (128 + signal).
TERMINATED_EXIT = {"SIGTERM": 143, "SIGHUP": 129}


def stop_cleanly_on_signals() -> None:
    """SIGTERM and SIGHUP end the command as an exception would: the files being written are removed
    or left whole (outputs are renamed into place only when complete) and `end_process` cleans up.
    Without this the default action kills the process where it stands. (SIGINT already raises
    KeyboardInterrupt.) A second signal during the cleanup is ignored."""
    import signal

    def stop(signum: int, frame) -> None:
        for name in TERMINATED_EXIT:
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        raise SystemExit(TERMINATED_EXIT.get(signal.Signals(signum).name, 128 + signum))

    for name in TERMINATED_EXIT:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), stop)


def end_process(code: int) -> None:
    """End the command now with `code`: the exit work (temporary folders of this process, the cache's
    unfinished entries and its hash memo, all registered with atexit) is run, output flushed, then the
    process exits at once. Interpreter shutdown would free every table (hundreds of MB on a large run,
    ~0.07 s) only for the OS to reclaim the memory anyway, and os._exit skips atexit: run it first."""
    import atexit
    import signal
    import sys

    for name in TERMINATED_EXIT:  # the cleanup is not cut short by a late signal
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    with _quiet():
        atexit._run_exitfuncs()
    if "logging" in sys.modules:
        sys.modules["logging"].shutdown()
    with _quiet():
        sys.stdout.flush()
    with _quiet():
        sys.stderr.flush()
    os._exit(code)


def _quiet():
    import contextlib

    return contextlib.suppress(Exception)
