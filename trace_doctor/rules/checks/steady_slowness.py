"""TD104 steady-slowness: every steady step is slower than the work needs, and why."""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.loop_phases import UNTIMED_SAMPLING_PART
from trace_doctor.derive.stalls import SUBMIT_COLUMNS, TRAINING_SUBMITS
from trace_doctor.derive.step_times import phase_seconds
from trace_doctor.humanize import format_seconds
from trace_doctor.knowledge.tinker import PERIODIC_PHASES, TRAINING_SUBMIT_CALLS
from trace_doctor.model import Finding
from trace_doctor.policy.timing import SteadySlownessPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext

# Trainers whose step is fb + optim only: for them a step should take about one or two cycles.
TRAIN_ONLY_TRAINERS = ("sl", "dpo")


def client_share(steady: pl.DataFrame, min_steps: int) -> float | None:
    """Median share of a step outside the result wait and scheduled work (evals, checkpoints).

    Only trusted where the total is one iteration: SFT totals rebuilt from phases (a legacy
    pipelined SFT `time/total` spans two iterations and would double the client share).
    """
    rows = (
        steady.filter(pl.col("total_source") == "sum of top-level phases")
        if "total_source" in steady.columns
        else steady.clear()
    )
    if rows.height < min_steps:
        return None
    wait = phase_seconds(rows, "step").fill_null(0.0)
    scheduled = sum((phase_seconds(rows, n).fill_null(0.0) for n in PERIODIC_PHASES), pl.Series([0.0] * rows.height))
    share = ((rows["total_s"] - wait - scheduled) / rows["total_s"]).median()
    return float(share) if share is not None else None


def slow_submissions(spans: pl.DataFrame) -> tuple[float, int] | None:
    if spans.is_empty():
        return None
    subs = (
        spans.lazy()
        .filter(pl.col("name").is_in(sorted(TRAINING_SUBMIT_CALLS)) & pl.col("closed").fill_null(True))
        .select("dur_us")
        .collect()
    )
    if subs.is_empty():
        return None
    return float((subs["dur_us"] / 1e6).median()), subs.height


SAMPLING_FIX = (
    "Overlap sampling with training: asynchronous, off-policy RL with a staleness bound "
    "(`async_config=AsyncConfig(max_steps_off_policy=...)`) or streaming minibatches "
    "(`stream_minibatch_config`); and make each step's rollouts cheaper: a shorter `max_tokens`, fewer samples "
    "per group (`group_size`)."
)


def sampling_finding(ctx: RuleContext[SteadySlownessPolicy]) -> Finding | None:
    """Sampling dominates the step: the loop's structure (derive/loop_phases) puts most of each step's
    time in its rollouts, timed (`time/sample`, `time/sampling`) or the sync loop's untimed remainder."""
    phases = ctx.loop_phases
    if phases is None:
        return None
    part = phases.part(UNTIMED_SAMPLING_PART) or phases.part("sampling")
    if part is None or part.steps < 3:
        return None
    t = ctx.thresholds
    # Of the steps' time that the structure explains: an untimed gap beyond what sampling explains
    # (a host asleep) is no step's work and would dilute the share.
    explained = float(phases.per_step["total_s"].sum()) - phases.unnamed_s
    if explained <= 0:
        return None
    share = part.seconds / explained
    if share < t.sampling_info_share:
        return None
    untimed = not part.timed
    what = "Sampling and reward computation" + (" (untimed by the cookbook: the rest of time/total)" if untimed else "")
    evidence = {
        "sampling_share": round(share, 4),
        "sampling_median_step_s": round(part.median_step_s, 6),
        "median_step_s": round(phases.median_step_s, 6),
        "sampling_s": round(part.seconds, 6),
        "steps": part.steps,
        "measured": "untimed remainder of time/total" if untimed else "+".join(part.phases),
        **{k: v for k, v in phases.evidence.items() if v is not None and k != "steps"},
    }
    tokens = phases.evidence.get("tokens_per_step")
    episodes = phases.evidence.get("episodes_per_step")
    generated = (
        f" Each step generated {tokens:,.0f} tokens" + (f" over {episodes:,.0f} episodes" if episodes else "") + "."
        if tokens
        else ""
    )
    return ctx.finding(
        severity="warning" if share >= t.sampling_warning_share else "info",
        title="Sampling dominates every step",
        message=(
            f"{what} takes {format_seconds(part.median_step_s)} of a {format_seconds(phases.median_step_s)} step "
            f"(median), {share:.0%} of the steps' time over {part.steps} steps; training waits for it every step."
            + generated
        ),
        fix=SAMPLING_FIX,
        steps=[],
        evidence=evidence,
        fingerprint="steady-slowness:sampling",
        confidence="medium" if untimed else "high",
    )


def check(ctx: RuleContext[SteadySlownessPolicy]) -> list[Finding]:
    sampling = sampling_finding(ctx)
    try:
        found = _excess_findings(ctx)
    except NotApplicable:
        if sampling is None:
            raise
        found = []
    return found if sampling is None else [*found, sampling]


