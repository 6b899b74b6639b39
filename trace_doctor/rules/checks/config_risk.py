"""TD209 config-risk: RL settings the cookbook warns against, read from config.json — one finding per risk."""

from __future__ import annotations

from typing import Any

from trace_doctor.knowledge.hyperparams import (
    CLIPPED_LOSSES,
    DEFAULT_LOSS_FN,
    RL_RECIPE_LEARNING_RATES,
    SOURCE_COMMIT,
    sft_lora_lr,
)
from trace_doctor.model import Finding
from trace_doctor.policy.configuration import ConfigRiskPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import found, requires

# Trainers that sample with `temperature` and update with `loss_fn` over `num_substeps` (FORMATS.md 3.3).
SAMPLING_TRAINERS = ("rl", "distillation")
USUAL_RL_LRS = f"{min(RL_RECIPE_LEARNING_RATES.values()):g}–{max(RL_RECIPE_LEARNING_RATES.values()):g}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _temperature_with_kl(ctx: RuleContext[ConfigRiskPolicy], cfg: dict[str, Any]) -> Finding | None:
    temperature, kl_coef = _number(cfg.get("temperature")), _number(cfg.get("kl_penalty_coef"))
    if temperature is None or kl_coef is None or abs(temperature - 1.0) <= 1e-9 or kl_coef <= 0:
        return None
    return ctx.finding(
        severity="warning",
        title="Sampling temperature ≠ 1 together with a KL penalty",
        message=(
            f"config.json sets temperature {temperature:g} and kl_penalty_coef {kl_coef:g}. The KL penalty is "
            "computed from the sampler's logprobs, which are temperature-scaled, against reference logprobs at "
            "temperature 1, so it penalises the temperature rather than drift; rl/train.py warns that non-1 "
            "temperatures 'do not play well with KL penalty'. The same scaling inflates optim/kl_sample_train_*."
        ),
        fix="Sample at temperature 1 when using a KL penalty, or set kl_penalty_coef to 0.",
        evidence={"temperature": temperature, "kl_penalty_coef": kl_coef, "source": "rl/train.py Config.temperature"},
        fingerprint="config-risk:temperature-with-kl-penalty",
        confidence="high",
    )


def _substeps_without_ppo(ctx: RuleContext[ConfigRiskPolicy], cfg: dict[str, Any]) -> Finding | None:
    substeps = _number(cfg.get("num_substeps"))
    async_config = cfg.get("async_config") if isinstance(cfg.get("async_config"), dict) else {}
    loss_fn = str(async_config.get("loss_fn") or cfg.get("loss_fn") or DEFAULT_LOSS_FN)
    if substeps is None or substeps <= 1 or loss_fn in CLIPPED_LOSSES:
        return None
    unclipped = loss_fn == DEFAULT_LOSS_FN
    return ctx.finding(
        severity="warning",
        title="Several optimizer substeps without the PPO loss",
        message=(
            f"config.json sets num_substeps {substeps:g} with loss_fn `{loss_fn}`. After the first substep the "
            "policy is no longer the one that sampled, and "
            + (
                "importance_sampling reweights by an unclipped ratio, so later substeps can take large, unstable steps."
                if unclipped
                else f"the cookbook's guidance names PPO's clipping for this; `{loss_fn}` is not it."
            )
            + " The cookbook's hyperparams guide: num_substeps > 1 'Requires PPO objective'."
        ),
        fix="Use loss_fn='ppo' with num_substeps > 1, or keep num_substeps=1 (and a larger batch).",
        evidence={"num_substeps": substeps, "loss_fn": loss_fn, "source": "skills/research/references/hyperparams.md"},
        fingerprint="config-risk:substeps-without-ppo",
        confidence="high" if unclipped else "low",
    )


