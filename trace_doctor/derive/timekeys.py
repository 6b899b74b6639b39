"""Parse `time/*` metric keys and know how the cookbook's timers nest (FORMATS.md 1.4).

Timer names are flat but spans nest: an outer span's seconds include its children's, so a
per-step breakdown must only add up top-level phases. Names that ran several times in a step
(`:total` with `:count` ≥ 2) are concurrent per-group spans whose totals exceed wall time; they
are never phases.
"""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.knowledge.tinker import (
    LOGPROB_CALLS,
    RECIPE_TIME_TOTAL_KEY,
    SAVE_FOR_SAMPLING_CALLS,
    TIME_PREFIX,
    TRAINING_SUBMIT_CALLS,
)

AGGREGATE_SUFFIXES = ("total", "count", "mean", "max")

# Keys that measure the whole iteration, not a phase of it.
WHOLE_STEP_NAMES = frozenset({"total"})

# Concurrent or per-group spans: their time overlaps the phases that wrap them (sampling,
# rollouts, evaluations), so even a single occurrence is not a phase of its own.
CONCURRENT_NAMES = frozenset(
    {
        "policy_sample",
        "env_step",
        "env_initial_observation",
        "compute_group_rewards",
        "do_group_rollout_and_filter_constant_reward",
        "trajectory_group_worker_task",
        "trajectory_group_worker",
        "run_single_evaluation",
        # SDK round trips run per group; 0.6.1 `sample` is not here: legacy `time/sample` is a phase.
        "sample_async",
        *LOGPROB_CALLS,
        "score_sequences",
    }
)

_DO_TRAIN = ("do_train_step_and_get_sampling_client", "do_train_step_streaming_and_get_sampling_client")

# child -> the spans that wrap it when they ran in the same step, innermost first. A child is
# only nested when one of its parents was logged in the same row (layouts changed across
# cookbook versions: `save_checkpoint` sits under `finish_batch` in SFT, under
# `save_checkpoint_and_get_sampling_client` in RL, and is top-level in legacy RL).
PARENTS: dict[str, tuple[str, ...]] = {
    # SFT: submit_batch ⊃ get_batch, evals, SDK submissions; finish_batch ⊃ save, step (result wait).
    "get_batch": ("submit_batch",),
    "evals": ("submit_batch",),
    "infrequent_evals": ("submit_batch",),
    "run_evaluator": ("evals", "infrequent_evals", "submit_batch"),
    "step": ("finish_batch",),
    "save_checkpoint_async": ("save_checkpoint", "save_checkpoint_and_get_sampling_client", "finish_batch"),
    "save_checkpoint": (
        "save_checkpoint_and_get_sampling_client",
        "finish_batch",
        "compute_full_batch_metrics_and_get_sampling_client",
        *_DO_TRAIN,
    ),
    # SDK calls (submit-only or round trip) sit inside the trainer's training phase.
    **{call: ("train_step", "train", "submit_batch", *_DO_TRAIN) for call in TRAINING_SUBMIT_CALLS},
    **{
        call: ("save_checkpoint", "save_checkpoint_and_get_sampling_client", *_DO_TRAIN)
        for call in SAVE_FOR_SAMPLING_CALLS
    },
    # 0.6.1 SDK `sample` calls inside the sampling phase; legacy `time/sample` is a top-level phase.
    "sample": ("sampling", "score_sequences"),
    # RL (HEAD): do_train_step ⊃ prepare_minibatch ⊃ incorporate_kl_penalty ⊃ compute_kl_penalty,
    # do_train_step ⊃ train ⊃ train_step, do_train_step ⊃ compute_full_batch_metrics ⊃ KL, save.
    "train_step": ("train", *_DO_TRAIN),
    "train": _DO_TRAIN,
    "prepare_minibatch": _DO_TRAIN,
    "assemble_training_data": ("prepare_minibatch", *_DO_TRAIN),
    "incorporate_kl_penalty": ("prepare_minibatch", *_DO_TRAIN),
    "compute_kl_penalty": ("incorporate_kl_penalty", "prepare_minibatch", *_DO_TRAIN),
    "kl_vs_base": ("incorporate_kl_penalty", "prepare_minibatch", *_DO_TRAIN),
    "compute_full_batch_metrics_and_get_sampling_client": _DO_TRAIN,
    "compute_kl_sample_train": ("compute_full_batch_metrics_and_get_sampling_client", *_DO_TRAIN),
    "compute_post_kl": _DO_TRAIN,
    "save_checkpoint_and_get_sampling_client": ("compute_full_batch_metrics_and_get_sampling_client", *_DO_TRAIN),
    "run_single_evaluation": ("run_evaluations_parallel", "run_evals"),
}


@dataclass(frozen=True)
class TimeKey:
    """A parsed `time/<name>[:agg]` metric key."""

    key: str
    name: str
    aggregate: str | None  # None for a single occurrence, else total|count|mean|max


def parse_time_key(key: str) -> TimeKey | None:
    """Parse a metric key into (span name, aggregate); None when it is not a timer key."""
    if key == RECIPE_TIME_TOTAL_KEY:
        return TimeKey(key, "total", None)
    if not key.startswith(TIME_PREFIX):
        return None
    name = key[len(TIME_PREFIX) :]
    aggregate = None
    head, sep, tail = name.rpartition(":")
    if sep and tail in AGGREGATE_SUFFIXES:
        name, aggregate = head, tail
    if not name:
        return None
    return TimeKey(key, name, aggregate)


def is_phase_name(name: str) -> bool:
    """Whether a single-occurrence timer can be a step phase (not a whole-step or loop timer)."""
    if name in WHOLE_STEP_NAMES or name in CONCURRENT_NAMES:
        return False
    # `train/fwd_bwd_substep_0_mb_1_enqueue`, `training_loop/total`, `sampling_time_max`: substeps
    # of a phase, whole async loops, or per-group statistics.
    return "/" not in name and not name.startswith("sampling_time_")


def parent_of(name: str, present: set[str]) -> str | None:
    """The innermost wrapping span of `name` that was logged in the same step, if any."""
    for parent in PARENTS.get(name, ()):
        if parent in present and parent != name:
            return parent
    return None


def phase_sources(columns: list[str]) -> dict[str, tuple[str, str | None]]:
    """Phase name -> (its `time/X` column, its `time/X:total` column or None), sorted by name.

    A phase is a timer that ran once per step in at least one row; in rows where it ran
    several times (sequentially, e.g. `compute_post_kl`) its `:total` stands in for it.
    """
    singles: dict[str, str] = {}
    totals: dict[str, str] = {}
    for column in columns:
        parsed = parse_time_key(column)
        if parsed is None or not is_phase_name(parsed.name):
            continue
        if parsed.aggregate is None:
            singles[parsed.name] = column
        elif parsed.aggregate == "total":
            totals[parsed.name] = column
    return {name: (singles[name], totals.get(name)) for name in sorted(singles)}
