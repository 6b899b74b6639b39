"""TD204 stale-sampler: samples from an old policy.

Two shapes (derive/staleness.py): an async/stream loop whose samples lag more steps than its bound,
or whose staleness filter throws away a large share of the sampling (`Samples are too stale` lines);
and a sync loop whose sampler is refreshed only at checkpoint saves, seen as a KL sawtooth with the
save cadence.
"""

from __future__ import annotations

import orjson
import polars as pl

from trace_doctor.derive.staleness import loop_mode, sampler_lag
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.knowledge.tinker import ASYNC_STALENESS_PREFIX
from trace_doctor.model import Finding
from trace_doctor.policy.training import StaleSamplerPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, values_in

MAX_LISTED_STEPS = 50
STALE_LOG_KIND = "stale-samples"


def _config_int(config: dict, *path: str) -> int | None:
    value = config
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _stale_lines(log_events: pl.DataFrame) -> pl.DataFrame:
    """`Samples are too stale` records: step and action (requeuing / discarding)."""
    if log_events.is_empty():
        return pl.DataFrame(schema={"step": pl.Int64, "action": pl.String})
    rows = log_events.filter(pl.col("kind") == STALE_LOG_KIND)
    parsed = [orjson.loads(text) if text else {} for text in rows["fields"].to_list()]
    return pl.DataFrame(
        {"step": [p.get("step") for p in parsed], "action": [p.get("action") for p in parsed]},
        schema={"step": pl.Int64, "action": pl.String},
    )


def trains_late_groups(rows: pl.DataFrame) -> bool:
    """Whether the async loop is 0.6.1's, which logs `async/staleness_*` and never drops a finished group
    for its age: max_steps_off_policy caps how far sampling runs ahead (rollout slots), and a slow rollout
    is trained when it finishes however stale (rl/train.py `AsyncConfig`). Older loops requeue stale groups."""
    return any(c.startswith(ASYNC_STALENESS_PREFIX) for c in rows.columns)


def _stragglers(ctx: RuleContext[StaleSamplerPolicy], measured: str, steps: list[int], evidence: dict) -> Finding:
    """0.6.1 async: steps over the bound are slow rollouts trained late, by design of the loop."""
    share = evidence["steps_over_bound"] / evidence["steps_measured"]
    return ctx.finding(
        # A few stragglers are the loop working as documented; most steps over the bound is a sampler that
        # routinely runs far behind, which trains off-policy throughout.
        severity="warning" if share > ctx.thresholds.max_straggler_step_share else "info",
        title="Slow rollouts trained long after they were sampled (stragglers)",
        message=(
            f"{measured} The cookbook's async loop (0.6.1) bounds how far sampling runs ahead, not how old a "
            "finished group may be: a rollout that outlasts the bound is trained when it finishes, on weights "
            f"up to {evidence['lag_max']:g} updates old. Within the bound on the other steps."
        ),
        fix=(
            "Bound rollout time where an environment can hang or crawl "
            "(rollout_error_tolerance=RetryOnFailure(per_rollout_timeout=...)), or speed up the slow "
            "environments; keep a loss that tolerates off-policy data (stable_reinforce, ppo)."
        ),
        steps=steps[:MAX_LISTED_STEPS],
        evidence={**evidence, "loop": "0.6.1 async: trains late groups", "share_over_bound": round(share, 4)},
        fingerprint="stale-sampler:stragglers:async",
        confidence="high",
    )


