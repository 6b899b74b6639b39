"""The cookbook's learning-rate guidance and RL loss facts, as data (config-risk reads it).

Source: thinking-machines-lab/tinker-cookbook at 9dfcc3a2cf44432d621a01005073dc6d76a1e87a
(2026-08-19): `tinker_cookbook/hyperparam_utils.py` (`get_lr`, `_get_hidden_size`),
`skills/research/references/hyperparams.md`, the RL recipes' `learning_rate` defaults, and
`rl/train.py`'s Config comments.
"""

from __future__ import annotations

SOURCE_COMMIT = "9dfcc3a2cf44432d621a01005073dc6d76a1e87a"

# `learning_rate` defaults of the cookbook's RL recipes (recipes/*/train.py).
RL_RECIPE_LEARNING_RATES: dict[str, float] = {
    "math_rl": 1e-5,
    "code_rl": 1e-5,
    "harbor_rl": 1e-5,
    "verifiers_rl": 1e-5,
    "rubric": 1e-5,
    "multiplayer_rl": 3e-5,
    "search_tool": 4e-5,
    "rl_loop": 4e-5,
}

# get_lr: LR = 5e-5 x 10 (LoRA) x (2000 / hidden_size) ^ exponent; only Llama and Qwen are calibrated.
GET_LR_BASE = 5e-5
GET_LR_LORA_MULTIPLIER = 10.0
GET_LR_EXPONENTS = {"llama": 0.781, "qwen": 0.0775}
# _KNOWN_HIDDEN_SIZES, the Llama and Qwen entries.
HIDDEN_SIZES: dict[str, int] = {
    "meta-llama/Llama-3.2-1B": 2048,
    "meta-llama/Llama-3.2-3B": 3072,
    "meta-llama/Llama-3.1-8B": 4096,
    "meta-llama/Llama-3.1-8B-Instruct": 4096,
    "meta-llama/Llama-3.1-70B": 8192,
    "meta-llama/Llama-3.3-70B-Instruct": 8192,
    "Qwen/Qwen3-235B-A22B-Instruct-2507": 4096,
    "Qwen/Qwen3-30B-A3B-Instruct-2507": 2048,
    "Qwen/Qwen3-30B-A3B": 2048,
    "Qwen/Qwen3-30B-A3B-Base": 2048,
    "Qwen/Qwen3-32B": 5120,
    "Qwen/Qwen3-8B": 4096,
    "Qwen/Qwen3-8B-Base": 4096,
    "Qwen/Qwen3-4B-Instruct-2507": 2560,
    "Qwen/Qwen3-VL-235B-A22B-Instruct": 4096,
    "Qwen/Qwen3-VL-30B-A3B-Instruct": 2048,
    "Qwen/Qwen3.5-397B-A17B": 4096,
    "Qwen/Qwen3.5-35B-A3B": 2048,
    "Qwen/Qwen3.5-35B-A3B-Base": 2048,
    "Qwen/Qwen3.5-27B": 5120,
    "Qwen/Qwen3.5-9B": 4096,
    "Qwen/Qwen3.5-9B-Base": 4096,
    "Qwen/Qwen3.5-4B": 2560,
    "Qwen/Qwen3.6-27B": 5120,
    "Qwen/Qwen3.6-35B-A3B": 2048,
    "Qwen/Qwen3.8-27B": 5120,
}

# Losses that clip the importance ratio, which hyperparams.md requires for num_substeps > 1
# ("Splits batch into mini-batches. Requires PPO objective."): after the first optimizer substep
# the policy is no longer the sampler, and `importance_sampling` reweights by an unclipped ratio.
CLIPPED_LOSSES = frozenset({"ppo"})
DEFAULT_LOSS_FN = "importance_sampling"  # rl/train.py Config.loss_fn
# Losses the cookbook (0.6.1 rl/train.py) warns "can become unstable on the off-policy data that async
# training produces", naming 'stable_reinforce' (the async default) or a clipped loss such as 'ppo'.
OFF_POLICY_UNSTABLE_LOSSES = frozenset({"importance_sampling", "cispo"})


def training_loss_fn(config: dict) -> tuple[str, bool]:
    """(the loss the run trains with, whether it trains off-policy): rl/train.py `Config.training_loss_fn`
    (async_config's loss_fn for async runs) and async with max_steps_off_policy > 0."""
    async_config = config.get("async_config") if isinstance(config.get("async_config"), dict) else None
    loss = (async_config or {}).get("loss_fn") or config.get("loss_fn") or DEFAULT_LOSS_FN
    off_policy = async_config is not None and (async_config.get("max_steps_off_policy") or 0) > 0
    return str(loss), bool(off_policy)


def stabler_loss_advice(config: dict) -> str | None:
    """What to switch the RL loss to when updates are unstable, or None when the loss is already a clipped one.

    The Tinker notes: importance_sampling reweights by an unclipped ratio; `ppo` clips it and `cispo`
    clips the importance weights. Off-policy (async), the cookbook warns about cispo too.
    """
    loss, off_policy = training_loss_fn(config)
    if off_policy and loss in OFF_POLICY_UNSTABLE_LOSSES:
        return (
            f"loss_fn is `{loss}` on async off-policy data, which rl/train.py warns can become unstable: switch to "
            "`stable_reinforce` (the async default) or the clipped `ppo`."
        )
    if loss == DEFAULT_LOSS_FN:
        return (
            "loss_fn is `importance_sampling`, which reweights by an unclipped ratio: switch to a clipped objective, "
            "loss_fn `ppo` or `cispo`."
        )
    return None


def sft_lora_lr(model_name: str) -> float | None:
    """`hyperparam_utils.get_lr(model, is_lora=True)`, or None where the cookbook has no formula."""
    model = model_name.split(":", 1)[0]
    hidden = HIDDEN_SIZES.get(model)
    family = next((f for f in GET_LR_EXPONENTS if f in model.lower()), None)
    if hidden is None or family is None:
        return None
    return GET_LR_BASE * GET_LR_LORA_MULTIPLIER * (2000 / hidden) ** GET_LR_EXPONENTS[family]
