"""TD211 overfitting: the held-out NLL rising while the training NLL keeps falling — the step to stop at.

SFT evaluates `test/nll` every eval_every steps, before the step's training ops (FORMATS.md 1.3), so
the value at step s scores the weights after s updates. The best evaluation is the step to stop at;
the saved checkpoint nearest to it (checkpoints.jsonl, with sampler weights) is the one to keep.
"""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.checkpoints import checkpoint_records, cite, record_ttl, step_of, ttl_known
from trace_doctor.derive.rl_quality import median, series
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.knowledge.tinker import is_eval_key
from trace_doctor.model import Finding
from trace_doctor.policy.training import OverfittingPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.checks.checkpoint_risk import KEEP_FIX, ttl_text
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, values_in

TRAIN_NLL = "train_mean_nll"
HELD_OUT_NLL = "test/nll"


def held_out_column(columns: list[str]) -> str | None:
    """`test/nll`, else another evaluator's NLL (`<name>/nll`), never a training key or an async alias."""
    if HELD_OUT_NLL in columns:
        return HELD_OUT_NLL
    found = sorted(c for c in columns if is_eval_key(c) and c.endswith("/nll") and not c.startswith("eval/by_"))
    return found[0] if found else None


def _evaluations(steps: pl.DataFrame, column: str) -> pl.DataFrame:
    """(step, value) of the held-out NLL on every kept row (evals can sit on rows of their own), last per step."""
    kept = steps.filter(pl.col("step").is_not_null())
    if "superseded" in kept.columns:
        kept = kept.filter(~pl.col("superseded").fill_null(False))
    frame = series(kept, column)
    return frame.unique(subset=["step"], keep="last", maintain_order=True).sort("step")


def _nearest_checkpoint(ctx: RuleContext, step: int) -> dict | None:
    """The saved checkpoint with sampler weights nearest to `step` (the earlier on a tie)."""
    saved = [(step_of(r), r) for r in checkpoint_records(ctx.run.checkpoints) if r.get("sampler_path")]
    usable = [(abs(s - step), s, r) for s, r in saved if s is not None]
    return min(usable, key=lambda item: (item[0], item[1]))[2] if usable else None


