"""TD206 training-instability: non-finite loss / KL / entropy / gradient values, or loss spikes."""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.instability import health_columns, non_finite_steps, spike_columns, spikes
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.knowledge.hyperparams import stabler_loss_advice
from trace_doctor.knowledge.tinker import is_eval_key
from trace_doctor.model import Finding
from trace_doctor.policy.training import TrainingInstabilityPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, table

MAX_LISTED_STEPS = 50
# SFT's `train_mean_nll` is NaN when a batch has no loss-weighted token (FORMATS 1.1): a data problem.
EMPTY_BATCH_LOSS = "train_mean_nll"
LOSS_TOKENS = "num_loss_tokens"


def _describe(bad: dict[str, pl.DataFrame], total_steps: int) -> str:
    parts = []
    for column, frame in sorted(bad.items(), key=lambda kv: int(kv[1]["step"].min())):
        kinds = "/".join(sorted(set(frame["value"].to_list())))
        parts.append(
            f"`{column}` {kinds} on {frame.height} of {total_steps} steps from step {int(frame['step'].min())}"
        )
    return "; ".join(parts[:6]) + (f"; and {len(parts) - 6} more keys" if len(parts) > 6 else "")


def _loss_advice(ctx) -> str:
    """For an RL run whose loss does not clip the update, the loss to switch to (the Tinker notes), else ""."""
    if ctx.run.meta.trainer != "rl" or not ctx.run.meta.config:
        return ""
    advice = stabler_loss_advice(ctx.run.meta.config)
    return f" The {advice}" if advice else ""


def _empty_batch_steps(rows: pl.DataFrame, steps: list[int]) -> set[int]:
    """Steps whose NaN NLL comes with zero loss tokens (a batch with nothing to learn from)."""
    if LOSS_TOKENS not in rows.columns or not rows.schema[LOSS_TOKENS].is_numeric():
        return set()
    empty = rows.filter(pl.col("step").is_in(steps) & (pl.col(LOSS_TOKENS) == 0))
    return {int(s) for s in empty["step"].to_list()}


def _never_finite(
    ctx: RuleContext[TrainingInstabilityPolicy],
    rows: pl.DataFrame,
    training: dict[str, pl.DataFrame],
    columns: dict[str, str],
):
    """A diagnostic estimate (KL, entropy) non-finite on every step it was logged, from the first, while
    no loss or gradient is: it was never computable — a logging problem (no sampled logprobs to
    compare), not an update that diverged. None when that is not the shape."""
    if {"loss", "grad"} & {columns[c] for c in training}:
        return None
    if any(f.height < int(rows[c].is_not_null().sum()) for c, f in training.items()):
        return None
    steps = sorted({int(s) for f in training.values() for s in f["step"].to_list()})
    return ctx.finding(
        severity="warning",
        title="A training metric was never finite",
        message=(
            f"{_describe(training, rows.height)}: non-finite on every step it was logged, while the loss and "
            "gradients (where logged) stay finite. The estimate was never computable (e.g. no sampled "
            "logprobs for the action tokens), so it says nothing about stability: the problem is in what is "
            "logged, not (yet) in the weights."
        ),
        fix="Check that the sampler returns logprobs for every action token and that the metric's inputs are "
        "not empty; until then the run has no KL/entropy signal to watch.",
        steps=steps[:MAX_LISTED_STEPS],
        evidence={
            "keys": {c: f.height for c, f in sorted(training.items())},
            "first_step": steps[0],
            "steps_affected": len(steps),
        },
        fingerprint="training-instability:never-finite",
        confidence="medium",
    )


