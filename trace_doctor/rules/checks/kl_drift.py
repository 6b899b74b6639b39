"""TD202 kl-drift: sampler-vs-trainer KL above the stable band for a sustained share of steps."""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.staleness import loop_mode, sampler_lag
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.model import Finding
from trace_doctor.policy.training import KlDriftPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.checks.renderer_kl_step0 import kl_columns, run_label, temperature_confound
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, values_in

MAX_LISTED_STEPS = 50


def worst_series(later: pl.DataFrame, columns: dict[str, str], band: float, min_steps: int):
    """(share above the band, column, values, above-band rows) of the KL version with the largest share,
    or None when no version has `min_steps` values."""
    best = None
    for version in sorted(columns):
        column = columns[version]
        values = later.filter(pl.col(column).is_not_null() & pl.col(column).is_finite()).select(
            "step", pl.col(column).abs().alias("kl")
        )
        if values.height < min_steps:
            continue
        above = values.filter(pl.col("kl") > band)
        share = above.height / values.height
        if best is None or share > best[0]:
            best = (share, column, values, above)
    return best


def per_update(later: pl.DataFrame, lag: pl.DataFrame, columns: dict[str, str]) -> tuple[pl.DataFrame, dict | None]:
    """The KL of off-policy steps per policy update, and what was done (None when every step is on-policy).

    On samples k updates old the sampler-vs-trainer gap holds the policy's own movement over those k
    updates: to first order the logprob gap grows k-fold, so |v1| (a mean gap) by k and v2 (half a mean
    squared gap) by k². Dividing by them leaves what one update moves, which the on-policy band can
    judge. A step without a logged lag keeps its raw value and is counted, so an excess there abstains."""
    joined = later.join(lag.rename({"lag_max": "_lag"}), on="step", how="left")
    stale = joined.filter(pl.col("_lag") > 0)
    unknown = joined.filter(pl.col("_lag").is_null())["step"].to_list()
    if stale.is_empty() and not unknown:
        return later, None
    k = pl.when(pl.col("_lag") > 1).then(pl.col("_lag")).otherwise(1.0)
    scaled = joined.with_columns(
        [(pl.col(c) / (k if version == "v1" else k * k)).alias(c) for version, c in columns.items()]
    )
    return scaled.drop("_lag"), {
        "off_policy_steps": stale.height,
        "lag_max": float(stale["_lag"].max()) if stale.height else 0.0,
        "unknown_lag_steps": unknown,
    }


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


def check(ctx: RuleContext[KlDriftPolicy]) -> list[Finding]:
    rows = live_training_rows(ctx.run.steps)
    columns = kl_columns(rows)
    if not columns:
        raise NotApplicable("no optim/kl_sample_train_v1/_v2 in metrics: not an RL run")
    t = ctx.thresholds
    band = ctx.shared.max_stable_kl
    first_step = rows.sort(["segment", "step"])["step"][0]
    later = rows.filter(~((pl.col("segment") == rows["segment"].min()) & (pl.col("step") == first_step)))
    lag = off_policy_lag(ctx.run.meta, rows)
    off_policy = None
    if lag is not None:
        later, off_policy = per_update(later, lag, columns)
    best = worst_series(later, columns, band, t.min_judged_steps)
    if best is None:
        raise NotApplicable(f"fewer than {t.min_judged_steps} later steps with a KL value")
    share, column, values, above = best
    median = float(values["kl"].median())
    per = " per policy update (off-policy steps: |v1| / lag, v2 / lag²)" if off_policy else ""
    if share < t.min_share_above or above.height < t.min_steps_above:
        return ctx.passed(
            f"`{column}`{per} above {ctx.shared.max_stable_kl} on {above.height}/{values.height} later steps "
            f"(median {median:.3g})"
            + (
                f"; {off_policy['off_policy_steps']} step(s) trained on samples up to {off_policy['lag_max']:g} "
                + ("update" if off_policy["lag_max"] == 1 else "updates")
                + " old"
                if off_policy
                else ""
            )
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
    unknown = above.filter(pl.col("step").is_in(off_policy["unknown_lag_steps"])) if off_policy else above.clear()
    if unknown.height:
        raise NotApplicable(
            f"{ctx.run.meta.trainer_mode or 'async'} RL without a logged lag (sampling_client/step_*, "
            f"async/staleness_*): |`{column}`| is above {band} on {unknown.height} step(s) whose samples may be "
            "several updates old, where this KL also measures the policy's own movement over those updates"
        )
    steps = sorted(int(s) for s in above["step"].to_list())
    note = (
        f" Config temperature is {ctx.run.meta.temperature:g}, which inflates this KL by itself."
        if temperature_confound(ctx.run.meta)
        else ""
    )
    if off_policy:
        note += (
            f" {off_policy['off_policy_steps']} step(s) trained on samples up to {off_policy['lag_max']:g} "
            + ("update" if off_policy["lag_max"] == 1 else "updates")
            + " old: their KL is taken per policy update (|v1| / lag, v2 / lag²), so staleness alone does not count, "
            "and the excess is in each update."
        )
    measured = (
        f"|`{column}`|{per} is above {ctx.shared.max_stable_kl} on {above.height} of {values.height} steps "
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
                "staleness": (
                    None
                    if off_policy is None
                    else {
                        "normalised": "per policy update: |v1| / lag, v2 / lag²",
                        "off_policy_steps": off_policy["off_policy_steps"],
                        "lag_max": off_policy["lag_max"],
                    }
                ),
                "save_sawtooth": ctx.sawtooth_shown(),
            },
            fingerprint=f"kl-drift:{column}",
            confidence="high" if share >= t.high_confidence_share else "medium",
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
                "the steps after the first. Async/stream RL: a step trained on samples k updates old (lag = step − "
                "sampling_client/step_min) is judged per policy update (|v1| / k, v2 / k²), since its KL also holds "
                "the policy's own movement over those updates; an async run that logs no lag abstains when above "
                "the band."
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
        policy=KlDriftPolicy,
        stage="training quality",
        panels=("kl",),
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
