"""Thresholds of the rules that judge a run's configuration: renderer choice and risky settings."""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import POSITIVE, Bounds, threshold


@dataclass(frozen=True)
class RendererModelMismatchPolicy:
    max_sft_step0_nll: float = threshold(
        2.0,
        unit="nats per token",
        why="SFT / DPO: the first `test/nll` (base weights) or `train_mean_nll` above this is far above what "
        "a model scores on text in its own chat template: the cookbook's chat SFT sweep treats test NLL > 2.0 "
        "as divergence, where Qwen3-8B ends at about 0.55 test / 0.61 train (FORMATS.md 1.5, "
        "recipes/chat_sl/results/sft_sweep.md). Per-token NLL depends on the tokenizer, hence low confidence.",
        bounds=POSITIVE,
    )
    min_worse_than_uniform_nll: float = threshold(
        12.5,
        unit="nats per token",
        why="ln(268,000): above ln(vocabulary size) of every model in the cookbook's registry (Llama 3 128,256 "
        "-> 11.76, Qwen3 151,936 -> 11.93, gpt-oss 201,088 -> 12.21, Qwen3.5 248,320 -> 12.42). A step-0 NLL "
        "above it scores the targets worse than guessing uniformly over the vocabulary, which no chat "
        "template does (a wrong one costs a few nats): the targets, the tokens or the loss weights are wrong.",
        bounds=POSITIVE,
    )


@dataclass(frozen=True)
class ConfigRiskPolicy:
    max_rl_learning_rate: float = threshold(
        4e-4,
        unit="learning rate (LoRA)",
        why="Ten times the highest RL recipe default, 4e-5 (recipes/rl_loop.py, search_tool; math_rl, code_rl "
        "use 1e-5; hyperparams.md: Math GRPO 4e-5, multi-turn RL 1e-5). It is about the SFT LoRA rate "
        "hyperparam_utils.get_lr gives (5e-4 x (2000 / hidden)^0.0775 = 4.7e-4 for Qwen3-8B), and "
        "hyperparams.md says RL LR should be lower than SFT.",
        bounds=POSITIVE,
    )
    min_rl_learning_rate: float = threshold(
        1e-6,
        unit="learning rate (LoRA)",
        why="A tenth of the lowest RL recipe default, 1e-5 (math_rl, code_rl, verifiers_rl, rubric): an order "
        "of magnitude below the usual range the policy barely moves.",
        bounds=POSITIVE,
    )
    max_sft_lr_over_get_lr: float = threshold(
        10.0,
        unit="x hyperparam_utils.get_lr(model)",
        why="SFT with LoRA: get_lr gives the cookbook's recommended rate for the model (5e-4 x (2000 / hidden "
        "size)^exponent, Llama and Qwen). An order of magnitude above it the updates are too large for LoRA "
        "(loss spikes, divergence) — the same order-of-magnitude margin the RL learning-rate check uses.",
        bounds=Bounds(1.0, None, low_open=True),
    )
    min_sft_lr_over_get_lr: float = threshold(
        0.1,
        unit="x hyperparam_utils.get_lr(model)",
        why="An order of magnitude below get_lr is the full-fine-tuning rate used with LoRA (get_lr's LoRA "
        "multiplier is 10, 'LoRA Without Regret'): the adapter barely moves in the steps the run has.",
        bounds=Bounds(0.0, 1.0, low_open=True, high_open=True),
    )


@dataclass(frozen=True)
class CheckpointRiskPolicy:
    min_safe_ttl_s: float = threshold(
        86400.0,
        unit="s",
        why="Periodic checkpoints are saved with config ttl_seconds (cookbook default 604800 s, 7 days) and "
        "only the final one without a TTL (checkpoint_utils.CheckpointManager). With no final checkpoint, a TTL "
        "shorter than a day deletes the run's only weights before a crash found the next morning can be "
        "resumed or a checkpoint picked: warning; a longer one is a reminder (info).",
        bounds=POSITIVE,
    )
