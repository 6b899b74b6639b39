"""TD102 get-batch-bottleneck: data loading takes a large share of steady-state step time."""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.step_times import phase_seconds
from trace_doctor.model import Finding
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.requires import requires, values_in


def check(ctx) -> list[Finding]:
    times = ctx.step_times
    t = ctx.thresholds
    frame = times.with_columns(phase_seconds(times, "get_batch").alias("_gb"))
    usable = frame.filter(pl.col("_gb").is_not_null() & pl.col("total_s").is_not_null() & (pl.col("total_s") > 0))
    split = ctx.warmup
    steady = usable.join(split.steady.select("segment", "step"), on=["segment", "step"], how="semi")
    warm = usable.join(split.warmup.select("segment", "step"), on=["segment", "step"], how="semi")
    warm_note = ""
    if warm.height:
        w_gb, w_total = float(warm["_gb"].sum()), float(warm["total_s"].sum())
        warm_note = (
            f"; warm-up steps {sorted(warm['step'].to_list())[:5]} spent {w_gb:.1f} s of {w_total:.1f} s in "
            "get_batch (warm-up, not a bottleneck)"
        )
    if steady.height < t.min_steady_steps:
        if warm.is_empty():
            raise NotApplicable(
                f"only {steady.height} step(s) with get_batch timing (need {t.min_steady_steps} steady steps)"
            )
        return ctx.passed(f"only {steady.height} steady steps with get_batch timing{warm_note}")
    hidden_note, what = "", "get_batch"
    if "previous_in_flight" in steady.columns:
        what = "get_batch on the critical path"
        # Legacy pipelined SFT loads batch k+1 while step k is on the service: when the result wait
        # that follows is still long, the service set the pace and the loading cost nothing.
        hidden = steady.filter(pl.col("previous_in_flight"))
        if hidden.height:
            hidden_note = (
                f"; {float(hidden['_gb'].sum()):.1f} s of it on {hidden.height} steps ran while the previous step "
                "was still on the service (its result wait followed), so it cost no time"
            )
        steady = steady.with_columns(
            pl.when(pl.col("previous_in_flight")).then(0.0).otherwise(pl.col("_gb")).alias("_gb")
        )
    gb, total = float(steady["_gb"].sum()), float(steady["total_s"].sum())
    share = float((steady["_gb"] / steady["total_s"]).median())
    if share <= t.min_share:
        return ctx.passed(
            f"{what} is {share:.1%} of a typical steady step ({gb:.1f} s of {total:.1f} s){hidden_note}{warm_note}"
        )
    median_gb = float(steady["_gb"].median())
    return [
        ctx.finding(
            severity="warning",
            title="Data loading (get_batch) is a bottleneck",
            message=(
                f"get_batch takes {share:.0%} of a typical steady step (median share; {gb:.1f} s of {total:.1f} s "
                f"over {steady.height} steps, median {median_gb:.2f} s per step){hidden_note}{warm_note}."
            ),
            fix=(
                "Prepare batches ahead (tokenize/render the dataset once, cache it, or build the next batch in a "
                "background task while the current step's results are awaited); keep get_batch off the critical "
                "path."
            ),
            steps=sorted(int(s) for s in steady.sort("_gb", descending=True)["step"].head(20).to_list()),
            evidence={
                "steady_steps": steady.height,
                "get_batch_s": round(gb, 6),
                "steady_total_s": round(total, 6),
                "share": round(share, 4),
                "median_get_batch_s": median_gb,
                "threshold": t.min_share,
            },
            seconds_lost=round(gb, 6),
            fraction_of_wall=round(share, 4),
            fingerprint="get-batch-bottleneck:steady",
            confidence="high" if steady.height >= 10 else "medium",
        )
    ]


RULE = register(
    Rule(
        slug="get-batch-bottleneck",
        code="TD102",
        title="get_batch takes a large share of step time",
        severity="warning",
        needs="metrics.jsonl with time/get_batch and a step total (time/total, or SFT phases)",
        docs=RuleDocs(
            what=(
                "get_batch (data loading and rendering) above a share of steady-state step time; warm-up steps "
                "are excluded, so a slow first batch (dataset download/tokenisation) does not count."
            ),
            why=(
                "While the client builds a batch nothing new is submitted; the service idles and every step pays "
                "for it."
            ),
            evidence=(
                "Per-step time/get_batch against the step total over the steady steps (after the change-point "
                "warm-up boundary); its seconds are what it costs. In a legacy pipelined SFT run (overlapping "
                "time/total, derive/overlap.py) a batch loaded while the previous step was still on the service "
                "(a result wait followed) costs nothing and is left out."
            ),
            fix=(
                "Pre-tokenise or cache the dataset, prefetch the next batch concurrently with the result wait, "
                "move heavy rendering out of the loop."
            ),
        ),
        check=check,
        shared=("max_warmup_share",),
        requires=(
            requires(
                "no time/get_batch in metrics (this trainer does not time data loading)",
                values_in("step_times", "phase:get_batch", "inner:get_batch"),
            ),
        ),
        tags=("timing", "metrics"),
    )
)
