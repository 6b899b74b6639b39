"""Knobs several components read: the service's clock cycle, the warm-up cap and the healthy KL band.

They are set under `[tool.trace-doctor.shared]`, and handed to derive/ and to the renderers as plain
parameters: derive/ knows no rule and no policy class. Changing one changes every rule and chart that
uses the series it shapes, which is why none of them belongs to a single rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import POSITIVE, Bounds, threshold


@dataclass(frozen=True)
class SharedPolicy:
    clock_cycle_s: float | None = threshold(
        None,
        unit="s",
        why="The service's clock cycle; unset, it is estimated from the result waits in the trace "
        "(pipelining-gap, steady-slowness and the charts count steps in cycles).",
        bounds=POSITIVE,
    )
    max_warmup_share: float = threshold(
        0.25,
        unit="share of a launch's steps",
        why="A slow prefix longer than this share of the steps is not a warm-up: it would hide a "
        "slow run's steady state from every steady-state statistic.",
        bounds=Bounds(0.0, 1.0, low_open=True),
    )
    max_stable_kl: float = threshold(
        0.01,
        unit="nats per token",
        why='"Training is stable when KL < 0.01" (cookbook hyperparams.md / ops.md): the healthy band '
        "of the sampler-vs-trainer KL, for renderer-kl-step0, kl-drift and the KL chart.",
        bounds=POSITIVE,
    )
