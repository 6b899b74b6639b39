"""How old the sampling policy was: per-step lag in async/stream RL, and the KL sawtooth of a sync
sampler that is only refreshed at checkpoint saves.

Async and stream RL log which policy version generated each batch (`sampling_client/step_min|max|mean`;
0.6.1 async also `async/staleness_*`): lag = step − `sampling_client/step_min` (FORMATS 1.3). The
cookbook's async loop requeues groups more than `async_config.max_steps_off_policy` steps behind
(logging `Samples are too stale, requeuing` / `..., discarding (dataloader done)`), and the sync
stream loop samples every batch with the current weights, so its lag is 0 by construction
(rl/train.py, `do_sync_training_with_stream_minibatch`).

A sync loop refreshes the sampler after every step (`save_weights_and_get_sampling_client` on
non-save steps). A loop that only builds a sampling client from a saved checkpoint samples, between
saves, from the policy of the last save: the sampler-vs-trainer KL then grows with the steps since
that save and falls back when the next save refreshes it — a sawtooth whose teeth are the save
cadence (config `save_every`, or the saves in checkpoints.jsonl).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from trace_doctor.derive.training_health import sampler_saves
from trace_doctor.knowledge.tinker import (
    ASYNC_STALENESS_PREFIX,
    SAMPLER_STEP_PREFIX,
    TRAINING_CLIENT_STEP,
)
from trace_doctor.model import RunMeta


def _numeric(rows: pl.DataFrame, column: str) -> bool:
    return column in rows.columns and rows.schema[column].is_numeric()


def loop_mode(meta: RunMeta, rows: pl.DataFrame) -> str | None:
    """sync | stream | async for an RL-style loop: config first, else the keys the loop writes."""
    if meta.trainer_mode in ("sync", "stream", "async"):
        return meta.trainer_mode
    if meta.trainer_mode == "on_policy":
        return "sync"
    if _numeric(rows, TRAINING_CLIENT_STEP):
        return "async"
    if _numeric(rows, SAMPLER_STEP_PREFIX + "min"):
        return "stream"
    return None


def sampler_lag(rows: pl.DataFrame) -> pl.DataFrame | None:
    """Per training step: `lag_max` (steps behind of the oldest sample) and `lag_mean`, and the metric
    they come from; None when the run logs neither sampler steps nor async staleness."""
    if _numeric(rows, SAMPLER_STEP_PREFIX + "min"):
        mean = SAMPLER_STEP_PREFIX + "mean"
        frame = rows.select(
            "step",
            (pl.col("step") - pl.col(SAMPLER_STEP_PREFIX + "min")).cast(pl.Float64).alias("lag_max"),
            ((pl.col("step") - pl.col(mean)) if _numeric(rows, mean) else pl.lit(None))
            .cast(pl.Float64)
            .alias("lag_mean"),
        )
        source = f"step − {SAMPLER_STEP_PREFIX}min"
    elif _numeric(rows, ASYNC_STALENESS_PREFIX + "max"):
        mean = ASYNC_STALENESS_PREFIX + "mean"
        frame = rows.select(
            "step",
            pl.col(ASYNC_STALENESS_PREFIX + "max").cast(pl.Float64).alias("lag_max"),
            (pl.col(mean) if _numeric(rows, mean) else pl.lit(None)).cast(pl.Float64).alias("lag_mean"),
        )
        source = f"{ASYNC_STALENESS_PREFIX}max"
    else:
        return None
    frame = frame.filter(pl.col("lag_max").is_not_null() & pl.col("lag_max").is_finite())
    if frame.is_empty():
        return None
    return frame.with_columns(pl.lit(source).alias("source"))


def _as_int(value) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value == value else None


def save_steps(meta: RunMeta, checkpoints: pl.DataFrame, first: int, last: int) -> tuple[list[int], str] | None:
    """The steps at which the sampler could be refreshed from a save within [first, last], and where they
    come from: the checkpoints the run recorded with sampler weights (what happened), else config
    `save_every` (what was asked). Rolling checkpoints hold no sampler weights and do not count."""
    batches = [b for b in sampler_saves(checkpoints) if first < b <= last]
    if len(batches) >= 2:
        return batches, "checkpoints.jsonl"
    every = _as_int(meta.config.get("save_every"))
    if every and every > 0:
        batches = [s for s in range(every * (first // every + 1), last + 1, every)]
        return batches, f"config save_every = {every}"
    return None


def _rank(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), for a Spearman correlation."""
    return pl.Series(values).rank("average").to_numpy().astype(np.float64)


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman rank correlation, None when either side is constant or there are fewer than 3 pairs."""
    if x.size < 3:
        return None
    rx, ry = _rank(x), _rank(y)
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


@dataclass(frozen=True)
class Sawtooth:
    """What the KL series shows against the save cadence.

    `resets`: saves with a KL value at the save step and just before it (each closes one period);
    `teeth`: those where the KL fell by at least the drop factor when the save refreshed the sampler;
    `correlation`: Spearman correlation of KL with steps since the last save, over every step.
    """

    metric: str
    saves: list[int]
    cadence_source: str
    resets: int
    teeth: int
    tooth_steps: list[int]
    correlation: float | None
    fresh_median: float
    stale_median: float
    stale_steps: list[int]

    @property
    def tooth_share(self) -> float:
        return self.teeth / self.resets if self.resets else 0.0

    def shows(self, *, min_periods: int, min_share: float, min_correlation: float) -> bool:
        """Whether the KL follows the save cadence: enough teeth, most resets teeth, KL rising between saves."""
        return (
            self.teeth >= min_periods
            and self.tooth_share >= min_share
            and self.correlation is not None
            and self.correlation >= min_correlation
        )


def kl_sawtooth(
    rows: pl.DataFrame, column: str, saves: list[int], cadence_source: str, *, min_drop: float
) -> Sawtooth | None:
    """The KL (`column`, per live training row) against the saves; None without two saves inside the series.

    A save at step s refreshes the sampler used *at* step s (the sync loop saves checkpoint s after
    training step s−1), so s is a fresh step and s−1 the stalest of its period.
    """
    values = rows.filter(pl.col(column).is_not_null() & pl.col(column).is_finite()).select(
        "step", pl.col(column).abs().alias("kl")
    )
    if values.height < 3:
        return None
    steps = values["step"].to_numpy()
    kl = values["kl"].to_numpy().astype(np.float64)
    first = int(steps.min())
    inside = [s for s in saves if first < s <= int(steps.max())]
    if len(inside) < 2:
        return None
    boundaries = np.array([first, *inside])
    since = steps - boundaries[np.searchsorted(boundaries, steps, side="right") - 1]
    by_step = dict(zip(steps.tolist(), kl.tolist(), strict=True))
    resets = teeth = 0
    tooth_steps: list[int] = []
    for s in inside:
        if s in by_step and (s - 1) in by_step:
            resets += 1
            if by_step[s - 1] >= min_drop * max(by_step[s], 1e-12):
                teeth += 1
                tooth_steps.append(s)
    fresh = kl[since == 0]
    stale = since >= max(1, int(np.median(np.diff(boundaries))) // 2)
    return Sawtooth(
        metric=column,
        saves=inside,
        cadence_source=cadence_source,
        resets=resets,
        teeth=teeth,
        tooth_steps=tooth_steps,
        correlation=spearman(since.astype(np.float64), kl),
        fresh_median=float(np.median(fresh)) if fresh.size else float("nan"),
        stale_median=float(np.median(kl[stale])) if stale.any() else float("nan"),
        stale_steps=[int(s) for s in steps[since > 0]],
    )


def run_kl_sawtooth(
    meta: RunMeta, rows: pl.DataFrame, checkpoints: pl.DataFrame, kl_columns: dict[str, str], *, min_drop: float
) -> tuple[Sawtooth | None, str]:
    """The sawtooth of a sync loop's KL (v2 first: always ≥ 0) against its saves, or None and why not."""
    mode = loop_mode(meta, rows)
    if mode in ("async", "stream"):
        return None, f"a {mode} loop: its staleness is logged per step, not read from a KL sawtooth"
    if not kl_columns:
        return None, "no optim/kl_sample_train_v1/_v2 in metrics"
    column = kl_columns.get("v2") or kl_columns["v1"]
    present = rows.filter(pl.col(column).is_not_null())
    if present.height < 3:
        return None, f"fewer than 3 steps with `{column}`"
    first, last = int(present["step"].min()), int(present["step"].max())
    cadence = save_steps(meta, checkpoints, first, last)
    if cadence is None:
        return None, "no save cadence (config save_every, or checkpoints.jsonl with sampler weights)"
    saves, source = cadence
    found = kl_sawtooth(rows, column, saves, source, min_drop=min_drop)
    if found is None:
        return None, f"fewer than 2 saves ({source}) inside steps {first}-{last}: no period to compare"
    return found, ""
