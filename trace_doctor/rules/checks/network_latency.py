"""TD116 network-latency: the debug guide's timed API round trips say the network is slow.

The guide's Step 6 separates the network from the service with one timed call: a
`get_server_capabilities()` round trip over 2 s is the network, under 1 s rules it out (FORMATS.md
5.5). Users capture it as `API round-trip: 3.80s`, or as the smoke test's `API reachable (2.31s), N
models available`, which times the same call. Their own `submit: Ss, wait: Ws` timings around the
SDK's calls (Step 3) then say what the slow network cost: a long wait behind a prompt submit.

The rule judges the slowest round trip, not the median: one slow check is the network at the time
the user was investigating, which is when they ran it. A fast round trip clears the network, and the
rule says where the guide goes next (the service, Step 7) instead of firing.
"""

from __future__ import annotations

from trace_doctor.derive.log_signals import LogLine, call_timing_lines, round_trip_lines
from trace_doctor.model import Finding
from trace_doctor.policy.service import NetworkLatencyPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import found, requires, table

MAX_CITED = 10


def _network_waits(timings: list[LogLine], t: NetworkLatencyPolicy) -> list[LogLine]:
    """Calls that waited long behind a prompt submit: the waits a slow network (or the service) explains."""
    return [
        line
        for line in timings
        if line.values["wait_s"] >= float(t.slow_wait_s) and line.values["submit_s"] < float(t.slow_submit_s)
    ]


def check(ctx: RuleContext[NetworkLatencyPolicy]) -> list[Finding]:
    t = ctx.thresholds
    trips = round_trip_lines(ctx.run.log_events)
    if not trips:
        raise NotApplicable(
            "no timed API round trip in the logs: capture the debug guide's network check "
            "(`API round-trip: …s`, Step 6) or its smoke test (`API reachable (…s), N models available`)"
        )
    slowest = max(trips, key=lambda line: line.values["seconds"])
    seconds = slowest.values["seconds"]
    waits = _network_waits(call_timing_lines(ctx.run.log_events), t)
    if seconds <= float(t.slow_round_trip_s):
        return ctx.passed(
            f"the slowest API round trip of {len(trips)} ({seconds:.2f} s, {slowest.source}:{slowest.line}) is not "
            f"over {float(t.slow_round_trip_s):g} s: the guide rules the network out"
            + (
                f"; {len(waits)} call(s) waited {float(t.slow_wait_s):g} s or more behind a prompt submit, which "
                "the guide then reads as the service's time (Step 7: escalate with the session id)"
                if waits
                else ""
            )
        )
    slow = [line for line in trips if line.values["seconds"] > float(t.slow_round_trip_s)]
    checks = sorted({line.values["check"] for line in slow})
    wait_total = sum(line.values["wait_s"] for line in waits)
    return [
        ctx.finding(
            severity="warning",
            title="Slow network to the Tinker API",
            message=(
                f"{len(slow)} of {len(trips)} timed API round trip(s) ({', '.join(checks)}) took over "
                f"{float(t.slow_round_trip_s):g} s, the slowest {seconds:.2f} s at {slowest.source}:{slowest.line}: "
                "the debug guide reads a slow round trip as the network, not the service"
                + (
                    f". {len(waits)} timed call(s) waited {float(t.slow_wait_s):g} s or more behind a prompt "
                    f"submit ({wait_total:.1f} s in all, the longest {max(w.values['wait_s'] for w in waits):.1f} s): "
                    "that wait is where the network's time shows"
                    if waits
                    else ""
                )
                + "."
            ),
            fix=(
                "Run from a machine closer to the service (same cloud region), check proxies, VPNs and "
                "firewalls on the path, and repeat the round trip from another network; escalate to Tinker only "
                "once a round trip stays under 1 s and the waits remain long."
            ),
            evidence={
                "round_trips": [dict(line.cite(), seconds=line.values["seconds"]) for line in trips[:MAX_CITED]],
                "slowest_s": seconds,
                "slow_count": len(slow),
                "network_waits": [
                    dict(line.cite(), submit_s=line.values["submit_s"], wait_s=line.values["wait_s"])
                    for line in waits[:MAX_CITED]
                ],
                "network_wait_s": round(wait_total, 3),
            },
            # Only the user's own timings measure what the network cost; without them it is unknown.
            seconds_lost=round(wait_total, 3) if waits else None,
            fingerprint="network-latency",
        )
    ]


RULE = register(
    Rule(
        slug="network-latency",
        code="TD116",
        title="Slow network between the client and the Tinker API",
        severity="warning",
        needs="the debug guide's network-check or smoke-test printouts in a captured log or stdout",
        docs=RuleDocs(
            what=(
                "The API round trip is slow: the debug guide's network check (`API round-trip: 3.80s`) or its "
                "smoke test (`API reachable (2.31s), N models available`) took over 2 s. That is the network, "
                "not the service. Sources: the tinker-cookbook debug skill (skills/debug/SKILL.md, Step 6 "
                "'Network vs. server-side' and the service-availability smoke test; FORMATS.md 5.5)."
            ),
            why=(
                "Every SDK call crosses that path: submits, result polls and heartbeats. A slow network looks "
                "like a slow service (long waits with prompt submits), and escalating it to Tinker wastes a round "
                "of support; the guide checks it before blaming the server (Step 6 before Step 7)."
            ),
            evidence=(
                "Each timed round trip (file:line, seconds; the slowest one is judged) and the user's own "
                "`submit: Ss, wait: Ws` timings whose wait is long behind a prompt submit, with their total: the "
                "time the network's latency shows in. A high submit is client-side work and is not counted."
            ),
            fix=(
                "Move the client closer to the service, check proxies/VPN/firewall, repeat the round trip from "
                "another network; a round trip under 1 s with long waits is the service's (escalate)."
            ),
        ),
        check=check,
        policy=NetworkLatencyPolicy,
        stage="network and service",
        requires=(
            requires(
                "no text log (logs.log, W&B output.log or captured stdout) holding the guide's printouts",
                table("log_events"),
                found("log"),
                found("dump"),
            ),
        ),
        tags=("logs", "network"),
    )
)
