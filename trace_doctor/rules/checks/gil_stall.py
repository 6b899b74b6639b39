"""TD105 gil-stall: independent signals that user code held the GIL and starved the SDK thread.

No single input shows a GIL stall: the SDK's background thread is never in the trace nor in a
pyinstrument profile. So this rule collects every independent reading — GIL-monitor jitter, task
dumps where one loop went silent, stack-watchdog blocks, trace spans that could only be long if
the calling thread was blocked, heartbeat warnings, erratic step times — and grades a single
verdict by how many independent signals agree and how direct each one is.
"""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.busy_threads import busy_thread_stalls, match_outages, stretched_waits
from trace_doctor.derive.dump_cadence import process_silences, sdk_loop_silences, silences
from trace_doctor.derive.log_signals import gil_monitor_lines, heartbeat_episodes, heartbeat_lines
from trace_doctor.derive.profile_stats import StackState, stack_states
from trace_doctor.derive.robust import median, robust_cv
from trace_doctor.derive.stalls import (
    CITED_COLUMNS,
    CLOSED_WITH_DURATION,
    MAIN_TRACK_COLUMNS,
    MAIN_TRACK_SPANS,
    main_track_gaps,
    merge_ranges,
    overlaps,
    span_ref,
)
from trace_doctor.knowledge.tinker import SUBMIT_ONLY_CALLS
from trace_doctor.model import Finding
from trace_doctor.policy.timing import GilStallPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.signals import Signal

# Direct readings of a starved or blocked thread weigh 2, readings with one innocent alternative
# (e.g. a suspended process) 1.5, corroborating ones 1, circumstantial 0.5.
STRONG, STRONG_ISH, MEDIUM, WEAK = 2.0, 1.5, 1.0, 0.5
MAX_CITED = 15
# Readings of the SDK thread itself being starved: the GIL monitor's own thread woke late, the SDK
# loop's dumps stopped (alone or with every loop), its round trips stretched while a call blocked.
# Without one of them there is no GIL stall: the guide's reading is that a GIL stall stops *every*
# thread, while a main thread blocked in sync code leaves the SDK thread running
# (blocking-call-in-async). Stack-watchdog blocks, heartbeats and step times only support.
# A heartbeat outage as long as a stretch where a thread ran user code and nothing on it moved is a
# reading of both threads stopped at once (derive.busy_threads), like every loop's dumps stopping.
SDK_STARVED = frozenset(
    {"gil-monitor", "holder-silent", "all-loops-silent", "trace-submit", "trace-sync", "heartbeat-while-busy"}
)
# Readings that every thread stopped, which a suspended process (SIGSTOP, a paused VM) gives as well:
# alone they say "the process's threads were starved", not which of the two, so never with high confidence.
ALL_THREADS_STOPPED = frozenset({"all-loops-silent", "heartbeat-while-busy"})


def confidence(signals: list[Signal], t: GilStallPolicy) -> str:
    """high: two or more independent signals, at least one direct; medium: one direct or two weaker."""
    score = sum(s.strength for s in signals)
    independent = sum(1 for s in signals if s.strength >= MEDIUM)
    if score >= t.high_confidence_score and independent >= t.high_confidence_readings:
        return "high"
    if score >= t.medium_confidence_score:
        return "medium"
    return "low"


def _monitor_signal(ctx: RuleContext[GilStallPolicy]) -> Signal | None:
    threshold = float(ctx.thresholds.min_monitor_jitter_s)
    lines = [ln for ln in gil_monitor_lines(ctx.run.log_events) if ln.values["jitter_s"] >= threshold]
    if not lines:
        return None
    jitter = [ln.values["jitter_s"] for ln in lines]
    return Signal(
        "gil-monitor",
        STRONG,
        f"{len(lines)} GIL-monitor line(s) with jitter up to {max(jitter):.2f} s (total {sum(jitter):.1f} s)",
        {
            "lines": [dict(ln.cite(), jitter_s=ln.values["jitter_s"]) for ln in lines[:MAX_CITED]],
            "count": len(lines),
            "total_jitter_s": round(sum(jitter), 3),
            "max_jitter_s": max(jitter),
        },
        seconds=sum(jitter),
    )


