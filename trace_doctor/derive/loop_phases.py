"""Where a step's time went by the loop's structure: its timed phases by what the loop does in them,
and the untimed remainder of the step's timer named when the loop is known to leave a phase untimed.

Facts, no verdict. A metrics-only run has no spans, yet its `time/*` keys say which phases the loop
timed (derive/step_times: top-level phases only, spans nest) and `time/total` minus those phases is
what it did not time. The cookbook's synchronous RL loop before the window timers (2025-10-30 to
2026-03-17, FORMATS.md 1.4) times training, KL, data assembly, evaluations and checkpoints but not
its sampling: the untimed remainder of each step *is* the rollouts (sampling plus reward
computation). That reading needs the loop's training phase timed in the row (the cookbook's loop,
not a custom one writing only `time/total`) and no timed sampling phase anywhere in the run.

A rollout's untimed seconds follow the step's generated tokens only loosely (a batch waits for its
slowest sample), so the remainder is named sampling up to `excess_factor` times the larger of the
run's typical untimed step and what the step's tokens predict at the run's median rate; the rest of
a step's untimed time (an hour with no more tokens than usual: the host asleep) stays unnamed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from trace_doctor.derive.robust import median
from trace_doctor.derive.step_times import live_training_rows, phase_names
from trace_doctor.knowledge.tinker import (
    CHECKPOINT_PHASES,
    EVAL_PHASES,
    RESULT_WAIT_PHASES,
    RL_ENV_PREFIX,
    SAMPLER_STEP_PREFIX,
)

SAMPLING_PHASES = ("sample", "sampling")
TRAINING_PHASES = (
    "train",
    "train_step",
    "do_train_step_and_get_sampling_client",
    "do_train_step_streaming_and_get_sampling_client",
    "submit_batch",
    "get_ref_logprobs",
)
# What the loop does in each top-level phase; a phase not named here is "other timed work" (KL,
# data assembly, metrics).
PART_PHASES: dict[str, tuple[str, ...]] = {
    "sampling": SAMPLING_PHASES,
    "training on the service": TRAINING_PHASES,
    # SFT/DPO result waits (`step`) and the finish around them: the account's service work when counted.
    "waiting for training results": RESULT_WAIT_PHASES,
    "evaluations": EVAL_PHASES,
    "checkpoints": (*CHECKPOINT_PHASES, "save_checkpoint_and_get_sampling_client"),
    "loading batches": ("get_batch",),
}
OTHER_PART = "other timed work"
UNTIMED_SAMPLING_PART = "sampling and reward computation (untimed by the cookbook)"
# The sync RL loop's own training phase: timed in a row, the row is the cookbook loop's.
SYNC_RL_TRAINING = ("train", "do_train_step_and_get_sampling_client")
CONCURRENT_SAMPLING_MODES = ("async", "stream")
TOKENS_KEY = f"{RL_ENV_PREFIX}total_ac_tokens"
EPISODES_KEY = f"{RL_ENV_PREFIX}total_episodes"
TIME_TOTAL_SOURCE = "time/total"
# Time the rest: the trace's spans time every phase, the sampling calls included.
TO_TIME_REST = "enable_trace=True would time it: every phase and SDK call as a span"
# Fewer steps than this give no correlation worth reporting.
MIN_CORRELATION_STEPS = 5


@dataclass(frozen=True)
class LoopPart:
    """One part of the steps' time: a group of top-level phases, or the named untimed remainder."""

    part: str
    phases: tuple[str, ...]  # the `time/<name>` phases summed; empty for the untimed remainder
    seconds: float  # over all steps
    steps: int  # steps it ran in
    median_step_s: float  # median seconds per step where it ran
    timed: bool  # False: the untimed remainder, named by the loop's structure

    def to_dict(self) -> dict:
        return {
            "part": self.part,
            "phases": list(self.phases),
            "seconds": round(self.seconds, 6),
            "steps": self.steps,
            "median_step_s": round(self.median_step_s, 6),
            "timed": self.timed,
        }


