"""TD102 get-batch-bottleneck: data loading takes a large share of steady-state step time.

In async RL the training loop's batch is the rollouts' output: it waits for finished trajectory
groups before each step's timer starts, so that wait is its data loading (derive/sample_waits)."""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.sample_waits import (
    DRIVER_AND_ROLLOUT_COLUMNS,
    DRIVER_AND_ROLLOUT_SPANS,
    trainer_sample_waits,
    training_extent_s,
)
from trace_doctor.derive.staleness import loop_mode
from trace_doctor.derive.step_times import phase_seconds
from trace_doctor.knowledge.tinker import ASYNC_STALENESS_PREFIX, TRAINING_CLIENT_STEP
from trace_doctor.model import Finding
from trace_doctor.policy.timing import GetBatchBottleneckPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, values_in


def _async_config(meta) -> dict:
    config = meta.config.get("async_config")
    return config if isinstance(config, dict) else {}


def _sample_waits(ctx: RuleContext[GetBatchBottleneckPolicy]) -> list[Finding]:
    """Async RL: the share of the training loop's time spent waiting for rollouts to deliver a batch."""
    t = ctx.thresholds
    if ctx.run.height("spans") == 0:
        raise NotApplicable(
            "async RL: the training loop waits for samples before each step's timer starts (or, streaming, inside "
            "it between minibatches), so no time/* key isolates the wait; only trace_events.jsonl "
            "(enable_trace=True) shows it"
        )
    spans = ctx.spans_where(DRIVER_AND_ROLLOUT_SPANS, DRIVER_AND_ROLLOUT_COLUMNS)
    waits = trainer_sample_waits(spans)
    stepped = spans.filter(pl.col("step").is_not_null()).select("segment", "step").unique()
    if stepped.height < t.min_steady_steps:
        raise NotApplicable(f"async RL: only {stepped.height} traced step(s) (need {t.min_steady_steps})")
    loop_s = training_extent_s(spans)
    # The first batch has nothing to overlap with: every run waits for it, however fast its sampler.
    first_steps = stepped.group_by("segment").agg(pl.col("step").min())
    fill = waits.join(first_steps, on=["segment", "step"], how="semi")
    later = waits.join(first_steps, on=["segment", "step"], how="anti")
    wait_s = float(later["wait_s"].sum())
    fill_note = (
        f"; {float(fill['wait_s'].sum()):.2f} s waiting for the first batch is not counted" if fill.height else ""
    )
    share = wait_s / loop_s if loop_s > 0 else 0.0
    if share <= t.min_share:
        return ctx.passed(
            f"async RL: the training loop waited for samples {wait_s:.2f} s of its {loop_s:.1f} s from the first "
            f"step to the last ({share:.1%}){fill_note}"
        )
    bound = _async_config(ctx.run.meta).get("max_steps_off_policy")
    waited = later.drop_nulls("step")
    sampling = (
        float(ctx.run.steps["time/sampling_time_mean"].median())
        if "time/sampling_time_mean" in ctx.run.steps.columns
        else None
    )
    per_group = f" A group's rollout took {sampling:.3g} s (median time/sampling_time_mean)." if sampling else ""
    return [
        ctx.finding(
            severity="warning",
            title="Training waits for samples: sampling is the bottleneck",
            message=(
                f"The async training loop waited {wait_s:.2f} s for rollouts to deliver its groups, {share:.0%} of "
                f"its {loop_s:.1f} s from the first step to the last, in {later.height} waits over "
                f"{waited['step'].n_unique()} of {stepped.height} steps "
                f"(median {float(later['wait_s'].median()):.3g} s)"
                f"{fill_note}.{per_group} Samples arrive more slowly than the trainer uses them"
                + (f" with max_steps_off_policy = {bound}" if bound is not None else "")
                + "."
            ),
            fix=(
                "Make rollouts faster (the environment's own steps: reward or grader code, tool calls, sandboxes) "
                "or run more at once: raise async_config.max_steps_off_policy (each step of it adds "
                "groups_per_batch rollout slots) or the rollout executor's size. More steps off policy means "
                "staler samples: watch stale-sampler and the KL."
            ),
            steps=sorted(int(s) for s in waited.sort("wait_s", descending=True)["step"].head(20).to_list()),
            time_ranges_us=[[a, b] for a, b in later.select("start_us", "end_us").iter_rows()],
            evidence={
                "source": "trace: training_loop intervals with no span open, ended by a rollout's delivery",
                "wait_s": round(wait_s, 6),
                "training_loop_s": round(loop_s, 6),
                "share": round(share, 4),
                "waits": later.height,
                "first_batch_wait_s": round(float(fill["wait_s"].sum()), 6),
                "max_steps_off_policy": bound,
                "sampling_time_mean_s": sampling,
                "threshold": t.min_share,
            },
            seconds_lost=round(wait_s, 6),
            # A faster or wider sampler wins the wait back only up to what training itself takes.
            confidence="medium",
        )
    ]


def check(ctx: RuleContext[GetBatchBottleneckPolicy]) -> list[Finding]:
    if loop_mode(ctx.run.meta, ctx.run.steps) == "async":
        return _sample_waits(ctx)
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
            confidence="high" if steady.height >= t.high_confidence_steps else "medium",
        )
    ]


RULE = register(
    Rule(
        slug="get-batch-bottleneck",
        code="TD102",
        title="get_batch takes a large share of step time",
        severity="warning",
        needs=(
            "metrics.jsonl with time/get_batch and a step total (time/total, or SFT phases); async RL: "
            "trace_events.jsonl"
        ),
        docs=RuleDocs(
            what=(
                "get_batch (data loading and rendering) above a share of steady-state step time; warm-up steps "
                "are excluded, so a slow first batch (dataset download/tokenisation) does not count. Async RL "
                "(async_config): the training loop's batch is the rollouts' output, so its data loading is the "
                "time it waits for rollouts to deliver groups (before a step, or inside a streaming step between "
                "minibatches), above a share of the loop's time; the wait for the first batch does not count."
            ),
            why=(
                "While the client builds a batch nothing new is submitted; the service idles and every step pays "
                "for it."
            ),
            evidence=(
                "Per-step time/get_batch against the step total over the steady steps (after the change-point "
                "warm-up boundary); its seconds are what it costs. In a legacy pipelined SFT run (overlapping "
                "time/total, derive/overlap.py) a batch loaded while the previous step was still on the service "
                "(a result wait followed) costs nothing and is left out. Async RL: intervals of the training loop "
                "(main and its `training_loop` task) with no span open that a `trajectory_group_worker` span's "
                "end closes, against the loop's time from its first step to its last."
            ),
            fix=(
                "Pre-tokenise or cache the dataset, prefetch the next batch concurrently with the result wait, "
                "move heavy rendering out of the loop. Async RL: faster rollouts (environment, grader, tools), "
                "or more of them at once (max_steps_off_policy, rollout executor size)."
            ),
        ),
        check=check,
        policy=GetBatchBottleneckPolicy,
        stage="timing breakdown",
        shared=("max_warmup_share",),
        requires=(
            requires(
                "no time/get_batch in metrics (this trainer does not time data loading)",
                values_in("step_times", "phase:get_batch", "inner:get_batch"),
                # Async RL: its data loading is the wait for rollouts, read from the trace.
                values_in("steps", TRAINING_CLIENT_STEP, ASYNC_STALENESS_PREFIX + "*"),
            ),
        ),
        tags=("timing", "metrics"),
    )
)
