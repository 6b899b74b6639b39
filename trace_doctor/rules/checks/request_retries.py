"""TD113 request-retries: requests a client retried (429, 5xx, timeouts, connection errors) or failed after retries.

Decisions (tested in tests/test_rules_request_retries.py):

- Which service: a retry line's logger names the client (`tinker._base_client`, `tinker.lib.retry_handler`,
  `tinker.lib.api_future_impl` are Tinker; `openai._base_client` is the user's own calls, e.g. an LLM judge).
  Tinker retries and each other service's retries are separate findings; another service's retries are
  reported as info, named, and never counted as Tinker's (Tinker support cannot help with them).
- Non-retryable errors (`Request failed with non-retryable error: BadRequestError 400`) are not retries: the
  SDK gave up at once. decoded-error decodes them; this rule neither counts nor cites them.
- A failure after retries (`Failed ... after exhausting retries`, `No progress made in Ns`, or a 429/5xx/
  connection error surfacing from a Tinker logger, which the SDK retries before raising) is counted here,
  makes the finding a warning, and names the decoded-error finding that explains the message
  (`decoded_by`) instead of repeating its root cause.
- Time cost: measured only from timestamps (the union of the logged backoff sleeps); without them the
  seconds lost stay null and the finding says so, quoting the sum of the logged backoff values.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from trace_doctor.derive.log_signals import fields_of
from trace_doctor.model import Finding
from trace_doctor.policy.service import RequestRetriesPolicy
from trace_doctor.rules.base import Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import found, requires, table

MAX_CITED = 20
TINKER = "tinker"
# Known errors that say retries ran out, whichever logger wrote them.
EXHAUSTED_IDS = frozenset({"retries-exhausted", "stuck-requests"})
# Retryable classes: when one surfaces from a Tinker logger, the SDK's retries did not recover it.
RETRYABLE_IDS = frozenset({"rate-limited", "server-error", "connection-error", "publish-timeout"})
SERVICE_NAMES = {TINKER: "Tinker", "openai": "OpenAI", "anthropic": "Anthropic", "unknown": "an unidentified client"}
SERVER_SIDE = ("server error (5xx)", "timeout", "connection error", "server try_again")


@dataclass
class Retry:
    """One retried request: where it was logged, by which client, why, and the backoff it slept."""

    source: str
    line: int | None
    timestamp: datetime | None
    service: str
    reason: str
    status: int | None
    backoff_s: float | None
    url: str | None
    message: str

    def cite(self) -> dict[str, Any]:
        return {"file": self.source, "line": self.line, "text": self.message.strip().splitlines()[0][:240]}


def _service(logger: str | None) -> str:
    """The client that logged a line: the logger's top-level package (`tinker`, `openai`), or unknown."""
    return (logger or "").split(".")[0] or "unknown"


def _reason(status: int | None, error: str | None) -> str:
    if status == 429:
        return "rate limit (429)"
    if status == 408 or error == "timeout":
        return "timeout"
    if status is not None and 500 <= status < 600:
        return "server error (5xx)"
    if status == 409:
        return "conflict (409)"
    if error == "connection":
        return "connection error"
    if status is not None:
        return f"HTTP {status}"
    if error == "try_again":
        return "server try_again"
    if error == "other":
        return "other error"
    return "unspecified"


def _rows(events: pl.DataFrame) -> list[dict[str, Any]]:
    if events.is_empty():
        return []
    return events.sort("source", "line", nulls_last=True).to_dicts()


def retries(events: pl.DataFrame) -> list[Retry]:
    """Every retried request in the logs, its cause line paired with the backoff line that follows it.

    A client logs a retry's cause (`Retrying due to status code 429`, `Request timed out`) and then its
    backoff (`Retrying request to URL in S seconds`, `Retrying in Ss`): per file and logger, a cause and
    the next backoff are one retry; a cause or a backoff alone is one retry too.
    """
    found: list[Retry] = []
    pending: dict[tuple[str, str | None], dict[str, Any]] = {}

    def flush(key: tuple[str, str | None]) -> None:
        cause = pending.pop(key, None)
        if cause is not None:
            found.append(_retry(cause, None))

    for row in _rows(events):
        fields = fields_of(row.get("fields"))
        kind = row.get("kind")
        if kind == "retry" and fields.get("sdk_message") == "retry-try-again":
            found.append(_retry({**row, "_fields": {"error": "try_again"}}, None))
            continue
        if kind != "request-retry":
            continue
        key = (row["source"], row.get("logger"))
        if fields.get("retry") == "cause":
            flush(key)
            pending[key] = {**row, "_fields": fields}
        else:
            cause = pending.pop(key, None)
            found.append(_retry(cause or {**row, "_fields": {}}, row, fields))
    for key in list(pending):
        flush(key)
    found.sort(key=lambda r: (r.source, r.line or 0))
    return found


