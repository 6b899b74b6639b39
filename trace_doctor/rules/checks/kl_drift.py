"""TD202 kl-drift: sampler-vs-trainer KL above the stable band for a sustained share of steps."""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.staleness import loop_mode, sampler_lag
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.model import Finding
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.checks.renderer_kl_step0 import kl_columns, run_label, temperature_confound
from trace_doctor.rules.requires import requires, values_in

MAX_LISTED_STEPS = 50


def worst_series(later: pl.DataFrame, columns: dict[str, str], band: float):
    """(share above the band, column, values, above-band rows) of the KL version with the largest share,
    or None when no version has 3 values."""
    best = None
    for version in sorted(columns):
        column = columns[version]
        values = later.filter(pl.col(column).is_not_null() & pl.col(column).is_finite()).select(
            "step", pl.col(column).abs().alias("kl")
        )
        if values.height < 3:
            continue
        above = values.filter(pl.col("kl") > band)
        share = above.height / values.height
        if best is None or share > best[0]:
            best = (share, column, values, above)
    return best


def off_policy_lag(meta, rows: pl.DataFrame) -> pl.DataFrame | None:
    """Per step, how many updates behind its oldest sample was (`step`, `lag_max`), for async/stream loops;
    None for an on-policy loop. An async loop that logs no lag gets an empty frame: every step may be stale."""
    mode = loop_mode(meta, rows)
    if mode not in ("async", "stream"):
        return None
    lag = sampler_lag(rows)
    if lag is None:
        return pl.DataFrame(schema={"step": pl.Int64, "lag_max": pl.Float64}) if mode == "async" else None
    return lag.select("step", "lag_max")


def check(ctx) -> list[Finding]:
    rows = live_training_rows(ctx.run.steps)
    columns = kl_columns(rows)
    if not columns:
        raise NotApplicable("no optim/kl_sample_train_v1/_v2 in metrics: not an RL run")
    t = ctx.thresholds
    band = ctx.shared.max_stable_kl
    first_step = rows.sort(["segment", "step"])["step"][0]
    later = rows.filter(~((pl.col("segment") == rows["segment"].min()) & (pl.col("step") == first_step)))
    best = worst_series(later, columns, band)
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
    lag = off_policy_lag(ctx.run.meta, rows)
    off_policy = None
    if lag is not None:
        # On samples k updates old this KL also measures how far the policy moved in those k updates,
        # which the on-policy band cannot tell from drift: judge only the on-policy steps, or abstain.
        stale = lag.filter(pl.col("lag_max") > 0)["step"].to_list()
        known = lag["step"].to_list()
        stale_above = above.filter(pl.col("step").is_in(stale) | ~pl.col("step").is_in(known))
        if stale_above.height:
            on_policy = later.filter(pl.col("step").is_in(known) & ~pl.col("step").is_in(stale))
            judged = worst_series(on_policy, columns, band)
            lag_median = float(lag.filter(pl.col("step").is_in(stale_above["step"].to_list()))["lag_max"].median() or 0)
            if judged is None or judged[0] < t.min_share_above or judged[3].height < 3:
                raise NotApplicable(
                    f"{ctx.run.meta.trainer_mode or 'async'} RL: |`{column}`| is above {band} on "
                    f"{stale_above.height} step(s) trained on off-policy samples"
                    + (f" (median lag {lag_median:g} update(s))" if known else " (lag not logged)")
                    + ": there the KL includes the policy's own movement over those updates, which the "
                    "on-policy band cannot tell from drift; "
                    + (
                        f"{judged[3].height} of {judged[2].height} on-policy step(s) above it"
                        if judged is not None
                        else "fewer than 3 on-policy steps to judge"
                    )
                )
            share, column, values, above = judged
            median = float(values["kl"].median())
            off_policy = {
                "off_policy_steps_excluded": len(stale),
                "judged_on_policy_steps": values.height,
            }
    steps = sorted(int(s) for s in above["step"].to_list())
    note = (
        f" Config temperature is {ctx.run.meta.temperature:g}, which inflates this KL by itself."
        if temperature_confound(ctx.run.meta)
        else ""
    )
    if off_policy:
        note += (
            f" Judged on the {off_policy['judged_on_policy_steps']} on-policy steps only: "
            f"{off_policy['off_policy_steps_excluded']} steps trained on stale samples are left out."
        )
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
                "staleness": off_policy,
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
                "the steps after the first. Async/stream RL: steps trained on samples from older weights (lag "
                "step − sampling_client/step_min > 0) are judged only when in band; above it the rule judges the "
                "on-policy steps, or abstains when there are too few."
            ),
            why=(
                "The cookbook calls training stable when KL < 0.01; a sustained excess means the policy moves "
                "faster than the sampler tracks (too high LR, staleness, numerics) and updates become unreliable."
            ),
            evidence=(
                "Per-step |optim/kl_sample_train_v1/_v2| after the first step: share above the band, median, max, "
                "the steps above it; for off-policy runs the per-step lag (sampling_client/step_* or "
                "async/staleness_max), since on stale samples this KL also measures the policy's own movement."
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
