"""TD403 quality-regression: the candidate trained worse than the baseline.

Runs only with `--baseline`. For each training-quality family both runs log (derive/quality_series.py:
eval and training reward, eval/training NLL and teacher KL, sampler-trainer KL, entropy) the final
window of the steps both runs reached is compared with step-time-regression's test
(derive/shift.py): one-sided Mann-Whitney U in the direction that is worse, and a minimum relative
effect. Within an axis the eval family decides when it can (it is the better signal); the training
family is shown beside it. Different trainer kinds, no common metric, or too few values in the
window make the comparison "inconclusive" rather than a guess.
"""

from __future__ import annotations

from typing import Any

from trace_doctor.derive.quality_series import (
    FAMILIES,
    KL_AXES,
    PRIMARY_AXES,
    Family,
    batch_difference,
    batch_shape,
    final_window,
    in_window,
    numeric_keys,
    series,
)
from trace_doctor.derive.shift import compare_samples
from trace_doctor.model import Finding, QualityComparison
from trace_doctor.policy.baseline import QualityRegressionPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import baseline_run, requires

AXIS_WORDS = {
    "reward": "reward dropped",
    "loss": "loss rose",
    "kl_v1": "sampler-trainer KL rose",
    "kl_v2": "sampler-trainer KL rose",
    "entropy": "entropy collapsed",
}


def _min_effect(axis: str, t) -> float:
    return {
        "reward": t.min_reward_drop,
        "loss": t.min_loss_rise,
        "kl_v1": t.min_kl_rise,
        "kl_v2": t.min_kl_rise,
        "entropy": t.min_entropy_drop,
    }[axis]


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _compare_family(family: Family, cand_ctx, base_ctx, t, max_stable_kl: float) -> dict[str, Any] | None:
    """One family's comparison, or None when neither run logs it."""
    cand_key = family.pick(numeric_keys(cand_ctx.run.steps))
    base_key = family.pick(numeric_keys(base_ctx.run.steps))
    if cand_key is None and base_key is None:
        return None
    entry: dict[str, Any] = {
        "family": family.name,
        "axis": family.axis,
        "worse": family.worse,
        "key_baseline": base_key,
        "key_candidate": cand_key,
        "window": None,
        "statistics": None,
        "min_relative_effect": _min_effect(family.axis, t),
    }

    def inconclusive(why: str) -> dict[str, Any]:
        return {**entry, "verdict": "inconclusive", "message": f"{family.name}: {why}"}

    if cand_key is None or base_key is None:
        missing = "candidate" if cand_key is None else "baseline"
        return inconclusive(f"only the {'baseline' if missing == 'candidate' else 'candidate'} logs it")
    models = (base_ctx.run.meta.model_name, cand_ctx.run.meta.model_name)
    if family.same_model and all(models) and models[0] != models[1]:
        return inconclusive(f"models differ ({models[0]} vs {models[1]}): per-token values are not comparable")
    if family.per_batch:
        differ = batch_difference(batch_shape(base_ctx.run.meta.config), batch_shape(cand_ctx.run.meta.config))
        if differ:
            return inconclusive(
                f"batches differ ({differ}): each step's training value is measured on different prompts, "
                "so only an eval on a fixed set compares the runs"
            )
    absolute = family.axis in KL_AXES  # v1 can be negative; its size is what drifts
    base, cand = (
        series(base_ctx.run.steps, base_key, absolute=absolute),
        series(cand_ctx.run.steps, cand_key, absolute=absolute),
    )
    if not base or not cand:
        return inconclusive("no finite value in " + ("the baseline" if not base else "the candidate"))
    window = final_window(base, cand, t.final_share, min_points=int(t.min_points), max_share=t.max_window_share)
    entry["window"] = window.to_dict()
    base_x, cand_x = in_window(base, window), in_window(cand, window)
    shift = compare_samples(cand_x, base_x, worse=family.worse, min_n=int(t.min_points))
    entry["statistics"] = {
        "n_baseline": shift.n_baseline,
        "n_candidate": shift.n_candidate,
        "median_baseline": shift.median_baseline,
        "median_candidate": shift.median_candidate,
        "u": shift.u,
        "p": shift.p,
        "effect": shift.effect,
        "alpha": t.alpha,
    }
    span = f"steps {window.first}-{window.last}"
    if shift.p is None:
        return inconclusive(
            f"too few values in the final window ({span}): baseline {shift.n_baseline}, candidate "
            f"{shift.n_candidate}, at least {int(t.min_points)} each needed"
        )
    change = f"{-shift.effect if family.worse == 'lower' else shift.effect:+.1%}" if shift.effect is not None else "n/a"
    text = (
        f"{family.name} `{cand_key}` final median {_number(shift.median_baseline)} -> "
        f"{_number(shift.median_candidate)} ({change}; Mann-Whitney U={shift.u:.1f}, one-sided p={shift.p:.3g}, "
        f"n={shift.n_baseline} vs {shift.n_candidate}, {span})"
    )
    regressed = shift.regressed(t.alpha, entry["min_relative_effect"])
    why_not = [] if shift.significant(t.alpha) else [f"p >= {t.alpha}"]
    if shift.effect is None:
        why_not.append("the baseline's median is 0: no relative change")
    elif shift.effect <= 0:
        why_not.append("not worse")
    elif not shift.large(entry["min_relative_effect"]):
        why_not.append(f"worse by less than {entry['min_relative_effect']:.0%}")
    if family.axis in KL_AXES and regressed and (shift.median_candidate or 0.0) <= max_stable_kl:
        # A rise that stays inside the stable band is still stable training (cookbook: KL < 0.01).
        regressed = False
        why_not.append(f"still inside the stable band (< {max_stable_kl:g})")
    entry["short"] = f"{family.name} {_number(shift.median_baseline)} -> {_number(shift.median_candidate)} ({change})"
    if family.same_model and not all(models):
        # Without config.json the model is unknown: two different models would make this per-token
        # value incomparable, and nothing here can rule that out.
        sides = [side for side, name in zip(("baseline", "candidate"), models, strict=True) if not name]
        unknown = "the baseline's and the candidate's models are" if len(sides) == 2 else f"the {sides[0]}'s model is"
        text += f"; {unknown} unknown (no config.json): this holds only if both runs trained the same model"
        entry["caveat"] = "model unknown"
    if regressed:
        return {**entry, "verdict": "regression", "message": text}
    return {**entry, "verdict": "no regression", "message": f"{text}: not a regression ({', '.join(why_not)})"}