def _retry(
    cause: dict[str, Any], backoff: dict[str, Any] | None, backoff_fields: dict[str, Any] | None = None
) -> Retry:
    why = cause["_fields"]
    extra = backoff_fields or {}
    where = backoff or cause
    status = why.get("status")
    url = extra.get("url") or why.get("url")
    return Retry(
        source=cause["source"],
        line=cause.get("line"),
        timestamp=where.get("timestamp") or cause.get("timestamp"),
        # httpx's response lines and a user's retry loop say which service they retried in their fields.
        service=why.get("service") or _service(cause.get("logger")),
        reason=_reason(int(status) if status is not None else None, why.get("error")),
        status=int(status) if status is not None else None,
        backoff_s=float(extra["backoff_s"]) if extra.get("backoff_s") is not None else None,
        url=url,
        message=cause.get("message") or "",
    )


def failures_after_retries(events: pl.DataFrame) -> list[tuple[dict[str, Any], str]]:
    """(error event, known error id) for each request that failed after the SDK's retries."""
    failed = []
    for row in _rows(events):
        if row.get("kind") != "error" and row.get("level") not in ("ERROR", "CRITICAL"):
            continue
        fields = fields_of(row.get("fields"))
        if fields.get("sdk_message") == "non-retryable":
            continue  # given up at once: decoded-error's, not a retry
        ids = [fields[k] for k in ("error_id", "exception_error_id") if fields.get(k)]
        from_tinker = (row.get("logger") or "").split(".")[0] == TINKER
        for error_id in ids:
            if error_id in EXHAUSTED_IDS or (from_tinker and error_id in RETRYABLE_IDS):
                failed.append((row, error_id))
                break
    return failed


def _non_retryable(events: pl.DataFrame) -> int:
    if events.is_empty():
        return 0
    return sum(1 for raw in events["fields"].to_list() if fields_of(raw).get("sdk_message") == "non-retryable")


def _per_minute(group: list[Retry]) -> dict[str, int] | None:
    stamps = [r.timestamp for r in group if r.timestamp is not None]
    if not stamps:
        return None
    counts = Counter(stamp.strftime("%Y-%m-%dT%H:%M") for stamp in stamps)
    return dict(sorted(counts.items()))


def _time_cost(group: list[Retry]) -> tuple[float | None, float | None, str]:
    """(summed backoff, measured wall-clock seconds or None, the sentence saying which)."""
    backoffs = [r.backoff_s for r in group if r.backoff_s is not None]
    summed = round(sum(backoffs), 3) if backoffs else None
    timed = [r for r in group if r.backoff_s is not None and r.timestamp is not None]
    if timed and len(timed) == len(backoffs):
        intervals = sorted((r.timestamp, r.timestamp + timedelta(seconds=r.backoff_s)) for r in timed)
        wall = 0.0
        start, end = intervals[0]
        for low, high in intervals[1:]:
            if low > end:
                wall += (end - start).total_seconds()
                start, end = low, high
            else:
                end = max(end, high)
        wall = round(wall + (end - start).total_seconds(), 3)
        return (
            summed,
            wall,
            (
                f"From the log's timestamps, the backoff sleeps covered {wall:.1f} s of wall-clock time "
                "(the failed attempts' own time not included)."
            ),
        )
    if summed is not None:
        return (
            summed,
            None,
            (
                "The log has no timestamps for these lines, so their wall-clock cost could not be measured; the "
                f"logged backoff sleeps add up to {summed:.1f} s (not counting the failed attempts' own time, and "
                "overlapping when requests ran concurrently)."
            ),
        )
    return (
        None,
        None,
        ("Neither timestamps nor backoff values are logged for these lines, so their time cost could not be measured."),
    )


