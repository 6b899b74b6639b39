"""Per-step RL quality series shared by the training-quality rules: metric lookup by key family,
per-group reward statistics from the rollout summaries, and the early/late windows of a series.

Metric keys are matched by suffix (FORMATS.md 1.3): `env/all/by_group/frac_mixed`, `env/<tag>/...`
and a fork's `env_true/all/...` are one family; `test/...` and `eval/...` keys are evaluations, not
training, and are never read here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from trace_doctor.ingest.parsers.rollouts import LENGTH_STOPS
from trace_doctor.knowledge.tinker import EVAL_KEY_PREFIXES

# Evaluation key prefixes: their values describe held-out prompts, not the batches trained on.
# (the shared eval prefixes, plus custom loops' validation splits)
EVAL_PREFIXES = (*EVAL_KEY_PREFIXES, "validation/", "val/")
# The cookbook's "good" cut for a constant group (rl/metrics.py `_compute_by_group_metrics`).
GOOD_REWARD = 0.5


def training_column(columns: list[str], suffix: str) -> str | None:
    """The training metric of this key family: `env/all/<suffix>` first, else the first other
    `.../<suffix>` (or the bare key), never an evaluation key."""
    preferred = f"env/all/{suffix}"
    if preferred in columns:
        return preferred
    for name in sorted(columns):
        if name.startswith(EVAL_PREFIXES):
            continue
        if name == suffix or name.endswith("/" + suffix):
            return name
    return None


def series(rows: pl.DataFrame, column: str) -> pl.DataFrame:
    """(step, value) of one numeric column on live training rows, finite values only."""
    if column not in rows.columns or not rows.schema[column].is_numeric():
        return pl.DataFrame(schema={"step": pl.Int64, "value": pl.Float64})
    frame = rows.select("step", pl.col(column).cast(pl.Float64).alias("value"))
    return frame.filter(pl.col("value").is_not_null() & pl.col("value").is_finite())


@dataclass(frozen=True)
class Windows:
    """The first and last stretches of a series, each max(min_len, share x length) points."""

    early: list[float]
    late: list[float]
    late_steps: list[int]

    @staticmethod
    def of(frame: pl.DataFrame, *, share: float, min_len: int, early_len: int | None = None) -> Windows:
        """`early_len` fixes the early window's length (the starting level, before a fast change)."""
        values = frame["value"].to_list()
        steps = frame["step"].to_list()
        size = max(min_len, math.ceil(share * len(values)))
        size = min(size, len(values) // 2) if len(values) >= 2 else len(values)
        first = size if early_len is None else min(early_len, size)
        return Windows(values[:first], values[-size:], [int(s) for s in steps[-size:]])


def median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return math.nan
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def group_table(rollouts: pl.DataFrame) -> pl.DataFrame:
    """One row per (iteration, group) of the training rollouts: size, reward min/max/mean, whether
    the reward is constant (exactly, as the cookbook's `all_same`) and whether that constant is "good"."""
    train = rollouts.filter(
        (pl.col("split").is_null() | (pl.col("split") == "train")) & pl.col("iteration").is_not_null()
    )
    if train.is_empty():
        return pl.DataFrame(
            schema={
                "iteration": pl.Int64,
                "group_idx": pl.Int64,
                "size": pl.UInt32,
                "reward_min": pl.Float64,
                "reward_max": pl.Float64,
                "reward_mean": pl.Float64,
                "constant": pl.Boolean,
                "good": pl.Boolean,
            }
        )
    return (
        train.group_by("iteration", "group_idx")
        .agg(
            pl.len().alias("size"),
            pl.col("total_reward").min().alias("reward_min"),
            pl.col("total_reward").max().alias("reward_max"),
            pl.col("total_reward").mean().alias("reward_mean"),
        )
        .with_columns(
            (pl.col("reward_min") == pl.col("reward_max")).alias("constant"),
            (pl.col("reward_min") >= GOOD_REWARD).alias("good"),
        )
        .sort("iteration", "group_idx")
    )


def constant_shares_from_rollouts(rollouts: pl.DataFrame) -> pl.DataFrame:
    """Per iteration: groups, and the shares of all-good / all-bad constant groups (exact)."""
    groups = group_table(rollouts)
    return (
        groups.group_by("iteration")
        .agg(
            pl.len().alias("groups"),
            (pl.col("constant") & pl.col("good")).mean().alias("all_good"),
            (pl.col("constant") & ~pl.col("good")).mean().alias("all_bad"),
            pl.col("size").median().alias("group_size"),
        )
        .with_columns((pl.col("all_good") + pl.col("all_bad")).alias("constant"))
        .rename({"iteration": "step"})
        .sort("step")
    )


def truncation_from_rollouts(rollouts: pl.DataFrame, max_tokens: int | None) -> pl.DataFrame:
    """Per iteration: trajectories, and the share whose last turn was cut at the cap (its stop reason
    says so, or its action length reached `max_tokens`)."""
    train = rollouts.filter(
        (pl.col("split").is_null() | (pl.col("split") == "train")) & pl.col("iteration").is_not_null()
    )
    cut = pl.col("last_stop_reason").is_in(list(LENGTH_STOPS)).fill_null(False)
    if max_tokens is not None:
        cut = cut | (pl.col("last_ac_len") >= max_tokens).fill_null(False)
    known = pl.col("last_stop_reason").is_not_null() | pl.lit(max_tokens is not None)
    return (
        train.filter(known)
        .group_by("iteration")
        .agg(pl.len().alias("samples"), cut.mean().alias("value"))
        .rename({"iteration": "step"})
        .sort("step")
    )