@dataclass(frozen=True)
class LoopPhases:
    """The steps' time by the loop's structure (see module docstring)."""

    steps: int
    median_step_s: float
    parts: tuple[LoopPart, ...]  # largest first
    unnamed_s: float  # untimed seconds no structure names (an unknown loop, or beyond what sampling explains)
    untimed_named: str | None  # what the untimed remainder is, when the loop's structure says
    evidence: dict  # tokens and episodes per step, correlation of untimed seconds with tokens
    to_time_rest: str  # what would time the unnamed rest
    # segment, step, total_s, untimed_s, named_s (the remainder named), expected_s, tokens
    per_step: pl.DataFrame = field(compare=False, repr=False)

    def part(self, name: str) -> LoopPart | None:
        return next((p for p in self.parts if p.part == name), None)

    def to_dict(self) -> dict:
        return {
            "steps": self.steps,
            "median_step_s": round(self.median_step_s, 6),
            "parts": [p.to_dict() for p in self.parts],
            "unnamed_s": round(self.unnamed_s, 6),
            "untimed_named": self.untimed_named,
            "evidence": self.evidence,
            "to_time_rest": self.to_time_rest,
        }


def _part_of(phase: str) -> str:
    return next((part for part, names in PART_PHASES.items() if phase in names), OTHER_PART)


