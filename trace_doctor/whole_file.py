"""A named output replaced whole: written beside itself under a temporary name, renamed into place.

Written in place, a file that a kill interrupts is neither the previous output nor the new one: a
bundle that is no zip, a truncated trace export, a 0-byte Parquet part. Renamed into place (one
system call, atomic within a folder), the file at its name is always one complete version. The
temporary file is removed when the writing fails or is interrupted (an exception, Ctrl-C, and the
SIGTERM the CLI turns into one); only SIGKILL can leave it, hidden (`.<name>.<random>.tmp`).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with replacing(folder / "out.txt") as temp:
    ...     _ = temp.write_text("new")
    >>> sorted(p.name for p in folder.iterdir()), (folder / "out.txt").read_text()
    (['out.txt'], 'new')
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], *, make_folder: bool = False) -> Iterator[Path]:
    """A path to write the new version of `path` to: renamed over `path` when the block ends normally,
    removed when it raises. A `path` that is not a regular file (/dev/null, a pipe) is written directly:
    it cannot be replaced, and a reader is waiting on it. `make_folder`: create `path`'s folder when
    missing (else a missing folder is the writer's FileNotFoundError, as writing in place would be)."""
    target = Path(os.path.realpath(path))  # a symlink's target is the file replaced, as a write would
    try:
        if not stat.S_ISREG(target.stat().st_mode):
            yield target
            return
    except OSError:
        pass  # not there yet
    if make_folder:
        target.parent.mkdir(parents=True, exist_ok=True)
    temp = _new_temp(target)
    try:
        yield temp
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _new_temp(target: Path) -> Path:
    """A new, empty file beside `target`, with the permissions a new file gets (umask), not mkstemp's 0600."""
    for _ in range(100):
        temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except FileExistsError:
            continue
        return temp
    raise FileExistsError(f"no free temporary name beside {target}")
