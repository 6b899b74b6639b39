"""TD207 truncated-samples: a large share of the samples stopped at `max_tokens`.

Sources, best first: `env/*/stop/max_tokens` (cookbook >= 2026-07, FORMATS.md 1.3), the rollout
summaries (the last turn's stop reason, or its ac_len reaching config `max_tokens`, FORMATS 3.6), and
the weakest, `env/*/ac_tokens_per_turn` close to config `max_tokens` (a mean near the cap implies most
samples are at or near it; lower confidence).
"""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.rl_quality import (
    Windows,
    median,
    series,
    training_column,
    truncation_from_rollouts,
)
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.ingest.parsers.config import find_setting
from trace_doctor.model import Finding
from trace_doctor.policy.rl_quality import TruncatedSamplesPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.checks.renderer_kl_step0 import run_label
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, table, values_in

MAX_LISTED_STEPS = 50
# Renderer names that turn thinking off (cookbook renderers: `qwen3_disable_thinking`, ...).
NO_THINKING_MARKERS = ("disable_thinking", "no_thinking", "nothink", "instruct")
# Families whose renderer thinks by default (the debug guide's renderer table).
THINKING_FAMILIES = ("qwen3", "deepseekv3_thinking", "kimi_k2", "gpt_oss", "nemotron")


def max_tokens_of(config: dict) -> int | None:
    value = find_setting(config, "max_tokens")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return int(value)


def thinking_renderer(name: str | None) -> bool:
    """Whether the renderer thinks before answering (qwen3 without disable_thinking, ...)."""
    if not name:
        return False
    lowered = name.lower()
    if any(marker in lowered for marker in NO_THINKING_MARKERS):
        return False
    return "thinking" in lowered or lowered.startswith(THINKING_FAMILIES)


def _stop_series(rows: pl.DataFrame) -> tuple[pl.DataFrame, str] | None:
    key = training_column(rows.columns, "stop/max_tokens")
    if key is None:
        return None
    frame = series(rows, key)
    return (frame, key) if frame.height else None


