"""Suggestions for a mistyped name: a rule slug or code, a path (difflib's closest matches)."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable
from pathlib import Path

# How alike a suggestion must be (difflib's ratio): 0.6 is difflib's default and keeps
# `pipelinig-gap` -> `pipelining-gap` while leaving unrelated words without a suggestion.
CUTOFF = 0.6
# A folder with more entries than this is not listed for a suggestion (a huge runs folder).
MAX_SIBLINGS = 10_000


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean `x`?)` for the closest of `choices`, or "" when none is close."""
    # Slugs and codes are matched case-insensitively, so a suggestion is compared the same way.
    lowered = {option.lower(): option for option in choices}
    found = [lowered[m] for m in difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=CUTOFF)]
    return f" (did you mean `{found[0]}`?)" if found else ""


def missing_path(path: Path) -> str:
    """How a path that does not exist is named in an error: a broken link says so; otherwise the closest
    entry of its parent folder is suggested, when one is close."""
    if path.is_symlink():
        return f"{path} (a broken symbolic link)"
    parent = path.parent
    try:
        with os.scandir(parent) as entries:
            names = []
            for entry in entries:
                names.append(entry.name)
                if len(names) > MAX_SIBLINGS:
                    return str(path)
    except OSError:
        return str(path)
    found = difflib.get_close_matches(path.name, names, n=1, cutoff=CUTOFF)
    return f"{path} (did you mean {parent / found[0]}?)" if found else str(path)