def _dump_signals(ctx: RuleContext[GilStallPolicy]) -> list[Signal]:
    found = silences(
        ctx.run.task_snapshots,
        min_intervals=float(ctx.thresholds.min_silent_intervals),
        min_seconds=float(ctx.thresholds.min_silence_s),
    )
    together = process_silences(
        ctx.run.task_snapshots,
        min_intervals=float(ctx.thresholds.min_silent_intervals),
        min_seconds=float(ctx.thresholds.min_silence_s),
    )
    holder = [s for s in found if s.label == "holder" and "main" in s.other_dumps]
    signals = []
    if holder:
        total = sum(s.lower_bound_s for s in holder)
        signals.append(
            Signal(
                "holder-silent",
                STRONG,
                f"the SDK loop's [holder] task dumps stopped {len(holder)} time(s) while [main] kept "
                f"dumping (at least {total:.1f} s in all, longest {max(s.clock_gap_s for s in holder):.0f} s)",
                {"silences": [s.to_dict() for s in holder[:MAX_CITED]], "count": len(holder)},
                seconds=total,
            )
        )
    if together:
        total = sum(s.lower_bound_s for s in together)
        signals.append(
            Signal(
                "all-loops-silent",
                STRONG_ISH,
                f"every event loop ([main] and [holder]) stopped dumping at once {len(together)} time(s) "
                f"(at least {total:.1f} s in all): threads only all stop together when one holds the GIL "
                "in C code (or the process was suspended)",
                {"silences": [s.to_dict() for s in together[:MAX_CITED]], "count": len(together)},
                seconds=total,
            )
        )
    return signals


def _stack_signal(ctx: RuleContext[GilStallPolicy]) -> Signal | None:
    states = stack_states(ctx.run.stack_snapshots)
    by_block: dict[tuple[str, int], dict[str, StackState]] = {}
    for state in states:
        by_block.setdefault((state.source, state.snapshot), {})[state.label] = state
    starving = [
        block
        for block in by_block.values()
        if block.get("main") is not None
        and block["main"].state in ("cpu", "serialization")
        and block.get("holder") is not None
        and block["holder"].state == "idle-poll"
    ]
    if not starving:
        return None
    libraries = sorted({b["main"].detail for b in starving})
    return Signal(
        "stack-watchdog",
        MEDIUM,
        f"{len(starving)} stack-watchdog block(s) show [main] in CPU code ({', '.join(libraries)}) while "
        "[holder] waits in selectors/poll for the GIL to process results",
        {
            "blocks": [{"main": b["main"].to_dict(), "holder": b["holder"].to_dict()} for b in starving[:MAX_CITED]],
            "count": len(starving),
        },
    )