def check(ctx: RuleContext[OverfittingPolicy]) -> list[Finding]:
    t = ctx.thresholds
    column = held_out_column(ctx.run.steps.columns)
    if column is None:
        raise NotApplicable("no held-out NLL (test/nll) in metrics")
    evals = _evaluations(ctx.run.steps, column)
    if evals.height < t.min_evals:
        raise NotApplicable(f"only {evals.height} evaluation(s) of `{column}` (needs {t.min_evals})")
    train = series(live_training_rows(ctx.run.steps), TRAIN_NLL)
    if train.height < 2 * t.train_window:
        raise NotApplicable(f"only {train.height} step(s) with `{TRAIN_NLL}` (needs {2 * t.train_window})")
    steps, values = evals["step"].to_list(), evals["value"].to_list()
    best = min(range(len(values)), key=lambda i: (values[i], i))
    best_step, best_value = int(steps[best]), float(values[best])
    after = values[best + 1 :]
    if len(after) < t.min_evals_after_best:
        return ctx.passed(
            f"`{column}` is at its best {best_value:.4g} at step {best_step}, with {len(after)} evaluation(s) after "
            f"it (needs {t.min_evals_after_best} to see a rise)"
        )
    recent = median(after[-t.min_evals_after_best :])
    rise = recent / best_value - 1 if best_value > 0 else 0.0
    if rise < t.min_rise:
        return ctx.passed(
            f"`{column}` best {best_value:.4g} at step {best_step}; the last {t.min_evals_after_best} evaluations' "
            f"median {recent:.4g} is {rise:+.1%} from it (a rise needs {t.min_rise:.0%})"
        )
    before = train.filter(pl.col("step") <= best_step).tail(t.train_window)
    if before.height < t.train_window:
        before = train.head(t.train_window)
    at_best = median(before["value"].to_list())
    at_end = median(train.tail(t.train_window)["value"].to_list())
    fall = 1 - at_end / at_best if at_best > 0 else 0.0
    if fall < t.min_train_fall:
        return ctx.passed(
            f"`{column}` rose {rise:+.1%} after its best at step {best_step}, but `{TRAIN_NLL}` did not keep "
            f"falling ({at_best:.4g} -> {at_end:.4g}, {-fall:+.1%}): not memorisation (see training-instability)"
        )
    last_step, last_value = int(steps[-1]), float(values[-1])
    checkpoint = _nearest_checkpoint(ctx, best_step)
    if checkpoint is not None:
        config = ctx.run.meta.config or {}
        ttl = record_ttl(checkpoint, config)
        if not ttl_known(checkpoint, config):
            kept_for = "its TTL is not in config.json"
        else:
            kept_for = f"kept {ttl_text(ttl)} after it was saved" if ttl is not None else "kept without TTL"
        saved = (
            f" The nearest saved checkpoint with sampler weights is `{checkpoint.get('name')}` (step "
            f"{step_of(checkpoint)}, {kept_for}): {checkpoint.get('sampler_path')}."
        )
    else:
        saved = " No checkpoint with sampler weights was recorded near it (checkpoints.jsonl)."
    message = (
        f"`{column}` reached its best, {best_value:.4g}, at step {best_step} and rose to {last_value:.4g} by step "
        f"{last_step} (the last {t.min_evals_after_best} evaluations {rise:+.1%} above the best), while "
        f"`{TRAIN_NLL}` kept falling ({at_best:.4g} around step {best_step} -> {at_end:.4g} over the last "
        f"{t.train_window} steps, {-fall:.1%}): the model is fitting the training set at the held-out set's "
        f"expense. Stop at step {best_step}.{saved}"
    )
    fix = (
        f"Use the weights of step {best_step} (the checkpoint nearest to it"
        + (f"; {KEEP_FIX}" if checkpoint is not None and record_ttl(checkpoint, ctx.run.meta.config or {}) else "")
        + f"); next time stop near step {best_step} (fewer epochs or max_steps), lower the learning rate, or add "
        "data; save often enough (save_every) that a checkpoint lands near the best evaluation."
    )
    return [
        ctx.finding(
            severity="warning",
            title=f"Held-out loss rising while training loss falls: stop at step {best_step}",
            message=message,
            fix=fix,
            steps=[int(s) for s in steps[best:]],
            evidence={
                "metric": column,
                "train_metric": TRAIN_NLL,
                "best_step": best_step,
                "best_value": best_value,
                "last_step": last_step,
                "last_value": last_value,
                "rise": round(rise, 4),
                "train_at_best": at_best,
                "train_at_end": at_end,
                "train_fall": round(fall, 4),
                "evaluations": evals.height,
                "checkpoint": cite(checkpoint) if checkpoint is not None else None,
            },
            fingerprint="overfitting",
            confidence="high" if len(after) >= 2 * t.min_evals_after_best else "medium",
        )
    ]


RULE = register(
    Rule(
        slug="overfitting",
        code="TD211",
        title="Overfitting: held-out NLL rising while the training NLL falls",
        severity="warning",
        needs="metrics.jsonl with test/nll evaluations and train_mean_nll (SFT)",
        docs=RuleDocs(
            what=(
                "The held-out NLL (`test/nll`, scored every eval_every steps) past its best — the median of the "
                "last evaluations well above the minimum — while `train_mean_nll` keeps falling. Names the best "
                "evaluation's step as the step to stop at, and the saved checkpoint with sampler weights nearest "
                "to it (checkpoints.jsonl) with how long the service keeps it."
            ),
            why=(
                "A model that keeps lowering its training loss while the held-out loss rises is memorising the "
                "training set: every step after the best evaluation makes it worse on new data, and the final "
                "checkpoint is not the one to use. Both losses rising is instability, not this."
            ),
            evidence=(
                "The held-out NLL's evaluations (best step and value, the last ones), the training NLL's median "
                "around the best evaluation and at the end, the nearest checkpoint record (name, sampler_path) "
                "and its TTL (config ttl_seconds)."
            ),
            fix=(
                "Use the checkpoint nearest to the best evaluation (remove its TTL or export it); next time stop "
                "there (fewer epochs, max_steps), lower the learning rate, or add data."
            ),
        ),
        check=check,
        policy=OverfittingPolicy,
        stage="training quality",
        panels=("loss",),
        requires=(
            requires("no held-out NLL in metrics", values_in("steps", "test/nll", "*/nll")),
            requires("no train_mean_nll in metrics", values_in("steps", TRAIN_NLL)),
        ),
        tags=("training", "metrics"),
    )
)