def check(ctx: RuleContext[TruncatedSamplesPolicy]) -> list[Finding]:
    if ctx.run.meta.trainer in ("sl", "dpo"):
        raise NotApplicable(f"a {ctx.run.meta.trainer} run samples nothing")
    t = ctx.thresholds
    rows = live_training_rows(ctx.run.steps)
    cap = max_tokens_of(ctx.run.meta.config)
    stop = _stop_series(rows) if not rows.is_empty() else None
    exact = truncation_from_rollouts(ctx.run.rollouts, cap)
    if stop is not None:
        per_step, source, confidence, weak = stop[0], f"`{stop[1]}`", "high", False
    elif exact.height:
        per_step = exact.select("step", "value")
        source = f"rollout summaries ({int(exact['samples'].sum()):,} samples, {exact.height} iteration(s))"
        confidence, weak = ("high" if exact.height >= t.min_steps_above else "medium"), False
    else:
        length_key = training_column(rows.columns, "ac_tokens_per_turn") if not rows.is_empty() else None
        if length_key is None:
            raise NotApplicable("no stop/max_tokens metric, rollout summaries or ac_tokens_per_turn")
        if cap is None:
            raise NotApplicable(f"`{length_key}` is logged but config.json gives no max_tokens to compare with")
        per_step = series(rows, length_key).with_columns(pl.col("value") / cap)
        source = f"`{length_key}` / max_tokens {cap}"
        confidence, weak = "low", True

    if per_step.is_empty():
        raise NotApplicable("no step with a truncation value")
    threshold = t.mean_near_cap if weak else t.min_share
    values = per_step["value"].to_list()
    whole = median(values)
    late_window = Windows.of(per_step, share=t.late_share, min_len=1) if per_step.height >= 2 else None
    late = median(late_window.late) if late_window else whole
    above = per_step.filter(pl.col("value") >= threshold)
    needed = min(t.min_steps_above, per_step.height)
    judged = max(whole, late)
    if judged < threshold or above.height < needed:
        what = "mean completion / max_tokens" if weak else "share stopped at max_tokens"
        return ctx.passed(
            f"{what} median {whole:.0%} (last third {late:.0%}) from {source}; {above.height} step(s) at or above "
            f"{threshold:.0%}"
        )

    rising = late >= threshold > whole
    when = (
        f"rising to {late:.0%} in the last third of the run (median {whole:.0%} overall)"
        if rising
        else (f"median {whole:.0%} of the samples per step")
    )
    if weak:
        head = (
            f"The mean completion is {judged:.0%} of max_tokens ({cap}) on {above.height} of {per_step.height} steps "
            f"({source}): most samples must be at or near the cap (a weaker reading than stop counts)."
        )
    else:
        head = (
            f"Samples stopped at max_tokens{f' ({cap})' if cap else ''}: {when}, {above.height} of "
            f"{per_step.height} steps at or above {threshold:.0%} ({source})."
        )
    renderer = ctx.run.meta.renderer_name
    thinking = thinking_renderer(renderer) and cap is not None and cap <= t.short_thinking_max_tokens
    if thinking:
        head += (
            f" The renderer `{renderer}` thinks before answering and max_tokens is only {cap}: the model spends the "
            "budget in its reasoning and never reaches an answer, so those samples score 0."
        )
    fix = (
        f"Raise max_tokens (a thinking model needs room for its reasoning), or switch to `{renderer}`'s "
        "disable_thinking variant; otherwise shorten the answers the prompt asks for, or penalise length."
        if thinking
        else "Raise max_tokens, or ask for shorter answers in the prompt / penalise overlong samples; check "
        "transcripts (iteration_*/train.html) for repetition loops when lengths grow with training."
    )
    steps = sorted(int(s) for s in above["step"].to_list())
    return [
        ctx.finding(
            title="Many samples are cut at max_tokens",
            message=f"{head} ({run_label(ctx.run.meta)})",
            fix=fix,
            steps=steps[:MAX_LISTED_STEPS],
            evidence={
                "source": source,
                "median_share": round(whole, 4),
                "late_share": round(late, 4),
                "steps_above": above.height,
                "steps_measured": per_step.height,
                "max_tokens": cap,
                "renderer_name": renderer,
                "thinking_renderer_short_budget": thinking,
                "from_mean_length": weak,
            },
            fingerprint="truncated-samples",
            confidence=confidence,
        )
    ]


RULE = register(
    Rule(
        slug="truncated-samples",
        code="TD207",
        title="Truncated samples: completions cut at max_tokens",
        severity="warning",
        needs="RL metrics.jsonl (env/*/stop/max_tokens or ac_tokens_per_turn + config max_tokens) or rollout summaries",
        docs=RuleDocs(
            what=(
                "RL: a large, sustained share of the samples stopped at max_tokens (over the run, or rising in its "
                "last third): from env/*/stop/max_tokens, else the rollout summaries' last turn, else (weaker) "
                "ac_tokens_per_turn close to config max_tokens. Names a thinking renderer with a short budget."
            ),
            why=(
                "A cut sample has no final answer: it scores 0 or is masked, so the reward measures the length cap "
                "more than the task, and the policy learns from broken samples. With a thinking renderer and short "
                "max_tokens the model never reaches an answer."
            ),
            evidence=(
                "Per step: the share stopped at max_tokens (or mean length / max_tokens), its median over the run "
                "and over the last third, the steps above the threshold, max_tokens and renderer_name from config."
            ),
            fix=(
                "Raise max_tokens, or use the renderer's disable_thinking variant; ask for shorter answers or "
                "penalise overlong samples; check transcripts for repetition loops."
            ),
        ),
        check=check,
        policy=TruncatedSamplesPolicy,
        stage="training quality",
        panels=("truncation",),
        requires=(
            requires(
                "no stop/max_tokens, ac_tokens_per_turn or rollout summaries",
                values_in("steps", "*stop/max_tokens", "*ac_tokens_per_turn"),
                table("rollouts"),
            ),
        ),
        tags=("training", "rl", "metrics"),
    )
)