def _when(group: list[Retry]) -> str:
    first, last = group[0], group[-1]
    if first.timestamp is not None and last.timestamp is not None:
        return f"between {first.timestamp:%Y-%m-%d %H:%M:%S} and {last.timestamp:%H:%M:%S}"
    if len(group) == 1:
        return f"at {first.source}:{first.line}"
    if first.source == last.source:
        return f"between {first.source}:{first.line} and line {last.line}"
    return f"between {first.source}:{first.line} and {last.source}:{last.line}"


def _classes(group: list[Retry]) -> dict[str, int]:
    return dict(Counter(r.reason for r in group).most_common())


def _sessions(events: pl.DataFrame) -> list[str]:
    found: list[str] = []
    for row in _rows(events.filter(pl.col("kind") == "session") if not events.is_empty() else events):
        session = fields_of(row.get("fields")).get("session_id")
        if session and session not in found:
            found.append(session)
    return found


def _classes_text(classes: dict[str, int]) -> str:
    return ", ".join(f"{name} ×{count}" for name, count in classes.items())


def _tinker_finding(
    ctx: RuleContext, group: list[Retry], failed: list[tuple[dict[str, Any], str]], sessions: list[str]
) -> Finding:
    limits = ctx.thresholds
    classes = _classes(group)
    per_minute = _per_minute(group)
    peak = max(per_minute.values()) if per_minute else None
    summed, wall, cost = _time_cost(group)
    frequent = len(group) >= limits.frequent_retries or (
        peak is not None and peak >= limits.frequent_retries_per_minute
    )
    severity = "warning" if failed or frequent else "info"
    decoded = sorted({f"decoded-error:{error_id}" for _, error_id in failed})
    parts = []
    if group:
        parts.append(
            f"{len(group)} Tinker request retr{'y' if len(group) == 1 else 'ies'} ({_classes_text(classes)}) "
            f"{_when(group)}" + (f", up to {peak} in one minute" if peak is not None else "") + "."
        )
    if failed:
        first = failed[0][0]
        parts.append(
            f"{len(failed)} request(s) failed after the SDK's retries (first at {first['source']}:{first['line']}; "
            f"the message is decoded by {', '.join(decoded)})."
        )
    if group:
        parts.append(cost)
    fixes = []
    if failed:
        fixes.append("The failed requests' work is lost: resume from the last checkpoint once the service answers.")
    if classes.get("rate limit (429)"):
        fixes.append(
            "429 means the service throttled you: lower the request rate and concurrency (fewer requests in "
            "flight, smaller sampling bursts, fewer concurrent clients) and check your account's quota and limits."
        )
    server = sum(classes.get(name, 0) for name in SERVER_SIDE)
    session = sessions[0] if sessions else None
    if failed or server >= 2:
        fixes.append(
            "Repeated server errors, timeouts or connection failures are on the service or network side: run "
            "`trace-doctor bundle <log_path> -o escalation.zip` and send it to Tinker support with the session id"
            + (f" {session}." if session else " (the `ServiceClient initialized for session` log line).")
        )
    if not fixes:
        fixes.append("Nothing to fix: the SDK retried and recovered. Watch whether the count grows from run to run.")
    return ctx.finding(
        severity=severity,
        title="Tinker requests failed after retries" if failed else "Tinker requests retried",
        message=" ".join(parts),
        fix=" ".join(fixes),
        evidence={
            "service": "Tinker",
            "retries": len(group),
            "classes": classes,
            "statuses": dict(sorted(Counter(r.status for r in group if r.status is not None).items())),
            "failed_after_retries": len(failed),
            "failures": [
                {"file": row["source"], "line": row["line"], "error_id": error_id, "text": (row["message"] or "")[:240]}
                for row, error_id in failed[:MAX_CITED]
            ],
            "decoded_by": decoded,
            "first": group[0].cite() if group else None,
            "last": group[-1].cite() if group else None,
            "per_minute": per_minute,
            "time_cost": {"backoff_s": summed, "wall_clock_s": wall, "note": cost},
            "sessions": sessions,
            "lines": [r.cite() for r in group[:MAX_CITED]],
        },
        seconds_lost=wall,
        fingerprint="request-retries:tinker",
    )


def _config_hint(ctx: RuleContext[RequestRetriesPolicy]) -> str | None:
    """A configured judge/grader model, the usual source of third-party calls in a training loop."""
    stack: list[Any] = [ctx.run.meta.config or {}]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str) and any(word in key for word in ("judge", "grader", "reward_model")):
                    return f"{key}={value}"
                if isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return None