def _learning_rate(ctx: RuleContext[ConfigRiskPolicy], cfg: dict[str, Any]) -> tuple[Finding | None, str | None]:
    """(finding, pass reason) for an RL learning rate an order of magnitude outside the recipes' range."""
    if ctx.run.meta.trainer != "rl":
        return None, None
    lr = _number(cfg.get("learning_rate"))
    if lr is None:
        return None, None
    high, low = float(ctx.thresholds.max_rl_learning_rate), float(ctx.thresholds.min_rl_learning_rate)
    model = ctx.run.meta.model_name
    sft = sft_lora_lr(model) if model else None
    context = f"; get_lr gives {sft:.2g} for {model}'s SFT LoRA, which RL should stay below" if sft else ""
    evidence = {
        "learning_rate": lr,
        "usual_rl_range": USUAL_RL_LRS,
        "max_rl_learning_rate": high,
        "min_rl_learning_rate": low,
        "sft_lora_lr_get_lr": sft,
        "source": f"tinker-cookbook {SOURCE_COMMIT[:8]} RL recipe defaults, hyperparam_utils.get_lr",
    }
    if lr > high:
        return ctx.finding(
            severity="warning",
            title="RL learning rate far above the usual range",
            message=(
                f"config.json learning_rate {lr:.3g} is above {high:.3g}, over ten times the cookbook's RL "
                f"recipes ({USUAL_RL_LRS}){context}. Updates this large destabilise the policy."
            ),
            fix=f"Start from the recipes' RL learning rates ({USUAL_RL_LRS} for LoRA) and sweep from there.",
            evidence=evidence,
            fingerprint="config-risk:rl-learning-rate-high",
            confidence="medium",
        ), None
    if lr < low:
        return ctx.finding(
            severity="info",
            title="RL learning rate far below the usual range",
            message=(
                f"config.json learning_rate {lr:.3g} is below {low:.3g}, a tenth of the cookbook's lowest RL "
                f"recipe rate ({USUAL_RL_LRS}): the policy will barely move in the steps the run has."
            ),
            fix=f"Use a learning rate in the recipes' RL range ({USUAL_RL_LRS} for LoRA) unless this is deliberate.",
            evidence=evidence,
            fingerprint="config-risk:rl-learning-rate-low",
            confidence="medium",
        ), None
    return None, f"learning_rate {lr:.3g} is within an order of magnitude of the RL recipes' {USUAL_RL_LRS}"


def check(ctx: RuleContext[ConfigRiskPolicy]) -> list[Finding]:
    cfg = ctx.run.meta.config
    if not cfg:
        raise NotApplicable("config.json is empty or unreadable")
    if ctx.run.meta.trainer not in SAMPLING_TRAINERS:
        raise NotApplicable(
            f"a {ctx.run.meta.trainer} run: temperature, KL penalty, substeps and the RL learning rate are "
            "settings of RL and on-policy distillation"
        )
    lr_finding, lr_pass = _learning_rate(ctx, cfg)
    findings = [f for f in (_temperature_with_kl(ctx, cfg), _substeps_without_ppo(ctx, cfg), lr_finding) if f]
    if findings:
        return findings
    settings = ", ".join(
        f"{key} {cfg[key]}" for key in ("temperature", "kl_penalty_coef", "num_substeps", "loss_fn") if key in cfg
    )
    parts = [part for part in (settings and f"config.json: {settings}", lr_pass) if part]
    return ctx.passed("; ".join(parts) or "config.json sets no temperature, KL penalty, substeps or learning rate")


RULE = register(
    Rule(
        slug="config-risk",
        code="TD209",
        title="Risky RL configuration",
        severity="warning",
        needs="config.json of an RL or on-policy distillation run",
        docs=RuleDocs(
            what=(
                "Settings the cookbook warns against, one finding each: sampling temperature ≠ 1 with "
                "kl_penalty_coef > 0; num_substeps > 1 without loss_fn `ppo`; an RL learning rate an order of "
                "magnitude outside the cookbook's RL recipes (1e-5–4e-5)."
            ),
            why=(
                "A KL penalty on temperature-scaled logprobs penalises the temperature itself (rl/train.py: non-1 "
                "temperatures 'do not play well with KL penalty'); substeps after the first train off-policy, "
                "which importance_sampling does not clip (hyperparams.md: 'Requires PPO objective'); RL needs a "
                "lower rate than SFT (hyperparams.md), and a rate ten times the usual one destabilises the policy."
            ),
            evidence=(
                "config.json's temperature, kl_penalty_coef, num_substeps, loss_fn (async_config's if set) and "
                "learning_rate, quoted in each finding; for the learning rate also get_lr's SFT LoRA rate for the "
                "model where the cookbook has one."
            ),
            fix="Temperature 1 with a KL penalty; loss_fn='ppo' with substeps; an RL rate near 1e-5–4e-5 for LoRA.",
        ),
        check=check,
        policy=ConfigRiskPolicy,
        stage="training quality",
        requires=(requires("no config.json", found("config")),),
        tags=("config",),
    )
)
