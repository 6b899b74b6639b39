"""Content hashes remembered by file identity, so an unchanged input is not hashed again.

Every cache lookup hashes the run's inputs whole (an edit that keeps the size and mtime must miss):
1.65 GB at 24,000 steps x 64 samples, ~0.5 s, most of a cached re-analysis. A file whose device,
inode, size, mtime and ctime are those recorded with its hash has not been written since: the kernel
sets ctime on every write, and no call sets it back. As git's index does, a hash is only trusted
when it was taken well after the file's last change, since a second write within the same clock
tick would leave the times as they were (a run still being written is hashed on every lookup).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

MEMO_NAME = "digests.json"
# Files remembered at most (the most recently hashed are kept).
MAX_ENTRIES = 4096
# A hash taken less than this long after the file's last change is not trusted later.
RACY_SECONDS = 2.0

# The memo is written to its folder at most this often (and at exit).
SAVE_EVERY_S = 1.0

# Per cache folder: what this process loaded from it and added to it, which folders have additions
# not yet written, and when each was last written.
_memos: dict[str, dict[str, list[Any]]] = {}
_unsaved: set[str] = set()
_saved_at: dict[str, float] = {}


def _identity(stat: os.stat_result) -> str:
    return f"{stat.st_dev}:{stat.st_ino}"


def _load(root: Path) -> dict[str, list[Any]]:
    key = os.fspath(root)
    if key not in _memos:
        try:
            raw = json.loads((root / MEMO_NAME).read_text())
        except (OSError, ValueError):
            raw = {}
        valid = raw.items() if isinstance(raw, dict) else []
        _memos[key] = {k: v for k, v in valid if isinstance(v, list) and len(v) == 5}
    return _memos[key]


def recall(root: Path, stat: os.stat_result) -> str | None:
    """The remembered hash of the file `stat` describes, when it cannot have changed since."""
    entry = _load(root).get(_identity(stat))
    if entry is None:
        return None
    size, mtime_ns, ctime_ns, digest, taken_at = entry
    unchanged = (size, mtime_ns, ctime_ns) == (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    settled = isinstance(taken_at, (int, float)) and taken_at - ctime_ns / 1e9 > RACY_SECONDS
    return digest if unchanged and settled and isinstance(digest, str) else None


def remember(root: Path, stat: os.stat_result, digest: str) -> None:
    """Record the hash of the file `stat` describes (taken now); the memo is written to the cache
    folder at most once a second and when the process ends (a folder of 200 runs hashes a thousand
    files: writing the whole memo for each would cost more than it saves)."""
    memo = _load(root)
    memo[_identity(stat)] = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, digest, time.time()]
    if len(memo) > MAX_ENTRIES:
        for identity, _ in sorted(memo.items(), key=lambda item: item[1][4])[: len(memo) - MAX_ENTRIES]:
            del memo[identity]
    key = os.fspath(root)
    if key not in _unsaved:
        _unsaved.add(key)
        atexit.register(_save, root)
    if time.monotonic() - _saved_at.get(key, float("-inf")) >= SAVE_EVERY_S:
        _save(root)


def _save(root: Path) -> None:
    key = os.fspath(root)
    memo = _memos.get(key)
    if memo is None or key not in _unsaved:
        return
    _saved_at[key] = time.monotonic()
    temp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=".json")
        with os.fdopen(handle, "w") as out:
            json.dump(memo, out)
        os.replace(temp, root / MEMO_NAME)
        _unsaved.discard(key)
    except OSError:
        # A cache folder that cannot be written: the hashes are remembered for this process only.
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def forget() -> None:
    """Drop what this process loaded (the next lookup reads the folders' memos again)."""
    _memos.clear()
    _unsaved.clear()
    _saved_at.clear()
