"""TD202 kl-drift: sampler-vs-trainer KL above the stable band for a sustained share of steps."""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.model import Finding
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.checks.renderer_kl_step0 import kl_columns, run_label, temperature_confound
from trace_doctor.rules.requires import requires, values_in

MAX_LISTED_STEPS = 50
# Async RL (0.6.1) logs how many updates behind the sampler was; older async/stream runs do not.
STALENESS_COLUMNS = ("async/staleness_mean", "async/staleness_max")
# Steps behind: staleness this much higher on above-band steps makes it a confound worth naming.
MIN_STALENESS_GAP = 0.5


def staleness_confound(rows: pl.DataFrame, above_steps: list[int]) -> dict | None:
    """Median staleness on the above-band steps vs the others, when the run logs it and it differs."""
    column = next((c for c in STALENESS_COLUMNS if c in rows.columns and rows.schema[c].is_numeric()), None)
    if column is None:
        return None
    values = rows.filter(pl.col(column).is_not_null() & pl.col(column).is_finite()).select(
        "step", pl.col(column).alias("s")
    )
    high = values.filter(pl.col("step").is_in(above_steps))["s"]
    low = values.filter(~pl.col("step").is_in(above_steps))["s"]
    if high.is_empty() or low.is_empty():
        return None
    above, within = float(high.median()), float(low.median())
    if above - within < MIN_STALENESS_GAP:
        return None
    return {"metric": column, "above_band_median": round(above, 4), "in_band_median": round(within, 4)}


def check(ctx) -> list[Finding]:
    rows = live_training_rows(ctx.run.steps)
    columns = kl_columns(rows)
    if not columns:
        raise NotApplicable("no optim/kl_sample_train_v1/_v2 in metrics: not an RL run")
    t = ctx.thresholds
    first_step = rows.sort(["segment", "step"])["step"][0]
    later = rows.filter(~((pl.col("segment") == rows["segment"].min()) & (pl.col("step") == first_step)))
    best = None
    for version in sorted(columns):
        column = columns[version]
        values = later.filter(pl.col(column).is_not_null() & pl.col(column).is_finite()).select(
            "step", pl.col(column).abs().alias("kl")
        )
        if values.height < 3:
            continue
        above = values.filter(pl.col("kl") > ctx.shared.max_stable_kl)
        share = above.height / values.height
        candidate = (share, column, values, above)
        if best is None or share > best[0]:
            best = candidate
    if best is None:
        raise NotApplicable("fewer than 3 later steps with a KL value")
    share, column, values, above = best
    median = float(values["kl"].median())
    if share < t.min_share_above or above.height < 3:
        return ctx.passed(
            f"`{column}` above {ctx.shared.max_stable_kl} on {above.height}/{values.height} later steps "
            f"(median {median:.3g})"
        )
    first = rows.filter((pl.col("segment") == rows["segment"].min()) & (pl.col("step") == first_step))[column]
    first_value = abs(float(first[0])) if first.len() and first[0] is not None else None
    if (
        first_value is not None
        and first_value > ctx.shared.max_stable_kl
        and median < t.min_rise_over_step0 * first_value
    ):
        return ctx.passed(
            f"`{column}` is high from the first step ({first_value:.3g}) and stays near it (median "
            f"{median:.3g}): a step-0 mismatch (renderer-kl-step0), not drift"
        )
    steps = sorted(int(s) for s in above["step"].to_list())
    note = (
        f" Config temperature is {ctx.run.meta.temperature:g}, which inflates this KL by itself."
        if temperature_confound(ctx.run.meta)
        else ""
    )
    stale = staleness_confound(rows, steps)
    if stale:
        note += (
            f" Samples were staler on those steps (`{stale['metric']}` median {stale['above_band_median']:.3g} vs "
            f"{stale['in_band_median']:.3g} on in-band steps): off-policy staleness inflates this KL, so reduce "
            "max_steps_off_policy before blaming the learning rate."
        )
    elif ctx.run.meta.trainer_mode in ("async", "stream"):
        note += f" This is a {ctx.run.meta.trainer_mode} run: sampling from older weights (staleness) inflates this KL."
    measured = (
        f"|`{column}`| is above {ctx.shared.max_stable_kl} on {above.height} of {values.height} steps "
        f"after the first ({share:.0%}); median {median:.3g}, max {float(values['kl'].max()):.3g}, first "
        f"at step {steps[0]} ({run_label(ctx.run.meta)})."
    )
    sawtooth, _ = ctx.kl_sawtooth
    if ctx.sawtooth_shown():
        # The KL rises between saves and resets at each: the sampler is stale, the learning rate is not
        # what moved it (stale-sampler has the evidence), so the message must not send the user there.
        title = "KL between sampler and trainer rises between checkpoint saves (stale sampler)"
        message = (
            f"The KL follows the save cadence ({sawtooth.cadence_source}): it resets at {sawtooth.teeth} of "
            f"{sawtooth.resets} saves, so the sampler is only refreshed when a checkpoint is saved "
            f"(see stale-sampler). {measured}{note}"
        )
        fix = (
            "Refresh the sampling client after every optimizer step (stale-sampler); judge the learning rate "
            "only once the KL no longer follows the save cadence."
        )
    else:
        title = "KL between sampler and trainer drifted above the stable band"
        message = measured + note
        fix = (
            "Lower the learning rate or add a KL penalty (kl_penalty_coef); check off-policy staleness in "
            "async/stream runs, and MoE numerics; if it is high from step 0, see renderer-kl-step0."
        )
    return [
        ctx.finding(
            severity="warning",
            title=title,
            message=message,
            fix=fix,
            steps=steps[:MAX_LISTED_STEPS],
            evidence={
                "metric": column,
                "median": median,
                "max": float(values["kl"].max()),
                "steps_above": above.height,
                "steps_measured": values.height,
                "share_above": round(share, 4),
                "band": ctx.shared.max_stable_kl,
                "staleness": stale,
                "save_sawtooth": ctx.sawtooth_shown(),
            },
            fingerprint=f"kl-drift:{column}",
            confidence="high" if share >= 0.5 else "medium",
        )
    ]


RULE = register(
    Rule(
        slug="kl-drift",
        code="TD202",
        title="KL drifting above the stable range",
        severity="warning",
        needs="metrics.jsonl with optim/kl_sample_train_v1/_v2",
        docs=RuleDocs(
            what=(
                "|KL| between sampler and trainer logprobs above the stable band (0.01) on a sustained share of "
                "the steps after the first."
            ),
            why=(
                "The cookbook calls training stable when KL < 0.01; a sustained excess means the policy moves "
                "faster than the sampler tracks (too high LR, staleness, numerics) and updates become unreliable."
            ),
            evidence=(
                "Per-step |optim/kl_sample_train_v1/_v2| after the first step: share above the band, median, max, "
                "the steps above it."
            ),
            fix=(
                "Lower the learning rate, add or raise the KL penalty, reduce off-policy staleness; check "
                "temperature and MoE numerics."
            ),
        ),
        check=check,
        shared=(
            "max_stable_kl",
            "sawtooth_min_periods",
            "sawtooth_min_drop",
            "sawtooth_min_share",
            "sawtooth_min_correlation",
        ),
        requires=(
            requires(
                "no optim/kl_sample_train_v1/_v2 in metrics: not an RL run",
                values_in(
                    "steps", "kl_sample_train_v1", "kl_sample_train_v2", "*/kl_sample_train_v1", "*/kl_sample_train_v2"
                ),
            ),
        ),
        tags=("kl", "metrics"),
    )
)
