"""Typed readings of the log lines the rules use: GIL monitor, heartbeat, pause, stuck, serialization test.

Each reader takes the `log_events` table and recognises its lines by the parsed `fields` when the
ingest layer filled them and by the exact message text of FORMATS.md 5.3 / 5.4 otherwise, so a rule
works whatever `kind` the parser gave a line. Every reading keeps its file and line number.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from trace_doctor.knowledge.tinker import GIL_MONITOR_LINE, MODEL_DUMP_TOOK, SESSION_ID

HEARTBEAT = re.compile(
    rf"Session heartbeat failed for (?P<seconds>[\d.]+) seconds(?: for session (?P<session>{SESSION_ID}))?"
)
PAUSED = re.compile(
    r"(?P<what>Training for \S+ is paused|Training is paused for \S+|Model creation for \S+ is paused"
    r"|Sampling is paused for sampler \S+|The job is paused due to billing status"
    r"|The job was paused due to billing status for (?P<seconds>[\d.]+) seconds)"
    r"(?:.*?Reason: (?P<reason>[^.]+))?"
)
# tinker.lib.sync_only: a blocking SDK method called on a running event loop (FORMATS.md 3.x table).
SYNC_FROM_ASYNC = re.compile(r"Synchronous method '?(?P<method>[\w.]+)\(\)'? called from async context")
STUCK = re.compile(r"No progress made in (?P<seconds>[\d.]+)s")
SERIALIZATION_VERDICT = re.compile(r"^\s*(?P<verdict>PASS|WARNING|FAIL):")


@dataclass(frozen=True)
class LogLine:
    """A cited log line: where it is, what it says, and the numbers read from it."""

    source: str
    line: int | None
    message: str
    values: dict[str, Any]

    def cite(self, width: int = 240) -> dict[str, Any]:
        text = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return {"file": self.source, "line": self.line, "text": text[:width]}


def fields_of(raw: str | None) -> dict[str, Any]:
    """The parsed fields of a log event (JSON text), or {} when absent or unreadable."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _rows(log_events: pl.DataFrame) -> list[dict[str, Any]]:
    if log_events.is_empty():
        return []
    return log_events.sort("source", "line", nulls_last=True).to_dicts()


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def gil_monitor_lines(log_events: pl.DataFrame) -> list[LogLine]:
    """`[GIL monitor] slept As instead of Es (jitter: Js)` lines with actual/expected/jitter seconds."""
    found = []
    for row in _rows(log_events):
        message = row.get("message") or ""
        fields = fields_of(row.get("fields"))
        match = GIL_MONITOR_LINE.search(message)
        if row.get("kind") == "gil-monitor" and "jitter_s" in fields:
            values = {k: _number(fields.get(k)) for k in ("actual_s", "expected_s", "jitter_s")}
        elif match:
            values = {
                "actual_s": float(match["actual"]),
                "expected_s": float(match["expected"]),
                "jitter_s": float(match["jitter"]),
            }
        else:
            continue
        if values["jitter_s"] is None:
            continue
        found.append(LogLine(row["source"], row.get("line"), message, values))
    return found


def heartbeat_lines(log_events: pl.DataFrame) -> list[LogLine]:
    """`Session heartbeat failed for N seconds for session S` warnings."""
    found = []
    for row in _rows(log_events):
        message = row.get("message") or ""
        match = HEARTBEAT.search(message)
        if not match:
            continue
        found.append(
            LogLine(
                row["source"],
                row.get("line"),
                message,
                {"seconds": float(match["seconds"]), "session": match["session"]},
            )
        )
    return found


def heartbeat_episodes(lines: list[LogLine]) -> list[list[LogLine]]:
    """Group heartbeat warnings into outages: per session, a new outage starts when the count resets.

    The SDK repeats the warning with a growing "failed for N seconds" while the outage lasts, so
    summing the numbers would count one outage many times; its length is the largest N.
    """
    episodes: list[list[LogLine]] = []
    current: dict[str | None, list[LogLine]] = {}
    for line in lines:
        session = line.values.get("session")
        open_episode = current.get(session)
        if open_episode and line.values["seconds"] > open_episode[-1].values["seconds"]:
            open_episode.append(line)
            continue
        current[session] = [line]
        episodes.append(current[session])
    return episodes


