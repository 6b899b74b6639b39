"""Replacing a named output whole or not at all: written beside it under a temporary name, renamed over it.

A rename within one folder is atomic (POSIX `rename`, Windows `MoveFileEx` through `os.replace`): a
reader, or a user whose command was killed half-way, finds the previous file or the new one, never a
half-written one. A kill leaves at most the hidden temporary file (`.<name>.<random>.part`) beside it.
Every writer of a named output can use it; the escalation bundle is the first.

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "out.txt"
    >>> with replaced_atomically(target) as part:
    ...     _ = part.write_text("new")
    >>> target.read_text()
    'new'
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _default_mode() -> int:
    """The mode a plain `open(path, "w")` would give a new file (0o666 less the umask); mkstemp's is 0o600."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def replaced_atomically(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside `path` to write to; when the block ends without an exception it is
    flushed to disk and renamed to `path` (replacing what was there), otherwise it is removed and
    `path` is left as it was. The file keeps the mode of the one it replaces.

    A symbolic link is written through (its target is replaced, as `open(path, "w")` would write it);
    a device or a pipe (`-o /dev/null`) is not a file to rename over: it is written to directly.
    """
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        yield target
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    os.close(handle)
    part = Path(name)
    try:
        yield part
        try:
            mode = target.stat().st_mode & 0o7777
        except OSError:
            mode = _default_mode()
        os.chmod(part, mode)
        with open(part, "rb+") as written:
            os.fsync(written.fileno())  # the bytes reach the disk before the name points at them
        os.replace(part, target)
    except BaseException:  # Ctrl-C and SystemExit too: the previous file stays, the part goes
        part.unlink(missing_ok=True)
        raise
