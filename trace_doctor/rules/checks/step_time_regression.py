"""TD401 step-time-regression: the candidate's steady steps are slower than the baseline's.

Runs only with `--baseline` (compare.py calls it with a BaselineContext). Each run is cut at its
own warm-up boundary; the steady samples are compared with derive/shift.py's one-sided
Mann-Whitney U test *and* a minimum relative effect, so a significant-but-tiny or a
large-but-noisy change does not fire.
Structural signals (cycles per step, each run's clock cycle, per-rule finding counts such as
sequential waits) are reported beside the test to tell a slower service from slower code.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from trace_doctor.derive.robust import median
from trace_doctor.derive.shift import compare_samples
from trace_doctor.knowledge.tinker import (
    CHECKPOINT_PHASES,
    EVAL_PHASES,
    SAVE_FOR_SAMPLING_CALLS,
    SAVE_SUBMIT_CALLS,
    TRAINING_SUBMIT_CALLS,
)
from trace_doctor.model import Finding, StepTimeComparison
from trace_doctor.policy.baseline import StepTimeRegressionPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import baseline_run, requires

# Breakdown parts in reading order. Each top-level phase (a cookbook timer name) is added into the
# part it belongs to; a phase not listed here (e.g. RL `sampling`) is a part of its own.
PHASE_GROUPS: dict[str, tuple[str, ...]] = {
    "get_batch": ("get_batch",),
    "submission": (
        "submit_batch",
        *TRAINING_SUBMIT_CALLS,
        "prepare_minibatch",
        "assemble_training_data",
    ),
    "waits": (
        "step",
        "finish_batch",
        "train_step",
        "train",
        "do_train_step_and_get_sampling_client",
        "do_train_step_streaming_and_get_sampling_client",
        "compute_full_batch_metrics_and_get_sampling_client",
    ),
    "evals": EVAL_PHASES,
    "checkpoints": (
        *CHECKPOINT_PHASES,
        "save_checkpoint_and_get_sampling_client",
        *SAVE_FOR_SAMPLING_CALLS,
        *SAVE_SUBMIT_CALLS,
    ),
}
GROUP_OF = {phase: group for group, phases in PHASE_GROUPS.items() for phase in phases}
UNTIMED = "untimed"
OTHER = "other/interaction"


def _steady(ctx: RuleContext[StepTimeRegressionPolicy]) -> pl.DataFrame:
    split = ctx.warmup
    if split is None or split.steady is None:
        return pl.DataFrame()
    return split.steady


def _cycle(ctx: RuleContext[StepTimeRegressionPolicy]) -> tuple[float | None, str | None]:
    """The run's clock-cycle estimate in seconds and its confidence, or (None, None)."""
    try:
        cycle = ctx.clock_cycle
    except Exception:  # noqa: BLE001 - no cycle estimate is a normal state: wall time stays the measure
        return None, None
    seconds = getattr(cycle, "seconds", None)
    if isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0:
        return float(seconds), getattr(cycle, "confidence", None)
    return None, None


def _values(frame: pl.DataFrame, column: str) -> list[float]:
    if frame.is_empty() or column not in frame.columns:
        return []
    return [float(v) for v in frame[column].drop_nulls().to_list() if math.isfinite(float(v))]


def _grouped_phases(*frames: pl.DataFrame) -> dict[str, list[str]]:
    """Breakdown part -> the `phase:<name>` columns summed into it, parts in reading order."""
    columns = sorted({c for f in frames for c in f.columns if c.startswith("phase:")})
    groups: dict[str, list[str]] = {}
    for column in columns:
        phase = column.split(":", 1)[1]
        groups.setdefault(GROUP_OF.get(phase, phase), []).append(column)
    order = [g for g in PHASE_GROUPS if g in groups] + sorted(g for g in groups if g not in PHASE_GROUPS)
    return {g: groups[g] for g in order}


def _part_values(frame: pl.DataFrame, columns: list[str]) -> list[float]:
    """Per-step seconds of a breakdown part: the sum of its phases in each row that has any."""
    present = [c for c in columns if c in frame.columns]
    if frame.is_empty() or not present:
        return []
    summed = frame.select(
        pl.when(pl.any_horizontal([pl.col(c).is_not_null() for c in present]))
        .then(pl.sum_horizontal([pl.col(c) for c in present]))
        .otherwise(None)
        .alias("part")
    )
    return _values(summed, "part")


