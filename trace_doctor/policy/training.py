"""Thresholds of the training-quality rules (KL); the healthy KL band itself is shared (SharedPolicy)."""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import AT_LEAST_ONE, POSITIVE, SHARE, threshold


@dataclass(frozen=True)
class RendererKlStep0Policy:
    max_teacher_kl_step0: float = threshold(
        0.1,
        unit="nats per token",
        why="Distillation: a student/teacher renderer mismatch measured +0.287 nats/token (cookbook #796).",
        bounds=POSITIVE,
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
