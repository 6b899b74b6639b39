"""The Tinker session ids a run recorded: what support needs to find the run on the service side."""

from __future__ import annotations

from typing import Any

import polars as pl

from trace_doctor.derive.log_signals import fields_of
from trace_doctor.knowledge.tinker import SESSION_MENTION


def _walk(value: Any, prefix: str = ""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item, prefix)
    else:
        yield prefix, value


def session_ids(log_events: pl.DataFrame, config: dict | None) -> list[str]:
    """Session ids from log events (parsed fields, or mentioned in the text) and from the config."""
    found: set[str] = set()
    if not log_events.is_empty() and "message" in log_events.columns:
        for row in log_events.iter_rows(named=True):
            fields = fields_of(row.get("fields"))
            for key in ("session_id", "session"):
                if isinstance(fields.get(key), str) and fields[key]:
                    found.add(fields[key])
            found.update(m.group("session_id") for m in SESSION_MENTION.finditer(row.get("message") or ""))
    for key, value in _walk(config or {}):
        if "session" in key.lower() and isinstance(value, str) and value:
            found.add(value)
    return sorted(found)
