"""TD101 pipelining-gap: calls awaited one by one instead of submitted ahead.

From the trace: a forward_backward submission followed by a wait before optim_step is submitted
(the fb result awaited first), and SFT steps whose next submission starts only after the
previous step's results arrived. With pipelining the client work of step k+1 would overlap the
service's work on step k, so each sequential transition loses min(client work, result wait).
Without a trace only a configuration that forbids pipelining (`submit_ahead: 0`) is evidence;
`time/total` above the sum of timed phases is not (sync RL does not time sampling).
"""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.pipelining import PIPELINING_CALLS, PIPELINING_COLUMNS, fb_optim_waits, step_transitions
from trace_doctor.derive.step_times import phase_seconds
from trace_doctor.model import Finding
from trace_doctor.policy.timing import PipeliningGapPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext

FIX = (
    "Submit forward_backward and optim_step back to back and await both results afterwards; submit step k+1 "
    "before awaiting step k (SFT `submit_ahead >= 1`)."
)


def worth_reporting(lost: float, wall: float, t: PipeliningGapPolicy) -> bool:
    return lost >= t.min_seconds_lost or (wall > 0 and lost / wall >= t.min_fraction_lost)


def from_trace(ctx: RuleContext[PipeliningGapPolicy], spans: pl.DataFrame) -> list[Finding]:
    t = ctx.thresholds
    min_wait = ctx.shared.fb_optim_handoff_s
    cycle = ctx.clock_cycle
    waits = fb_optim_waits(spans, min_wait)
    trans = step_transitions(spans)
    if cycle is not None and trans.height:
        # A submission that lands after the results misses the cycle it could have shared: the
        # loss per transition is at least a cycle (bounded by the wait it could have overlapped).
        trans = trans.with_columns(
            pl.min_horizontal(
                pl.col("fin_dur") / 1e6, pl.max_horizontal(pl.col("lost_s"), pl.lit(cycle.seconds))
            ).alias("lost_s")
        )
    wall = ctx.wall_s or 0.0
    findings: list[Finding] = []
    if waits.height:
        seq = waits.filter(pl.col("sequential"))
        share = seq.height / waits.height
        lost = float(seq["gap_s"].sum())
        if share >= t.min_sequential_step_share and worth_reporting(lost, wall, t):
            cyc = f"; the clock cycle is ~{cycle.seconds:.3g} s ({cycle.method})" if cycle else ""
            findings.append(
                ctx.finding(
                    severity="warning",
                    title="optim_step submitted only after the forward_backward result",
                    message=(
                        f"On {seq.height} of {waits.height} steps optim_step was submitted "
                        f"{float(seq['gap_s'].median()):.3g} s (median) after forward_backward, instead of "
                        "back to back: the client awaited the fb result first and each step paid an extra "
                        f"round trip{cyc}. Pipelined, the run would take ~{max(wall - lost, 0):.1f} s "
                        f"instead of {wall:.1f} s."
                    ),
                    fix=FIX,
                    steps=sorted(int(s) for s in seq["step"].drop_nulls().to_list()),
                    time_ranges_us=[[a, b] for a, b in seq.select("fb_end_us", "optim_start_us").iter_rows()],
                    evidence={
                        "sequential_steps": seq.height,
                        "steps_measured": waits.height,
                        "median_gap_s": float(seq["gap_s"].median()),
                        "min_wait_s": min_wait,
                        "clock_cycle": cycle.to_dict() if cycle else None,
                        "wall_s": wall,
                        "pipelined_wall_s": max(wall - lost, 0.0),
                    },
                    seconds_lost=round(lost, 6),
                    fraction_of_wall=round(lost / wall, 4) if wall else None,
                    fingerprint="pipelining-gap:sequential-fb-optim",
                    confidence="high",
                )
            )
    if trans.height:
        seq = trans.filter(pl.col("sequential"))
        share = seq.height / trans.height
        lost = float(seq["lost_s"].sum())
        if share >= t.min_sequential_step_share and worth_reporting(lost, wall, t):
            idle = float(((seq["idle_to"] - seq["idle_from"]) / 1e6).sum())
            findings.append(
                ctx.finding(
                    severity="warning",
                    title="Next step submitted only after the previous step's results",
                    message=(
                        f"On {seq.height} of {trans.height} step transitions the next batch was built and "
                        "submitted only after the previous results arrived, so the service idled while the client "
                        f"worked. Pipelined (submit_ahead ≥ 1), ~{lost:.1f} s of client work would have overlapped "
                        f"the waits: ~{max(wall - lost, 0):.1f} s instead of {wall:.1f} s."
                    ),
                    fix=FIX,
                    steps=sorted(int(s) for s in seq["step"].to_list()),
                    time_ranges_us=[[a, b] for a, b in seq.select("idle_from", "idle_to").iter_rows() if b > a],
                    evidence={
                        "sequential_transitions": seq.height,
                        "transitions": trans.height,
                        "nothing_in_flight_s": round(idle, 6),
                        "submit_ahead": ctx.run.meta.submit_ahead,
                        "wall_s": wall,
                        "pipelined_wall_s": max(wall - lost, 0.0),
                    },
                    seconds_lost=round(lost, 6),
                    fraction_of_wall=round(lost / wall, 4) if wall else None,
                    fingerprint="pipelining-gap:sequential-steps",
                    confidence="high",
                )
            )
    if findings:
        return findings
    if not waits.height and not trans.height:
        raise NotApplicable(
            "the trace has no forward_backward/optim_step or submit_batch/finish_batch spans to judge pipelining from"
        )
    back_to_back = int((~waits["sequential"]).sum()) if waits.height else 0
    ahead = int((~trans["sequential"]).sum()) if trans.height else 0
    return ctx.passed(
        f"fb→optim back to back on {back_to_back}/{waits.height} steps; "
        f"next step submitted ahead on {ahead}/{trans.height} transitions"
    )