def _points(entry: dict[str, Any]) -> int:
    stats = entry["statistics"] or {}
    return min(stats.get("n_baseline", 0), stats.get("n_candidate", 0))


def _decisive(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per axis: its first conclusive family (eval before training); when none is, the one
    with the most values in its window (the closest to a judgement, so the message says why)."""
    chosen: dict[str, dict[str, Any]] = {}
    for entry in entries:
        current = chosen.get(entry["axis"])
        if current is None or (
            current["verdict"] == "inconclusive"
            and (entry["verdict"] != "inconclusive" or _points(entry) > _points(current))
        ):
            chosen[entry["axis"]] = entry
    return list(chosen.values())


def compare_quality(cand_ctx, base_ctx, thresholds, max_stable_kl: float) -> QualityComparison:
    """The training-quality comparison: verdict, message and one entry per metric family."""
    base_trainer, cand_trainer = base_ctx.run.meta.trainer, cand_ctx.run.meta.trainer
    families = [f for f in FAMILIES if cand_trainer not in f.not_for and base_trainer not in f.not_for]
    entries = [e for f in families if (e := _compare_family(f, cand_ctx, base_ctx, thresholds, max_stable_kl))]
    if not entries:
        raise NotApplicable("neither run logs a training-quality metric (reward, NLL, KL, entropy)")
    trainers = {"baseline": base_trainer, "candidate": cand_trainer}
    if "unknown" not in (base_trainer, cand_trainer) and base_trainer != cand_trainer:
        for entry in entries:
            entry.update(verdict="inconclusive", message=f"{entry['family']}: trainers differ")
        return QualityComparison(
            verdict="inconclusive",
            message=f"trainer kinds differ (baseline {base_trainer}, candidate {cand_trainer}): not comparable",
            metrics=entries,
            trainers=trainers,
        )
    decisive = _decisive(entries)
    for entry in entries:
        entry["decisive"] = any(entry is d for d in decisive)
    regressed = [e for e in decisive if e["verdict"] == "regression"]
    primary = [e for e in decisive if e["axis"] in PRIMARY_AXES]
    if regressed:
        verdict = "regression"
    elif all(e["verdict"] == "inconclusive" for e in primary or decisive):
        verdict = "inconclusive"
    else:
        verdict = "no regression"
    order = {"regression": 0, "inconclusive": 1, "no regression": 2}
    shown = sorted(decisive, key=lambda e: order[e["verdict"]])
    # The regressed and undecided metrics in full; the ones that held, in a few words.
    undecided = {e["axis"] for e in decisive if e["verdict"] == "inconclusive"}
    # An undecided axis says why for each of its families (eval: too few points; training: batches differ).
    message = "; ".join(
        e["message"]
        for e in sorted(entries, key=lambda e: order[e["verdict"]])
        if (e["decisive"] and e["verdict"] == "regression") or e["axis"] in undecided
    )
    held = [e["short"] for e in shown if e["verdict"] == "no regression"]
    if held:
        message += ("; " if message else "") + "no regression: " + ", ".join(held)
    truncated = next((e["window"] for e in decisive if e["window"] and e["window"]["truncated"]), None)
    if truncated:
        longer = truncated["truncated"]
        message += (
            f" (compared up to step {truncated['last_step']}, where the shorter run ends; the {longer} "
            f"continues to step {truncated[longer + '_last_step']})"
        )
    return QualityComparison(verdict=verdict, message=message, metrics=entries, trainers=trainers)


def check(ctx: RuleContext[QualityRegressionPolicy]) -> list[Finding]:
    """One finding per axis (reward, loss, KL, entropy) that is significantly and materially worse."""
    comparison = ctx.quality_comparison  # derived once; the baseline block reads the same record
    if comparison.verdict != "regression":
        return ctx.passed(comparison.message)
    found: list[Finding] = []
    reported: set[str] = set()
    for entry in comparison.regressed():
        # Both KL estimators regressing is one problem: one finding, the other estimator as context.
        what = "kl" if entry["axis"] in KL_AXES else entry["axis"]
        if what in reported:
            continue
        reported.add(what)
        stats, window = entry["statistics"], entry["window"]
        related = KL_AXES if what == "kl" else (entry["axis"],)
        context = [e["message"] for e in comparison.metrics if e["axis"] in related and e is not entry]
        found.append(
            ctx.finding(
                severity="error",
                title=f"Training quality regressed against the baseline: {AXIS_WORDS[entry['axis']]}",
                message=entry["message"] + "." + (f" Also: {'; '.join(context)}." if context else ""),
                fix=(
                    "Diff the candidate's config and code against the baseline's (learning rate, renderer, "
                    "loss, KL penalty, sampling settings, data) and read the candidate's own training-quality "
                    "findings: they often name the change."
                ),
                steps=list(range(window["first_step"], window["last_step"] + 1)),
                evidence={
                    "family": entry["family"],
                    "key_baseline": entry["key_baseline"],
                    "key_candidate": entry["key_candidate"],
                    "window": window,
                    "statistics": stats,
                    "min_relative_effect": entry["min_relative_effect"],
                },
                # Unknown models cap it: the same numbers from two different models mean nothing.
                confidence="high" if stats["p"] < stats["alpha"] / 10 and "caveat" not in entry else "medium",
                fingerprint=f"quality-regression:{what}",
            )
        )
    return found


register(
    Rule(
        slug="quality-regression",
        code="TD403",
        title="Training quality worse than the baseline",
        severity="error",
        needs="--baseline PATH; a training-quality metric in both runs (reward, NLL, teacher KL, KL, entropy)",
        docs=RuleDocs(
            what=(
                "Compares the final window of training (the last quarter of the steps both runs reached) "
                "of each quality metric both runs log: eval and training reward (lower is worse), eval / "
                "training NLL and distillation's teacher KL (higher is worse), sampler-trainer KL (higher "
                "is worse, and only above the stable band) and entropy (lower is worse: collapse). The "
                "test is step-time-regression's: one-sided Mann-Whitney U and a minimum relative effect. "
                "An eval metric decides over the training one when it has enough points."
            ),
            why=(
                "A change that speeds a run up but makes it learn less (a lower final reward, a collapsed "
                "policy, a sampler that no longer matches the trainer) is a regression CI should catch "
                "before the run is launched at scale. A shorter candidate is compared at the step it "
                "reached; too few points, different trainer kinds or no common metric give 'inconclusive'."
            ),
            evidence=(
                "the baseline block's `quality`: per metric the keys in each run, the window (first/last "
                "step, which run was cut), medians, U, p, the worse-signed relative effect, the verdict."
            ),
            fix=(
                "Diff config and code against the baseline; the candidate's own training-quality findings "
                "(kl-drift, entropy-collapse, constant-reward-groups, ...) usually name the cause."
            ),
        ),
        check=check,
        policy=QualityRegressionPolicy,
        stage="comparison",
        panels=("reward", "kl", "entropy"),
        shared=("max_stable_kl",),
        requires=(requires("needs --baseline PATH", baseline_run()),),
        baseline_only=True,
        tags=("regression", "baseline", "quality"),
    )
)