def _trace_signals(ctx: RuleContext[GilStallPolicy]) -> list[Signal]:
    if ctx.run.height("spans") == 0:
        return []
    is_closed = CLOSED_WITH_DURATION
    min_s = float(ctx.thresholds.min_blocked_submit_s)
    stretched = ctx.stretched_round_trips(min_s)
    signals = []
    if stretched.is_empty():
        return signals  # both readings are of spans that overlap a stretched round trip

    submits = ctx.run.spans_where(is_closed & pl.col("name").is_in(list(SUBMIT_ONLY_CALLS)), CITED_COLUMNS)
    if not submits.is_empty():
        submits = submits.with_columns(pl.col("dur_us").median().over("name").alias("typical_us"))
        long = submits.filter(pl.col("dur_us") > min_s * 1e6).sort("segment", "start_us", maintain_order=True)
        # A slow submit alone says only that the calling thread was busy (building or serializing the
        # payload, a blocking call): blocking-call-in-async. It is a GIL stall when the SDK's own
        # round trips stretched at the same time.
        with_stretch = _with_overlaps(long, stretched)
        long_submits = [row for row, _ in with_stretch]
        if long_submits:
            excess = sum((row["dur_us"] - row["typical_us"]) / 1e6 for row in long_submits)
            signals.append(
                Signal(
                    "trace-submit",
                    STRONG,
                    f"{len(long_submits)} submit-only SDK span(s) "
                    f"({', '.join(sorted({r['name'] for r in long_submits}))}) "
                    f"took over {min_s:g} s (longest {max(r['dur_us'] for r in long_submits) / 1e6:.2f} s) while "
                    "sample round trips on another thread stretched at the same time: neither thread could run",
                    {
                        "spans": [
                            dict(
                                span_ref(r),
                                typical_s=round(r["typical_us"] / 1e6, 6),
                                overlapping_round_trips=[span_ref(h) for h in hits[:3]],
                            )
                            for r, hits in with_stretch[:MAX_CITED]
                        ],
                        "count": len(long_submits),
                    },
                    seconds=excess,
                    time_ranges_us=merge_ranges([[r["start_us"], r["end_us"]] for r in long_submits]),
                    steps=sorted({r["step"] for r in long_submits if r["step"] is not None}),
                )
            )

    sync_main = ctx.run.spans_where(
        is_closed
        & pl.col("track").str.starts_with("sync:")
        & (pl.col("thread") == "MainThread")
        & (pl.col("dur_us") > min_s * 1e6),
        CITED_COLUMNS,
    ).sort("segment", "start_us", maintain_order=True)
    corroborated_sync = _with_overlaps(sync_main, stretched)
    if corroborated_sync:
        ranges = merge_ranges([[r["start_us"], r["end_us"]] for r, _ in corroborated_sync])
        signals.append(
            Signal(
                "trace-sync",
                MEDIUM,
                f"{len(corroborated_sync)} long synchronous span(s) on the main thread overlap sample round "
                "trips stretched well beyond their median",
                {
                    "spans": [
                        dict(span_ref(r), overlapping_round_trips=[span_ref(h) for h in hits[:3]])
                        for r, hits in corroborated_sync[:MAX_CITED]
                    ],
                    "count": len(corroborated_sync),
                },
                seconds=sum(b - a for a, b in ranges) / 1e6,
                time_ranges_us=ranges,
                steps=sorted({r["step"] for r, _ in corroborated_sync if r["step"] is not None}),
            )
        )
    return signals


def _submits_while_loop_stopped(ctx: RuleContext[GilStallPolicy]) -> Signal | None:
    """Submit-only SDK calls that took seconds in a run whose SDK loop's dumps stopped (the guide's pair of
    signs: "submit-only calls taking seconds" and "the SDK thread stopped logging").

    A submit hands the request to the SDK's loop in milliseconds; it takes seconds when the calling thread
    or that loop cannot run. With no sample round trips to time against (an SFT loop), the dumps say which:
    the loop stopped. Dump stamps are wall-clock seconds and trace stamps are not, so the two are read
    together over the run, not span by span: this reading places the stall in the trace, it does not prove it.
    """
    if ctx.run.height("spans") == 0 or ctx.run.task_snapshots.is_empty():
        return None
    t = ctx.thresholds
    stopped = sdk_loop_silences(
        ctx.run.task_snapshots, min_intervals=float(t.min_silent_intervals), min_seconds=float(t.min_silence_s)
    )
    if not stopped:
        return None
    min_s = float(t.min_blocked_submit_s)
    submits = ctx.run.spans_where(
        CLOSED_WITH_DURATION & pl.col("name").is_in(list(SUBMIT_ONLY_CALLS)), CITED_COLUMNS
    ).with_columns(pl.col("dur_us").median().over("name").alias("typical_us"))
    long = submits.filter(pl.col("dur_us") > min_s * 1e6).sort("segment", "start_us", maintain_order=True)
    if long.is_empty():
        return None
    rows = long.to_dicts()
    excess = sum((r["dur_us"] - r["typical_us"]) / 1e6 for r in rows)
    return Signal(
        "trace-submit-loop-stopped",
        MEDIUM,
        f"{len(rows)} submit-only SDK span(s) ({', '.join(sorted({r['name'] for r in rows}))}) took over {min_s:g} s "
        f"(longest {max(r['dur_us'] for r in rows) / 1e6:.2f} s, typically "
        f"{min(r['typical_us'] for r in rows) / 1e3:.1f} ms) in a run whose SDK loop stopped dumping "
        f"{len(stopped)} time(s): handing a request over takes milliseconds unless neither thread can run",
        {
            "spans": [dict(span_ref(r), typical_s=round(r["typical_us"] / 1e6, 6)) for r in rows[:MAX_CITED]],
            "count": len(rows),
        },
        seconds=excess,
        time_ranges_us=merge_ranges([[r["start_us"], r["end_us"]] for r in rows]),
        steps=sorted({r["step"] for r in rows if r["step"] is not None}),
    )


