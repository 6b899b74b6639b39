"""TD107 serialization-stall: time spent turning request payloads into JSON (pydantic, json, orjson)."""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.log_signals import call_timing_lines, serialization_test_lines
from trace_doctor.derive.profile_stats import breakdown, stack_states
from trace_doctor.derive.robust import median
from trace_doctor.derive.stalls import SUBMIT_COLUMNS, TRAINING_SUBMITS
from trace_doctor.knowledge.tinker import TRAINING_SUBMIT_CALLS
from trace_doctor.model import Finding
from trace_doctor.policy.profiles import SerializationStallPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext

FIX = (
    "Check the pydantic version (2.13.0b1+ pre-releases take minutes to dump large payloads: pin "
    "`pydantic<2.13` or a stable release), build Datum payloads from numpy/lists once instead of "
    "re-dumping models, and never log or repr whole request models."
)
MAX_CITED = 10


def _profile_findings(ctx: RuleContext[SerializationStallPolicy]) -> list[Finding]:
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
                fingerprint=f"serialization-stall:profile:{ctx.input_key(item.profile)}",
            )
        )
    return findings


def _stack_finding(ctx: RuleContext[SerializationStallPolicy]) -> Finding | None:
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


def _test_finding(ctx: RuleContext[SerializationStallPolicy]) -> Finding | None:
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


def _trace_finding(ctx: RuleContext[SerializationStallPolicy]) -> Finding | None:
    """Every training submit slow: the request is built and serialized on the calling thread."""
    if ctx.run.height("spans") == 0:
        return None
    spans = ctx.spans_where(TRAINING_SUBMITS, SUBMIT_COLUMNS)
    submits = spans.filter(
        pl.col("name").is_in(sorted(TRAINING_SUBMIT_CALLS))
        & pl.col("closed").fill_null(True)
        & pl.col("dur_us").is_not_null()
    )
    enough = ctx.thresholds.min_submits
    if submits.height < enough:
        return None
    limit = float(ctx.thresholds.max_submit_median_s)
    # Judged per call: optim_step requests are tiny, so a slow forward_backward would be diluted.
    medians = submits.group_by("name").agg((pl.col("dur_us").median() / 1e6).alias("median_s"), pl.len().alias("n"))
    slow_names = medians.filter((pl.col("median_s") >= limit) & (pl.col("n") >= enough))["name"].to_list()
    if not slow_names:
        return None
    median_s = float(submits.filter(pl.col("name").is_in(slow_names))["dur_us"].median()) / 1e6
    slow = submits.filter(pl.col("name").is_in(slow_names) & (pl.col("dur_us") >= limit * 1e6))
    seconds = float(slow["dur_us"].sum()) / 1e6
    if seconds < float(ctx.thresholds.min_seconds):
        return None
    by_name = slow.group_by("name").agg(pl.len().alias("n"), (pl.col("dur_us").median() / 1e6).alias("median_s"))
    names = ", ".join(f"{n} ({c}x, median {m:.3f} s)" for n, c, m in sorted(by_name.iter_rows()))
    return ctx.finding(
        severity="warning",
        title="Every training submit blocks its caller (payload serialization)",
        message=(
            f"{slow.height} of {submits.height} training submits took {limit:g} s or more — {names}; "
            f"{seconds:.2f} s in all. These calls only build the request and hand it to the SDK thread, which "
            "takes milliseconds: the time is the payload being built and serialized (pydantic) on the calling "
            "thread. A profile would show it in model_dump; the trace alone cannot, hence medium confidence."
        ),
        fix=FIX,
        steps=sorted({int(s) for s in slow["step"].drop_nulls().to_list()}),
        evidence={"submits": submits.height, "slow_submits": slow.height, "median_submit_s": round(median_s, 6)},
        seconds_lost=round(seconds, 6),
        fingerprint="serialization-stall:trace-submits",
        confidence="medium",
    )


def _printed_timing_finding(ctx: RuleContext[SerializationStallPolicy]) -> Finding | None:
    """The guide's own timing around the calls (`submit: Ss, wait: Ws`, Step 3): a high submit is client-side work
    (serialization, data preparation) on the calling thread, the guide's Step 4."""
    lines = call_timing_lines(ctx.run.log_events)
    t = ctx.thresholds
    if len(lines) < t.min_submits:
        return None
    limit = float(t.max_submit_median_s)
    submits = [ln.values["submit_s"] for ln in lines]
    typical = median(submits)
    slow = [ln for ln in lines if ln.values["submit_s"] >= limit]
    seconds = sum(ln.values["submit_s"] for ln in slow)
    if typical < limit or seconds < float(t.min_seconds):
        return None
    waits = median([ln.values["wait_s"] for ln in lines])
    return ctx.finding(
        severity="warning",
        title="The submit itself is slow in the printed call timings (client side)",
        message=(
            f"{len(slow)} of {len(lines)} timed calls spent {limit:g} s or more submitting (median submit "
            f"{typical:.2f} s, median wait {waits:.2f} s; first at {lines[0].source}:{lines[0].line}); {seconds:.1f} s "
            "in all. The debug guide reads a high submit time as client-side work on the calling thread — the "
            "payload being built and serialized, or data preparation — not the network or the service (its Step 4: "
            "profile the submit)."
        ),
        fix=FIX,
        evidence={
            "timed_calls": len(lines),
            "slow_submits": len(slow),
            "median_submit_s": round(typical, 6),
            "median_wait_s": round(waits, 6),
            "lines": [dict(ln.cite(), **ln.values) for ln in slow[:MAX_CITED]],
        },
        seconds_lost=round(seconds, 6),
        fingerprint="serialization-stall:printed-timings",
        confidence="medium",
    )


def check(ctx: RuleContext[SerializationStallPolicy]) -> list[Finding]:
    has_trace = ctx.run.height("spans") > 0
    has_profile = not ctx.run.frames.is_empty()
    has_stacks = not ctx.run.stack_snapshots.is_empty()
    has_test = bool(serialization_test_lines(ctx.run.log_events))
    has_timings = bool(call_timing_lines(ctx.run.log_events))
    if not (has_profile or has_stacks or has_test or has_trace or has_timings):
        raise NotApplicable(
            "no pyinstrument profile, stack-watchdog dump, trace or serialization-test output: profile the "
            "training loop (pyinstrument Profiler API) or run the debug skill's serialization test"
        )
    findings = _profile_findings(ctx)
    for extra in (_stack_finding(ctx), _test_finding(ctx), _trace_finding(ctx), _printed_timing_finding(ctx)):
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
        + ("; training submits hand off promptly in the trace" if has_trace else "")
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
                "serialization test; the guide's `submit: Ss, wait: Ws` timings whose median submit is slow "
                "(client-side work on the calling thread: serialization or data preparation)."
            ),
            fix=FIX,
        ),
        check=check,
        policy=SerializationStallPolicy,
        stage="profile",
        tags=("profile", "dumps", "logs"),
    )
)
