"""TD201 renderer-kl-step0: sampler-vs-trainer KL already high at the first training step."""

from __future__ import annotations

from typing import Any

import polars as pl

from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.knowledge.renderers import judge_renderer
from trace_doctor.knowledge.tinker import (
    EVAL_KEY_PREFIXES,
    KL_SAMPLE_TRAIN_SUFFIXES,
    SAMPLING_SIDE_WORDS,
    SYSTEM_PROMPT_KEY,
    TRAINING_SIDE_WORDS,
)
from trace_doctor.model import Finding, RunMeta
from trace_doctor.policy.training import RendererKlStep0Policy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, table, values_in


def kl_columns(frame: pl.DataFrame) -> dict[str, str]:
    """{"v1"/"v2": column} for the sampler-vs-trainer KL keys, matched by suffix (docs drop `optim/`)."""
    found: dict[str, str] = {}
    schema = frame.schema  # built on every access: once, not once per column of a 10,000-key row
    for column in sorted(frame.columns):
        if not schema[column].is_numeric() or column.startswith(EVAL_KEY_PREFIXES):
            continue
        for suffix in KL_SAMPLE_TRAIN_SUFFIXES:
            if column == suffix or column.endswith("/" + suffix):
                found.setdefault(suffix[-2:], column)
    return found


def run_label(meta: RunMeta) -> str:
    """`renderer X with model Y` from config.json, for messages (saying which of them is unknown)."""
    if not meta.renderer_name and not meta.model_name:
        return "renderer and model unknown: no config.json with them"
    renderer = f"renderer `{meta.renderer_name}`" if meta.renderer_name else "renderer unknown (no renderer_name)"
    model = f"model `{meta.model_name}`" if meta.model_name else "model unknown"
    return f"{renderer} with {model}"


def temperature_confound(meta: RunMeta) -> bool:
    return meta.temperature is not None and abs(meta.temperature - 1.0) > 1e-9


