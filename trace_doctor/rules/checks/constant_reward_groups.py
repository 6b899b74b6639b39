"""TD203 constant-reward-groups: most groups of a step got one reward for every sample (no advantage).

Sources, best first (FORMATS.md 1.3, 3.5, 3.6):
1. rollout summaries: per (iteration, group) the exact rewards, written before the constant groups are
   dropped, so the only honest source in sync mode with `remove_constant_reward_groups=True`;
2. `env/*/by_group/frac_all_good + frac_all_bad` (= 1 - frac_mixed), per step;
   a custom loop's `groups_filtered` / `groups_kept` counters (the groups it dropped as constant);
3. the cookbook's `All rewards are uniform. There will be no gradient` and `Batch N: all groups failed
   or filtered, skipping batch` warnings;
and config `group_size = 1`, where every group is constant by construction.
"""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.rl_quality import (
    constant_shares_from_rollouts,
    median,
    series,
    training_column,
)
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.ingest.parsers.config import find_setting
from trace_doctor.model import Finding
from trace_doctor.policy.rl_quality import ConstantRewardGroupsPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.checks.renderer_kl_step0 import run_label
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, table, values_in

MAX_LISTED_STEPS = 50
UNIFORM_REWARDS = "All rewards are uniform"
SKIPPED_BATCH_KIND = "skipped-batch"


def is_distillation(ctx: RuleContext[ConstantRewardGroupsPolicy]) -> bool:
    """On-policy distillation logs env/* keys but has no env reward: every group is "all bad" there."""
    if ctx.run.meta.trainer == "distillation":
        return True
    return any(c == "teacher_kl" or c.startswith("teacher_kl/") for c in ctx.run.steps.columns)


def _group_size(config: dict) -> int | None:
    value = find_setting(config, "group_size")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _from_metrics(rows: pl.DataFrame) -> tuple[pl.DataFrame, str] | None:
    """Per-step (step, constant, all_good, all_bad) from the by_group fractions, and the key used."""
    good_key = training_column(rows.columns, "by_group/frac_all_good")
    bad_key = training_column(rows.columns, "by_group/frac_all_bad")
    mixed_key = training_column(rows.columns, "by_group/frac_mixed")
    if good_key and bad_key:
        good, bad = series(rows, good_key), series(rows, bad_key)
        frame = good.join(bad, on="step", suffix="_bad").select(
            "step", pl.col("value").alias("all_good"), pl.col("value_bad").alias("all_bad")
        )
        frame = frame.with_columns((pl.col("all_good") + pl.col("all_bad")).alias("constant"))
        return frame, good_key.rsplit("/", 1)[0] + "/frac_all_good + frac_all_bad"
    if mixed_key:
        frame = series(rows, mixed_key).select(
            "step",
            (1.0 - pl.col("value")).alias("constant"),
            pl.lit(None, dtype=pl.Float64).alias("all_good"),
            pl.lit(None, dtype=pl.Float64).alias("all_bad"),
        )
        return frame, f"1 - {mixed_key}"
    return None


def _from_filter_counters(rows: pl.DataFrame) -> tuple[pl.DataFrame, str] | None:
    """A custom loop's counters of the groups it dropped as constant and the ones it kept."""
    filtered = training_column(rows.columns, "groups_filtered")
    kept = training_column(rows.columns, "groups_kept")
    if not (filtered and kept):
        return None
    frame = series(rows, filtered).join(series(rows, kept), on="step", suffix="_kept")
    frame = frame.filter((pl.col("value") + pl.col("value_kept")) > 0).select(
        "step",
        (pl.col("value") / (pl.col("value") + pl.col("value_kept"))).alias("constant"),
        pl.lit(None, dtype=pl.Float64).alias("all_good"),
        pl.lit(None, dtype=pl.Float64).alias("all_bad"),
    )
    return frame, f"{filtered} / ({filtered} + {kept})"


def _log_lines(ctx: RuleContext[ConstantRewardGroupsPolicy]) -> tuple[int, int]:
    """(`All rewards are uniform` warnings, `skipping batch` warnings) in the run's logs."""
    events = ctx.run.log_events
    if events.is_empty():
        return 0, 0
    uniform = events.filter(pl.col("message").str.contains(UNIFORM_REWARDS, literal=True)).height
    skipped = events.filter(pl.col("kind") == SKIPPED_BATCH_KIND).height
    return uniform, skipped


def _onset(shares: list[float], threshold: float, stay: float) -> int | None:
    """Index of the first step above `threshold` from which at least `stay` of the remaining steps stay
    above it (one pass from the end)."""
    above_from = [0] * (len(shares) + 1)
    for i in range(len(shares) - 1, -1, -1):
        above_from[i] = above_from[i + 1] + (shares[i] > threshold)
    for i, value in enumerate(shares):
        if value > threshold and above_from[i] >= stay * (len(shares) - i):
            return i
    return None