def _with_tokens(times: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """The step-time rows with the step's generated tokens and episodes (null where not logged)."""
    wanted = [c for c in (TOKENS_KEY, EPISODES_KEY) if c in steps.columns and steps.schema[c].is_numeric()]
    out = times
    if wanted:
        rows = live_training_rows(steps).select(
            pl.col("segment").cast(pl.Int32),
            pl.col("step").cast(pl.Int64),
            *[pl.col(c).cast(pl.Float64) for c in wanted],
        )
        out = times.join(rows, on=["segment", "step"], how="left")
    for column in (TOKENS_KEY, EPISODES_KEY):
        if column not in out.columns:
            out = out.with_columns(pl.lit(None, dtype=pl.Float64).alias(column))
    return out.rename({TOKENS_KEY: "tokens", EPISODES_KEY: "episodes"})


def _spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < MIN_CORRELATION_STEPS or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    return float(np.corrcoef(rx, ry)[0, 1])


def _untimed_is_sampling(
    times: pl.DataFrame, steps: pl.DataFrame, trainer: str | None, mode: str | None, phases: list[str]
) -> pl.Series:
    """Rows whose untimed remainder is the sync RL loop's untimed sampling (module docstring). Async and
    stream loops sample concurrently with training (their `sampling_client/step_*` keys say so when the
    config does not): what their step timer leaves out is not the step's own sampling."""
    concurrent = mode in CONCURRENT_SAMPLING_MODES or any(c.startswith(SAMPLER_STEP_PREFIX) for c in steps.columns)
    if trainer != "rl" or concurrent or any(p in phases for p in SAMPLING_PHASES):
        return pl.Series([False] * times.height)
    training = [f"phase:{p}" for p in SYNC_RL_TRAINING if p in phases]
    if not training or "total_source" not in times.columns:
        return pl.Series([False] * times.height)
    return times.select(
        (pl.any_horizontal([pl.col(c).is_not_null() for c in training]) & (pl.col("total_source") == TIME_TOTAL_SOURCE))
        .fill_null(False)
        .alias("sampling")
    ).to_series()


def loop_phases(
    times: pl.DataFrame, steps: pl.DataFrame, trainer: str | None, *, excess_factor: float, mode: str | None = None
) -> LoopPhases | None:
    """The steps' time by the loop's structure; None without timed steps.

    `times`: derive/step_times; `steps`: the run's metrics rows (for the generated tokens);
    `trainer`, `mode`: the run's trainer and loop mode (rl: sync | stream | async);
    `excess_factor`: how far above the typical untimed step a remainder is still named sampling.
    """
    if times.is_empty() or "total_s" not in times.columns:
        return None
    times = times.filter(pl.col("total_s").is_not_null() & pl.col("total_s").is_finite())
    if times.is_empty():
        return None
    phases = phase_names(times)
    parts: list[LoopPart] = []
    for part in [*PART_PHASES, OTHER_PART]:
        names = [p for p in phases if _part_of(p) == part]
        if not names:
            continue
        per_step = times.select(
            pl.sum_horizontal([pl.col(f"phase:{p}") for p in names]).alias("s"),
            pl.any_horizontal([pl.col(f"phase:{p}").is_not_null() for p in names]).alias("ran"),
        )
        ran = per_step.filter("ran")["s"]
        if ran.is_empty() or float(ran.sum()) <= 0:
            continue
        parts.append(LoopPart(part, tuple(names), float(ran.sum()), ran.len(), median(ran) or 0.0, True))

    # A row without any phase timed is all untimed.
    untimed = pl.coalesce(pl.col("untimed_s"), pl.col("total_s")).clip(lower_bound=0.0)
    frame = _with_tokens(times, steps).with_columns(
        untimed.alias("untimed_s"), _untimed_is_sampling(times, steps, trainer, mode, phases).alias("_named")
    )
    named_rows = frame.filter("_named")
    evidence: dict = {}
    untimed_named = None
    if named_rows.height:
        untimed_named = UNTIMED_SAMPLING_PART
        typical = median(named_rows["untimed_s"]) or 0.0
        with_tokens = named_rows.filter(pl.col("tokens").is_not_null() & (pl.col("tokens") > 0))
        rate = median(with_tokens["untimed_s"] / with_tokens["tokens"]) if with_tokens.height else None
        predicted = pl.col("tokens") * rate if rate is not None else pl.lit(None, dtype=pl.Float64)
        expected = pl.max_horizontal(pl.lit(typical), predicted.fill_null(typical))
        frame = frame.with_columns(
            pl.when("_named").then(expected).otherwise(None).alias("expected_s"),
        ).with_columns(
            pl.when("_named")
            .then(pl.min_horizontal(pl.col("untimed_s"), pl.col("expected_s") * excess_factor))
            .otherwise(0.0)
            .alias("named_s")
        )
        named = frame.filter("_named")["named_s"]
        parts.append(LoopPart(UNTIMED_SAMPLING_PART, (), float(named.sum()), named.len(), median(named) or 0.0, False))
        evidence = {
            "steps": named_rows.height,
            "tokens_per_step": median(with_tokens["tokens"]),
            "episodes_per_step": median(named_rows["episodes"]),
            "seconds_per_1k_tokens": round(rate * 1000, 6) if rate is not None else None,
            "untimed_tokens_correlation": _spearman(
                with_tokens["untimed_s"].to_numpy(), with_tokens["tokens"].to_numpy()
            ),
            "typical_untimed_s": round(typical, 6),
        }
        corr = evidence["untimed_tokens_correlation"]
        evidence["untimed_tokens_correlation"] = round(corr, 4) if corr is not None else None
    else:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias("expected_s"), pl.lit(0.0).alias("named_s"))
    unnamed = float((frame["untimed_s"] - frame["named_s"]).clip(lower_bound=0.0).sum())
    return LoopPhases(
        steps=times.height,
        median_step_s=median(times["total_s"]) or 0.0,
        parts=tuple(sorted(parts, key=lambda p: -p.seconds)),
        unnamed_s=unnamed,
        untimed_named=untimed_named,
        evidence=evidence,
        to_time_rest=TO_TIME_REST,
        per_step=frame.select("segment", "step", "total_s", "untimed_s", "named_s", "expected_s", "tokens"),
    )
