"""TD106 heartbeat-stall: the SDK's heartbeat, pause and stuck-request warnings in the logs."""

from __future__ import annotations

from trace_doctor.derive.log_signals import LogLine, heartbeat_episodes, heartbeat_lines, paused_lines, stuck_lines
from trace_doctor.model import Finding
from trace_doctor.policy.timing import HeartbeatStallPolicy
from trace_doctor.rules.base import Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import found, requires, table

MAX_CITED = 20


def has_log_input(ctx: RuleContext[HeartbeatStallPolicy]) -> bool:
    return (
        not ctx.run.log_events.is_empty()
        or ctx.run.has_input("log")
        or any(i.kind in ("log", "dump") for i in ctx.run.inputs)
    )


def _heartbeat_finding(
    ctx: RuleContext[HeartbeatStallPolicy], lines: list[LogLine], min_warnings: int
) -> Finding | None:
    if len(lines) < min_warnings:
        return None
    episodes = heartbeat_episodes(lines)
    lost = sum(max(line.values["seconds"] for line in ep) for ep in episodes)
    longest = max(max(line.values["seconds"] for line in ep) for ep in episodes)
    sessions = sorted({line.values["session"] for line in lines if line.values.get("session")})
    first = lines[0]
    return ctx.finding(
        severity="warning",
        title="SDK heartbeat failed",
        message=(
            f"{len(lines)} heartbeat warning(s) in {len(episodes)} outage(s), the longest "
            f"{longest:.1f} s without a successful heartbeat (first at {first.source}:{first.line}). "
            "The heartbeat runs on the SDK's background thread (every 10 s; tinker 0.38 warns after "
            "120 s of failures): that thread was starved (GIL held by user code) or the "
            "network/service was unreachable."
        ),
        fix=(
            "Check gil-stall for GIL evidence; move CPU-heavy work (tokenization, reward code, "
            "pydantic dumps of large payloads) off the main thread or into a process pool; if the "
            "GIL is free, check connectivity and the Tinker status page."
        ),
        evidence={
            "warnings": len(lines),
            "outages": [
                {
                    "first_line": ep[0].line,
                    "last_line": ep[-1].line,
                    "file": ep[0].source,
                    "max_seconds_without_heartbeat": max(line.values["seconds"] for line in ep),
                    "session": ep[0].values.get("session"),
                }
                for ep in episodes
            ],
            "sessions": sessions,
            "lines": [line.cite() for line in lines[:MAX_CITED]],
        },
        seconds_lost=round(lost, 3),
        fingerprint="heartbeat-stall:heartbeat",
    )


def _paused_finding(ctx: RuleContext[HeartbeatStallPolicy], lines: list[LogLine]) -> Finding | None:
    if not lines:
        return None
    billing = [line for line in lines if line.values["billing"]]
    reasons = sorted({line.values["reason"] for line in lines if line.values.get("reason")})
    known = [line.values["seconds"] for line in lines if line.values.get("seconds") is not None]
    aborted = any("Aborting" in line.message for line in lines)
    what = "billing status" if billing and len(billing) == len(lines) else "the service queue"
    return ctx.finding(
        severity="error" if aborted else "warning",
        title="Work paused by the service",
        message=(
            f"{len(lines)} pause warning(s) ({what}"
            + (f"; reasons: {', '.join(reasons)}" if reasons else "")
            + f"), first at {lines[0].source}:{lines[0].line}"
            + ("; the job was aborted." if aborted else ".")
            + " The SDK only logs a queue pause after it has lasted a while (15 min in tinker 0.38)."
        ),
        fix=(
            "Billing pauses: add credits. Queue pauses: reduce concurrent training/sampling clients "
            "(`concurrent ... limit hit`) or wait for capacity / use a smaller model."
        ),
        evidence={"warnings": len(lines), "reasons": reasons, "lines": [line.cite() for line in lines[:MAX_CITED]]},
        seconds_lost=round(max(known), 3) if known else None,
        fingerprint="heartbeat-stall:paused",
    )


def _stuck_finding(ctx: RuleContext[HeartbeatStallPolicy], lines: list[LogLine]) -> Finding | None:
    if not lines:
        return None
    seconds = [line.values["seconds"] for line in lines]
    return ctx.finding(
        severity="error",
        title="Requests stuck: no progress",
        message=(
            f"The SDK's stuck-request detector fired {len(lines)} time(s) (`No progress made in "
            f"{max(seconds):.0f}s`), first at {lines[0].source}:{lines[0].line}: requests made no "
            "progress and were abandoned with APIConnectionError."
        ),
        fix=(
            "Check the service status and the session with its session id; if the GIL was held "
            "(see gil-stall) the SDK thread could not poll results. Restart from the last checkpoint."
        ),
        evidence={"occurrences": len(lines), "lines": [line.cite() for line in lines[:MAX_CITED]]},
        seconds_lost=round(sum(seconds), 3),
        fingerprint="heartbeat-stall:stuck",
    )


def check(ctx: RuleContext[HeartbeatStallPolicy]) -> list[Finding]:
    events = ctx.run.log_events
    heartbeat = heartbeat_lines(events)
    candidates = [
        _heartbeat_finding(ctx, heartbeat, ctx.thresholds.min_warnings),
        _paused_finding(ctx, paused_lines(events)),
        _stuck_finding(ctx, stuck_lines(events)),
    ]
    findings = [f for f in candidates if f is not None]
    if findings:
        return findings
    return ctx.passed(f"no heartbeat, pause or stuck-request warning in {len(events)} log event(s)")


RULE = register(
    Rule(
        slug="heartbeat-stall",
        code="TD106",
        title="Heartbeat failures, pauses and stuck requests",
        severity="warning",
        needs="text logs (logs.log, W&B output.log, or captured stdout)",
        docs=RuleDocs(
            what=(
                "`Session heartbeat failed for N seconds` warnings of the SDK, queue/billing pause "
                "warnings, and `No progress made in Ns` stuck-request errors."
            ),
            why=(
                "The heartbeat runs on the SDK's background thread every 10 s; a warning after ~120 s "
                "of failures means that thread could not run (GIL held by user code) or the service "
                "was unreachable. Long outages end in a terminated session."
            ),
            evidence=(
                "Each cited log line with file and line number; repeated warnings of one outage are "
                "grouped per session (the reported seconds grow until the outage ends); seconds lost "
                "= the longest reported duration of each outage."
            ),
            fix=(
                "Free the GIL (move CPU work off the main thread, avoid huge pydantic dumps), check "
                "connectivity; for pauses reduce concurrency or add credits."
            ),
        ),
        check=check,
        policy=HeartbeatStallPolicy,
        stage="GIL",
        requires=(
            requires(
                "no text log (logs.log or captured stdout): heartbeat warnings are only logged there",
                table("log_events"),
                found("log"),
                found("dump"),
            ),
        ),
        tags=("logs",),
    )
)
