"""TD111 blocking-call-in-async: the main thread blocked in synchronous code while the SDK thread lived.

The debug guide tells two stalls apart by who stops. In a GIL stall every thread stops (the SDK's
loop dumps nothing, its round trips stretch): gil-stall. Here only the main thread stops: a sync
`.result()` on a future, `time.sleep`, a lock, a large payload built or serialized inside a submit,
or CPU work in a library that releases the GIL (BLAS) — the SDK thread keeps dumping and polling,
but the event loop submits nothing until the call returns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from trace_doctor.derive.dump_cadence import sdk_loop_silences, silences
from trace_doctor.derive.intervals import sum_in_order
from trace_doctor.derive.log_signals import sync_from_async_lines
from trace_doctor.derive.profile_stats import stack_states
from trace_doctor.derive.stalls import (
    CITED_COLUMNS,
    CLOSED_WITH_DURATION,
    merge_range_columns,
    merge_ranges,
    overlaps,
    span_ref,
)
from trace_doctor.knowledge.tinker import SUBMIT_ONLY_CALLS
from trace_doctor.model import Finding
from trace_doctor.policy.timing import BlockingCallPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.signals import Signal

MAX_CITED = 15
# Innermost functions of a thread waiting synchronously: Future.result, Event/Condition.wait,
# time.sleep, Lock.acquire, Thread.join.
BLOCKING_WAITS = frozenset({"result", "wait", "sleep", "acquire", "join", "_wait_for_tstate_lock"})
# How the main thread's stall is read: the SDK's own warning and a silent [main] are direct.
DIRECT, SUPPORTING = 2.0, 1.0


def _sdk_warnings(ctx: RuleContext[BlockingCallPolicy]) -> Signal | None:
    lines = sync_from_async_lines(ctx.run.log_events)
    if not lines:
        return None
    methods = sorted({ln.values["method"] for ln in lines})
    return Signal(
        "sync-from-async",
        DIRECT,
        f"the SDK warned {len(lines)} time(s) that a synchronous method ({', '.join(methods[:5])}) was called "
        "from async code",
        {"lines": [ln.cite() for ln in lines[:MAX_CITED]], "count": len(lines), "methods": methods},
    )


def _main_silent(ctx: RuleContext[BlockingCallPolicy]) -> Signal | None:
    t = ctx.thresholds
    found = silences(
        ctx.run.task_snapshots, min_intervals=float(t.min_silent_intervals), min_seconds=float(t.min_silence_s)
    )
    main = [s for s in found if s.label == "main" and "holder" in s.other_dumps]
    if not main:
        return None
    total = sum(s.lower_bound_s for s in main)
    return Signal(
        "main-silent",
        DIRECT,
        f"[main] task dumps stopped {len(main)} time(s) while the SDK loop's [holder] kept dumping (at least "
        f"{total:.1f} s in all, longest {max(s.clock_gap_s for s in main):.1f} s)",
        {"silences": [s.to_dict() for s in main[:MAX_CITED]], "count": len(main)},
        seconds=total,
    )


def _stack_waits(ctx: RuleContext[BlockingCallPolicy]) -> Signal | None:
    blocks: dict[tuple[str, int], dict[str, Any]] = {}
    for state in stack_states(ctx.run.stack_snapshots):
        blocks.setdefault((state.source, state.snapshot), {})[state.label] = state
    waiting = [
        b["main"]
        for b in blocks.values()
        if b.get("main") is not None
        and b["main"].function.rsplit(".", 1)[-1] in BLOCKING_WAITS
        and b.get("holder") is not None
    ]
    if not waiting:
        return None
    calls = sorted({f"{w.function} ({w.file_path.rsplit('/', 1)[-1]}:{w.line_no})" for w in waiting})
    return Signal(
        "stack-watchdog",
        SUPPORTING,
        f"{len(waiting)} stack-watchdog block(s) show [main] waiting synchronously in {', '.join(calls[:3])} "
        "while the SDK thread has its own stack",
        {"blocks": [w.to_dict() for w in waiting[:MAX_CITED]], "count": len(waiting)},
    )


def _trace_blocks(ctx: RuleContext[BlockingCallPolicy]) -> Signal | None:
    if ctx.run.height("spans") == 0:
        return None
    min_s = float(ctx.thresholds.min_blocked_s)
    # A stretched round trip at the same time means the SDK thread could not run either: a GIL stall,
    # judged by the ratio gil-stall uses (shared), so a block is one rule's or the other's, never both.
    stretched = ctx.stretched_round_trips(min_s)
    long = ctx.run.spans_where(
        CLOSED_WITH_DURATION
        & (pl.col("dur_us") > min_s * 1e6)
        & (
            pl.col("name").is_in(list(SUBMIT_ONLY_CALLS))
            | (pl.col("track").str.starts_with("sync:") & (pl.col("thread") == "MainThread"))
        ),
        CITED_COLUMNS,
    )
    # Those overlapping stretched round trips are gil-stall's: the SDK thread stalled too. (The
    # table is in start order already: a stable sort keeps ties in it.)
    long = long.sort("segment", "start_us", maintain_order=True)
    if not stretched.is_empty():
        taken = overlaps(long, stretched).select(pl.col("_row").unique())
        long = long.with_row_index("_row").join(taken, on="_row", how="anti", maintain_order="left").drop("_row")
    if long.is_empty():
        return None
    names = long.get_column("name").unique().sort().to_list()
    # Those calls' durations read through spans_where: a stored table's parts seen before are not read again.
    calls = ctx.spans_where(CLOSED_WITH_DURATION & pl.col("name").is_in(names), ["name", "dur_us"])
    typical = calls.group_by("name").agg(pl.col("dur_us").median().alias("typical_us"))
    # A row's excess over its call's median; summed in row order, as the rows are listed.
    over = long.join(typical, on="name", how="left", maintain_order="left").select(
        pl.col("dur_us") - pl.min_horizontal(pl.col("typical_us").fill_null(0.0), pl.col("dur_us"))
    )
    excess = sum_in_order(np.maximum(over.to_series().to_numpy(), 0.0)) / 1e6
    durations = long.get_column("dur_us")
    return Signal(
        "trace-blocked",
        SUPPORTING,
        f"{long.height} span(s) of submit-only SDK calls or synchronous main-thread work ({', '.join(names[:4])}) "
        f"took over {min_s:g} s (longest {durations.max() / 1e6:.2f} s)"
        + (" while sample round trips kept their usual pace" if _round_trips(ctx) else "")
        + ": handing a request over takes milliseconds unless the calling thread is busy "
        "(building or serializing a large payload, or a blocking call)",
        {"spans": [span_ref(r) for r in long.head(MAX_CITED).to_dicts()], "count": long.height},
        seconds=excess,
        time_ranges_us=merge_range_columns(long.get_column("start_us"), long.get_column("end_us")),
        steps=sorted({int(step) for step in long.get_column("step").drop_nulls().to_list()}),
    )


def _round_trips(ctx: RuleContext[BlockingCallPolicy]) -> bool:
    """Whether the trace has sample round trips, whose pace beside a long call shows the SDK thread running."""
    return ctx.round_trip_medians.height > 0


def _confidence(readings: list[Signal]) -> str:
    direct = sum(1 for r in readings if r.strength >= DIRECT)
    if direct and len(readings) >= 2:
        return "high"
    if direct or len(readings) >= 2:
        return "medium"
    return "low"


def check(ctx: RuleContext[BlockingCallPolicy]) -> list[Finding]:
    run = ctx.run
    if run.task_snapshots.is_empty() and run.stack_snapshots.is_empty() and run.height("spans") == 0:
        if not sync_from_async_lines(run.log_events):
            raise NotApplicable(
                "no task dumps, stack dumps, trace or SDK sync-from-async warnings to see the main thread blocked"
            )
    readings = [r for r in (_sdk_warnings(ctx), _main_silent(ctx), _stack_waits(ctx), _trace_blocks(ctx)) if r]
    if not readings:
        return ctx.passed("the main thread was never seen blocked while the SDK thread ran")
    t = ctx.thresholds
    stopped = sdk_loop_silences(
        run.task_snapshots, min_intervals=float(t.min_silent_intervals), min_seconds=float(t.min_silence_s)
    )
    if stopped and not any(r.strength >= DIRECT for r in readings):
        # Long calls say a thread was held, not which: with the SDK loop's own dumps stopping too, every
        # thread was, which is a GIL stall (the guide's "SDK thread stopped logging"), not a blocking call.
        return ctx.passed(
            f"{'; '.join(r.summary for r in readings)}; but the SDK loop's task dumps stopped {len(stopped)} time(s) "
            f"(at least {sum(s.lower_bound_s for s in stopped):.1f} s): the SDK thread did not keep running, so "
            "these are gil-stall's"
        )
    # Whether the SDK thread is seen running while the main thread was held: its loop kept dumping while
    # [main] stopped, the SDK itself caught a sync `.result()` (which waits on that thread), or sample round
    # trips kept their pace beside a long call (trace-blocked's own test, when the trace has round trips).
    kinds = {r.kind for r in readings}
    seen_running = bool(kinds & {"main-silent", "sync-from-async"}) or ("trace-blocked" in kinds and _round_trips(ctx))
    readings.sort(key=lambda r: (-r.strength, r.kind))
    level = _confidence(readings)
    estimates = [r.seconds for r in readings if r.seconds is not None]
    lost = max(estimates) if estimates else None
    return [
        ctx.finding(
            title="Main thread blocked by a synchronous call",
            message=(
                f"{len(readings)} reading(s), confidence {level}: "
                + "; ".join(r.summary for r in readings)
                + (f". About {lost:.1f} s of event-loop time were lost" if lost else "")
                + (
                    ". The SDK thread kept running, so this is not a GIL stall: the event loop itself was held."
                    if seen_running
                    else ". Nothing shows the SDK thread stopped with it (no task dumps or sample round trips tell), "
                    "so a blocking call is the likelier reading; task dumps would rule a GIL stall out."
                )
            ),
            fix=(
                "Await the SDK's futures instead of calling `.result()` in async code (use the `*_async` method); "
                "replace `time.sleep` with `await asyncio.sleep`; run blocking work in `asyncio.to_thread` or a "
                "process pool; build and serialize large payloads off the event loop."
            ),
            steps=sorted({s for r in readings for s in r.steps}),
            time_ranges_us=merge_ranges([rng for r in readings for rng in r.time_ranges_us]),
            evidence={
                "readings": [
                    {
                        "kind": r.kind,
                        "summary": r.summary,
                        "seconds": round(r.seconds, 3) if r.seconds is not None else None,
                        **r.evidence,
                    }
                    for r in readings
                ]
            },
            seconds_lost=round(lost, 3) if lost else None,
            confidence=level,
            fingerprint="blocking-call-in-async",
        )
    ]


RULE = register(
    Rule(
        slug="blocking-call-in-async",
        code="TD111",
        title="Main thread blocked by a synchronous call (not a GIL stall)",
        severity="warning",
        needs="any of: asyncio task dumps, stack-watchdog dumps, trace_events.jsonl, SDK sync_only warnings",
        docs=RuleDocs(
            what=(
                "The event loop / main thread blocked by a synchronous call (sync `.result()`, `time.sleep`, a "
                "lock, payload building, CPU work with the GIL released) while the SDK thread keeps running."
            ),
            why=(
                "Nothing is submitted while the loop is held, so the service idles for whole clock cycles; unlike "
                "a GIL stall the SDK thread is fine, so the fix is in the calling code, not the GIL."
            ),
            evidence=(
                "The SDK's `Synchronous method ... called from async context` warnings; [main] task dumps that stop "
                "while [holder] keeps dumping; stack-watchdog blocks with [main] in result/wait/sleep/acquire; "
                "submit-only or sync main-thread spans over min_blocked_s while sample round trips keep pace."
            ),
            fix="Await futures, asyncio.sleep, asyncio.to_thread / a process pool for blocking work.",
        ),
        check=check,
        policy=BlockingCallPolicy,
        stage="profile",
        shared=("round_trip_stretch_ratio",),
        tags=("gil", "dumps", "trace", "logs"),
    )
)
