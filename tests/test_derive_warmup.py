"""Change-point warm-up split and the clock-cycle estimate."""

from __future__ import annotations

import numpy as np
import pytest
from rule_helpers import run_from_rows

from trace_doctor.derive.cycles import estimate_clock_cycle, periodic_fit
from trace_doctor.derive.step_times import step_times
from trace_doctor.derive.warmup import split_warmup
from trace_doctor.policy import SharedPolicy

SHARED = SharedPolicy()


def _series(totals, segment_starts=(), resume_step=0):
    rows, step = [], 0
    for i, t in enumerate(totals):
        if i in segment_starts:
            step = resume_step
        rows.append({"step": step, "progress/batch": step, "time/total": t})
        step += 1
    return step_times(run_from_rows(rows))


def test_slow_prefix_is_warmup_and_steady_excludes_it():
    rng = np.random.default_rng(0)
    totals = [300.0, 40.0] + list(10 + rng.normal(0, 0.5, 40))
    split = split_warmup(_series(totals), max_warmup_share=SHARED.max_warmup_share)
    assert split.warmup_steps == 2
    assert split.boundary_step == 2
    assert split.steady.height == 40


def test_flat_series_with_a_mid_run_spike_has_no_warmup():
    rng = np.random.default_rng(1)
    totals = list(10 + rng.normal(0, 0.5, 30))
    totals[15] = 200.0
    assert split_warmup(_series(totals), max_warmup_share=SHARED.max_warmup_share).warmup_steps == 0


def test_resumed_segment_gets_its_own_warmup():
    rng = np.random.default_rng(2)
    totals = [100.0] + list(10 + rng.normal(0, 0.3, 20)) + [90.0] + list(10 + rng.normal(0, 0.3, 20))
    # Relaunched from a checkpoint at step 15: steps 15-20 of the first launch are rewritten.
    split = split_warmup(
        _series(totals, segment_starts=(21,), resume_step=15), max_warmup_share=SHARED.max_warmup_share
    )
    assert [s.warmup_steps for s in split.segments] == [1, 1]


def test_clock_cycle_from_waits_at_multiples_and_override():
    waits = np.array([0.1, 0.2, 0.1, 0.3, 0.2, 0.1, 0.2, 0.1, 0.3, 0.1]) + 0.002
    period, r = periodic_fit(waits)
    assert period == pytest.approx(0.1, rel=0.1) and r > 0.8
    run = run_from_rows([{"step": i, "train_mean_nll": 1.0, "time/step": float(w)} for i, w in enumerate(waits)])
    assert estimate_clock_cycle(run).seconds == pytest.approx(0.1, rel=0.1)
    assert estimate_clock_cycle(run, override_s=7.0).method.startswith("policy override")