def sync_from_async_lines(log_events: pl.DataFrame) -> list[LogLine]:
    """The SDK's own warnings that a synchronous method was called from async code."""
    found = []
    for row in _rows(log_events):
        message = row.get("message") or ""
        match = SYNC_FROM_ASYNC.search(message)
        if match:
            found.append(LogLine(row["source"], row.get("line"), message, {"method": match["method"]}))
    return found


def paused_lines(log_events: pl.DataFrame) -> list[LogLine]:
    """Queue / sampling / billing pause warnings of the SDK."""
    found = []
    for row in _rows(log_events):
        message = row.get("message") or ""
        match = PAUSED.search(message)
        if not match:
            continue
        seconds = _number(match["seconds"])
        reason = (match["reason"] or "").strip() or None
        found.append(
            LogLine(
                row["source"],
                row.get("line"),
                message,
                {"what": match["what"], "seconds": seconds, "reason": reason, "billing": "billing" in match["what"]},
            )
        )
    return found


def stuck_lines(log_events: pl.DataFrame) -> list[LogLine]:
    """`No progress made in Ns. Requests appear to be stuck.` (the SDK's stuck-request detector)."""
    found = []
    for row in _rows(log_events):
        message = row.get("message") or ""
        match = STUCK.search(message)
        if match:
            found.append(LogLine(row["source"], row.get("line"), message, {"seconds": float(match["seconds"])}))
    return found


def serialization_test_lines(log_events: pl.DataFrame) -> list[LogLine]:
    """The debug skill's serialization test: `model_dump() took Ns` and its PASS/WARNING/FAIL verdict."""
    found = []
    for row in _rows(log_events):
        message = row.get("message") or ""
        took = MODEL_DUMP_TOOK.search(message)
        verdict = SERIALIZATION_VERDICT.search(message)
        if took:
            found.append(LogLine(row["source"], row.get("line"), message, {"seconds": float(took["seconds"])}))
        elif verdict and ("model_dump" in message or "pydantic" in message or "serializ" in message.lower()):
            found.append(LogLine(row["source"], row.get("line"), message, {"verdict": verdict["verdict"]}))
    return found


def renderer_lines(log_events: pl.DataFrame) -> list[LogLine]:
    """The cookbook's renderer warnings (FORMATS.md 1.5, 3.5), one per distinct line with its repeat count:
    `problem` is `not-recommended` (renderer, model), `mismatch` (checkpoint, checkpoint_renderer,
    current_renderer) or `extension-property` (train_on_what)."""
    found = []
    for row in _rows(log_events):
        if row.get("kind") != "renderer":
            continue
        fields = fields_of(row.get("fields"))
        if not fields.get("problem"):
            continue
        values = {k: v for k, v in fields.items() if k not in ("repeats", "last_line")}
        values["repeats"] = int(fields.get("repeats") or 1)
        values["last_line"] = fields.get("last_line", row.get("line"))
        found.append(LogLine(row["source"], row.get("line"), row.get("message") or "", values))
    return found


def round_trip_lines(log_events: pl.DataFrame) -> list[LogLine]:
    """The debug guide's timed API round trips (FORMATS.md 5.5): the network check's `API round-trip: Ss`
    and the smoke test's `API reachable (Ss), N models available`; `values` has `seconds` and `check`."""
    found = []
    for row in _rows(log_events):
        fields = fields_of(row.get("fields"))
        kind = row.get("kind")
        seconds = _number(fields.get("seconds"))
        if seconds is None:
            continue
        if kind == "round-trip":
            found.append(
                LogLine(
                    row["source"],
                    row.get("line"),
                    row.get("message") or "",
                    {"seconds": seconds, "check": "network check"},
                )
            )
        elif kind == "smoke-test" and fields.get("step") == 1 and fields.get("ok"):
            found.append(
                LogLine(
                    row["source"],
                    row.get("line"),
                    row.get("message") or "",
                    {"seconds": seconds, "check": "smoke test"},
                )
            )
    return found


def call_timing_lines(log_events: pl.DataFrame) -> list[LogLine]:
    """The guide's timing around one SDK call, `submit: Ss, wait: Ws` (FORMATS.md 5.5): `submit_s`, `wait_s`."""
    found = []
    for row in _rows(log_events):
        if row.get("kind") != "call-timing":
            continue
        fields = fields_of(row.get("fields"))
        submit, wait = _number(fields.get("submit_s")), _number(fields.get("wait_s"))
        if submit is None or wait is None:
            continue
        found.append(
            LogLine(row["source"], row.get("line"), row.get("message") or "", {"submit_s": submit, "wait_s": wait})
        )
    return found
