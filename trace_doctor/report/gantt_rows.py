"""Rows of the Gantt: one per thread · track, with short-lived tracks sharing rows across windows.

The Gantt draws a few steps' windows on one time axis. An RL step runs its rollouts on asyncio tasks
that live one step (`Task-486`, `Task-486:sample:1000127`, `trajectory_group_worker_task_2`): a row
per task track leaves most rows empty in any one window (15 of 20 in a sync RL step). A track whose
spans all fall in one window is short-lived; the short-lived tracks of one kind (the name with its
numbers generalised) take numbered rows window by window, so a row is reused by the next window's
tasks and no window has a row that is empty only because its track lived in another step.
"""

from __future__ import annotations

import re

import polars as pl

NUMBER = re.compile(r"\d+")


def _kind(track: str) -> str:
    """`Task-486:sample:1000127` -> `Task-N:sample:N`: tracks made alike by the same code."""
    return NUMBER.sub("N", track)


def _window_of(start: float, windows: list[tuple[float, float]]) -> int | None:
    for index, (a, b) in enumerate(windows):
        if a <= start <= b:
            return index
    return None


def packed_labels(spans: pl.DataFrame, windows: list[tuple[float, float]]) -> tuple[list[str], list[str]]:
    """(Each span's row label, each span's own `thread · track`): short-lived tracks of one kind share
    numbered rows (`MainThread · Task-N #2`) window by window; every other track keeps its own row."""
    threads = spans["thread"].to_list() if "thread" in spans.columns else [None] * len(spans)
    pids = spans["pid"].to_list()
    tracks = spans["track"].to_list() if "track" in spans.columns else [None] * len(spans)
    starts = spans["start_us"].to_list()
    own = [f"{t or f'pid {p}'} · {k or '?'}" for t, p, k in zip(threads, pids, tracks, strict=True)]
    if len(windows) < 2:
        return own, own
    first_start: dict[str, float] = {}
    seen_in: dict[str, set[int | None]] = {}
    for label, start in zip(own, starts, strict=True):
        first_start[label] = min(first_start.get(label, start), start)
        seen_in.setdefault(label, set()).add(_window_of(start, windows))
    short = {label for label, found in seen_in.items() if len(found) == 1 and None not in found}
    group_of = {
        label: (thread or f"pid {pid}", _kind(track or "?"))
        for label, thread, pid, track in zip(own, threads, pids, tracks, strict=True)
        if label in short
    }
    # Window by window, the kind's tracks in order of first start take rows 1, 2, ...
    slot: dict[str, int] = {}
    taken: dict[tuple[tuple[str, str], int], int] = {}
    for label in sorted(short, key=lambda k: (first_start[k], k)):
        key = (group_of[label], next(iter(seen_in[label])))
        slot[label] = taken.get(key, 0)
        taken[key] = slot[label] + 1

    def row(label: str) -> str:
        if label not in short:
            return label
        thread, kind = group_of[label]
        return f"{thread} · {kind} #{slot[label] + 1}"

    return [row(label) for label in own], own
