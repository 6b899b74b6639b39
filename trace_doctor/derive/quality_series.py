"""The training-quality metrics of a run, by family, and their values in a final window.

A family is one quality signal whatever the trainer spelled it: the mean total reward is
`env/all/reward/total` in `rl/train.py` and `reward/total` in `recipes/rl_loop.py`; an eval's is
`test/env/all/reward/total` (or `test/test/…` when an evaluator named `test` is prefixed again).
Eval and training keys are separate families: an eval reward is measured on held-out prompts with
the current weights, so it is the better quality signal when a run has it (FORMATS.md 1.3).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from trace_doctor.knowledge.tinker import is_eval_key

# `final_reward`: custom trainers built on ml_log (e.g. act-prm: `eval/final_reward`, `train/try_0/final_reward`).
REWARD_SUFFIXES = ("reward/total", "reward/mean", "final_reward")


def _by_preference(keys: list[str], *ranks: Callable[[str], bool]) -> str | None:
    """The key matching the earliest rank; ties broken by the shorter, then alphabetically first key."""
    for rank in ranks:
        hits = sorted((k for k in keys if rank(k)), key=lambda k: (len(k), k))
        if hits:
            return hits[0]
    return None


def _eval_reward(keys: list[str]) -> str | None:
    rewards = [k for k in keys if is_eval_key(k) and k.endswith(REWARD_SUFFIXES)]
    return _by_preference(rewards, lambda k: "env/all/" in k, lambda k: True)


def _train_reward(keys: list[str]) -> str | None:
    rewards = [k for k in keys if not is_eval_key(k) and k.endswith(REWARD_SUFFIXES)]
    # env/all/ covers every group; env/<tag>/ only a subset; bare reward/* is the minimal recipes'.
    return _by_preference(
        rewards,
        lambda k: k.startswith("env/all/"),
        lambda k: k in REWARD_SUFFIXES,
        lambda k: k.startswith("env/"),
        lambda k: True,
    )


def _eval_nll(keys: list[str]) -> str | None:
    return _by_preference([k for k in keys if is_eval_key(k) and k.endswith("/nll")], lambda k: True)


def _exact(name: str) -> Callable[[list[str]], str | None]:
    return lambda keys: name if name in keys else None


def _kl(version: str) -> Callable[[list[str]], str | None]:
    def pick(keys: list[str]) -> str | None:
        return _by_preference([k for k in keys if not is_eval_key(k) and k.endswith(version)], lambda k: True)

    return pick


def _entropy(keys: list[str]) -> str | None:
    return _by_preference([k for k in keys if not is_eval_key(k) and k.split("/")[-1] == "entropy"], lambda k: True)


KL_AXES = ("kl_v1", "kl_v2")


@dataclass(frozen=True)
class Family:
    name: str  # for people: "eval reward"
    axis: str  # what it measures: reward | loss | kl_v1 | kl_v2 | entropy; one decisive family per axis
    worse: str  # "lower" | "higher"
    pick: Callable[[list[str]], str | None]  # the run's key of this family, or None
    # Per-token NLL is only comparable between runs with one tokenizer (FORMATS.md 1.5).
    same_model: bool = False
    # Measured on each step's own training batch: comparable step for step only with the same batches.
    per_batch: bool = False
    # On-policy distillation has no env reward (reward 0, every group all-bad: expected there).
    not_for: tuple[str, ...] = ()


# In the order a family is preferred within its axis: an eval measure before a training one.
FAMILIES: tuple[Family, ...] = (
    Family("eval reward", "reward", "lower", _eval_reward, not_for=("distillation",)),
    Family("training reward", "reward", "lower", _train_reward, per_batch=True, not_for=("distillation",)),
    Family("eval NLL", "loss", "higher", _eval_nll, same_model=True),
    Family("teacher KL", "loss", "higher", _exact("teacher_kl")),
    Family("training NLL", "loss", "higher", _exact("train_mean_nll"), same_model=True, per_batch=True),
    # Both KL estimators, each on its own: the stable band (< 0.01) is written for v1, whose mean of
    # signed differences can cancel; v2 (0.5 mean squared) cannot (FORMATS.md 1.5). |v1| is compared.
    Family("sampler-trainer KL v1", "kl_v1", "higher", _kl("kl_sample_train_v1")),
    Family("sampler-trainer KL v2", "kl_v2", "higher", _kl("kl_sample_train_v2")),
    # Entropy per token depends on the tokenizer and model family as NLL does.
    Family("entropy", "entropy", "lower", _entropy, same_model=True),
)
# The axis that says whether training worked; KL and entropy are health signals beside it.
PRIMARY_AXES = ("reward", "loss")


def numeric_keys(steps: pl.DataFrame) -> list[str]:
    return [c for c, t in steps.schema.items() if t.is_numeric() and c not in ("step", "segment", "line")]


def series(steps: pl.DataFrame, key: str, *, absolute: bool = False) -> list[tuple[int, float]]:
    """(step, value) of one metric: finite values only, rows a later launch rewrote left out, the last
    row of a step kept (an async eval row and its training row carry different keys, so both count)."""
    if key not in steps.columns or "step" not in steps.columns:
        return []
    frame = steps.filter(pl.col("step").is_not_null() & pl.col(key).is_not_null())
    if "superseded" in frame.columns:
        frame = frame.filter(~pl.col("superseded").fill_null(False))
    frame = frame.select("step", pl.col(key).cast(pl.Float64).alias("v")).unique("step", keep="last")
    values = [(int(s), float(v)) for s, v in frame.sort("step").iter_rows() if math.isfinite(v)]
    return [(s, abs(v)) for s, v in values] if absolute else values


@dataclass(frozen=True)
class Window:
    """The final window both runs are compared over: steps `first`..`last` of the matched horizon."""

    first: int
    last: int  # the matched horizon: the last step both runs reached with this metric
    baseline_last: int
    candidate_last: int

    @property
    def truncated(self) -> str | None:
        """Which run was cut to the other's horizon, if any."""
        if self.baseline_last > self.last:
            return "baseline"
        if self.candidate_last > self.last:
            return "candidate"
        return None

    def to_dict(self) -> dict[str, int | str | None]:
        return {
            "first_step": self.first,
            "last_step": self.last,
            "baseline_last_step": self.baseline_last,
            "candidate_last_step": self.candidate_last,
            "truncated": self.truncated,
        }


