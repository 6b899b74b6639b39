"""TD210 response-parse-errors: a large share of RL samples the environment could not parse.

Keys (FORMATS.md 1.3, cookbook rl/types.py): `env/<tag>/stop/parse_error` (the share of trajectories
ended by StopReason.PARSE_ERROR, cookbook >= 2026-07), `env/<tag>/parse_error` (the message envs'
per-turn metric) and `env/<tag>/parse_error_masked` (turns a ParseErrorPolicy with mask_error_turns
took out of the loss). Each step is judged on the largest of the shares it logged.
"""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.rl_quality import EVAL_PREFIXES, series
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.knowledge.renderers import judge_renderer
from trace_doctor.model import Finding
from trace_doctor.policy.rl_quality import ResponseParseErrorsPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.checks.renderer_kl_step0 import run_label
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, values_in

MAX_LISTED_STEPS = 50
# The metric names, as the last path component(s) of a training key (`env/all/<name>`).
PARSE_METRICS = ("stop/parse_error", "parse_error", "parse_error_masked")


def _is_metric(column: str, name: str) -> bool:
    """Whether `column` is the metric `name` (`env/<tag>/<name>` or bare); `parse_error` is never the tail of
    `stop/parse_error`."""
    if column != name and not column.endswith("/" + name):
        return False
    return name != "parse_error" or not column.endswith("stop/parse_error")


def parse_error_columns(columns: list[str]) -> dict[str, str]:
    """metric name -> its training column: `env/all/<name>` first, else the first other, never an eval key."""
    found: dict[str, str] = {}
    training = sorted(c for c in columns if not c.startswith(EVAL_PREFIXES))
    for name in PARSE_METRICS:
        preferred = f"env/all/{name}"
        column = preferred if preferred in columns else next((c for c in training if _is_metric(c, name)), None)
        if column is not None:
            found[name] = column
    return found


def check(ctx: RuleContext[ResponseParseErrorsPolicy]) -> list[Finding]:
    if ctx.run.meta.trainer in ("sl", "dpo"):
        raise NotApplicable(f"a {ctx.run.meta.trainer} run samples nothing for an environment to parse")
    t = ctx.thresholds
    rows = live_training_rows(ctx.run.steps)
    columns = parse_error_columns(rows.columns) if not rows.is_empty() else {}
    if not columns:
        raise NotApplicable("no stop/parse_error, parse_error or parse_error_masked metric")
    frames = [series(rows, column).rename({"value": name}) for name, column in columns.items()]
    per_step = frames[0]
    for frame in frames[1:]:
        per_step = per_step.join(frame, on="step", how="full", coalesce=True)
    per_step = per_step.with_columns(pl.max_horizontal(*columns).alias("share")).sort("step")
    per_step = per_step.filter(pl.col("share").is_not_null())
    if per_step.is_empty():
        raise NotApplicable("the parse-error metrics hold no finite value")
    above = per_step.filter(pl.col("share") > t.min_share)
    medians = {columns[name]: round(float(per_step[name].median()), 4) for name in columns if per_step[name].len()}
    summary = ", ".join(f"`{column}` median {value:.1%}" for column, value in medians.items())
    if above.height < t.min_steps_above or above.height < t.min_share_of_steps * per_step.height:
        return ctx.passed(
            f"{summary}; {above.height} of {per_step.height} step(s) above {t.min_share:.0%} unparsed samples"
        )
    worst = above.sort("share").row(-1, named=True)
    meta = ctx.run.meta
    judgement = judge_renderer(meta.model_name, meta.renderer_name) if meta.model_name and meta.renderer_name else None
    if judgement is not None and judgement.verdict in ("other-family", "variant"):
        renderer_note = (
            f" The renderer `{judgement.renderer}` is not among those the cookbook recommends for "
            f"`{judgement.model}` ({', '.join(judgement.recommended)}; see renderer-model-mismatch): the likely cause."
        )
    else:
        renderer_note = ""
    masked = "parse_error_masked" in columns and "stop/parse_error" not in columns and "parse_error" not in columns
    consequence = (
        " They are masked out of the loss (parse_error_masked), so those samples are sampled and thrown away."
        if masked
        else " Each one ends its episode with the failed-parse reward (or is masked out), so it teaches nothing "
        "about the task and drags the reward down."
    )
    message = (
        f"{above.height} of {per_step.height} steps had more than {t.min_share:.0%} of their samples unparsed "
        f"(worst: step {worst['step']}, {worst['share']:.0%}); {summary} ({run_label(meta)}).{consequence}"
        f"{renderer_note}"
    )
    return [
        ctx.finding(
            severity="warning",
            title="Many samples the environment could not parse",
            message=message,
            fix=(
                "Read a few failed samples (iteration_*/train.html, the `parse_errors` logs): if the model writes "
                "its tool calls or answer in another syntax than the parser expects, sample and parse with the "
                "renderer recommended for the model (model_info.get_recommended_renderer_name) and make the system "
                "prompt / tool spec show the format; if the samples were cut at max_tokens first, raise max_tokens "
                "(see truncated-samples)."
            ),
            steps=[int(s) for s in above["step"].to_list()][:MAX_LISTED_STEPS],
            evidence={
                "metrics": list(columns.values()),
                "medians": medians,
                "steps_above": above.height,
                "steps_measured": per_step.height,
                "worst_step": int(worst["step"]),
                "worst_share": round(float(worst["share"]), 4),
                "renderer_name": meta.renderer_name,
                "model_name": meta.model_name,
                "renderer_verdict": judgement.verdict if judgement else None,
            },
            fingerprint="response-parse-errors",
            confidence="high" if "stop/parse_error" in columns or "parse_error" in columns else "medium",
        )
    ]


RULE = register(
    Rule(
        slug="response-parse-errors",
        code="TD210",
        title="Samples the environment could not parse",
        severity="warning",
        needs="metrics.jsonl with env/*/stop/parse_error, env/*/parse_error or env/*/parse_error_masked (RL)",
        docs=RuleDocs(
            what=(
                "A sustained share of RL samples the environment could not parse: per step the largest of "
                "`stop/parse_error` (trajectories ended by a parse error), `parse_error` (turns whose output or "
                "tool calls failed to parse) and `parse_error_masked` (parse-error turns masked out of the loss), "
                "above a tenth of the samples on several steps and a good share of the run."
            ),
            why=(
                "An unparsed sample earns the failed-parse reward or is masked out: it is sampled, paid for and "
                "teaches nothing about the task. A large share is rarely the model's skill: the debug guide traces "
                "it to a renderer whose tool-call / answer format is not the model's (or the system prompt's)."
            ),
            evidence=(
                "The parse-error metrics' per-step shares and medians, the steps above the threshold, the worst "
                "step; the configured renderer judged against the cookbook's registry for the model."
            ),
            fix=(
                "Read failed samples; use the renderer the cookbook recommends for the model for sampling and "
                "parsing; show the expected format in the prompt; raise max_tokens if samples are cut first."
            ),
        ),
        check=check,
        policy=ResponseParseErrorsPolicy,
        stage="training quality",
        requires=(
            requires(
                "no parse-error metric in metrics.jsonl",
                values_in("steps", "*/stop/parse_error", "*/parse_error", "*/parse_error_masked"),
            ),
        ),
        tags=("training", "rl", "metrics"),
    )
)