def _with_overlaps(rows: pl.DataFrame, stretched: pl.DataFrame) -> list[tuple[dict, list[dict]]]:
    """The rows that overlap a stretched round trip on another thread, in table order; the first
    MAX_CITED of them (those a finding cites) with the first three round trips they overlap."""
    pairs = overlaps(rows, stretched)
    if pairs.is_empty():
        return []
    firsts = pairs.group_by("_row", maintain_order=True).agg(pl.col("_other").head(3))
    hit_rows = rows[firsts.get_column("_row")].to_dicts()
    cited = stretched.select(CITED_COLUMNS)
    hits = [cited[others].to_dicts() for others in firsts.get_column("_other").head(MAX_CITED).to_list()]
    return [(row, hits[i] if i < len(hits) else []) for i, row in enumerate(hit_rows)]


def _trace_gap_signal(ctx: RuleContext[GilStallPolicy]) -> Signal | None:
    """Gaps on the main task with no span open: untraced code ran, or the thread could not run.

    Alone this cannot tell a stall from untraced work, so it only supports other signals — but it
    places them on the timeline.
    """
    if ctx.run.height("spans") == 0:
        return None
    gaps = main_track_gaps(
        ctx.spans_where(MAIN_TRACK_SPANS, MAIN_TRACK_COLUMNS), float(ctx.thresholds.min_blocked_submit_s)
    )
    if not gaps:
        return None
    total = sum(b - a for a, b in gaps) / 1e6
    return Signal(
        "trace-gap",
        WEAK,
        f"the main task had no span open for {len(gaps)} interval(s) of over "
        f"{float(ctx.thresholds.min_blocked_submit_s):g} s (longest {max(b - a for a, b in gaps) / 1e6:.2f} s)",
        {
            "gaps": [{"start_us": a, "end_us": b, "dur_s": round((b - a) / 1e6, 6)} for a, b in gaps[:MAX_CITED]],
            "count": len(gaps),
        },
        seconds=total,
        time_ranges_us=gaps,
    )


def _heartbeat_signals(ctx: RuleContext[GilStallPolicy]) -> list[Signal]:
    """The heartbeat warnings: placed in the trace when an outage is as long as a stretch where a thread
    ran user code and nothing on it moved (both threads stopped), else only corroborating."""
    lines = heartbeat_lines(ctx.run.log_events)
    if not lines:
        return []
    outages = heartbeat_episodes(lines)
    matches, service = [], []
    if ctx.run.height("spans") > 0:
        spans = ctx.run.scan("spans")
        min_s = float(ctx.thresholds.min_blocked_submit_s)
        matches, service = match_outages(
            outages,
            busy_thread_stalls(spans, min_s),
            stretched_waits(spans, float(ctx.shared.round_trip_stretch_ratio), min_s),
            float(ctx.thresholds.heartbeat_match_ratio),
        )
    on_service = sum(len(ep) for ep in service)
    signals = [
        Signal(
            "heartbeat",
            WEAK if on_service == len(lines) else MEDIUM,
            f"{len(lines)} SDK heartbeat warning(s) (the heartbeat runs on the SDK thread; network trouble "
            "gives the same warning)"
            + (f"; {on_service} as long as a stretched wait on the service" if on_service else ""),
            {"lines": [ln.cite() for ln in lines[:MAX_CITED]], "count": len(lines)},
        )
    ]
    if matches:
        stalls = [m.stall for m in matches]
        signals.append(
            Signal(
                "heartbeat-while-busy",
                MEDIUM,
                f"the trace places {len(matches)} of those outage(s): each as long as a stretch where the "
                f"{_where(stalls)} ran user code and nothing else on that thread moved "
                f"({', '.join(f'{m.seconds:.1f} s ~ {m.stall.seconds:.1f} s' for m in matches[:5])}), so the "
                "SDK thread and the user code's thread stopped together",
                {"matches": [m.to_dict() for m in matches[:MAX_CITED]], "count": len(matches)},
                seconds=sum(s.seconds for s in stalls),
                time_ranges_us=merge_ranges([[s.start_us, s.end_us] for s in stalls]),
                steps=sorted({s.step for s in stalls if s.step is not None}),
            )
        )
    return signals


