"""TD209 config-risk: RL and SFT settings the cookbook warns against, read from config.json — one finding per risk."""

from __future__ import annotations

from typing import Any

from trace_doctor.ingest.parsers.config import find_setting
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

# train_on_what values (renderers.base.TrainOnWhat) whose loss covers the prompt of a chat example.
PROMPT_TRAINING = ("all_tokens", "all_messages")
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


def _sft_learning_rate(ctx: RuleContext[ConfigRiskPolicy], cfg: dict[str, Any]) -> tuple[Finding | None, str | None]:
    """(finding, pass reason) for an SFT learning rate an order of magnitude away from get_lr's for the model."""
    lr, model = _number(cfg.get("learning_rate")), ctx.run.meta.model_name
    if lr is None or lr <= 0:
        return None, "config.json sets no learning_rate"
    recommended = sft_lora_lr(model) if model else None
    if recommended is None:
        return None, f"get_lr has no formula for `{model}` (only Llama and Qwen are calibrated)"
    t, ratio = ctx.thresholds, lr / recommended
    evidence = {
        "learning_rate": lr,
        "get_lr": recommended,
        "ratio": round(ratio, 4),
        "model_name": model,
        "source": "tinker_cookbook 0.6.1 hyperparam_utils.get_lr(model_name, is_lora=True)",
    }
    fix = f"Start from hyperparam_utils.get_lr('{model}') = {recommended:.2g} (LoRA) and sweep around it."
    if ratio > t.max_sft_lr_over_get_lr:
        return ctx.finding(
            severity="warning",
            title="SFT learning rate far above the recommended one",
            message=(
                f"config.json learning_rate {lr:.3g} is {ratio:.0f}x what the cookbook's get_lr recommends for "
                f"`{model}` with LoRA ({recommended:.2g}): updates this large overshoot (loss spikes, divergence, "
                "a model that forgets its chat skills)."
            ),
            fix=fix,
            evidence=evidence,
            fingerprint="config-risk:sft-learning-rate-high",
            confidence="medium",
        ), None
    if ratio < t.min_sft_lr_over_get_lr:
        return ctx.finding(
            severity="info",
            title="SFT learning rate far below the recommended one",
            message=(
                f"config.json learning_rate {lr:.3g} is {ratio:.2g}x what the cookbook's get_lr recommends for "
                f"`{model}` with LoRA ({recommended:.2g}): a full-fine-tuning rate with a LoRA adapter (get_lr's "
                "LoRA multiplier is 10) barely moves it in the steps the run has."
            ),
            fix=fix,
            evidence=evidence,
            fingerprint="config-risk:sft-learning-rate-low",
            confidence="medium",
        ), None
    return None, f"learning_rate {lr:.3g} is {ratio:.2g}x get_lr's {recommended:.2g} for `{model}`"


def _train_on_all_tokens(ctx: RuleContext[ConfigRiskPolicy], cfg: dict[str, Any]) -> tuple[Finding | None, str | None]:
    """(finding, pass reason) for chat SFT whose loss covers the prompt (train_on_what all_tokens / all_messages)."""
    what = find_setting(cfg.get("dataset_builder"), "train_on_what")
    if not isinstance(what, str):
        return None, None
    what = what.strip().lower()
    if what not in PROMPT_TRAINING:
        return None, f"train_on_what {what}"
    every_token = what == "all_tokens"
    return ctx.finding(
        severity="warning" if every_token else "info",
        title="Chat SFT trains on the prompt too",
        message=(
            f"dataset_builder's train_on_what is `{what}`: the loss covers "
            + (
                "every token — system prompt, user turns and the template's special tokens — "
                if every_token
                else "every message, the user and system turns included, "
            )
            + "not only the assistant's replies. The prompt is most of the tokens and easy to predict, so the loss "
            "drops while the replies barely improve: the debug guide's 'loss drops but outputs are poor'."
        ),
        fix=(
            "Train on the replies: train_on_what=all_assistant_messages or last_assistant_message (the cookbook's "
            "defaults: supervised/data.py, recipes/chat_sl); keep all_tokens for plain-text (non-chat) data."
        ),
        evidence={
            "train_on_what": what,
            "renderer_name": ctx.run.meta.renderer_name,
            "source": "renderers.base.TrainOnWhat; defaults ALL_ASSISTANT_MESSAGES (supervised/data.py), "
            "LAST_ASSISTANT_MESSAGE (chat_sl)",
        },
        fingerprint="config-risk:sft-train-on-prompt",
        confidence="high" if every_token else "medium",
    ), None


