"""TD108 cpu-bound-main-thread: the main thread busy in CPU work instead of waiting on the API."""

from __future__ import annotations

from trace_doctor.derive.profile_stats import (
    CPU_LIBRARIES,
    StackState,
    breakdown,
    cpu_share,
    stack_states,
    top_categories,
)
from trace_doctor.model import Finding
from trace_doctor.policy.profiles import CpuBoundMainThreadPolicy
from trace_doctor.rules.base import Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, table

FIX = (
    "Move the hot CPU work off the main thread: tokenization, reward computation, numpy/torch CPU "
    "ops and regex scoring into a ProcessPoolExecutor (spawn) or precompute them; keep the event "
    "loop free so submissions go out and results are consumed on time."
)
MAX_CITED = 10


def _label(category: str) -> str:
    return CPU_LIBRARIES.get(category, category)


def _profile_findings(ctx: RuleContext[CpuBoundMainThreadPolicy]) -> list[Finding]:
    min_share = float(ctx.thresholds.min_share)
    min_seconds = float(ctx.thresholds.min_seconds)
    findings = []
    for item in breakdown(ctx.run.profiles, ctx.run.frames):
        share = cpu_share(item)
        cpu_s = share * item.wall_s
        if share < min_share or cpu_s < min_seconds:
            continue
        merged: dict[str, float] = {}
        for category, seconds in item.cpu_by_category.items():
            merged[_label(category)] = merged.get(_label(category), 0.0) + seconds
        top = top_categories(merged)
        hottest = item.hot_cpu_frames[0] if item.hot_cpu_frames else None
        findings.append(
            ctx.finding(
                severity="warning",
                title="Main thread CPU-bound",
                message=(
                    f"The profiled thread of {item.profile} spent {cpu_s:.2f} s of {item.wall_s:.2f} s "
                    f"({share:.0%}) running CPU code rather than waiting: "
                    + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in top)
                    + (f"; hottest frame {hottest.where()} ({hottest.seconds:.2f} s self)" if hottest else "")
                    + (
                        ". While it computes, the event loop is stalled and the SDK thread competes for the GIL"
                        if item.runs_event_loop
                        else ". No event loop runs in this profile; if this thread drives a training loop, that work "
                        "delays every submission and holds the GIL the SDK thread needs"
                    )
                    + (
                        " (serialization is reported separately by serialization-stall)."
                        if item.serialization_s
                        else "."
                    )
                ),
                fix=FIX,
                evidence={
                    "profile": item.profile,
                    "wall_s": round(item.wall_s, 6),
                    "cpu_s": round(cpu_s, 6),
                    "process_cpu_time_s": item.cpu_time_s,
                    "by_library": {name: round(seconds, 6) for name, seconds in top_categories(merged, 12)},
                    "waiting_s": {
                        "event_loop_poll": round(item.idle_poll_s, 6),
                        "blocking_io": round(item.blocking_io_s, 6),
                        "await": round(item.await_s, 6),
                    },
                    "hot_frames": [f.to_dict() for f in item.hot_cpu_frames[:MAX_CITED]],
                },
                seconds_lost=round(cpu_s, 6),
                fraction_of_wall=round(share, 4),
                fingerprint=f"cpu-bound-main-thread:profile:{ctx.input_key(item.profile)}",
            )
        )
    return findings


def longest_cpu_run(main: list[StackState]) -> list[StackState]:
    """The longest run of consecutive [main] watchdog blocks in CPU code (per file, in block order)."""
    best: list[StackState] = []
    current: list[StackState] = []
    for state in main:
        follows = current and state.source == current[-1].source and state.snapshot == current[-1].snapshot + 1
        if state.state != "cpu":
            current = []
            continue
        current = [*current, state] if follows else [state]
        if len(current) > len(best):
            best = current
    return best


