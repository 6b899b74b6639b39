"""TD208 renderer-model-mismatch: the configured renderer is not the one recommended for the model.

Three readings, each its own finding: config.json's renderer against the cookbook's registry
(knowledge/renderers.py), the cookbook's own renderer warnings in logs.log, and an SFT/DPO run's
first NLL far above what a model scores in its own chat template.
"""

from __future__ import annotations

import math

import polars as pl

from trace_doctor.derive.log_signals import LogLine, renderer_lines
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.knowledge.renderers import (
    RENDERERS,
    SOURCE_COMMIT,
    RendererJudgement,
    describe_renderer,
    judge_renderer,
)
from trace_doctor.model import Finding
from trace_doctor.policy.configuration import RendererModelMismatchPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import found, requires, table, values_in

REGISTRY = f"the cookbook's model_info.py (at {SOURCE_COMMIT[:8]})"
NLL_COLUMNS = ("test/nll", "train_mean_nll")  # base-weights eval first (FORMATS.md 1.3: evals run before the step)
NLL_TRAINERS = ("sl", "dpo")


def _recommended(judgement: RendererJudgement) -> str:
    return ", ".join(f"`{name}`" for name in judgement.recommended)


def _first_step(ctx: RuleContext[RendererModelMismatchPolicy]) -> list[int]:
    """The first training step: where a renderer mismatch is measurable (KL / NLL at step 0)."""
    rows = live_training_rows(ctx.run.steps)
    return [int(rows["step"].min())] if not rows.is_empty() else []


def _judgement_finding(
    ctx: RuleContext, judgement: RendererJudgement, *, source: str, cited: LogLine | None = None
) -> Finding:
    """A finding for a renderer that is not recommended: a wrong family is a warning, a variant info."""
    chosen = describe_renderer(judgement.renderer)
    recommended = _recommended(judgement)
    evidence = {
        "model_name": judgement.model,
        "renderer_name": judgement.renderer,
        "recommended": list(judgement.recommended),
        "model_family": judgement.model_family,
        "renderer_family": judgement.renderer_family,
        "verdict": judgement.verdict,
        "source": source,
        "registry": REGISTRY,
    }
    if cited is not None:
        evidence["log_line"] = cited.cite() | {"repeats": cited.values["repeats"]}
    logged = " The cookbook itself warned about it in logs.log." if cited is not None else ""
    if judgement.verdict == "other-family":
        return ctx.finding(
            severity="warning",
            title="Renderer from another model family",
            message=(
                f"{source} uses renderer {chosen} with `{judgement.model}`, a {judgement.model_family} model; "
                f"{REGISTRY} recommends {recommended}. The run trains and samples on a chat template the "
                f"model was never trained on.{logged}"
            ),
            fix=(
                f"Set renderer_name to `{judgement.recommended[0]}` "
                "(model_info.get_recommended_renderer_name(model_name)), then restart the run."
            ),
            steps=_first_step(ctx),
            evidence=evidence,
            fingerprint="renderer-model-mismatch:config",
            confidence="high",
        )
    return ctx.finding(
        severity="info",
        title="Renderer is a non-recommended variant of the model's template",
        message=(
            f"{source} uses renderer {chosen} with `{judgement.model}`; {REGISTRY} recommends {recommended}. "
            "It is the model's own chat template in another mode (thinking, reasoning effort, Instruct or "
            f"base), which is fine when chosen on purpose and wrong when the model has no such mode.{logged}"
        ),
        fix=(
            f"Keep it if the mode is intended; otherwise use `{judgement.recommended[0]}`. Train and sample with "
            "the same renderer, and check data with `<think>` blocks against the thinking setting."
        ),
        steps=_first_step(ctx),
        evidence=evidence,
        fingerprint="renderer-model-mismatch:config",
        confidence="medium",
    )