def _sft_check(ctx: RuleContext[ConfigRiskPolicy], cfg: dict[str, Any]) -> list[Finding]:
    lr_finding, lr_pass = _sft_learning_rate(ctx, cfg)
    tokens_finding, tokens_pass = _train_on_all_tokens(ctx, cfg)
    findings = [f for f in (lr_finding, tokens_finding) if f]
    if findings:
        return findings
    return ctx.passed("; ".join(p for p in (lr_pass, tokens_pass) if p))


def check(ctx: RuleContext[ConfigRiskPolicy]) -> list[Finding]:
    cfg = ctx.run.meta.config
    if not cfg:
        raise NotApplicable("config.json is empty or unreadable")
    if ctx.run.meta.trainer == "sl":
        return _sft_check(ctx, cfg)
    if ctx.run.meta.trainer not in SAMPLING_TRAINERS:
        raise NotApplicable(
            f"a {ctx.run.meta.trainer} run: temperature, KL penalty, substeps and the RL learning rate are "
            "settings of RL and on-policy distillation, the learning rate against get_lr and train_on_what of SFT"
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
        title="Risky training configuration",
        severity="warning",
        needs="config.json of an RL, on-policy distillation or SFT run",
        docs=RuleDocs(
            what=(
                "Settings the cookbook warns against, one finding each: sampling temperature ≠ 1 with "
                "kl_penalty_coef > 0; num_substeps > 1 without loss_fn `ppo`; an RL learning rate an order of "
                "magnitude outside the cookbook's RL recipes (1e-5–4e-5); an SFT learning rate an order of "
                "magnitude away from hyperparam_utils.get_lr(model) (LoRA; Llama and Qwen); chat SFT with "
                "dataset_builder train_on_what `all_tokens` (warning) or `all_messages` (info): the loss covers "
                "the prompt."
            ),
            why=(
                "A KL penalty on temperature-scaled logprobs penalises the temperature itself (rl/train.py: non-1 "
                "temperatures 'do not play well with KL penalty'); substeps after the first train off-policy, "
                "which importance_sampling does not clip (hyperparams.md: 'Requires PPO objective'); RL needs a "
                "lower rate than SFT (hyperparams.md), and a rate ten times the usual one destabilises the policy. "
                "get_lr is the cookbook's LoRA SFT rate: ten times it overshoots, a tenth of it (a full fine-tuning "
                "rate) barely moves the adapter. A loss over the prompt's tokens falls while the replies stay poor "
                "(the debug guide's 'loss drops but outputs are poor')."
            ),
            evidence=(
                "config.json's temperature, kl_penalty_coef, num_substeps, loss_fn (async_config's if set) and "
                "learning_rate, quoted in each finding; for the learning rate also get_lr's SFT LoRA rate for the "
                "model where the cookbook has one; SFT: learning_rate over get_lr, "
                "dataset_builder.common_config.train_on_what."
            ),
            fix="Temperature 1 with a KL penalty; loss_fn='ppo' with substeps; an RL rate near 1e-5–4e-5 for LoRA; "
            "SFT near get_lr(model), trained on the assistant's messages (train_on_what=all_assistant_messages).",
        ),
        check=check,
        policy=ConfigRiskPolicy,
        stage="training quality",
        requires=(requires("no config.json", found("config")),),
        tags=("config",),
    )
)