def _kind(good: float | None, bad: float | None, dominant: float) -> str:
    if good is None or bad is None or good + bad <= 0:
        return "unknown"
    if good >= dominant * (good + bad):
        return "all-good"
    if bad >= dominant * (good + bad):
        return "all-bad"
    return "both"


def _reward(rows: pl.DataFrame) -> pl.DataFrame:
    key = training_column(rows.columns, "reward/total")
    return series(rows, key) if key else pl.DataFrame(schema={"step": pl.Int64, "value": pl.Float64})


def _group_size_one(ctx: RuleContext[ConstantRewardGroupsPolicy], rows: pl.DataFrame) -> list[Finding]:
    steps = sorted(int(s) for s in rows["step"].to_list()) if "step" in rows.columns else []
    return [
        ctx.finding(
            severity="error",
            title="Every group is constant: group_size = 1",
            message=(
                f"config.json sets group_size = 1 ({run_label(ctx.run.meta)}): each group holds one sample, so its "
                "reward is constant by construction, the group-centred advantage is 0 for every sample and the "
                "policy-gradient loss carries no signal on any step."
            ),
            fix="Sample several completions per prompt (group_size 4-16 in the cookbook recipes) and keep "
            "groups_per_batch x group_size near the batch you want.",
            steps=steps[:MAX_LISTED_STEPS],
            evidence={"source": "config", "group_size": 1, "kind": "group-size-1", "constant_share": 1.0},
            fingerprint="constant-reward-groups:group-size-1",
            confidence="high",
        )
    ]


def check(ctx: RuleContext[ConstantRewardGroupsPolicy]) -> list[Finding]:
    if is_distillation(ctx):
        raise NotApplicable(
            "on-policy distillation: there is no env reward, so frac_all_bad = 1 is expected (the signal is teacher_kl)"
        )
    if ctx.run.meta.trainer in ("sl", "dpo"):
        raise NotApplicable(f"a {ctx.run.meta.trainer} run has no reward groups")
    t = ctx.thresholds
    rows = live_training_rows(ctx.run.steps)
    if _group_size(ctx.run.meta.config) == 1:
        return _group_size_one(ctx, rows)

    dropped_before_metrics = (
        ctx.run.meta.trainer_mode in (None, "sync") and ctx.run.meta.config.get("remove_constant_reward_groups") is True
    )
    exact = constant_shares_from_rollouts(ctx.run.rollouts)
    from_metrics = None if rows.is_empty() else (_from_metrics(rows) or _from_filter_counters(rows))
    caveat = ""
    if exact.height >= t.min_steps:
        per_step, source, confidence = exact, "rollout summaries (exact per-group rewards)", "high"
    elif from_metrics is not None and not (dropped_before_metrics and "frac_all" in from_metrics[1]):
        per_step, source = from_metrics
        confidence = "high" if "frac_all" in source else "medium"
        if exact.height:
            # The exported iterations are exact: they replace the metrics' value at those steps.
            per_step = pl.concat(
                [
                    per_step.filter(~pl.col("step").is_in(exact["step"].to_list())),
                    exact.select(per_step.columns),
                ]
            ).sort("step")
            source += f", exact at {exact.height} exported iteration(s)"
    elif exact.height:
        per_step, source, confidence = exact, "rollout summaries (exact per-group rewards)", "medium"
        caveat = f" Only {exact.height} iteration(s) were exported, so the share over the run is an estimate."
    else:
        per_step = None
        source = ""
        confidence = "medium"

    uniform_lines, skipped_lines = _log_lines(ctx)
    if per_step is None:
        return _from_logs_only(ctx, rows, uniform_lines, skipped_lines, dropped_before_metrics)

    per_step = per_step.filter(pl.col("constant").is_not_null() & pl.col("constant").is_finite()).sort("step")
    shares = per_step["constant"].to_list()
    if len(shares) < min(t.min_steps, 2) or (len(shares) < t.min_steps and exact.height == 0):
        raise NotApplicable(f"only {len(shares)} step(s) with a constant-group share (needs {t.min_steps})")
    above = per_step.filter(pl.col("constant") > t.min_constant_share)
    share_of_steps = above.height / len(shares)
    overall = sum(shares) / len(shares)
    if share_of_steps < t.min_share_of_steps or above.height < min(t.min_steps, len(shares)) // 2:
        lines = f"; {uniform_lines} `All rewards are uniform` line(s)" if uniform_lines else ""
        return ctx.passed(
            f"constant-reward groups average {overall:.0%} of a step ({source}); {above.height} of {len(shares)} "
            f"step(s) above {t.min_constant_share:.0%}{lines}"
        )

    good = per_step["all_good"].drop_nulls()
    bad = per_step["all_bad"].drop_nulls()
    kind = _kind(
        float(good.mean()) if good.len() else None, float(bad.mean()) if bad.len() else None, t.dominant_kind_share
    )
    onset = _onset(shares, t.min_constant_share, t.min_share_of_steps)
    steps = [int(s) for s in above["step"].to_list()]
    onset_step = int(per_step["step"][onset]) if onset is not None else steps[0]
    reward = _reward(rows)
    # The first step's reward is the starting model's score on the task.
    first_reward = float(reward["value"][0]) if reward.height else None
    onset_reward = (
        median(reward.filter(pl.col("step") >= onset_step)["value"].head(3).to_list()) if reward.height else None
    )
    learned = first_reward is not None and onset_reward is not None and onset_reward - first_reward >= t.min_reward_gain
    late_onset = onset is not None and onset >= t.late_onset_share * len(shares)
    wasted = len(shares) - (onset or 0)
    severity, what, fix = _reading(kind, learned, late_onset, first_reward, onset_reward, onset_step, wasted)
    late = shares[onset:] if onset is not None else shares
    message = (
        f"{median(late):.0%} of the groups per step had one reward for every sample (median from step "
        f"{onset_step}; {above.height} of {len(shares)} steps above {t.min_constant_share:.0%}), from "
        f"{source}. {what}"
    )
    if dropped_before_metrics and "rollout" in source:
        message += (
            " remove_constant_reward_groups=True drops these groups before metrics.jsonl is computed, so its "
            "frac_mixed reads ~1 here: the rollout summaries are the honest count."
        )
    if uniform_lines or skipped_lines:
        message += _log_note(uniform_lines, skipped_lines)
    message += caveat
    return [
        ctx.finding(
            severity=severity,
            title=_title(kind, learned),
            message=message,
            fix=fix,
            steps=steps[:MAX_LISTED_STEPS],
            evidence={
                "source": source,
                "kind": kind,
                "constant_share_median": round(median(late), 4),
                "constant_share_mean": round(overall, 4),
                "all_good_mean": round(float(good.mean()), 4) if good.len() else None,
                "all_bad_mean": round(float(bad.mean()), 4) if bad.len() else None,
                "steps_above": above.height,
                "steps_measured": len(shares),
                "onset_step": onset_step,
                "reward_first": first_reward,
                "reward_at_onset": onset_reward,
                "saturated_after_learning": learned,
                "uniform_reward_lines": uniform_lines,
                "skipped_batch_lines": skipped_lines,
            },
            fingerprint=f"constant-reward-groups:{kind}",
            confidence=confidence,
        )
    ]