def _off_policy(ctx: RuleContext[StaleSamplerPolicy], rows: pl.DataFrame, mode: str) -> list[Finding]:
    t = ctx.thresholds
    config = ctx.run.meta.config
    lag = sampler_lag(rows)
    stale = _stale_lines(ctx.run.log_events)
    bound = 0 if mode == "stream" else _config_int(config, "async_config", "max_steps_off_policy")
    bound_text = (
        "0 (the sync stream loop samples every batch with the current weights)"
        if mode == "stream"
        else f"max_steps_off_policy = {bound}"
        if bound is not None
        else "unknown (no async_config in config.json)"
    )
    if lag is None and stale.is_empty():
        raise NotApplicable(
            f"a {mode} loop without sampling_client/step_* or async/staleness_* keys or stale-sample lines"
        )
    findings: list[Finding] = []
    lag_text = ""
    if lag is not None:
        lag_max, lag_median = float(lag["lag_max"].max()), float(lag["lag_max"].median())
        lag_text = f"lag ({lag['source'][0]}) median {lag_median:g}, max {lag_max:g} over {lag.height} steps"
        if bound is not None:
            over = lag.filter(pl.col("lag_max") > bound)
            if over.height >= t.min_steps_over_bound:
                steps = sorted(int(s) for s in over["step"].to_list())
                evidence = {
                    "mode": mode,
                    "bound": bound,
                    "lag_source": lag["source"][0],
                    "steps_over_bound": over.height,
                    "steps_measured": lag.height,
                    "lag_max": lag_max,
                    "lag_median": lag_median,
                }
                measured = (
                    f"On {over.height} of {lag.height} steps the oldest sample was more steps behind than the bound "
                    f"{bound_text}: up to {lag_max:g} (median {lag_median:g}; {lag['source'][0]}), first at step "
                    f"{steps[0]}."
                )
                if mode == "async" and trains_late_groups(rows):
                    findings.append(_stragglers(ctx, measured, steps, evidence))
                else:
                    findings.append(
                        ctx.finding(
                            severity="error",
                            title="Trained on samples staler than the staleness bound",
                            message=(
                                f"{measured} The loop does not enforce its staleness bound, so it trains "
                                "off-policy without knowing it."
                            ),
                            fix=(
                                "Check the sampler refresh and the staleness filter of the loop (cookbook rl/train.py "
                                "requeues groups more than max_steps_off_policy behind); a custom loop must refresh "
                                "the sampling client after each optimizer step."
                            ),
                            steps=steps[:MAX_LISTED_STEPS],
                            evidence=evidence,
                            fingerprint=f"stale-sampler:over-bound:{mode}",
                            confidence="high",
                        )
                    )
    if not stale.is_empty():
        trained_steps = rows.height
        per_batch = _config_int(config, "async_config", "groups_per_batch") or _config_int(
            config, "dataset_builder", "batch_size"
        )
        requeued = stale.filter(pl.col("action") == "requeuing").height
        discarded = stale.height - requeued
        if per_batch and trained_steps:
            share = stale.height / (per_batch * trained_steps)
            if share > t.max_stale_share:
                by_step = stale.group_by("step").len().sort("step")
                steps = [int(s) for s in by_step["step"].to_list() if s is not None]
                worst = by_step.sort("len", descending=True).row(0)
                findings.append(
                    ctx.finding(
                        title="Samplers fall behind: many groups too stale to train on",
                        message=(
                            f"{stale.height} groups were too stale to train on ({requeued} requeued, {discarded} "
                            f"discarded) against {per_batch * trained_steps} trained ({per_batch} per step × "
                            f"{trained_steps} steps): {share:.0%} of the sampling was redone or lost, on "
                            f"{len(steps)} steps (most at step {worst[0]}: {worst[1]}). Bound {bound_text}"
                            f"{'; ' + lag_text if lag_text else ''}."
                        ),
                        fix=(
                            "Sampling cannot keep up with training: raise sampling throughput (more concurrent "
                            "groups), or train less often per sampled batch; raising max_steps_off_policy keeps "
                            "the samples but trains further off-policy (KL rises)."
                        ),
                        steps=steps[:MAX_LISTED_STEPS],
                        evidence={
                            "mode": mode,
                            "bound": bound,
                            "stale_groups": stale.height,
                            "requeued": requeued,
                            "discarded": discarded,
                            "trained_groups": per_batch * trained_steps,
                            "stale_share": round(share, 4),
                            "steps_with_stale_lines": len(steps),
                        },
                        fingerprint=f"stale-sampler:requeued:{mode}",
                        confidence="high" if trained_steps >= t.high_confidence_steps else "medium",
                    )
                )
    if findings:
        return findings
    stale_text = f"; {stale.height} too-stale groups in logs.log" if not stale.is_empty() else ""
    return ctx.passed(f"{mode} loop, bound {bound_text}: {lag_text or 'no lag keys'}{stale_text}")