def _leaves(obj: Any, path: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    """(dotted key, value) of every leaf of a nested config (lists and deep nesting are not walked)."""
    if not isinstance(obj, dict) or depth > 8:
        return [(path, obj)]
    out: list[tuple[str, Any]] = []
    for key, value in obj.items():
        out += _leaves(value, f"{path}.{key}" if path else str(key), depth + 1)
    return out


def prompt_mismatch(meta: RunMeta) -> dict[str, Any] | None:
    """The config's system prompts for sampling and for training when they differ, else None.

    A key is on the sampling side when its dotted name says so (`teacher_system_prompt`,
    `sampling.system_message`), on the training side likewise (`student_system_prompt`); a null
    value is "no system prompt", which differs from any prompt.
    """
    sides: dict[str, dict[str, Any]] = {"sampling": {}, "training": {}}
    for key, value in _leaves(meta.config):
        if not SYSTEM_PROMPT_KEY.search(key.rsplit(".", 1)[-1]):
            continue
        name = key.lower()
        on_sampling = any(word in name for word in SAMPLING_SIDE_WORDS)
        on_training = any(word in name for word in TRAINING_SIDE_WORDS)
        if on_sampling != on_training:
            sides["sampling" if on_sampling else "training"][key] = value
    if not sides["sampling"] or not sides["training"]:
        return None
    values = {repr(v) for side in sides.values() for v in side.values()}
    return sides if len(values) > 1 else None


def recommended_renderer(meta: RunMeta) -> bool:
    """Whether config.json's renderer is one the cookbook recommends for its model (evidence against a
    renderer mismatch: renderer-model-mismatch passes it)."""
    if not meta.model_name or not meta.renderer_name:
        return False
    judgement = judge_renderer(meta.model_name, meta.renderer_name)
    return judgement is not None and judgement.verdict in ("recommended", "chat-on-base")


def peer_reading(ctx: RuleContext[RendererKlStep0Policy], value: float) -> dict[str, Any] | None:
    """How this run's first KL compares with the other runs of the same model and renderer in the
    folder (the fleet hands them over in `run.peers`): "outlier" (far above theirs: stronger evidence
    of this run's own mistake), "alike" (theirs are as high: the model's normal level), or "between"."""
    values = sorted(v for v in ctx.run.peers.get("step0_kl", ()) if v == v)
    if len(values) < ctx.thresholds.min_peer_runs:
        return None
    middle = len(values) // 2
    median = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
    ratio = ctx.thresholds.peer_outlier_ratio
    if abs(value) > ratio * max(abs(median), 1e-12):
        reading = "outlier"
    elif abs(median) > ctx.shared.max_stable_kl:
        reading = "alike"
    else:
        reading = "between"
    return {"runs": len(values), "median": median, "reading": reading, "values": values}


LOWER_CONFIDENCE = {"high": "medium", "medium": "low", "low": "low"}


def sample_train_check(
    ctx: RuleContext[RendererKlStep0Policy], rows: pl.DataFrame, columns: dict[str, str]
) -> tuple[list[Finding], str]:
    """The sampler-vs-trainer KL at the first step: (findings, pass reason)."""
    meta = ctx.run.meta
    for version in ("v2", "v1"):
        if version not in columns:
            continue
        column = columns[version]
        present = rows.filter(pl.col(column).is_not_null() & pl.col(column).is_finite())
        if present.is_empty():
            continue
        step, value = int(present["step"][0]), float(present[column][0])
        limit = ctx.shared.max_stable_kl
        if abs(value) <= limit:
            continue
        evidence = {
            "metric": column,
            "step": step,
            "value": value,
            "band": limit,
            "renderer_name": meta.renderer_name,
            "model_name": meta.model_name,
            "temperature": meta.temperature,
        }
        peers = peer_reading(ctx, value)
        if peers is not None:
            evidence["peers"] = peers
        prompts = prompt_mismatch(meta)
        if prompts is not None:
            evidence["system_prompts"] = prompts
            return [_prompts_finding(ctx, column, value, step, limit, prompts, evidence)], ""
        if temperature_confound(meta):
            return [
                ctx.finding(
                    severity="info",
                    title="KL at the first step inflated by sampling temperature",
                    message=(
                        f"`{column}` is {value:.4g} at step {step} (healthy < {limit}), but config temperature is "
                        f"{meta.temperature:g}: the sampler's logprobs are temperature-scaled and the trainer's "
                        f"are not, so this does not by itself point at {run_label(meta)}."
                    ),
                    fix=(
                        "Judge the renderer at temperature 1 (or compare a short run at temperature 1); the KL "
                        "from temperature is expected."
                    ),
                    steps=[step],
                    evidence=evidence,
                    fingerprint="renderer-kl-step0:temperature",
                    confidence="medium",
                )
            ], ""
        return [_mismatch_finding(ctx, column, value, step, limit, version, evidence)], ""
    column = columns.get("v2", columns.get("v1"))
    first = rows.filter(pl.col(column).is_not_null() & pl.col(column).is_finite())
    if first.is_empty():
        return [], f"`{column}` has no finite value"
    return [], f"first-step `{column}` {float(first[column][0]):.3g} is inside the healthy band"


def _prompts_finding(
    ctx: RuleContext[RendererKlStep0Policy],
    column: str,
    value: float,
    step: int,
    limit: float,
    prompts: dict[str, dict[str, Any]],
    evidence: dict[str, Any],
) -> Finding:
    """Sampling and training with different system prompts: a KL at step 0 by construction."""
    keys = ", ".join(f"`{key}`" for side in prompts.values() for key in side)
    meta = ctx.run.meta
    temperature = (
        f" Temperature {meta.temperature:g} adds to it (temperature-scaled sampler logprobs)."
        if temperature_confound(meta)
        else ""
    )
    return ctx.finding(
        severity="info",
        title="KL at the first step from different sampling and training prompts",
        message=(
            f"`{column}` is {value:.4g} at step {step} (healthy < {limit}), and config.json samples and trains "
            f"with different system prompts ({keys}): the trainer scores the sampled tokens after another prefix, "
            f"so the KL is expected and does not by itself point at {run_label(meta)}.{temperature}"
        ),
        fix=(
            "Nothing to fix when the difference is the method (context or prompt distillation). To judge the "
            "renderer, compare sampler and trainer logprobs at step 0 with the same prompt on both sides."
        ),
        steps=[step],
        evidence=evidence,
        fingerprint="renderer-kl-step0:prompts",
        confidence="medium",
    )


def _mismatch_finding(
    ctx: RuleContext[RendererKlStep0Policy],
    column: str,
    value: float,
    step: int,
    limit: float,
    version: str,
    evidence: dict[str, Any],
) -> Finding:
    """No confound in the config: the trained tokens are not the sampled ones. The confidence rests
    on the metric (v2 is always >= 0), the renderer (a recommended one argues against a mismatch) and,
    in a folder of runs, how the run compares with its peers (same model and renderer)."""
    meta = ctx.run.meta
    confidence = "high" if version == "v2" else "medium"
    peers = evidence.get("peers") or {}
    peer_reading = ""
    if peers.get("reading") == "alike":
        # Every run of this model and renderer starts there: the model's level, not this run's mistake.
        confidence = LOWER_CONFIDENCE[confidence]
        peer_reading = (
            f" The {peers['runs']} other run(s) of this model and renderer in the folder start alike (median "
            f"{peers['median']:.3g}): the model's normal level rather than this run's mistake."
        )
    elif peers.get("reading") == "outlier":
        peer_reading = (
            f" The {peers['runs']} other run(s) of this model and renderer in the folder start at a median of "
            f"{peers['median']:.3g}: this run is the outlier."
        )
    if recommended_renderer(meta):
        if peers.get("reading") != "outlier":
            confidence = LOWER_CONFIDENCE[confidence]
        title = "Sampler and trainer disagree at the first step (with the recommended renderer)"
        message = (
            f"`{column}` is {value:.4g} at step {step}, above the healthy band (< {limit}) while sampler and "
            f"trainer still share weights, but renderer `{meta.renderer_name}` is the one the cookbook recommends "
            f"for `{meta.model_name}`, which argues against a renderer mismatch: look at the round trip instead "
            f"(multi-turn history re-rendered, thinking stripped, image tokens), or MoE numerics.{peer_reading}"
        )
        fix = (
            "Check the render→tokenize round trip of one sampled episode against the tokens trained on (history "
            "re-rendering, stripped thinking, image token counts); the renderer choice itself is the recommended one."
        )
    else:
        title = "Sampler and trainer disagree at the first step (renderer mismatch)"
        message = (
            f"`{column}` is {value:.4g} at step {step}, above the healthy band (< {limit}) while sampler "
            "and trainer still share weights: the trained tokens are not the sampled ones — check "
            f"{run_label(meta)}.{peer_reading}"
        )
        fix = (
            "Use the renderer recommended for the model (get_recommended_renderer_name), check the chat "
            "template round trip (multi-turn history re-rendering, stripped thinking, image tokens)."
        )
    return ctx.finding(
        severity="warning",
        title=title,
        message=message,
        fix=fix,
        steps=[step],
        evidence=evidence,
        fingerprint="renderer-kl-step0:sample-train",
        confidence=confidence,
    )


def teacher_check(ctx: RuleContext[RendererKlStep0Policy], rows: pl.DataFrame) -> tuple[list[Finding], str]:
    """Distillation: the student-vs-teacher KL at the first step: (findings, pass reason)."""
    present = rows.filter(pl.col("teacher_kl").is_not_null() & pl.col("teacher_kl").is_finite())
    if present.is_empty():
        return [], "teacher_kl has no finite value"
    step, value = int(present["step"][0]), float(present["teacher_kl"][0])
    limit = ctx.thresholds.max_teacher_kl_step0
    if value <= limit:
        return [], f"teacher_kl {value:.3g} at step {step} is below {limit}"
    # A renderer mismatch biases every teacher logprob, so training cannot remove it; a student
    # that starts far from its teacher but closes the gap is distillation working.
    min_trend = ctx.thresholds.min_teacher_steps_for_trend
    if present.height >= min_trend:
        tail = present.tail(max(1, present.height // 4))
        late = float(tail["teacher_kl"].median())
        if late <= limit:
            return (
                [],
                (
                    f"teacher_kl starts at {value:.3g} (step {step}) but falls to {late:.3g} by step "
                    f"{int(tail['step'][-1])}: a student-teacher gap closed by training, not a renderer bias "
                    "(which would persist)"
                ),
            )
    short = present.height < min_trend
    caveat = (
        f" Only {present.height} step(s) logged: too few to tell a persistent renderer bias from a "
        "student-teacher gap that training closes."
        if short
        else ""
    )
    return [
        ctx.finding(
            severity="warning",
            title="Student and teacher disagree at the first step (renderer mismatch)",
            message=(
                f"`teacher_kl` is {value:.4g} at step {step}, above {limit}: the teacher may be scoring text "
                f"rendered for the student — check {run_label(ctx.run.meta)} against the teacher's "
                f"renderer.{caveat}"
            ),
            fix=(
                "Render the teacher's input with the teacher's own renderer (cookbook issue #796 measured +0.287 "
                "nats/token from this)."
            ),
            steps=[step],
            evidence={"metric": "teacher_kl", "step": step, "value": value, "band": limit},
            fingerprint="renderer-kl-step0:teacher",
            confidence="low" if short else "medium",
        )
    ], ""


def check(ctx: RuleContext[RendererKlStep0Policy]) -> list[Finding]:
    rows = live_training_rows(ctx.run.steps)
    if rows.is_empty():
        raise NotApplicable("no training rows in metrics.jsonl")
    rows = rows.filter(pl.col("segment") == rows["segment"].min()).sort("step")
    columns = kl_columns(rows)
    # On-policy distillation logs both: the student's own sampler-vs-trainer KL and teacher_kl,
    # and either can be wrong independently, so both are judged.
    has_teacher = "teacher_kl" in rows.columns and rows.schema["teacher_kl"].is_numeric()
    if not columns and not has_teacher:
        raise NotApplicable("no optim/kl_sample_train_v1/_v2 or teacher_kl in metrics: not an RL or distillation run")
    findings: list[Finding] = []
    reasons: list[str] = []
    for applies, judge in (
        (bool(columns), lambda: sample_train_check(ctx, rows, columns)),
        (has_teacher, lambda: teacher_check(ctx, rows)),
    ):
        if applies:
            found, reason = judge()
            findings += found
            reasons += [reason] if reason else []
    if not findings and reasons and all(r.endswith("has no finite value") for r in reasons):
        raise NotApplicable("; ".join(reasons))
    return findings or ctx.passed("; ".join(reasons))


RULE = register(
    Rule(
        slug="renderer-kl-step0",
        code="TD201",
        title="KL already high at the first step",
        severity="warning",
        needs=(
            "metrics.jsonl with optim/kl_sample_train_v1/_v2 (RL) or teacher_kl (distillation); config.json for "
            "renderer, model, temperature"
        ),
        docs=RuleDocs(
            what=(
                "Sampler-vs-trainer KL (`optim/kl_sample_train_v1/_v2`) above the healthy band (< 0.01) at the "
                "first training step, or a high `teacher_kl` at step 0 in distillation."
            ),
            why=(
                "At step 0 sampler and trainer use the same weights, so the KL should be numerical noise; a clear "
                "value means the trainer trains on tokens the sampler never produced (renderer / chat template "
                "mismatch) and the run optimises the wrong objective."
            ),
            evidence=(
                "The first training row's KL value (v2 preferred: always ≥ 0), the band, and config.json's "
                "renderer_name, model_name and temperature (temperature ≠ 1 inflates KL by itself and is reported "
                "as such)."
            ),
            fix=(
                "Use the model's recommended renderer; verify the render→tokenize round trip; for distillation "
                "render the teacher's input with the teacher's renderer."
            ),
        ),
        check=check,
        policy=RendererKlStep0Policy,
        stage="training quality",
        panels=("kl",),
        shared=("max_stable_kl",),
        requires=(
            requires("no training rows in metrics.jsonl", table("steps")),
            requires(
                "no optim/kl_sample_train_v1/_v2 or teacher_kl in metrics: not an RL or distillation run",
                values_in(
                    "steps",
                    "kl_sample_train_v1",
                    "kl_sample_train_v2",
                    "*/kl_sample_train_v1",
                    "*/kl_sample_train_v2",
                    "teacher_kl",
                ),
            ),
        ),
        tags=("kl", "metrics"),
    )
)