def untimed_note(ctx: RuleContext[PipeliningGapPolicy]) -> str:
    times = ctx.step_times
    if "untimed_s" not in times.columns:
        return ""
    rows = times.filter(pl.col("untimed_s").is_not_null() & (pl.col("total_s") > 0))
    if rows.is_empty():
        return ""
    share = float((rows["untimed_s"].clip(lower_bound=0) / rows["total_s"]).median())
    if share < 0.2:
        return ""
    trainer = ctx.run.meta.trainer
    if trainer in ("sl", "dpo"):
        why = "untimed here is e.g. a legacy pipelined SFT time/total also covering the previous step's result wait"
    elif ctx.run.meta.trainer_mode == "stream":
        why = "untimed waits for streamed trajectory groups"
    else:
        why = "untimed rollouts and sampling of the sync RL loop"
    return f"; {share:.0%} of a typical step is outside the timed phases ({why}) — that alone is not a pipelining gap"


def from_metrics(ctx: RuleContext[PipeliningGapPolicy]) -> list[Finding]:
    meta = ctx.run.meta
    times = ctx.step_times
    note = untimed_note(ctx)
    if meta.submit_ahead == 0 and meta.trainer == "sl":
        steady = ctx.warmup.steady.sort(["segment", "step"])
        wait = phase_seconds(steady, "step")
        client = phase_seconds(steady, "submit_batch")
        if client.null_count() == steady.height:
            client = phase_seconds(steady, "get_batch")
        frame = pl.DataFrame(
            {"segment": steady["segment"], "step": steady["step"], "wait": wait, "next_client": client.shift(-1)}
        )
        frame = frame.filter(pl.col("wait").is_not_null() & pl.col("next_client").is_not_null())
        lost = float(frame.select(pl.min_horizontal("wait", "next_client")).to_series().sum()) if frame.height else 0.0
        wall = ctx.wall_s or 0.0
        return [
            ctx.finding(
                severity="warning",
                title="Pipelining disabled (submit_ahead = 0)",
                message=(
                    "config.json sets submit_ahead = 0, so each step is submitted only after the previous results "
                    "arrived; overlapping the next step's client work with the result wait would save "
                    f"~{lost:.1f} s{f' of {wall:.1f} s' if wall else ''} "
                    "(no trace: estimated from time/step and the submission phases)."
                ),
                fix=FIX,
                steps=[],
                evidence={"submit_ahead": 0, "steps_estimated": frame.height, "wall_s": wall or None},
                seconds_lost=round(lost, 6) if frame.height else None,
                fraction_of_wall=round(lost / wall, 4) if wall and frame.height else None,
                fingerprint="pipelining-gap:submit-ahead-0",
                confidence="medium",
            )
        ]
    has_timing = "total_s" in times.columns and times["total_s"].drop_nulls().len() > 0
    if not has_timing:
        raise NotApplicable("no trace_events.jsonl (enable_trace was off) and no per-step timings in metrics")
    raise NotApplicable(
        f"no trace_events.jsonl (enable_trace was off): metrics cannot show whether calls were awaited one by one{note}"
    )


def check(ctx: RuleContext[PipeliningGapPolicy]) -> list[Finding]:
    if ctx.run.height("spans"):
        return from_trace(ctx, ctx.spans_where(pl.col("name").is_in(PIPELINING_CALLS), PIPELINING_COLUMNS))
    return from_metrics(ctx)


RULE = register(
    Rule(
        slug="pipelining-gap",
        code="TD101",
        title="Calls awaited one by one instead of pipelined",
        severity="warning",
        needs="trace_events.jsonl (enable_trace=True); without it only config submit_ahead = 0 is evidence",
        docs=RuleDocs(
            what=(
                "forward_backward and optim_step submissions separated by a wait for the fb result; a step's "
                "batch built and submitted only after the previous step's results arrived; time with nothing in "
                "flight."
            ),
            why=(
                "The service works in clock cycles: a request submitted after a result arrives misses the cycle "
                "it could have shared, and client work that could overlap the service's work adds to every step."
            ),
            evidence=(
                "Trace spans: fb end → optim start gap per step (submit-only SDK spans hand off in milliseconds), "
                "submit_batch(k+1) start vs finish_batch(k) end; the clock-cycle estimate; counterfactual "
                "pipelined wall time. Not time/total vs the sum of timed phases: sync RL leaves sampling untimed."
            ),
            fix=FIX,
        ),
        check=check,
        policy=PipeliningGapPolicy,
        stage="pipelining",
        shared=("clock_cycle_s", "max_warmup_share", "fb_optim_handoff_s"),
        tags=("timing", "trace"),
    )
)