def _sync_sawtooth(ctx: RuleContext[StaleSamplerPolicy]) -> list[Finding]:
    found, reason = ctx.kl_sawtooth
    if found is None:
        raise NotApplicable(f"sync loop: {reason}")
    s = ctx.shared
    summary = (
        f"`{found.metric}` dropped at {found.teeth} of {found.resets} saves ({found.cadence_source}); "
        f"ρ(KL, steps since save) = {found.correlation if found.correlation is None else round(found.correlation, 2)}"
    )
    if found.resets < s.sawtooth_min_periods:
        raise NotApplicable(
            f"only {found.resets} save(s) with KL on both sides ({found.cadence_source}): fewer than "
            f"{s.sawtooth_min_periods} periods to see a sawtooth"
        )
    if not ctx.sawtooth_shown():
        return ctx.passed(f"KL does not follow the save cadence: {summary}")
    confidence = "high" if found.teeth >= 2 * s.sawtooth_min_periods else "medium"
    return [
        ctx.finding(
            severity="error" if confidence == "high" else "warning",
            title="Sampler refreshed only at checkpoint saves: KL sawtooth with the save cadence",
            message=(
                f"The sampler-vs-trainer KL grows with the steps since the last save and falls back at each "
                f"save: `{found.metric}` median {found.stale_median:.3g} late in a period vs "
                f"{found.fresh_median:.3g} at the save steps; it dropped by ≥{s.sawtooth_min_drop:g}× at "
                f"{found.teeth} of {found.resets} saves ({found.cadence_source}; saves at "
                f"{', '.join(map(str, found.saves[:8]))}{'…' if len(found.saves) > 8 else ''}), Spearman "
                f"ρ(KL, steps since save) = {found.correlation:.2f}. Between saves the samples come from the "
                "last saved policy, not the current one: training is silently off-policy."
            ),
            fix=(
                "Refresh the sampling client after every optimizer step (the cookbook's sync loop calls "
                "save_weights_and_get_sampling_client each step), not only when a checkpoint is saved."
            ),
            steps=found.stale_steps[:MAX_LISTED_STEPS],
            evidence={
                "metric": found.metric,
                "cadence": found.cadence_source,
                "saves": found.saves,
                "resets": found.resets,
                "teeth": found.teeth,
                "tooth_steps": found.tooth_steps,
                "spearman": round(found.correlation, 4),
                "fresh_median": found.fresh_median,
                "stale_median": found.stale_median,
            },
            fingerprint="stale-sampler:sync-sawtooth",
            confidence=confidence,
        )
    ]


def check(ctx: RuleContext[StaleSamplerPolicy]) -> list[Finding]:
    meta = ctx.run.meta
    if meta.trainer in ("sl", "dpo") or meta.trainer_mode == "off_policy":
        raise NotApplicable(f"a {meta.trainer_mode or meta.trainer} run samples no policy")
    rows = live_training_rows(ctx.run.steps)
    mode = loop_mode(meta, rows)
    if mode in ("async", "stream"):
        return _off_policy(ctx, rows, mode)
    return _sync_sawtooth(ctx)


RULE = register(
    Rule(
        slug="stale-sampler",
        code="TD204",
        title="Samples from an old policy (stale sampler)",
        severity="warning",
        needs="metrics.jsonl of an RL loop (sampling_client/step_*, async/staleness_*, or KL with a save cadence)",
        docs=RuleDocs(
            what=(
                "Async/stream RL: training steps whose oldest sample lags more steps than the bound "
                "(async_config.max_steps_off_policy; 0 for the sync stream loop), or `Samples are too stale` "
                "lines for more than a tenth of the trained groups. Sync RL: a sampling client refreshed only "
                "at checkpoint saves, seen as a sampler-vs-trainer KL that grows with the steps since the last "
                "save and drops back at each save (at least two periods; abstains otherwise)."
            ),
            why=(
                "The canonical silent bug: nothing fails, but the samples come from an older policy than the "
                "one being trained, so the importance weights and the KL are wrong and learning slows or "
                "diverges. Async staleness beyond the bound, or a sampler that cannot keep up, wastes sampling "
                "and trains further off-policy."
            ),
            evidence=(
                "Lag = step − sampling_client/step_min (or async/staleness_max) per step against the bound from "
                "config.json; stale-sample log lines by step against groups_per_batch × steps; for sync loops "
                "optim/kl_sample_train_v2 (else |v1|) against the saves in checkpoints.jsonl (sampler weights, "
                "not rolling) or config save_every: drops at saves, rank correlation with steps since save."
            ),
            fix=(
                "Refresh the sampling client after every optimizer step; in async RL keep sampling ahead of "
                "training (more concurrent groups) and the staleness bound small."
            ),
        ),
        check=check,
        policy=StaleSamplerPolicy,
        stage="training quality",
        panels=("kl",),
        shared=("sawtooth_min_periods", "sawtooth_min_drop", "sawtooth_min_share", "sawtooth_min_correlation"),
        requires=(
            requires(
                "no sampler steps, staleness or KL keys in metrics: not an RL run",
                values_in(
                    "steps",
                    "sampling_client/step_*",
                    "async/staleness_*",
                    "kl_sample_train_v1",
                    "kl_sample_train_v2",
                    "*/kl_sample_train_v1",
                    "*/kl_sample_train_v2",
                ),
            ),
        ),
        tags=("kl", "metrics", "training quality"),
    )
)