def _where(stalls) -> str:
    names = sorted({s.name if s.kind == "span" else "untraced code on the main task" for s in stalls})
    threads = sorted({s.thread for s in stalls if s.thread})
    return f"{'/'.join(threads) or 'thread'} ({', '.join(names)})"


def _step_time_signal(ctx: RuleContext[GilStallPolicy]) -> Signal | None:
    """Erratic steady step times: circumstantial, only ever supporting other evidence."""
    try:
        split = ctx.warmup
        steady = split.steady if split is not None else ctx.step_times
    except (ImportError, AttributeError, KeyError, ValueError):
        return None
    if steady is None or "total_s" not in steady.columns:
        return None
    times = [t for t in steady["total_s"].drop_nulls().to_list() if t > 0]
    t = ctx.thresholds
    if len(times) < t.step_time_min_steady_steps:
        return None
    steady_median, cv = median(times), robust_cv(times)
    if cv <= t.step_time_max_robust_cv:
        return None
    return Signal(
        "step-times",
        WEAK,
        f"steady step times vary (robust CV {cv:.2f} over {len(times)} steps)",
        {"robust_cv": round(cv, 4), "steady_steps": len(times), "median_s": round(steady_median, 6)},
    )


def _inputs(ctx: RuleContext[GilStallPolicy]) -> dict[str, bool]:
    return {
        "gil-monitor": bool(gil_monitor_lines(ctx.run.log_events)),
        "task dumps": not ctx.run.task_snapshots.is_empty(),
        "stack dumps": not ctx.run.stack_snapshots.is_empty(),
        "trace": ctx.run.height("spans") > 0,
    }