def _title(kind: str, learned: bool) -> str:
    if kind == "all-good":
        return "Reward saturated: most groups are all-correct" if learned else "Most groups are all-correct: too easy"
    if kind == "all-bad":
        return "Most groups get no reward: too hard or a broken reward"
    return "Most groups have constant reward: no learning signal"


def _reading(
    kind: str,
    learned: bool,
    late_onset: bool,
    first: float | None,
    at_onset: float | None,
    onset_step: int,
    wasted: int,
) -> tuple[str, str, str]:
    """(severity, what it means, fix) for the kind of constant groups, and when they took over."""
    if kind == "all-good" and learned and not late_onset:
        return (
            "warning",
            f"They are all-good: the reward rose from {first:.2f} to {at_onset:.2f} by step {onset_step} and "
            f"saturated — the task was learned within a few steps, and the {wasted} steps after that trained on "
            "little but zero-advantage groups.",
            "Stop at the saturation (far fewer steps for this task), or move to harder prompts / a curriculum to "
            "keep learning; remove_constant_reward_groups=True saves the train step, not the rollouts.",
        )
    if kind == "all-good" and learned:
        return (
            "info",
            f"They are all-good: the reward rose from {first:.2f} to {at_onset:.2f} by step {onset_step} and then "
            f"saturated — the task is learned, and the last {wasted} steps train on little but zero-advantage "
            "groups.",
            "Stop the run at the saturation (or pick the checkpoint there); to keep learning, move to harder "
            "prompts or a curriculum.",
        )
    if kind == "all-good":
        return (
            "warning",
            "They are all-good (reward at or above 0.5 for every sample): the prompts are too easy for this model "
            "or the reward is saturated, so those rollouts give no gradient.",
            "Use harder prompts (filter out ones the base model always solves), raise difficulty with a "
            "curriculum, or stop earlier; remove_constant_reward_groups=True saves the train step, not the rollouts.",
        )
    if kind == "all-bad":
        return (
            "warning",
            "They are all-bad (every sample below 0.5): the prompts are too hard for this model, or the reward "
            "never pays (a grader, parser or format check that always fails).",
            "Read a few transcripts (iteration_*/train.html) to check the grader and the answer format; if the "
            "reward is right, use easier prompts, a larger group_size, or SFT warm-up first.",
        )
    if kind == "unknown":
        return (
            "warning",
            "This source does not say whether they are all-good (too easy) or all-bad (too hard / broken reward); "
            "the rollout summaries or the by_group metrics would.",
            "Read a few transcripts to see which: all-good -> harder prompts or stop earlier; all-bad -> check the "
            "grader and answer format, then easier prompts or SFT warm-up.",
        )
    return (
        "warning",
        "The constant groups are split between all-good and all-bad: part of the prompts is too easy and part "
        "too hard.",
        "Filter the prompt set to the model's range (drop always-solved and never-solved prompts) or raise "
        "group_size so that a group has a chance to disagree.",
    )