def _config_check(
    ctx: RuleContext[RendererModelMismatchPolicy], lines: list[LogLine]
) -> tuple[list[Finding], str | None, str | None]:
    """(findings, pass reason, not-checkable reason) for config.json's renderer."""
    meta = ctx.run.meta
    if not meta.model_name or not meta.renderer_name:
        missing = "model_name" if not meta.model_name else "renderer_name"
        return [], None, f"config.json has no {missing}" if ctx.run.has_input("config") else "no config.json"
    judgement = judge_renderer(meta.model_name, meta.renderer_name)
    if judgement is None:
        return (
            [],
            None,
            f"model `{meta.model_name}` is not in {REGISTRY}: its renderer family is unknown, so renderer "
            f"`{meta.renderer_name}` is not judged",
        )
    if judgement.verdict == "recommended":
        rank = judgement.rank or 0
        which = (
            "the most recommended" if rank == 0 else f"recommended choice {rank + 1} of {len(judgement.recommended)}"
        )
        return [], f"renderer `{judgement.renderer}` is {which} for `{judgement.model}`", None
    if judgement.verdict == "chat-on-base":
        return (
            [],
            f"base model `{judgement.model}` trained with its family's chat template `{judgement.renderer}` "
            "(how a base model learns to chat; the cookbook's own default for a base model is role_colon)",
            None,
        )
    if judgement.verdict == "unknown-renderer":
        return (
            [],
            f"renderer `{judgement.renderer}` is not one of the cookbook's (a register_renderer custom one): "
            f"the cookbook recommends {_recommended(judgement)} for `{judgement.model}`",
            None,
        )
    cited = next(
        (
            line
            for line in lines
            if line.values.get("problem") == "not-recommended"
            and line.values.get("renderer") == judgement.renderer
            and line.values.get("model") == meta.model_name
        ),
        None,
    )
    return [_judgement_finding(ctx, judgement, source="config.json", cited=cited)], None, None


def _log_findings(
    ctx: RuleContext[RendererModelMismatchPolicy], lines: list[LogLine], config_findings: list[Finding]
) -> list[Finding]:
    """The cookbook's renderer warnings the config judgement did not already cite."""
    cited = {(f.evidence.get("log_line") or {}).get("line") for f in config_findings}
    findings: list[Finding] = []
    for line in lines:
        problem = line.values.get("problem")
        if problem == "not-recommended" and line.line not in cited:
            if (finding := _not_recommended_line(ctx, line)) is not None:
                findings.append(finding)
        elif problem == "mismatch":
            findings.append(_checkpoint_mismatch(ctx, line))
        elif problem == "extension-property":
            findings.append(_extension_property(ctx, line))
    # One finding per fingerprint: the first line of each kind speaks, the others are counted.
    kept: dict[str, Finding] = {}
    for finding in findings:
        first = kept.setdefault(finding.fingerprint or "", finding)
        if first is not finding:
            first.evidence.setdefault("more_lines", []).append(finding.evidence.get("log_line"))
    return list(kept.values())


def _not_recommended_line(ctx: RuleContext[RendererModelMismatchPolicy], line: LogLine) -> Finding | None:
    renderer, model = str(line.values.get("renderer")), str(line.values.get("model"))
    judgement = judge_renderer(model, renderer)
    if judgement is not None and judgement.verdict == "chat-on-base":
        return None  # the cookbook warns for every base model not on role_colon; teaching chat is deliberate
    if judgement is not None and judgement.verdict in ("other-family", "variant"):
        finding = _judgement_finding(ctx, judgement, source=f"logs.log line {line.line}", cited=line)
        finding.fingerprint = "renderer-model-mismatch:log"
        return finding
    if judgement is None:
        why = f"The model is not in {REGISTRY}, so only the cookbook's own verdict is reported."
    else:
        # The registry of the cookbook that wrote the line differed from the one this tool carries.
        why = f"{REGISTRY} lists it for this model ({judgement.verdict}): the run's cookbook version did not."
    return ctx.finding(
        severity="warning" if judgement is None else "info",
        title="The cookbook warned the renderer is not recommended",
        message=(
            f"logs.log line {line.line}: the cookbook says renderer `{renderer}` is not recommended for model "
            f"`{model}` (logged {line.values['repeats']}x). {why}"
        ),
        fix="Use the renderer the warning recommends (model_info.get_recommended_renderer_name(model_name)).",
        steps=_first_step(ctx),
        evidence={"log_line": line.cite() | {"repeats": line.values["repeats"]}, "renderer": renderer, "model": model},
        fingerprint="renderer-model-mismatch:log",
        confidence="medium" if judgement is None else "low",
    )


def _checkpoint_mismatch(ctx: RuleContext[RendererModelMismatchPolicy], line: LogLine) -> Finding:
    saved, current = str(line.values.get("checkpoint_renderer")), str(line.values.get("current_renderer"))
    # None: the families are unknown (no model, or a renderer the cookbook does not ship).
    same_family = None
    families = {RENDERERS[name][0] if name in RENDERERS else None for name in (saved, current)}
    if None not in families:
        same_family = len(families) == 1
    evidence = {
        "log_line": line.cite() | {"repeats": line.values["repeats"]},
        "checkpoint": line.values.get("checkpoint"),
        "checkpoint_renderer": saved,
        "current_renderer": current,
    }
    if same_family:
        return ctx.finding(
            severity="info",
            title="Checkpoint trained with another mode of the same renderer",
            message=(
                f"logs.log line {line.line}: checkpoint {line.values.get('checkpoint')} was trained with `{saved}`, "
                f"this run uses `{current}` — the same chat template in another mode (thinking, reasoning effort)."
            ),
            fix=f"Keep it if the switch is intended; otherwise continue with `{saved}`.",
            steps=_first_step(ctx),
            evidence=evidence,
            fingerprint="renderer-model-mismatch:checkpoint",
            confidence="medium",
        )
    return ctx.finding(
        severity="warning",
        title="Checkpoint trained with a different renderer",
        message=(
            f"logs.log line {line.line}: checkpoint {line.values.get('checkpoint')} was trained with renderer "
            f"`{saved}`, this run uses `{current}`: the weights learned one chat template and now see another."
        ),
        fix=f"Use the checkpoint's renderer `{saved}`, or start from the base model with `{current}`.",
        steps=_first_step(ctx),
        evidence=evidence,
        fingerprint="renderer-model-mismatch:checkpoint",
        confidence="high" if same_family is False else "medium",
    )