def final_window(
    base: list[tuple[int, float]], cand: list[tuple[int, float]], share: float, *, min_points: int, max_share: float
) -> Window:
    """The last `share` of the steps up to the horizon both series reach (both must be non-empty),
    widened toward `max_share` until both have `min_points` values: sparse evals need a longer window."""
    start = min(base[0][0], cand[0][0])
    last = min(base[-1][0], cand[-1][0])
    length = last - start + 1
    width = max(1, math.ceil(share * length))
    widest = max(width, math.ceil(max_share * length))
    while (
        width < widest and min(_count(base, last - width + 1, last), _count(cand, last - width + 1, last)) < min_points
    ):
        width += 1
    return Window(max(start, last - width + 1), last, base[-1][0], cand[-1][0])


def _count(values: list[tuple[int, float]], first: int, last: int) -> int:
    return sum(1 for s, _ in values if first <= s <= last)


# Config keys that decide which prompts (or examples) a step trains on. Two runs that differ in one
# measure their per-step training reward / loss on different data at the same step, so those are
# not compared step for step (an eval on a fixed held-out set still is).
BATCH_KEYS = ("groups_per_batch", "group_size", "batch_size")


def batch_shape(config: dict) -> dict[str, object]:
    """The batch-defining settings found anywhere in config.json (the first occurrence of each)."""
    found: dict[str, object] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in BATCH_KEYS and key not in found and isinstance(value, (int, float)):
                    found[key] = value
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    return found


def batch_difference(base: dict, cand: dict) -> str | None:
    """The batch settings both configs spell and that differ, for people; None when none does."""
    changed = [f"{k} {base[k]} vs {cand[k]}" for k in BATCH_KEYS if k in base and k in cand and base[k] != cand[k]]
    return ", ".join(changed) or None


def in_window(values: list[tuple[int, float]], window: Window) -> list[float]:
    return [v for s, v in values if window.first <= s <= window.last]
