"""The package's own files as one hash: which code made a cache entry.

A cache entry made by other code must miss. Listing the files a table depends on by hand misses the
parser added next (or a helper a parser starts to import), so both caches hash the package whole:
the table cache every module (`source_digest`), the result cache every file, templates and data
included (`tree_digest` of the package folder).
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

# trace_doctor/, as installed or as checked out (this file is trace_doctor/ingest/storage/).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def tree_digest(root: Path, suffix: str = "") -> str:
    """Every file under `root` whose name ends with `suffix`, by relative name and content; bytecode aside."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob(f"*{suffix}")):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        digest.update(path.relative_to(root).as_posix().encode("utf-8", "surrogateescape") + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"\1unreadable")
        digest.update(b"\0")
    return digest.hexdigest()


@cache
def source_digest() -> str:
    """Every Python module of the package: once per process (a few ms)."""
    return tree_digest(PACKAGE_ROOT, ".py")