def _extension_property(ctx: RuleContext[RendererModelMismatchPolicy], line: LogLine) -> Finding:
    repeats = line.values["repeats"]
    return ctx.finding(
        severity="info",
        title="Training on every assistant message with a renderer that rewrites history",
        message=(
            f"logs.log lines {line.line}–{line.values['last_line']}: the cookbook warned {repeats:,} times "
            f"(once per example built) that train_on_what={line.values.get('train_on_what')} is used with a "
            "renderer without the extension property (such as one that strips thinking from earlier turns). "
            "Earlier assistant messages are then trained on a prefix the model never sees when sampling. Examples "
            "with a single assistant message are unaffected."
        ),
        fix=(
            "For multi-turn data, build one example per assistant message with train_on_what="
            "LAST_ASSISTANT_MESSAGE (or build_supervised_examples); for single-turn data nothing to do."
        ),
        evidence={"log_line": line.cite() | {"repeats": repeats, "last_line": line.values["last_line"]}},
        fingerprint="renderer-model-mismatch:extension-property",
        confidence="low",
    )


def _nll_check(
    ctx: RuleContext[RendererModelMismatchPolicy], config_findings: list[Finding]
) -> tuple[list[Finding], str | None]:
    """SFT / DPO: the first NLL, on base weights, far above a model's score on its own chat template."""
    if ctx.run.meta.trainer not in NLL_TRAINERS:
        return [], None
    rows = live_training_rows(ctx.run.steps)
    if rows.is_empty():
        return [], None
    rows = rows.filter(pl.col("segment") == rows["segment"].min()).sort("step")
    if int(rows["step"][0]) != 0:
        return [], f"the first logged step is {int(rows['step'][0])}, not 0: no base-model NLL to judge"
    first = rows.row(0, named=True)
    column = next((c for c in NLL_COLUMNS if isinstance(first.get(c), (int, float)) and math.isfinite(first[c])), None)
    if column is None:
        return [], None
    value, limit = float(first[column]), float(ctx.thresholds.max_sft_step0_nll)
    if value <= limit:
        return [], f"step-0 `{column}` {value:.3g} nats/token is below {limit:g}"
    meta = ctx.run.meta
    evidence = {
        "metric": column,
        "step": 0,
        "value": value,
        "limit": limit,
        "renderer_name": meta.renderer_name,
        "model_name": meta.model_name,
    }
    uniform = float(ctx.thresholds.min_worse_than_uniform_nll)
    if value > uniform:
        return [_worse_than_uniform(ctx, column, value, uniform, evidence)], None
    corroborated = any(f.severity == "warning" for f in config_findings)
    judgement = judge_renderer(meta.model_name, meta.renderer_name) if meta.model_name and meta.renderer_name else None
    recommended = judgement is not None and judgement.verdict in ("recommended", "chat-on-base")
    evidence["renderer_verdict"] = judgement.verdict if judgement is not None else None
    if recommended:
        # The registry's own choice for this model: the template is what the model was tuned on, so a
        # high first NLL says more about the data than about the renderer.
        reading = (
            f"Renderer `{meta.renderer_name}` is the one {REGISTRY} recommends for `{meta.model_name}`, which "
            "argues against a template mismatch: the data is more likely hard for the model (language, domain, "
            "format). Per-token NLL also depends on the tokenizer, so this is a note, not a diagnosis."
        )
        fix = (
            "Nothing to change in the renderer. If the NLL does not fall, look at the data (a sample of rendered "
            "examples with their loss weights) before the template."
        )
    else:
        reading = (
            f"A model scoring text in its own chat template starts far lower: check renderer `{meta.renderer_name}` "
            f"with `{meta.model_name}`. Per-token NLL depends on the tokenizer and the data, so this is a hint."
        )
        fix = (
            "Compare the renderer's tokens with the model's HF chat template (the debug skill's renderer parity "
            "check); if they match, the data itself is hard for the model."
        )
    return [
        ctx.finding(
            severity="warning" if corroborated else "info",
            title="NLL at step 0 far above what the model should score",
            message=(
                f"`{column}` is {value:.3g} nats/token at step 0 (before any update: base weights), above {limit:g}, "
                f"the cookbook's chat SFT divergence line (Qwen3-8B ends near 0.55 test / 0.61 train). {reading}"
            ),
            fix=fix,
            steps=[0],
            evidence=evidence,
            fingerprint="renderer-model-mismatch:sft-nll-step0",
            confidence="medium" if corroborated else "low",
        )
    ], None