def _excess_findings(ctx: RuleContext[SteadySlownessPolicy]) -> list[Finding]:
    steady = (
        ctx.warmup.steady.filter(pl.col("total_s").is_not_null()) if "total_s" in ctx.warmup.steady.columns else None
    )
    if steady is None or steady.height < ctx.thresholds.min_steady_steps:
        timed = ctx.step_times["total_s"].drop_nulls().len() if "total_s" in ctx.step_times.columns else 0
        raise NotApplicable(
            "no per-step times (no time/total or phase timers in metrics)"
            if timed == 0
            else f"only {timed} timed step(s), fewer than 3 steady steps to judge"
        )
    t = ctx.thresholds
    median = float(steady["total_s"].median())
    reasons: list[str] = []
    evidence: dict = {"steady_median_s": median, "steady_steps": steady.height}
    trainer = ctx.run.meta.trainer
    cycle = ctx.clock_cycle
    if cycle is not None and trainer in TRAIN_ONLY_TRAINERS:
        cycles = median / cycle.seconds
        evidence["clock_cycle"] = cycle.to_dict()
        evidence["cycles_per_step"] = round(cycles, 3)
        # A low-confidence cycle (e.g. every wait the same length) is an upper bound, and
        # "N cycles per step" from it would blame the steps for what the service took.
        # Judged at the precision the message prints (a tenth of a cycle): a cycle fitted from jittered
        # waits is known to a few percent, so a step of exactly three cycles may measure 2.99.
        if round(cycles, 1) >= t.max_cycles_per_step and cycle.confidence != "low":
            reasons.append(
                f"each step spans {cycles:.1f} clock cycles of {cycle.seconds:.3g} s (a forward-backward + "
                "optimizer step needs one or two)"
            )
    share = client_share(steady, t.min_steady_steps) if trainer in TRAIN_ONLY_TRAINERS else None
    if share is not None:
        evidence["client_share"] = round(share, 4)
        if share > t.max_client_share:
            reasons.append(f"{share:.0%} of each step is client-side work outside the result wait")
    submits = slow_submissions(ctx.spans_where(TRAINING_SUBMITS, SUBMIT_COLUMNS))
    if submits is not None:
        evidence["submit_median_s"], evidence["submit_spans"] = round(submits[0], 6), submits[1]
        if submits[0] > t.max_submit_s:
            reasons.append(
                f"submit-only SDK calls (forward_backward/optim_step) take {submits[0]:.2f} s median instead "
                "of milliseconds: the calling thread is blocked"
            )
    if not reasons:
        return ctx.passed(f"steady median {median:.2f} s/step; no sign of excess (cycles, client share, submissions)")
    excess = None
    if any("clock cycles" in r for r in reasons):
        excess = (median - 2 * cycle.seconds) * steady.height
    elif share is not None and share > t.max_client_share:
        excess = share * float(steady["total_s"].sum())
    wall = ctx.wall_s
    return [
        ctx.finding(
            severity="warning",
            title="Every steady step is slower than the work needs",
            message=f"Steady steps take {median:.2f} s (median of {steady.height}): " + "; ".join(reasons) + ".",
            fix=(
                "Pipeline submissions (submit the next step before awaiting results), move CPU work and "
                "serialization off the main thread, and keep payload building cheap."
            ),
            steps=[],
            evidence=evidence,
            seconds_lost=round(max(excess, 0.0), 6) if excess is not None else None,
            fraction_of_wall=round(max(excess, 0.0) / wall, 4) if excess is not None and wall else None,
            fingerprint="steady-slowness:"
            + ("cycles" if "clock cycles" in reasons[0] else "client" if "client-side" in reasons[0] else "submit"),
            confidence="medium",
        )
    ]


RULE = register(
    Rule(
        slug="steady-slowness",
        code="TD104",
        title="Every step slow (no warm-up shape)",
        severity="warning",
        needs="metrics.jsonl with per-step times; a trace or clock-cycle estimate sharpens it",
        docs=RuleDocs(
            what=(
                "Steady-state steps persistently slower than the work needs: several clock cycles per SL/DPO "
                "step, a large client-side share outside the result wait, slow submit-only SDK calls, or an RL "
                "step that waits for its own sampling most of the time."
            ),
            why="A persistent excess multiplies over every step; unlike warm-up it never pays for itself.",
            evidence=(
                "Steady median step time vs the clock cycle, the client-side share (SFT totals rebuilt from "
                "phases), median duration of forward_backward/optim_step submit spans in the trace."
            ),
            fix="Pipeline submissions, free the main thread (serialization, CPU work), cache data preparation.",
        ),
        check=check,
        policy=SteadySlownessPolicy,
        stage="symptoms",
        shared=("clock_cycle_s", "max_warmup_share"),
        tags=("timing",),
    )
)
