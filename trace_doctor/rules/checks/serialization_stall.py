"""TD107 serialization-stall: time spent turning request payloads into JSON (pydantic, json, orjson)."""

from __future__ import annotations

from trace_doctor.derive.log_signals import serialization_test_lines
from trace_doctor.derive.profile_stats import breakdown, stack_states
from trace_doctor.model import Finding
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext

FIX = (
    "Check the pydantic version (2.13.0b1+ pre-releases take minutes to dump large payloads: pin "
    "`pydantic<2.13` or a stable release), build Datum payloads from numpy/lists once instead of "
    "re-dumping models, and never log or repr whole request models."
)
MAX_CITED = 10


def _profile_findings(ctx: RuleContext) -> list[Finding]:
    min_share = float(ctx.thresholds.min_share)
    min_seconds = float(ctx.thresholds.min_seconds)
    findings = []
    for item in breakdown(ctx.run.profiles, ctx.run.frames):
        if item.wall_s <= 0 or item.serialization_s < min_seconds:
            continue
        share = item.serialization_s / item.wall_s
        if share < min_share:
            continue
        top = item.serialization_frames[0]
        findings.append(
            ctx.finding(
                severity="warning",
                title="Profile time in payload serialization",
                message=(
                    f"{item.serialization_s:.2f} s of {item.wall_s:.2f} s ({share:.0%}) of profile "
                    f"{item.profile} is spent serializing (hottest: {top.where()}, {top.seconds:.2f} s). "
                    "While it runs the calling thread holds the GIL and the SDK cannot submit or poll."
                ),
                fix=FIX,
                evidence={
                    "profile": item.profile,
                    "wall_s": round(item.wall_s, 6),
                    "serialization_s": round(item.serialization_s, 6),
                    "share": round(share, 4),
                    "frames": [f.to_dict() for f in item.serialization_frames[:MAX_CITED]],
                },
                seconds_lost=round(item.serialization_s, 6),
                fraction_of_wall=round(share, 4),
                fingerprint=f"serialization-stall:profile:{item.profile}",
            )
        )
    return findings


def _stack_finding(ctx: RuleContext) -> Finding | None:
    blocks = [s for s in stack_states(ctx.run.stack_snapshots) if s.state == "serialization"]
    if not blocks:
        return None
    labels = sorted({s.label for s in blocks})
    functions = sorted({s.detail for s in blocks})
    return ctx.finding(
        severity="warning",
        title="Threads caught serializing in stack dumps",
        message=(
            f"{len(blocks)} stack-watchdog stack(s) of [{'], ['.join(labels)}] end in payload "
            f"serialization ({', '.join(functions)}), first at {blocks[0].source}:{blocks[0].line}"
            + (" — on the SDK's holder thread, which then cannot send or poll anything" if "holder" in labels else "")
            + "."
        ),
        fix=FIX,
        evidence={"stacks": [s.to_dict() for s in blocks[:MAX_CITED]], "count": len(blocks)},
        fingerprint="serialization-stall:stacks",
    )


def _test_finding(ctx: RuleContext) -> Finding | None:
    lines = serialization_test_lines(ctx.run.log_events)
    took = [ln for ln in lines if "seconds" in ln.values]
    failed = [ln for ln in lines if ln.values.get("verdict") in ("FAIL", "WARNING")]
    slow = [ln for ln in took if ln.values["seconds"] >= 0.1]
    if not failed and not slow:
        return None
    worst = max((ln.values["seconds"] for ln in took), default=None)
    cited = (failed + slow)[:MAX_CITED]
    verdict = "FAIL" if any(ln.values.get("verdict") == "FAIL" for ln in failed) or (worst or 0) >= 1.0 else "WARNING"
    return ctx.finding(
        severity="error" if verdict == "FAIL" else "warning",
        title="Serialization test is slow",
        message=(
            f"The debug skill's serialization test reports {verdict}"
            + (f": model_dump() took {worst:.3f} s" if worst is not None else "")
            + f" ({cited[0].source}:{cited[0].line}); a healthy dump of the test payload takes < 0.1 s."
        ),
        fix=FIX,
        evidence={"lines": [ln.cite() for ln in cited], "model_dump_s": worst},
        seconds_lost=worst,
        fingerprint="serialization-stall:test",
    )


def check(ctx: RuleContext) -> list[Finding]:
    has_profile = not ctx.run.frames.is_empty()
    has_stacks = not ctx.run.stack_snapshots.is_empty()
    has_test = bool(serialization_test_lines(ctx.run.log_events))
    if not (has_profile or has_stacks or has_test):
        raise NotApplicable(
            "no pyinstrument profile, stack-watchdog dump or serialization-test output: profile the "
            "training loop (pyinstrument Profiler API) or run the debug skill's serialization test"
        )
    findings = _profile_findings(ctx)
    for extra in (_stack_finding(ctx), _test_finding(ctx)):
        if extra is not None:
            findings.append(extra)
    if findings:
        return findings
    shares = [
        f"{b.profile}: {b.serialization_s / b.wall_s:.1%}"
        for b in breakdown(ctx.run.profiles, ctx.run.frames)
        if b.wall_s > 0
    ]
    return ctx.passed(
        "serialization below the threshold"
        + (f" ({'; '.join(shares)})" if shares else "")
        + ("; no stack caught serializing" if has_stacks else "")
    )


RULE = register(
    Rule(
        slug="serialization-stall",
        code="TD107",
        title="Payload serialization stall",
        severity="warning",
        needs="a pyinstrument profile, stack-watchdog dumps, or the serialization test's output",
        docs=RuleDocs(
            what=(
                "Time under pydantic `model_dump` / `model_dump_json` / `__repr__`, tinker's "
                "`_compat.py model_dump`, `serialize_sequence_via_list`, `json.dumps` / orjson of "
                "request payloads."
            ),
            why=(
                "Serialization holds the GIL. Large Datum payloads dumped by a regressed pydantic take "
                "minutes, during which the SDK thread cannot submit, poll or heartbeat."
            ),
            evidence=(
                "Per profile: seconds under the outermost serialization frames and their share of the "
                "profile's wall time, with the hottest frames (function, file, line, seconds); stack "
                "dumps whose stacks end in serialization; `model_dump() took Ns` / FAIL lines of the "
                "serialization test."
            ),
            fix=FIX,
        ),
        check=check,
        tags=("profile", "dumps", "logs"),
    )
)
