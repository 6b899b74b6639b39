"""Ingest progress on an interactive stderr (never in pipes or CI)."""

from __future__ import annotations

import sys
import time


class TerminalProgress:
    """Called by parsers as progress(label, done_bytes, total_bytes); redraws at most 10x/s."""

    def __init__(self) -> None:
        self._last = 0.0
        self._shown = False

    def __call__(self, label: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        pct = 100.0 * done / total if total else 100.0
        sys.stderr.write(f"\r  reading {label}: {done / 1e6:,.0f} / {total / 1e6:,.0f} MB ({pct:3.0f}%)")
        self._shown = True
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()