def phase_breakdown(base: pl.DataFrame, cand: pl.DataFrame) -> list[dict[str, Any]]:
    """Change of median step time split into per-phase parts that sum exactly to the total change.

    Each part is the change of that part's per-step median; medians are not additive, so what is
    left over is reported as an explicit "other/interaction" part rather than spread around.
    """
    total_change = (median(_values(cand, "total_s")) or 0.0) - (median(_values(base, "total_s")) or 0.0)
    parts: list[dict[str, Any]] = []
    columns = list(_grouped_phases(base, cand).items()) + [(UNTIMED, ["untimed_s"])]
    for name, group in columns:
        before, after = median(_part_values(base, group)), median(_part_values(cand, group))
        if before is None and after is None:
            continue
        parts.append(
            {"phase": name, "baseline_s": before, "candidate_s": after, "change_s": (after or 0.0) - (before or 0.0)}
        )
    remainder = total_change - sum(p["change_s"] for p in parts)
    parts.append({"phase": OTHER, "baseline_s": None, "candidate_s": None, "change_s": remainder})
    for part in parts:
        part["share_of_change"] = part["change_s"] / total_change if total_change else None
    return parts


def compare_step_times(cand_ctx, base_ctx, thresholds: StepTimeRegressionPolicy) -> StepTimeComparison:
    """The step-time comparison: verdict, statistics, breakdown and structural signals."""
    cand, base = _steady(cand_ctx), _steady(base_ctx)
    cand_s, base_s = _values(cand, "total_s"), _values(base, "total_s")
    if not cand_s and not base_s:
        raise NotApplicable("neither run has per-step times (time/total, timing spans or trace)")
    # Structural signals beside wall time: steps measured in each run's own service clock cycles
    # (a slower shared service stretches seconds, not cycles). Each run's cycle is estimated
    # independently from its waits, which can lock onto a multiple of the true cycle, so they
    # explain the verdict rather than decide it.
    (cand_cycle, cand_conf), (base_cycle, base_conf) = _cycle(cand_ctx), _cycle(base_ctx)
    structural = {
        "clock_cycle_s": {"baseline": base_cycle, "candidate": cand_cycle},
        "clock_cycle_confidence": {"baseline": base_conf, "candidate": cand_conf},
        "cycles_per_step": {
            "baseline": median([v / base_cycle for v in base_s]) if base_cycle and base_s else None,
            "candidate": median([v / cand_cycle for v in cand_s]) if cand_cycle and cand_s else None,
        },
        "warmup_steps": {
            "baseline": int(base_ctx.warmup.warmup_steps) if base_ctx.warmup is not None else 0,
            "candidate": int(cand_ctx.warmup.warmup_steps) if cand_ctx.warmup is not None else 0,
        },
    }
    unit = "s"
    cand_x, base_x = cand_s, base_s
    stats: dict[str, Any] = {
        "metric": "steady step time",
        "unit": unit,
        "n_baseline": len(base_x),
        "n_candidate": len(cand_x),
        "median_baseline": median(base_x),
        "median_candidate": median(cand_x),
        "median_baseline_s": median(base_s),
        "median_candidate_s": median(cand_s),
        "u": None,
        "p": None,
        "effect": None,
        "alpha": thresholds.alpha,
        "min_relative_effect": thresholds.min_relative_effect,
    }
    minimum = int(thresholds.min_steady_steps)
    shift = compare_samples(cand_x, base_x, worse="higher", min_n=minimum)
    if shift.p is None:
        short = "candidate" if len(cand_x) < minimum else "baseline"
        return StepTimeComparison(
            verdict="inconclusive",
            message=(
                f"too few steady steps to compare: baseline {len(base_x)}, candidate {len(cand_x)} "
                f"(the {short} needs at least {minimum} after its warm-up)"
            ),
            statistics=stats,
            breakdown=[],
            structural=structural,
        )
    effect = shift.effect
    stats.update(u=shift.u, p=shift.p, effect=effect)
    significant = shift.significant(thresholds.alpha)
    large = shift.large(thresholds.min_relative_effect)
    verdict = "regression" if significant and large else "no regression"
    change = f"{effect:+.1%}" if effect is not None else "n/a"
    message = (
        f"median {stats['metric']} {stats['median_baseline']:.3g} -> {stats['median_candidate']:.3g} {unit} "
        f"({change}; Mann-Whitney U={stats['u']:.1f}, one-sided p={stats['p']:.3g}, "
        f"n={len(base_x)} vs {len(cand_x)})"
    )
    if base_cycle and cand_cycle and abs(cand_cycle / base_cycle - 1) >= thresholds.min_relative_effect:
        message += (
            f"; the estimated service clock cycle also changed ({base_cycle:.3g} -> {cand_cycle:.3g} s), "
            "so part of the change may be the service rather than the code"
        )
    if verdict == "no regression":
        why = [] if significant else [f"p >= {thresholds.alpha}"]
        why += [] if large else [f"effect below {thresholds.min_relative_effect:.0%}"]
        message += f": not a regression ({', '.join(why)})"
    return StepTimeComparison(
        verdict=verdict,
        message=message,
        statistics=stats,
        breakdown=phase_breakdown(base, cand),
        structural=structural,
    )


