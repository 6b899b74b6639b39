"""Thresholds of the timing rules: pipelining, data loading, warm-up, steady and inconsistent step times, stalls."""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import AT_LEAST_ONE, POSITIVE, SHARE, Bounds, threshold


@dataclass(frozen=True)
class PipeliningGapPolicy:
    min_sequential_step_share: float = threshold(
        0.5,
        unit="share of steady steps",
        why="A sequential wait (fb result awaited before optim is submitted, or the next step submitted "
        "only after the previous results) on most steps is the loop's shape, not an accident.",
        bounds=SHARE,
    )
    min_seconds_lost: float = threshold(
        1.0, unit="s", why="Findings worth less than this over the whole run are not worth a user's time."
    )
    min_fraction_lost: float = threshold(
        0.05,
        unit="share of wall time",
        why="...unless, on a short run, they are at least this share of its wall time.",
        bounds=SHARE,
    )


@dataclass(frozen=True)
class GetBatchBottleneckPolicy:
    min_share: float = threshold(
        0.2,
        unit="share of steady step time",
        why="Median per-step get_batch share above which data loading is the bottleneck (a median, so "
        "one stalled batch does not make a bottleneck).",
        bounds=SHARE,
    )
    min_steady_steps: int = threshold(
        3, unit="steps", why="Fewer steady steps with get_batch timing say nothing typical.", bounds=AT_LEAST_ONE
    )
    high_confidence_steps: int = threshold(
        10,
        unit="steps",
        why="A median share over this many steady steps is the loop's shape (high confidence); over fewer it "
        "may be a few slow batches (medium).",
        bounds=AT_LEAST_ONE,
    )


@dataclass(frozen=True)
class WarmupSlownessPolicy:
    min_ratio: float = threshold(
        2.0,
        unit="x steady median",
        why="A warm-up shorter than twice the steady step is noise, not setup worth naming.",
        bounds=AT_LEAST_ONE,
    )


@dataclass(frozen=True)
class SteadySlownessPolicy:
    max_cycles_per_step: float = threshold(
        3.0,
        unit="clock cycles",
        why="A pipelined step needs about two cycles (forward_backward and optim_step share them); "
        "steady steps that take more are slower than the work needs.",
        bounds=POSITIVE,
    )
    max_client_share: float = threshold(
        0.5,
        unit="share of a steady step",
        why="Above this share of time outside the service's calls, the client is the bottleneck.",
        bounds=SHARE,
    )
    max_submit_s: float = threshold(
        0.25,
        unit="s",
        why="A submit-only SDK call (forward_backward / optim_step) hands off in milliseconds.",
        bounds=POSITIVE,
    )
    sampling_info_share: float = threshold(
        0.5,
        unit="share of step time",
        why="When sampling takes most of a synchronous RL step, the trainer idles for it every step: "
        "worth knowing that asynchronous or streamed RL would overlap it.",
        bounds=SHARE,
    )
    sampling_warning_share: float = threshold(
        0.9,
        unit="share of step time",
        why="Sampling is most of a synchronous RL step by design (the rollouts are the work), so a large share "
        "alone is a note; past nine tenths the trainer idles through nearly the whole run and overlapping the "
        "rollouts with training (async or streamed RL) is the one speed-up that matters.",
        bounds=SHARE,
    )
    min_steady_steps: int = threshold(
        3,
        unit="steps",
        why="Fewer steady steps with a total (or, for the client's share, with a total rebuilt from its phases) "
        "say nothing typical about every step.",
        bounds=AT_LEAST_ONE,
    )


@dataclass(frozen=True)
class GilStallPolicy:
    min_monitor_jitter_s: float = threshold(
        0.5,
        unit="s",
        why="The debug skill's GIL monitor prints only above 0.5 s of jitter: anything it printed counts.",
    )
    min_silent_intervals: float = threshold(
        2.5,
        unit="dump intervals",
        why="A dump label silent this long while the other keeps dumping missed more than scheduling jitter.",
        bounds=POSITIVE,
    )
    min_silence_s: float = threshold(
        0.5, unit="s", why="A shorter dump silence is scheduling noise, not a stall worth reporting."
    )
    min_blocked_submit_s: float = threshold(
        0.5,
        unit="s",
        why="A submit-only SDK span (or a main-track gap) this long means the calling thread could not run.",
        bounds=POSITIVE,
    )
    heartbeat_match_ratio: float = threshold(
        2.0,
        unit="x",
        why=(
            "A heartbeat outage and a stretch where a thread ran user code with nothing else moving are one "
            "event when their lengths are within this factor: the SDK reports the seconds since its last "
            "successful heartbeat, at most a couple of 10 s periods more than the stall (warned after 120 s)."
        ),
        bounds=AT_LEAST_ONE,
    )
    step_time_max_robust_cv: float = threshold(
        0.35,
        unit="robust CV",
        why="Steady step times more variable than this (1.4826·MAD/median) support a GIL stall seen elsewhere.",
        bounds=POSITIVE,
    )
    step_time_min_steady_steps: int = threshold(
        8, unit="steps", why="Step-time variability needs this many steady steps to mean anything.", bounds=AT_LEAST_ONE
    )
    high_confidence_score: float = threshold(
        3.0,
        unit="signal weight",
        why="Summed weight of the readings (direct 2, one innocent alternative 1.5, corroborating 1, "
        "circumstantial 0.5) at which a GIL stall is called with high confidence: a direct reading and a "
        "corroborating one, read independently.",
        bounds=POSITIVE,
    )
    high_confidence_readings: int = threshold(
        2,
        unit="readings",
        why="...and at least this many of them corroborating or stronger: one strong reading repeated is one reading.",
        bounds=AT_LEAST_ONE,
    )
    medium_confidence_score: float = threshold(
        2.0,
        unit="signal weight",
        why="Summed weight for medium confidence: one direct reading, or two weaker ones; below it, low.",
        bounds=POSITIVE,
    )