def check(ctx: RuleContext[GilStallPolicy]) -> list[Finding]:
    inputs = _inputs(ctx)
    if not any(inputs.values()):
        heartbeat = heartbeat_lines(ctx.run.log_events)
        hint = (
            f" ({len(heartbeat)} heartbeat warning(s) were found — see heartbeat-stall — but alone they "
            "cannot tell GIL starvation from network trouble)"
            if heartbeat
            else ""
        )
        raise NotApplicable(
            "no GIL-monitor output, task dumps, stack dumps or trace: run with the debug skill's GIL "
            "monitor or task dumper, or enable_trace=True" + hint
        )
    signals: list[Signal] = []
    for make in (_monitor_signal, _stack_signal):
        signal = make(ctx)
        if signal is not None:
            signals.append(signal)
    signals += _heartbeat_signals(ctx) + _dump_signals(ctx) + _trace_signals(ctx)
    direct = [s for s in signals if s.kind in SDK_STARVED]
    if not direct:
        looked = ", ".join(name for name, present in inputs.items() if present)
        seen = ", ".join(s.kind for s in signals)
        return ctx.passed(
            f"no sign that the SDK thread itself was starved in {looked}"
            + (f" (only {seen}: not enough alone; a blocked main thread is blocking-call-in-async)" if seen else "")
        )
    for supporting in (_submits_while_loop_stopped(ctx), _trace_gap_signal(ctx), _step_time_signal(ctx)):
        if supporting is not None:
            signals.append(supporting)
    signals.sort(key=lambda s: (-s.strength, s.kind))
    level = confidence(signals, ctx.thresholds)
    # Without a reading of the GIL itself (the monitor, a stack, one thread's dumps stopping, a call
    # that could only be long if its thread was blocked) the evidence says every thread stopped: a
    # GIL held by user code is the likely reading, a suspended process the other one.
    threads_only = all(s.kind in ALL_THREADS_STOPPED for s in direct)
    if threads_only and level == "high":
        level = "medium"
    estimates = [s.seconds for s in signals if s.seconds is not None]
    lost = max(estimates) if estimates else None
    ranges = merge_ranges([r for s in signals for r in s.time_ranges_us])
    steps = sorted({step for s in signals for step in s.steps})
    return [
        ctx.finding(
            severity="warning",
            title=(
                "Threads starved: the SDK thread stopped with user code (GIL stall likely)"
                if threads_only
                else "GIL stall starving the SDK thread"
            ),
            message=(
                f"{len(signals)} independent signal(s), confidence {level}: "
                + "; ".join(s.summary for s in signals)
                + (f". About {lost:.1f} s were lost." if lost else ".")
                + " The SDK thread itself never appears in a trace or profile, so this is read from its effects."
                + (
                    " These readings show every thread of the process stopped at once: user code holding the "
                    "GIL, or the process suspended by the host; the debug skill's GIL monitor or task dumper "
                    "would tell them apart."
                    if threads_only
                    else ""
                )
            ),
            fix=(
                "Find the code holding the GIL (the [main] frames of the stack watchdog, or a profile of "
                "the main thread) and move it off the event loop: a process pool for CPU work "
                "(tokenization, reward functions, numpy/regex), smaller payloads or a stable "
                "pydantic<2.13 for serialization; never call blocking `.result()` inside async code."
            ),
            steps=steps,
            time_ranges_us=ranges,
            evidence={
                "signals": [
                    {
                        "kind": s.kind,
                        "strength": s.strength,
                        "summary": s.summary,
                        "seconds": round(s.seconds, 3) if s.seconds is not None else None,
                        **s.evidence,
                    }
                    for s in signals
                ],
                "inputs": inputs,
            },
            seconds_lost=round(lost, 3) if lost else None,
            confidence=level,
            fingerprint="gil-stall",
        )
    ]


RULE = register(
    Rule(
        slug="gil-stall",
        code="TD105",
        title="GIL stall: user code starves the SDK thread",
        severity="warning",
        needs="any of: GIL-monitor lines, asyncio task dumps, stack-watchdog dumps, trace_events.jsonl",
        docs=RuleDocs(
            what=(
                "User code holding the GIL (or blocking the main thread) so the SDK's background thread "
                "cannot submit, poll or heartbeat. Graded low/medium/high by how many independent "
                "signals agree."
            ),
            why=(
                "Requests queue behind the stalled thread: results arrive late, the next clock cycle is "
                "missed, heartbeats fail, and in the worst case the session is terminated."
            ),
            evidence=(
                "GIL-monitor jitter lines (file:line); [holder] task dumps that stop while [main] goes on "
                "(and the reverse: [main] stops = main blocked in sync code); stack-watchdog blocks with "
                "[main] in numpy/torch/tokenizers/pydantic/re while [holder] waits in poll; trace spans of "
                "submit-only SDK calls longer than 0.5 s, or long `sync:` spans on the main thread while "
                "sample round trips stretch; heartbeat warnings, placed in the trace when an outage is as "
                "long as a stretch where a thread ran user code and nothing else on it moved (without a "
                "GIL reading this says every thread stopped: medium confidence at most, and never when a "
                "wait on the service is as long); erratic step times (supporting only)."
            ),
            fix=(
                "Move CPU-bound work off the main thread (process pool), avoid huge pydantic dumps and "
                "pre-release pydantic, never block the event loop with synchronous `.result()`."
            ),
        ),
        check=check,
        policy=GilStallPolicy,
        stage="GIL",
        shared=("max_warmup_share", "round_trip_stretch_ratio"),
        tags=("gil", "logs", "dumps", "trace"),
    )
)
