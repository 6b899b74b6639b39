"""TD103 warmup-slowness: the first steps are slow, then the run settles (benign, info)."""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.warmup import following_window
from trace_doctor.model import Finding
from trace_doctor.policy.timing import WarmupSlownessPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, values_in

# A nested timer that carries this share of the slowest phase's excess is named instead of it:
# `get_batch` says more than the `submit_batch` that wraps it.
INNER_SHARE = 0.8


def slowest_phase(warm: pl.DataFrame, steady: pl.DataFrame) -> tuple[str, float]:
    """The phase (or untimed time) with the largest excess over its steady median in warm-up."""
    outer = _slowest(warm, steady, [c for c in warm.columns if c.startswith("phase:")] + ["untimed_s"])
    inner = _slowest(warm, steady, [c for c in warm.columns if c.startswith("inner:")])
    return inner if inner[1] > 0 and inner[1] >= INNER_SHARE * outer[1] else outer


def _slowest(warm: pl.DataFrame, steady: pl.DataFrame, columns: list[str]) -> tuple[str, float]:
    best = ("untimed", 0.0)
    for column in columns:
        if column not in steady.columns:
            continue
        # A phase absent from a row took no time there: periodic phases have a typical cost of 0.
        base = steady[column].fill_null(0.0).median()
        base = float(base) if base is not None else 0.0
        excess = float((warm[column].fill_null(0.0) - base).clip(lower_bound=0).sum())
        if excess > best[1]:
            best = (column.split(":", 1)[1] if ":" in column else "untimed", excess)
    return best


def check(ctx: RuleContext[WarmupSlownessPolicy]) -> list[Finding]:
    split = ctx.warmup
    if not split.segments:
        raise NotApplicable(f"{split.method}: a warm-up needs at least 3 timed steps")
    t = ctx.thresholds
    findings: list[Finding] = []
    for seg in split.segments:
        if seg.warmup_steps == 0:
            continue
        warm = split.warmup.filter(pl.col("segment") == seg.segment)
        steady = split.steady.filter((pl.col("segment") == seg.segment) & pl.col("total_s").is_not_null())
        if steady.is_empty() or warm.is_empty():
            continue
        # The level right after the warm-up (derive.warmup's window), so a later regime change
        # does not move the yardstick.
        window = following_window(seg.warmup_steps + steady.height, ctx.shared.max_warmup_share)
        base = float(steady.sort("step").head(window)["total_s"].median())
        ratio = float(warm["total_s"].mean()) / base if base > 0 else 0.0
        if ratio < t.min_ratio:
            continue
        cost = float((warm["total_s"] - base).clip(lower_bound=0).sum())
        phase, excess = slowest_phase(warm, steady)
        steps = sorted(int(s) for s in warm["step"].to_list())
        where = f" (resumed segment {seg.segment})" if seg.segment else ""
        findings.append(
            ctx.finding(
                severity="info",
                title="Slow warm-up, then steady",
                message=(
                    f"The first {len(steps)} step(s){where} took {float(warm['total_s'].sum()):.1f} s, "
                    f"{ratio:.1f}x the steady median of {base:.2f} s: {cost:.1f} s above steady, mostly in "
                    f"`{phase}` ({excess:.1f} s)."
                ),
                fix=(
                    "Nothing to fix if it is one-off setup (dataset load, tokenizer download, first compilation); "
                    "cache the dataset or tokenizer to shorten it."
                ),
                steps=steps,
                evidence={
                    "segment": seg.segment,
                    "warmup_steps": len(steps),
                    "boundary_step": seg.boundary_step,
                    "steady_median_s": base,
                    "ratio": round(ratio, 3),
                    "dominant_phase": phase,
                    "dominant_phase_excess_s": round(excess, 6),
                    "method": split.method,
                    "penalty": split.penalty,
                },
                seconds_lost=round(cost, 6),
                fingerprint=f"warmup-slowness:{phase}",
                confidence="high",
            )
        )
    if findings:
        return findings
    return ctx.passed(
        "no slow warm-up prefix found by change-point segmentation"
        if split.warmup_steps == 0
        else f"warm-up of {split.warmup_steps} step(s) is less than {t.min_ratio}x the steady median"
    )


RULE = register(
    Rule(
        slug="warmup-slowness",
        code="TD103",
        title="First steps slow, then steady",
        severity="info",
        needs="metrics.jsonl with per-step times",
        docs=RuleDocs(
            what=(
                "A prefix of slow steps followed by a steady regime, found by change-point segmentation of log "
                "step time (per resumed segment), not by skipping a fixed number of steps."
            ),
            why=(
                "Warm-up is usually one-off setup and benign; separating it keeps every steady-state statistic "
                "honest and tells you what the setup cost."
            ),
            evidence=(
                "The warm-up steps, their excess over the steady median, and the phase (or untimed time) that "
                "made them slow."
            ),
            fix="Usually nothing; cache datasets and tokenizers if the warm-up is long.",
        ),
        check=check,
        policy=WarmupSlownessPolicy,
        stage="timing breakdown",
        shared=("max_warmup_share",),
        requires=(
            requires(
                "no per-step times (no time/total or phase timers in metrics)", values_in("step_times", "total_s")
            ),
        ),
        tags=("timing", "metrics"),
    )
)