@dataclass(frozen=True)
class BlockingCallPolicy:
    min_blocked_s: float = threshold(
        0.5,
        unit="s",
        why=(
            "A submit-only SDK call or a synchronous main-thread span this long blocked the event loop for "
            "several scheduling quanta; shorter is payload building noise."
        ),
        bounds=POSITIVE,
    )
    min_silent_intervals: float = threshold(
        2.5,
        unit="dump intervals",
        why="[main] silent this long while [holder] keeps dumping missed more than scheduling jitter.",
        bounds=POSITIVE,
    )
    min_silence_s: float = threshold(
        0.5, unit="s", why="A shorter dump silence is scheduling noise, not a blocked loop worth reporting."
    )


@dataclass(frozen=True)
class HeartbeatStallPolicy:
    min_warnings: int = threshold(
        1,
        unit="warnings",
        why="The SDK logs a heartbeat warning only after the session missed its heartbeat: one is already a stall.",
        bounds=AT_LEAST_ONE,
    )


@dataclass(frozen=True)
class InconsistentStepTimesPolicy:
    max_robust_cv: float = threshold(
        0.35,
        unit="robust CV",
        why="Robust coefficient of variation (1.4826·MAD/median) of steady step times above which the "
        "variance is more than a healthy loop's jitter.",
        bounds=POSITIVE,
    )
    spike_ratio: float = threshold(
        3.0, unit="x steady median", why="A step this many times the steady median is a spike.", bounds=AT_LEAST_ONE
    )
    min_steady_steps: int = threshold(
        8, unit="steps", why="Fewer steady steps cannot tell variance from a few slow steps.", bounds=AT_LEAST_ONE
    )
    min_regime_ratio: float = threshold(
        1.5,
        unit="x",
        why="Step time that settles at a level this many times another is a regime change, not noise.",
        bounds=AT_LEAST_ONE,
    )
    min_regime_share: float = threshold(
        0.05,
        unit="share of steady steps",
        why="...when the shorter level lasts this share of the steady steps (and min_steady_steps): "
        "shorter excursions are spikes.",
        bounds=SHARE,
    )
    min_wall_share_alone: float = threshold(
        0.3,
        unit="share of wall time",
        why="With too few steady steps to judge variance (min_steady_steps), a step (or a run of consecutive "
        "steps) above spike_ratio x the median that holds this share of the run is still reported: one "
        "3,816 s step of a 7-step run (59% of its wall, sushantmehta logs) is where the run's time went.",
        bounds=SHARE,
    )
    min_wait_spike_share: float = threshold(
        0.2,
        unit="share of steady steps",
        why="Spikes in the result wait (finish_batch/step) with the client's work steady are read as how "
        "the service returns results (a queue delivering them in pairs: every other step waits cycles "
        "longer) when at least this share of the steady steps has one; fewer are isolated stalls (a GIL "
        "hold, retries, a host pause) and stay unexplained spikes for the stall rules to explain.",
        bounds=SHARE,
    )
    explained_share: float = threshold(
        0.5,
        unit="share of a spike's excess",
        why="A spike (or a regime change) is put down to one cause — evaluations and checkpoints, the client's "
        "own work, one timed phase — when that cause accounts for at least half of its excess over the steady step.",
        bounds=Bounds(0.0, 1.0, low_open=True),
    )
    untimed_spike_share: float = threshold(
        0.9,
        unit="share of a spike's excess",
        why="A spike whose excess lies almost entirely outside every timed phase happened in untimed code "
        "(a sleep, a blocking call, a GIL hold): said so instead of naming a phase.",
        bounds=SHARE,
    )
    high_confidence_regime_steps: int = threshold(
        20,
        unit="steps",
        why="A regime change whose two levels each last this many steps is a lasting shift (high confidence); "
        "shorter levels may be a long stall (medium).",
        bounds=AT_LEAST_ONE,
    )


@dataclass(frozen=True)
class ScheduledWorkPolicy:
    min_share_of_wall: float = threshold(
        0.05,
        unit="share of wall time",
        why="Periodic evals and checkpoints below this share of the run's wall time are the schedule working "
        "as intended, not a cost worth a user's attention.",
        bounds=SHARE,
    )
    min_seconds: float = threshold(
        1.0,
        unit="s",
        why="...and scheduled work worth less than this over the whole run is not worth reporting, whatever "
        "its share of a short run.",
        bounds=POSITIVE,
    )
