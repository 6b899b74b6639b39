"""SDK requests the asyncio task dumps show in flight, and for how long (FORMATS.md 5.1).

The SDK's loop ([holder]) holds one task per request in flight (`TrainingClient._run_fwd_bwd.<locals>.
_run_async`, `_APIFuture._result_async`, ...) until its result arrives; the same task, by name and
coroutine, in dump after dump is one request still waiting. Its wait is measured from the first to
the last dump that shows it (stamps have one-second resolution): a lower bound. The SDK's own
housekeeping tasks (the heartbeat, telemetry, the dumper itself) are not requests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

# Tasks on the SDK loop that are not requests: the session heartbeat, telemetry, the debug skill's dumper.
NOT_REQUESTS = re.compile(r"_session_heartbeat|tinker-telemetry|telemetry|periodic-task-dump|_periodic_dump_tasks")
COROUTINE = re.compile(r"<coroutine object (?P<name>[\w.<>]+)")
MAIN = "main"


@dataclass(frozen=True)
class PendingRequest:
    """One SDK request seen pending on a non-main loop from its first to its last dump."""

    source: str
    label: str
    task: str
    coroutine: str
    first_at: datetime
    last_at: datetime
    dumps: int
    first_line: int
    last_line: int

    @property
    def pending_s(self) -> float:
        return max(0.0, (self.last_at - self.first_at).total_seconds())

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "label": self.label,
            "task": self.task,
            "coroutine": self.coroutine,
            "first_seen": str(self.first_at),
            "last_seen": str(self.last_at),
            "pending_at_least_s": round(self.pending_s, 3),
            "dumps": self.dumps,
            "first_line": self.first_line,
            "last_line": self.last_line,
        }


def coroutine_name(text: str | None) -> str:
    """The qualified name in a coroutine repr (`TrainingClient._run_fwd_bwd.<locals>._run_async`)."""
    found = COROUTINE.search(text or "")
    return found["name"] if found else (text or "?").split(" at 0x")[0]


def pending_requests(task_snapshots: pl.DataFrame) -> list[PendingRequest]:
    """Every request task the SDK loop's dumps show pending, longest wait first."""
    if task_snapshots.is_empty():
        return []
    rows = task_snapshots.filter(
        (pl.col("label") != MAIN)
        & (pl.col("state").fill_null("pending") == "pending")
        & pl.col("timestamp").is_not_null()
        & ~pl.col("task_name").fill_null("").str.contains(NOT_REQUESTS.pattern)
        & ~pl.col("coroutine").fill_null("").str.contains(NOT_REQUESTS.pattern)
    )
    if rows.is_empty():
        return []
    grouped = (
        rows.with_columns(pl.col("coroutine").map_elements(coroutine_name, return_dtype=pl.String).alias("_coro"))
        .group_by("source", "label", "task_name", "_coro")
        .agg(
            pl.col("timestamp").min().alias("first_at"),
            pl.col("timestamp").max().alias("last_at"),
            pl.col("snapshot").n_unique().alias("dumps"),
            pl.col("line").min().alias("first_line"),
            pl.col("line").max().alias("last_line"),
        )
    )
    found = [
        PendingRequest(
            r["source"],
            r["label"],
            r["task_name"] or "?",
            r["_coro"],
            r["first_at"],
            r["last_at"],
            r["dumps"],
            r["first_line"],
            r["last_line"],
        )
        for r in grouped.to_dicts()
    ]
    return sorted(found, key=lambda p: (-p.pending_s, p.source, p.first_line))
