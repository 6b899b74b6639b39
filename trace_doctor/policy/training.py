"""Thresholds of the training-quality rules (KL); the healthy KL band itself is shared (SharedPolicy)."""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import AT_LEAST_ONE, POSITIVE, SHARE, Bounds, threshold


@dataclass(frozen=True)
class RendererKlStep0Policy:
    max_teacher_kl_step0: float = threshold(
        0.1,
        unit="nats per token",
        why="Distillation: a student/teacher renderer mismatch measured +0.287 nats/token (cookbook #796).",
        bounds=POSITIVE,
    )
    min_teacher_steps_for_trend: int = threshold(
        4,
        unit="steps",
        why="Distillation: with this many teacher_kl values, a high first value that falls to the band by the "
        "last quarter is a student-teacher gap training closed, not a renderer bias (which persists); fewer "
        "cannot tell the two apart and the finding says so.",
        bounds=AT_LEAST_ONE,
    )
    min_peer_runs: int = threshold(
        2,
        unit="other runs",
        why="In a folder of runs, the first KL is compared with this many other runs of the same model and "
        "renderer at least: one peer cannot tell the model's normal level from a shared mistake.",
        bounds=AT_LEAST_ONE,
    )
    peer_outlier_ratio: float = threshold(
        3.0,
        unit="x the peers' median first-step KL",
        why="A first KL this many times its peers' median is this run's own (an outlier: stronger evidence of a "
        "mismatch); within it, peers above the healthy band start alike, which is the model's normal level "
        "(MoE numerics, a recipe's prompts), not this run's mistake.",
        bounds=Bounds(low=1.0),
    )


@dataclass(frozen=True)
class KlDriftPolicy:
    min_share_above: float = threshold(
        0.2,
        unit="share of steady steps",
        why="KL above the band on this share of the later steps is drift, not a blip.",
        bounds=SHARE,
    )
    min_rise_over_step0: float = threshold(
        2.0,
        unit="x first-step KL",
        why="KL already above the band at the first step is renderer-kl-step0's finding; it is drift "
        "only when the later median exceeds the first-step value by this factor.",
        bounds=AT_LEAST_ONE,
    )
    min_judged_steps: int = threshold(
        3,
        unit="steps",
        why="A KL version needs this many later values to be judged for drift at all.",
        bounds=AT_LEAST_ONE,
    )
    min_steps_above: int = threshold(
        3,
        unit="steps",
        why="...and this many of them above the band: one or two high values on a short run are a blip, "
        "whatever their share.",
        bounds=AT_LEAST_ONE,
    )
    high_confidence_share: float = threshold(
        0.5,
        unit="share of later steps",
        why="KL above the band on most later steps is sustained drift (high confidence); on fewer it may be "
        "a passing excursion (medium).",
        bounds=SHARE,
    )


@dataclass(frozen=True)
class StaleSamplerPolicy:
    max_stale_share: float = threshold(
        0.1,
        unit="stale groups per trained group",
        why="Async RL requeues (or, once the dataloader is done, drops) every group sampled more than "
        "max_steps_off_policy steps ago and logs `Samples are too stale, ...` (cookbook rl/train.py): "
        "beyond one such group in ten trained, a tenth of the sampling is redone or thrown away and the "
        "kept samples sit at the staleness bound.",
        bounds=SHARE,
    )
    min_steps_over_bound: int = threshold(
        1,
        unit="training steps",
        why="The cookbook never trains on samples staler than max_steps_off_policy (async, before 0.6.1) or "
        "older than the current step (sync stream): a single step beyond that bound means the loop does not "
        "enforce it. The 0.6.1 async loop trains a slow rollout when it finishes, so there it counts stragglers.",
        bounds=AT_LEAST_ONE,
    )
    max_straggler_step_share: float = threshold(
        0.1,
        unit="share of training steps",
        why="0.6.1 async RL trains a rollout that outlasts max_steps_off_policy when it finishes (by design): "
        "a few such steps are stragglers (info); over one step in ten beyond the bound the run trains "
        "off-policy throughout (warning).",
        bounds=SHARE,
    )
    high_confidence_steps: int = threshold(
        10,
        unit="training steps",
        why="A stale-group share measured over this many trained steps is the loop's rate (high confidence); "
        "over fewer, one burst of requeues can dominate it (medium).",
        bounds=AT_LEAST_ONE,
    )