def _explain(breakdown: list[dict[str, Any]]) -> str:
    movers = sorted((p for p in breakdown if abs(p["change_s"]) > 0), key=lambda p: -abs(p["change_s"]))
    return ", ".join(f"{p['phase']} {p['change_s']:+.3g} s" for p in movers[:4]) or "no phase changed"


def check(ctx: RuleContext[StepTimeRegressionPolicy]) -> list[Finding]:
    """Fire when the candidate's steady steps are significantly and materially slower."""
    comparison = ctx.step_time_comparison  # derived once; the baseline block reads the same record
    if comparison.verdict != "regression":
        return ctx.passed(comparison.message)
    stats = comparison.statistics
    steady = _steady(ctx)
    per_step = (stats["median_candidate_s"] or 0.0) - (stats["median_baseline_s"] or 0.0)
    wall = ctx.run_wall_s
    lost = per_step * len(steady) if per_step > 0 else None
    return [
        ctx.finding(
            severity="error",
            title=f"Steady step time regressed {stats['effect']:+.0%} against the baseline",
            message=f"{comparison.message}. Change per step by phase: {_explain(comparison.breakdown)}.",
            fix=(
                "Look at the phases that grew (breakdown in the baseline block): a grown 'waits' part "
                "usually means lost pipelining, 'get_batch' slower data loading, 'untimed' new "
                "client-side work between timed sections."
            ),
            steps=[int(s) for s in steady["step"].to_list()] if "step" in steady.columns else [],
            evidence={
                "statistics": stats,
                "breakdown": comparison.breakdown,
                "structural": comparison.structural,
            },
            seconds_lost=lost,
            fraction_of_wall=(lost / wall) if lost and wall else None,
            confidence="high" if stats["p"] < stats["alpha"] / 10 else "medium",
            fingerprint="step-time-regression",
        )
    ]


register(
    Rule(
        slug="step-time-regression",
        code="TD401",
        title="Steady step time worse than the baseline",
        severity="error",
        needs="--baseline PATH; per-step times in both runs (metrics time/total, timing spans or trace)",
        docs=RuleDocs(
            what=(
                "Compares the steady-state step times of the candidate run with the baseline's, each "
                "cut at its own warm-up boundary, with a one-sided Mann-Whitney U test and a minimum "
                "relative effect. Reports cycles per step and the service clock cycle of both runs beside it."
            ),
            why=(
                "A change that makes each step 10% slower makes the whole training run 10% longer; "
                "CI catches it before the run is launched at scale. Too few steady steps give an "
                "'inconclusive' verdict instead of a guess."
            ),
            evidence=(
                "baseline block of the JSON document: U, p, relative effect, medians, n, and an additive "
                "per-phase breakdown of the change in median step time (parts sum to the total change)."
            ),
            fix=(
                "Read the breakdown: the phase that grew is where to look (waits = pipelining, "
                "get_batch = data loading, untimed = client-side work)."
            ),
        ),
        check=check,
        policy=StepTimeRegressionPolicy,
        stage="comparison",
        shared=("clock_cycle_s", "max_warmup_share"),
        requires=(requires("needs --baseline PATH", baseline_run()),),
        baseline_only=True,
        tags=("regression", "baseline"),
    )
)
