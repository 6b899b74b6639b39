"""Every rule threshold, in one place, with where its default comes from.

Users override any of these from `[tool.trace-doctor.rules.<slug>]` in pyproject.toml or
trace-doctor.toml; unknown keys are rejected so a typo never silently does nothing.
"""

from __future__ import annotations

from typing import Any

DEFAULTS: dict[str, dict[str, Any]] = {
    "pipelining-gap": {
        # The service's clock cycle in seconds; None = estimate it from result waits in the data.
        "clock_cycle_s": None,
        # Share of the steady-state wall time with nothing in flight before the rule fires.
        "min_idle_share": 0.2,
        # Share of steady steps that must show a sequential wait (fb result awaited before optim
        # submitted, or next step submitted only after the previous results arrived).
        "min_sequential_step_share": 0.5,
        # Findings worth less than this many seconds over the run are not reported.
        "min_seconds_lost": 1.0,
        # Submit-only SDK calls hand off in about a millisecond and the cookbook builds the
        # optimizer params in microseconds: a silence longer than this between a forward_backward
        # and the next optim_step submission is a wait for results, not Python overhead.
        "min_wait_s": 0.02,
        # ...or, on short runs, when they are at least this share of the wall time.
        "min_fraction_lost": 0.05,
    },
    "get-batch-bottleneck": {
        # Median per-step get_batch share of steady-state step time above which data loading is
        # the bottleneck (median, so one stalled get_batch does not make a bottleneck).
        "min_share": 0.2,
        "min_steady_steps": 3,
    },
    "warmup-slowness": {
        # The warm-up must be at least this many times the steady median to be called one.
        "min_ratio": 2.0,
        # Warm-up can be at most this share of the run's steps (else it is not a warm-up).
        "max_warmup_share": 0.25,
    },
    "steady-slowness": {
        # Steady steps that take at least this many clock cycles are slower than the work needs.
        "max_cycles_per_step": 3.0,
        # Client-side (untimed-by-service) share of a steady step above which the client is the
        # bottleneck.
        "max_client_share": 0.5,
        # A submit-only SDK call (forward_backward/optim_step) should hand off in milliseconds.
        "max_submit_s": 0.25,
    },
    "gil-stall": {
        # GIL-monitor lines are only printed above 0.5 s jitter (debug skill); anything printed counts.
        "min_monitor_jitter_s": 0.5,
        # A dump label silent for this many dump intervals while the other keeps dumping.
        "min_silent_intervals": 2.5,
        # A submit-only SDK span longer than this means the calling thread could not run.
        "min_blocked_submit_s": 0.5,
        # A dump silence shorter than this is scheduling noise, not a stall worth reporting.
        "min_silence_s": 0.5,
        # A sample round trip this many times its median (and min_blocked_submit_s longer) "stretched".
        "round_trip_stretch_ratio": 2.0,
    },
    "heartbeat-stall": {
        "min_warnings": 1,
    },
    "serialization-stall": {
        # Share of the profile's wall time under pydantic model_dump / payload serialization.
        "min_share": 0.1,
        "min_seconds": 0.2,
    },
    "cpu-bound-main-thread": {
        # Share of the profile's time that is self time in CPU-heavy libraries.
        "min_share": 0.25,
        "min_seconds": 0.2,
    },
    "profile-without-async-mode": {
        # Share of a profile spent in select/epoll/poll/kqueue with no [await] frame.
        "min_idle_share": 0.3,
    },
    "inconsistent-step-times": {
        # Robust coefficient of variation (1.4826*MAD/median) of steady step times.
        "max_robust_cv": 0.35,
        # A step this many times the steady median is a spike.
        "spike_ratio": 3.0,
        "min_steady_steps": 8,
        # Step time that settles at a new level mid-run is a regime change, not noise, when the two
        # levels differ by this factor and the shorter one lasts this share of the steady steps
        # (and at least min_steady_steps): shorter excursions are spikes.
        "min_regime_ratio": 1.5,
        "min_regime_share": 0.05,
    },
    "renderer-kl-step0": {
        # "training is stable when KL < 0.01" (cookbook hyperparams.md / ops.md).
        "max_kl_v1": 0.01,
        # v2 = 0.5*mean(diff^2) is always >= 0; same band.
        "max_kl_v2": 0.01,
        # Distillation: a student/teacher renderer mismatch measured +0.287 nats/token (#796).
        "max_teacher_kl_step0": 0.1,
    },
    "kl-drift": {
        "max_kl": 0.01,
        # Share of steady steps above the band before calling it drift rather than a blip.
        "min_share_above": 0.2,
        # KL already above the band at the first step is renderer-kl-step0's finding; it is drift
        # only when the later median exceeds the first-step value by this factor.
        "min_rise_over_step0": 2.0,
    },
    "known-bad-dependency": {
        # FORMATS.md 1.4 trap: sample_async (a round trip nested in policy_sample) timed at under
        # this share of policy_sample means it was recorded as a sync call...
        "trap_max_sample_share": 0.01,
        # ...provided policy_sample itself is long enough for the comparison to mean something.
        "trap_min_policy_sample_s": 0.5,
    },
    "decoded-error": {},
    "step-time-regression": {
        # Median steady step time must grow by at least this share (issue 5: "default 10%"); below
        # it a statistically significant change is noise that CI should not fail on.
        "min_relative_effect": 0.10,
        # One-sided Mann-Whitney U significance level.
        "alpha": 0.05,
        # Steady steps (after each run's warm-up) each run needs; with 5 vs 5 the smallest
        # possible one-sided p is 1/252 = 0.004, so the test can still reach alpha. Fewer gives
        # the verdict "inconclusive".
        "min_steady_steps": 5,
    },
    # Matches findings by fingerprint only: nothing to tune.
    "new-finding": {},
}


class PolicyError(ValueError):
    """A configuration override names a rule or threshold that does not exist."""


def thresholds_for(slug: str, overrides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    merged = dict(DEFAULTS.get(slug, {}))
    for key, value in (overrides.get(slug) or {}).items():
        if key not in merged:
            known = ", ".join(sorted(merged)) or "none"
            raise PolicyError(f"unknown threshold `{key}` for rule {slug} (known: {known})")
        merged[key] = value
    return merged


def validate_overrides(overrides: dict[str, dict[str, Any]]) -> None:
    for slug in overrides:
        if slug not in DEFAULTS:
            raise PolicyError(f"configuration names unknown rule `{slug}`")
        thresholds_for(slug, overrides)