@dataclass(frozen=True)
class TrainingInstabilityPolicy:
    spike_window: int = threshold(
        20,
        unit="steps",
        why="A spike is judged against the median and MAD of the steps just before it: the local level, "
        "so the early fall of a loss and a slow trend are not spikes; 20 steps keep the MAD steady on "
        "heavy-tailed per-batch losses (a 10-step MAD flagged ordinary per-example noise).",
        bounds=Bounds(3.0, None),
    )
    spike_min_sigmas: float = threshold(
        8.0,
        unit="robust σ (1.4826 × MAD of the window)",
        why="A per-batch loss is noisy; eight robust σ above the local median is far outside that noise "
        "(a normal batch-to-batch swing is 1-3 σ).",
        bounds=POSITIVE,
    )
    spike_min_rise: float = threshold(
        0.5,
        unit="share of the local median's magnitude",
        why="A smooth series has a tiny MAD; the jump must also be large in absolute terms: half the local "
        "level (an NLL of 0.6 jumping past 0.9; the chat SFT sweep calls test NLL > 2.0 divergence).",
        bounds=POSITIVE,
    )
    recovery_steps: int = threshold(
        5,
        unit="steps",
        why="After a spike the loss should come back to its level within a few steps; still above the "
        "spike threshold's midpoint over the next this-many steps, the run diverged.",
        bounds=AT_LEAST_ONE,
    )
    min_spikes_for_warning: int = threshold(
        2,
        unit="spikes",
        why="One recovered spike is a bad batch (info); repeated spikes mean the optimisation is unstable "
        "(learning rate too high for the batch size, no gradient clipping).",
        bounds=AT_LEAST_ONE,
    )
    min_spike_rate: float = threshold(
        0.01,
        unit="spikes per step",
        why="Repeated means often: a handful of recovered spikes over tens of thousands of steps is the tail "
        "of per-batch noise (info), at least one per hundred steps is instability (warning).",
        bounds=SHARE,
    )


@dataclass(frozen=True)
class OverfittingPolicy:
    min_evals: int = threshold(
        4,
        unit="evaluations",
        why="A best point and a rise after it need at least this many held-out evaluations (`test/nll` is "
        "logged every eval_every steps, FORMATS 1.3).",
        bounds=Bounds(3.0, None),
    )
    min_evals_after_best: int = threshold(
        2,
        unit="evaluations",
        why="Every evaluation after the best one must be above it, and there must be at least this many: one "
        "higher eval is noise of the held-out batch, a run of them is a trend.",
        bounds=AT_LEAST_ONE,
    )
    min_rise: float = threshold(
        0.05,
        unit="share of the best held-out NLL",
        why="The last evaluation must be this far above the best one: `test/nll` is scored on the same held-out "
        "set every time, so once it has settled it moves by a percent or two between evaluations; 5% above its "
        "best is a trend, not noise.",
        bounds=POSITIVE,
    )
    min_train_fall: float = threshold(
        0.03,
        unit="share of the training NLL at the best evaluation",
        why="Overfitting is the held-out loss rising while the training loss keeps falling: the median "
        "`train_mean_nll` after the best evaluation must be at least this much below its median around it. "
        "Both rising is instability (training-instability), not memorisation.",
        bounds=POSITIVE,
    )
    train_window: int = threshold(
        5,
        unit="steps",
        why="The training NLL is noisy per batch: its level around the best evaluation and at the end are "
        "medians of this many steps.",
        bounds=AT_LEAST_ONE,
    )