def _worse_than_uniform(
    ctx: RuleContext[RendererModelMismatchPolicy], column: str, value: float, uniform: float, evidence: dict
) -> Finding:
    """A first NLL above ln(vocabulary): worse than guessing, which no template explains."""
    return ctx.finding(
        severity="warning",
        title="NLL at step 0 worse than guessing: a data or loss-weight problem, not the template",
        message=(
            f"`{column}` is {value:.3g} nats/token at step 0 (base weights), above {uniform:g} = ln of a vocabulary "
            "larger than any listed model's: the model scores the trained tokens worse than a uniform guess over its "
            "vocabulary. A wrong chat template costs a few nats, not this; the targets, their tokens or the loss "
            "weights are wrong."
        ),
        fix=(
            "Check that the targets are the inputs shifted by one (not the inputs themselves or shifted twice), "
            "that the data was tokenized with this model's tokenizer, and that loss weights are 1 only on the "
            "tokens to learn (not on padding, prompt or special tokens); print one datum's tokens with weights."
        ),
        steps=[0],
        evidence=evidence | {"worse_than_uniform_above": uniform},
        fingerprint="renderer-model-mismatch:sft-nll-data",
        confidence="high",
    )


def check(ctx: RuleContext[RendererModelMismatchPolicy]) -> list[Finding]:
    lines = renderer_lines(ctx.run.log_events)
    config_findings, config_pass, not_checked = _config_check(ctx, lines)
    findings = config_findings + _log_findings(ctx, lines, config_findings)
    nll_findings, nll_pass = _nll_check(ctx, config_findings)
    findings += nll_findings
    if findings:
        return findings
    passes = [reason for reason in (config_pass, nll_pass) if reason]
    if not passes and not lines:
        raise NotApplicable(not_checked or "no renderer in config.json, no renderer warning in logs, no SFT NLL")
    return ctx.passed("; ".join(passes + ([not_checked] if not_checked else [])))


RULE = register(
    Rule(
        slug="renderer-model-mismatch",
        code="TD208",
        title="Renderer not recommended for the model",
        severity="warning",
        needs="config.json (model_name, renderer_name); logs.log renderer warnings; SFT/DPO metrics (step-0 NLL)",
        docs=RuleDocs(
            what=(
                "config.json's renderer_name (top level since 2026-02-24, else nested in dataset_builder) not among "
                "the renderers the cookbook recommends for model_name — another model family (warning) or another "
                "mode of the model's own template, e.g. thinking vs `_disable_thinking` or a thinking renderer on "
                "an Instruct model (info), while a base model taught its family's chat template is fine; the "
                "cookbook's own logs.log warnings (`Renderer ... is not recommended`, "
                "`Renderer mismatch for checkpoint`, `train_on_what=ALL_ASSISTANT_MESSAGES with a renderer that "
                "does not satisfy the extension property`, counted once); an SFT/DPO step-0 NLL far above normal."
            ),
            why=(
                "A renderer from another family trains the model on special tokens it has never seen and samples "
                "it with a prompt it was not tuned for: the loss falls while outputs stay poor, and RL shows a high "
                "KL at step 0 (renderer-kl-step0). The debug skill's first renderer check is exactly this table."
            ),
            evidence=(
                f"The model's recommended renderers from {REGISTRY} (also models it once listed), the renderer's "
                "family from get_renderer, the cited log lines with repeat counts, the step-0 `test/nll` or "
                "`train_mean_nll`. A model the registry never had is not judged (no guess)."
            ),
            fix="Use model_info.get_recommended_renderer_name(model_name), or the variant you mean, for training "
            "and sampling alike.",
        ),
        check=check,
        policy=RendererModelMismatchPolicy,
        stage="training quality",
        panels=("kl", "loss"),
        requires=(
            requires(
                "no config.json, no renderer warning in logs and no SFT/DPO NLL metrics",
                found("config"),
                table("log_events"),
                values_in("steps", "train_mean_nll", "test/nll"),
            ),
        ),
        tags=("config", "logs", "metrics"),
    )
)
