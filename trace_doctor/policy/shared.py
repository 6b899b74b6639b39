"""Knobs several components read: the service's clock cycle, the warm-up cap and the healthy KL band.

They are set under `[tool.trace-doctor.shared]`, and handed to derive/ and to the renderers as plain
parameters: derive/ knows no rule and no policy class. Changing one changes every rule and chart that
uses the series it shapes, which is why none of them belongs to a single rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import AT_LEAST_ONE, POSITIVE, Bounds, threshold


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
    # Overlapping step timers (derive/overlap.py): a legacy pipelined SFT `time/total` also holds the
    # next step's submission and the previous step's finish; the per-step times and the wall are
    # rebuilt only when the data bear that reading out.
    overlap_min_steps: int = threshold(
        5,
        unit="steps",
        why="The overlapping-window reading is tested on steps whose two neighbours were logged; fewer than "
        "this say nothing about the loop's shape, and the totals are kept as written.",
        bounds=AT_LEAST_ONE,
    )
    overlap_min_fit_share: float = threshold(
        0.9,
        unit="share of judged steps",
        why="In an overlapped run total - own - next submit - previous finish is the untimed remainder, never "
        "negative; in a sequential loop it is minus the neighbours' timers on nearly every step. A tenth of "
        "exceptions leaves room for a resumed or hand-edited row.",
        bounds=Bounds(0.0, 1.0, low_open=True),
    )
    overlap_max_spread_ratio: float = threshold(
        0.5,
        unit="x spread of total - own",
        why="The overlap residual must also be steadier (IQR) than the sequential one, which in an overlapped run "
        "swings with the neighbours' get_batch and result waits; on a real run it was 0.03x (tinker-rl-lab "
        "distillation_off, 683 steps), so half leaves a wide margin while a loop with a large untimed part of "
        "its own (sequential residual steady) is not read as overlapped.",
        bounds=Bounds(0.0, 1.0, low_open=True),
    )
    overlap_tolerance_s: float = threshold(
        0.05,
        unit="s",
        why="The timers nest exactly within one clock (time.time), so a residual below zero is measurement "
        "rounding at most a few milliseconds; 50 ms also absorbs a clock step. Likewise a result wait "
        "shorter than this means the results were already there: the step was no longer in flight.",
        bounds=POSITIVE,
    )
    # The untimed remainder of a sync RL step is its sampling (derive/loop_phases.py) up to this many
    # times the typical untimed step (or what the step's generated tokens predict, if more).
    untimed_excess_factor: float = threshold(
        3.0,
        unit="x typical untimed step",
        why="Rollout time follows a batch's slowest sample more than its token total (the last, 64-episode "
        "step of sushantmehta logs_v2 took 0.56 s per 1k tokens against the run's median 0.16; an eval-heavy "
        "step 15 untimed 2.9x the median): three times the typical step keeps those sampling, while an "
        "hour-long untimed gap with no more tokens than usual (10x and more: a host asleep) stays unexplained.",
        bounds=AT_LEAST_ONE,
    )
    max_stable_kl: float = threshold(
        0.01,
        unit="nats per token",
        why='"Training is stable when KL < 0.01" (cookbook hyperparams.md / ops.md): the healthy band '
        "of the sampler-vs-trainer KL, for renderer-kl-step0, kl-drift and the KL chart.",
        bounds=POSITIVE,
    )
    # The KL sawtooth of a sampler refreshed only at saves (derive/staleness.py): stale-sampler
    # reports it, and kl-drift then names staleness, not the learning rate, as the reason.
    sawtooth_min_periods: int = threshold(
        2,
        unit="save periods",
        why="One drop at one save can be chance; the sawtooth of a sampler refreshed only at saves repeats "
        "at every save, so at least two teeth are needed to call it (fewer: abstain).",
        bounds=AT_LEAST_ONE,
    )
    sawtooth_min_drop: float = threshold(
        2.0,
        unit="x KL at the save step",
        why="A tooth: the KL just before a save is at least this multiple of the KL at the save step, where "
        "the refreshed sampler matches the trainer again (healthy per-step KL noise is ~30%, FORMATS 1.5).",
        bounds=Bounds(1.0, None, low_open=True),
    )
    sawtooth_min_share: float = threshold(
        0.75,
        unit="share of saves",
        why="A stale sampler resets at every save; a drift or noise that happens to dip at one save does not "
        "at most of them.",
        bounds=Bounds(0.0, 1.0, low_open=True),
    )
    sawtooth_min_correlation: float = threshold(
        0.5,
        unit="Spearman ρ",
        why="KL must also rise with the steps since the last save over the whole run (ρ of 0.5 over 20+ steps "
        "is far beyond chance, whose spread is ~1/√n), so a few lucky drops are not a sawtooth.",
        bounds=Bounds(0.0, 1.0, low_open=True),
    )
    # Two rules judge "GIL stall or blocking call" on the same trace: gil-stall reads a blocked call that
    # overlaps a stretched round trip on another thread as the SDK thread starved too, and
    # blocking-call-in-async leaves exactly those blocks to it. One ratio keeps the two readings apart.
    round_trip_stretch_ratio: float = threshold(
        2.0,
        unit="x median round trip",
        why="A sample round trip this many times its call's median (and longer than the rule's blocked-time "
        "floor) was stretched: the SDK thread could not run either, a GIL stall rather than a blocking call.",
        bounds=AT_LEAST_ONE,
    )
    # pipelining-gap (an awaited fb result) and server-side-wait (a loop that pipelines, so late results
    # are the service's) read the same gaps between forward_backward and optim_step submissions.
    fb_optim_handoff_s: float = threshold(
        0.02,
        unit="s",
        why="Submit-only SDK calls hand off in about a millisecond and the cookbook builds the optimizer "
        "params in microseconds: a longer silence between forward_backward and optim_step is a result wait.",
        bounds=POSITIVE,
    )