def _stack_finding(ctx: RuleContext[CpuBoundMainThreadPolicy]) -> Finding | None:
    states = stack_states(ctx.run.stack_snapshots)
    main = [s for s in states if s.label == "main"]
    busy: list[StackState] = [s for s in main if s.state == "cpu"]
    t = ctx.thresholds
    held = longest_cpu_run(main)
    spread = len(busy) >= t.min_stack_blocks and len(busy) / max(len(main), 1) >= float(t.min_share)
    long_hold = len(held) >= t.min_consecutive_blocks
    if not (spread or long_hold):
        return None
    libraries = sorted({s.detail for s in busy})
    # The watchdog is a Python thread: it printed these blocks, and the SDK thread's stack in them, only because
    # the GIL was free. CPU code caught block after block is then C code that released it (BLAS, not a regex).
    sdk_alive = {(s.source, s.snapshot) for s in states if s.label == "holder"}
    hold_text = ""
    if long_hold:
        first, last = held[0], held[-1]
        with_sdk = sum(1 for s in held if (s.source, s.snapshot) in sdk_alive)
        hold_text = (
            f" [main] stayed in {', '.join(sorted({s.detail for s in held}))} for {len(held)} consecutive samples "
            f"({first.timestamp} to {last.timestamp}, {first.source}:{first.line}), "
            + (
                f"with the SDK thread's own stack printed in {with_sdk} of them: other threads got the GIL meanwhile "
                "(BLAS releases it inside each product; shorter GIL-holding calls let it go between calls), so the "
                "SDK thread kept running while the event loop was held — CPU work on the main thread, not a GIL "
                "stall."
                if with_sdk
                else "with no SDK-thread stack beside it."
            )
        )
    return ctx.finding(
        severity="warning",
        title="Main thread caught in CPU code",
        message=(
            f"{len(busy)} of {len(main)} stack-watchdog samples of [main] are in CPU code "
            f"({', '.join(libraries)}), first at {busy[0].source}:{busy[0].line} "
            f"({busy[0].function} in {busy[0].file_path}:{busy[0].line_no})." + hold_text
        ),
        fix=FIX,
        evidence={
            "samples": len(main),
            "cpu_samples": len(busy),
            "share": round(len(busy) / len(main), 4),
            "longest_hold_samples": len(held),
            "longest_hold": [s.to_dict() for s in held[:MAX_CITED]],
            "stacks": [s.to_dict() for s in busy[:MAX_CITED]],
        },
        fraction_of_wall=round(len(busy) / len(main), 4),
        fingerprint="cpu-bound-main-thread:stacks",
    )


def check(ctx: RuleContext[CpuBoundMainThreadPolicy]) -> list[Finding]:
    findings = _profile_findings(ctx)
    stacks = _stack_finding(ctx)
    if stacks is not None:
        findings.append(stacks)
    if findings:
        return findings
    shares = [
        f"{b.profile}: {cpu_share(b):.0%} CPU, {cpu_share(b) * b.wall_s:.2f} s"
        for b in breakdown(ctx.run.profiles, ctx.run.frames)
    ]
    return ctx.passed(
        f"main-thread CPU work below {float(ctx.thresholds.min_share):.0%} of wall time or "
        f"{float(ctx.thresholds.min_seconds):g} s" + (f" ({'; '.join(shares)})" if shares else "")
    )


RULE = register(
    Rule(
        slug="cpu-bound-main-thread",
        code="TD108",
        title="Main thread busy in CPU work",
        severity="warning",
        needs="a pyinstrument profile of the main thread, or stack-watchdog dumps",
        docs=RuleDocs(
            what=(
                "Main-thread self time in CPU code — numpy, torch on CPU, tokenizers, transformers, "
                "regex, pure-Python loops in application code — while the run waits on the API."
            ),
            why=(
                "Tinker does the GPU work; the client should mostly wait. CPU work on the main thread "
                "delays submissions past the service's clock cycle and holds the GIL the SDK thread needs."
            ),
            evidence=(
                "Per profile: exclusive time of non-waiting frames grouped by library (built-ins count "
                "for their caller), capped by the process CPU time pyinstrument recorded, with the "
                "hottest frames; waiting in epoll/select, blocking I/O and [await] is excluded. Stack "
                "dumps: share of [main] samples whose innermost frame is in a CPU library (or whose source line "
                "calls one: `np.…(`, `torch.…(`, a `@` matrix product), and the longest run of consecutive such "
                "samples: a hold of min_consecutive_blocks or more is named even as a small share of a long run."
            ),
            fix=FIX,
        ),
        check=check,
        policy=CpuBoundMainThreadPolicy,
        stage="profile",
        requires=(
            requires(
                "no pyinstrument profile or stack-watchdog dump: profile the training loop's main thread "
                "(pyinstrument) or run the debug skill's stack watchdog",
                table("frames"),
                table("stack_snapshots"),
            ),
        ),
        tags=("profile", "dumps"),
    )
)