def _other_finding(ctx: RuleContext[RequestRetriesPolicy], service: str, group: list[Retry]) -> Finding:
    name = SERVICE_NAMES.get(service, service)
    classes = _classes(group)
    urls = sorted({r.url for r in group if r.url})
    summed, wall, cost = _time_cost(group)
    hint = _config_hint(ctx)
    return ctx.finding(
        severity="info",
        title=f"{name} requests retried (not Tinker)",
        message=(
            f"{len(group)} retr{'y' if len(group) == 1 else 'ies'} of requests to {name}"
            + (f" ({', '.join(urls[:3])})" if urls else "")
            + f" {_when(group)}, logged by {service}'s client: calls your own code makes"
            + (f" (the config names {hint})" if hint else ", e.g. a judge or grader model")
            + ", not Tinker requests."
            + (f" Causes: {_classes_text(classes)}." if set(classes) != {"unspecified"} else "")
            + f" {cost}"
        ),
        fix=(
            f"Nothing to escalate to Tinker. If these retries are frequent, lower the concurrency of your {name} "
            "calls or raise that account's rate limit; they delay the rollouts that wait for them."
        ),
        evidence={
            "service": name,
            "retries": len(group),
            "classes": classes,
            "urls": urls,
            "first": group[0].cite(),
            "last": group[-1].cite(),
            "per_minute": _per_minute(group),
            "time_cost": {"backoff_s": summed, "wall_clock_s": wall, "note": cost},
            "lines": [r.cite() for r in group[:MAX_CITED]],
        },
        seconds_lost=wall,
        fingerprint=f"request-retries:{service}",
    )


def check(ctx: RuleContext[RequestRetriesPolicy]) -> list[Finding]:
    events = ctx.run.log_events
    found_retries = retries(events)
    failed = failures_after_retries(events)
    by_service: dict[str, list[Retry]] = {}
    for retry in found_retries:
        by_service.setdefault(retry.service, []).append(retry)
    findings = []
    if by_service.get(TINKER) or failed:
        findings.append(_tinker_finding(ctx, by_service.get(TINKER, []), failed, _sessions(events)))
    for service in sorted(s for s in by_service if s != TINKER):
        findings.append(_other_finding(ctx, service, by_service[service]))
    if findings:
        return findings
    skipped = _non_retryable(events)
    return ctx.passed(
        f"no retried request in {len(events)} log event(s)"
        + (f"; {skipped} non-retryable error(s) are not retries (decoded-error reports them)" if skipped else "")
    )


RULE = register(
    Rule(
        slug="request-retries",
        code="TD113",
        title="Requests retried, and failed after retries",
        severity="warning",
        needs="text logs (logs.log, W&B output.log, captured stdout); tinker logs its retries with TINKER_LOG=debug",
        docs=RuleDocs(
            what=(
                "Requests a client retried — HTTP 429, 5xx, timeouts, connection errors, the service's "
                "`try_again` — and requests that failed after the SDK's retries, per service: Tinker's own "
                "(logger `tinker.*`) and, separately and as info, other clients' (e.g. `openai` calls of a judge "
                "model). Non-retryable errors (`Request failed with non-retryable error`) are not retries: they "
                "are decoded-error's."
            ),
            why=(
                "The SDK retries silently with exponential backoff (0.5 s doubling to 10 s): a throttled or "
                "degraded service shows up as slow steps with nothing else to explain them."
            ),
            evidence=(
                "Count, first and last line (or time), the classes and HTTP statuses, per-minute counts when the "
                "log has timestamps, failures after retries with the decoded-error finding that explains each, "
                "and the time cost: measured from timestamps, otherwise null with the sum of the logged backoff "
                "sleeps."
            ),
            fix=(
                "429: lower the request rate and concurrency, check the quota. Repeated 5xx/timeouts/connection "
                "errors or failures after retries: escalate with the session id and `trace-doctor bundle`."
            ),
        ),
        check=check,
        policy=RequestRetriesPolicy,
        stage="network and service",
        requires=(
            requires(
                "no text log (logs.log, W&B output.log or captured stdout) to find retried requests in",
                table("log_events"),
                found("log"),
                found("dump"),
            ),
        ),
        tags=("logs",),
    )
)