def _log_note(uniform: int, skipped: int) -> str:
    parts = []
    if uniform:
        parts.append(f"{uniform} `All rewards are uniform. There will be no gradient` warning(s)")
    if skipped:
        parts.append(f"{skipped} `all groups failed or filtered, skipping batch` warning(s)")
    return " The log has " + " and ".join(parts) + "."


def _from_logs_only(
    ctx: RuleContext[ConstantRewardGroupsPolicy], rows: pl.DataFrame, uniform: int, skipped: int, dropped: bool
) -> list[Finding]:
    t = ctx.thresholds
    if uniform + skipped < t.min_log_lines:
        if dropped:
            raise NotApplicable(
                "remove_constant_reward_groups=True computes frac_mixed after the drop and no rollout summaries "
                "were found: the constant share is not measurable"
            )
        raise NotApplicable("no by_group/frac_* metrics, rollout summaries or constant-reward log lines")
    steps = rows.height
    of_steps = f" out of {steps} logged steps" if steps else ""
    return [
        ctx.finding(
            title="Whole steps with constant reward in every group",
            message=(
                f"The log has {uniform + skipped} warning(s) that a whole batch had no learning signal"
                f"{of_steps}:{_log_note(uniform, skipped)[12:]} Each is a step where every group got one reward "
                "per sample (or was filtered out)."
            ),
            fix="Check the reward on a few transcripts, then the prompt difficulty (too easy: all-good; too hard "
            "or broken grader: all-bad); export rollout summaries (rollout_json_export=True) for exact counts.",
            evidence={"source": "logs", "uniform_reward_lines": uniform, "skipped_batch_lines": skipped},
            fingerprint="constant-reward-groups:logs",
            confidence="medium",
        )
    ]


RULE = register(
    Rule(
        slug="constant-reward-groups",
        code="TD203",
        title="Constant-reward groups: no learning signal",
        severity="warning",
        needs="RL metrics.jsonl (env/*/by_group/frac_*), rollout summaries, logs.log, or config.json",
        docs=RuleDocs(
            what=(
                "RL: a large, sustained share of groups in which every sample got the same reward (the cookbook's "
                "frac_all_good + frac_all_bad = 1 - frac_mixed; exact from the rollout summaries), the "
                "`All rewards are uniform` / skipped-batch warnings, or group_size = 1. Says whether the constant "
                "groups are all-good (too easy / saturated; info when the reward rose first and saturated late) "
                "or all-bad (too hard / broken reward). Not applicable to on-policy distillation (no env reward)."
            ),
            why=(
                "Advantages are centred per group, so a constant group has zero advantage: its rollouts cost "
                "sampling time and give no gradient (Tinker notes; cookbook remove_constant_reward_groups)."
            ),
            evidence=(
                "Per step: the share of constant groups and of all-good / all-bad ones, from rollout summaries "
                "(written before constant groups are dropped, so exact even with remove_constant_reward_groups), "
                "else env/*/by_group/frac_*; onset step, reward before and at the onset; warning counts in logs.log."
            ),
            fix=(
                "All-good: harder prompts or stop earlier. All-bad: check the grader and answer format on "
                "transcripts, then easier prompts / SFT warm-up. group_size = 1: sample several completions per prompt."
            ),
        ),
        check=check,
        policy=ConstantRewardGroupsPolicy,
        stage="training quality",
        panels=("groups",),
        requires=(
            requires(
                "no RL signal: no by_group metrics, rollout summaries, logs or config",
                values_in("steps", "*by_group/frac_*", "*groups_filtered"),
                table("rollouts"),
                table("log_events"),
                values_in("steps", "*reward/total"),
            ),
        ),
        tags=("training", "rl", "metrics"),
    )
)