def _non_finite(
    ctx: RuleContext[TrainingInstabilityPolicy], rows: pl.DataFrame, columns: dict[str, str]
) -> list[Finding]:
    bad = {c: f for c in columns if not (f := non_finite_steps(rows, c)).is_empty()}
    if not bad:
        return []
    findings = []
    training = {c: f for c, f in bad.items() if not is_eval_key(c)}
    evals = {c: f for c, f in bad.items() if is_eval_key(c)}
    last_step = int(rows["step"].max())
    if training and (never := _never_finite(ctx, rows, training, columns)) is not None:
        findings.append(never)
        training = {}
    if training:
        steps = sorted({int(s) for f in training.values() for s in f["step"].to_list()})
        nll = training.get(EMPTY_BATCH_LOSS)
        empty = _empty_batch_steps(rows, nll["step"].to_list()) if nll is not None else set()
        only_empty_batches = set(training) == {EMPTY_BATCH_LOSS} and set(steps) <= empty
        persists = any(int(f["step"].max()) == last_step and f.height >= 2 for f in training.values())
        families = sorted({columns[c] for c in training})
        if only_empty_batches:
            message = (
                f"`{EMPTY_BATCH_LOSS}` is NaN on {len(steps)} steps ({', '.join(map(str, steps[:10]))}) where "
                f"`{LOSS_TOKENS}` is 0: those batches had no token to learn from (every weight zero), so they "
                "trained nothing."
            )
            severity, fix = (
                "warning",
                "Check the data and `train_on_what`: examples whose assistant turns are all masked or truncated "
                "away by max_length contribute no loss.",
            )
        else:
            message = f"Non-finite {', '.join(families)} values: {_describe(training, rows.height)}." + (
                " They persist to the last step: the weights are likely corrupted from there on." if persists else ""
            )
            severity, fix = (
                "error",
                "Resume from the last checkpoint before the first non-finite step with a lower learning rate "
                "(or gradient clipping); check the batch at that step for empty or extreme sequences."
                + _loss_advice(ctx),
            )
        findings.append(
            ctx.finding(
                severity=severity,
                title="Non-finite training values (NaN / Infinity)"
                if not only_empty_batches
                else "NaN loss on batches with no loss tokens",
                message=message,
                fix=fix,
                steps=steps[:MAX_LISTED_STEPS],
                evidence={
                    "keys": {c: f.height for c, f in sorted(training.items())},
                    "first_step": steps[0],
                    "steps_affected": len(steps),
                    "persists_to_end": persists,
                    "empty_batches": sorted(empty),
                },
                fingerprint="training-instability:non-finite"
                if not only_empty_batches
                else "training-instability:empty-batch",
                confidence="high",
            )
        )
    if evals:
        steps = sorted({int(s) for f in evals.values() for s in f["step"].to_list()})
        findings.append(
            ctx.finding(
                severity="warning",
                title="Non-finite evaluation values",
                message=(
                    f"Evaluation metrics are non-finite: {_describe(evals, rows.height)}. Evaluation does not "
                    "change the weights, but a NaN test loss means the model (or the eval set) produces "
                    "non-finite logprobs there."
                ),
                fix="Look at the eval examples of those steps (empty targets, truncation) and at the training "
                "values just before them.",
                steps=steps[:MAX_LISTED_STEPS],
                evidence={"keys": {c: f.height for c, f in sorted(evals.items())}, "first_step": steps[0]},
                fingerprint="training-instability:eval-non-finite",
                confidence="high",
            )
        )
    return findings


def _spikes(
    ctx: RuleContext[TrainingInstabilityPolicy], rows: pl.DataFrame, columns: dict[str, str]
) -> tuple[list[Finding], list[str]]:
    t = ctx.thresholds
    findings, notes = [], []
    for column in spike_columns(columns):
        series = rows.filter(pl.col(column).is_not_null() & pl.col(column).is_finite()).select("step", column)
        if series.height < t.spike_window + 2:
            notes.append(f"`{column}`: {series.height} finite steps, too few to judge spikes")
            continue
        found = spikes(
            series["step"].to_numpy(),
            series[column].cast(pl.Float64).to_numpy(),
            window=t.spike_window,
            min_sigmas=t.spike_min_sigmas,
            min_rise=t.spike_min_rise,
            recovery_steps=t.recovery_steps,
        )
        if not found:
            notes.append(f"`{column}`: no spike over {series.height} steps")
            continue
        diverged = [s for s in found if s.recovered is False]
        repeated = len(found) >= t.min_spikes_for_warning and len(found) / series.height >= t.min_spike_rate
        severity = "warning" if diverged or repeated else "info"
        listed = "; ".join(
            f"step {s.step}: {s.peak:.4g} vs local median {s.level:.4g}"
            + (f" ({s.sigmas:.0f} robust σ)" if s.sigmas is not None else "")
            + (", did not come back" if s.recovered is False else "")
            for s in found[:5]
        )
        kind = "loss" if columns[column] == "loss" else "gradient norm"
        findings.append(
            ctx.finding(
                severity=severity,
                title=f"{kind.capitalize()} spike{'s' if len(found) > 1 else ''} in `{column}`"
                + (" followed by divergence" if diverged else ""),
                message=(
                    f"`{column}` jumped far outside its local noise {len(found)} time(s) over {series.height} "
                    f"steps: {listed}."
                    + (
                        f" After step {diverged[0].step} it stayed high: the run diverged."
                        if diverged
                        else " It came back to its level: one bad batch."
                        if len(found) == 1
                        else " Each came back to its level: rare bad batches for this many steps."
                        if severity == "info"
                        else " Each came back, but they recur: the step size is too large for these batches."
                    )
                ),
                fix=(
                    "Lower the learning rate or add gradient clipping; look at the batches of the spike steps "
                    "(very long or degenerate sequences); resume from a checkpoint before a divergence."
                    + _loss_advice(ctx)
                ),
                steps=sorted({st for s in found for st in s.steps})[:MAX_LISTED_STEPS],
                evidence={"metric": column, "family": columns[column], "spikes": [s.to_dict() for s in found[:20]]},
                fingerprint=f"training-instability:spike:{column}",
                confidence="high" if len(found) >= 2 or diverged else "medium",
            )
        )
    return findings, notes


def check(ctx: RuleContext[TrainingInstabilityPolicy]) -> list[Finding]:
    steps = ctx.run.steps
    columns = health_columns(steps)
    if not columns:
        raise NotApplicable("no loss, KL, entropy or gradient-norm keys in metrics")
    # Eval keys sit on their own rows in async RL (is_eval_row): read them from every kept row.
    rows = live_training_rows(steps)
    kept = steps.filter(pl.col("step").is_not_null() & ~pl.col("superseded").fill_null(False))
    eval_columns = {c: f for c, f in columns.items() if is_eval_key(c)}
    findings = _non_finite(ctx, rows, {c: f for c, f in columns.items() if not is_eval_key(c)})
    findings += _non_finite(ctx, kept, eval_columns)
    spike_findings, notes = _spikes(ctx, rows, columns)
    findings += spike_findings
    if findings:
        return findings
    return ctx.passed("; ".join([f"every loss/KL/entropy/grad value finite over {rows.height} steps", *notes[:4]]))


RULE = register(
    Rule(
        slug="training-instability",
        code="TD206",
        title="Non-finite values or loss spikes",
        severity="warning",
        needs="metrics.jsonl with a loss, KL, entropy or gradient-norm key",
        docs=RuleDocs(
            what=(
                "NaN / ±Infinity in a training loss (SFT train_mean_nll, DPO dpo_loss, server loss:sum, "
                "distillation train/loss:sum), KL (optim/kl_*, teacher_kl, kl_policy_base), entropy or gradient "
                "norm (error; a NaN NLL on a batch with zero loss tokens is a data warning; NaN in test/… eval "
                "keys a warning); and loss or gradient-norm spikes far outside the local noise (one recovered "
                "spike: info; repeated spikes or a spike that does not come back: warning)."
            ),
            why=(
                "A NaN or infinite value means the update was computed from garbage: the weights are corrupted "
                "from that step on and every later step is wasted. Spikes mean the step size is too large for "
                "the batch; repeated ones often precede divergence."
            ),
            evidence=(
                "Every numeric key of those families in metrics.jsonl (the cookbook writes NaN/Infinity as bare "
                "tokens; ingest keeps them); spikes against a trailing window's median and robust σ (MAD), "
                "above both a σ multiple and a share of the level, so the early fall and batch noise are not "
                "spikes. Log text such as off-policy distillation's `Step i: loss=nan` is not read."
            ),
            fix=(
                "Resume from a checkpoint before the first bad step with a lower learning rate or gradient "
                "clipping; inspect the batches at the flagged steps. RL with loss_fn `importance_sampling` (an "
                "unclipped ratio): switch to `ppo` or `cispo`, as the Tinker notes advise; async off-policy, to "
                "`stable_reinforce` or `ppo` (rl/train.py warns importance_sampling and cispo can become unstable)."
            ),
        ),
        check=check,
        policy=TrainingInstabilityPolicy,
        stage="training quality",
        panels=("loss", "kl", "entropy"),
        requires=(requires("no metrics.jsonl rows", table("steps")),),
        tags=("metrics", "training quality"),
    )
)
