"""Timing rules on the generated fixture runs (EXPECTED.json) and on synthetic metrics."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURE_RUNS, fixture_run
from rule_helpers import TIMING_AND_KL, by_rule, expected, findings, load_dir, run_from_rows

SCENARIOS = (
    sorted(p.name for p in FIXTURE_RUNS.iterdir() if (p / "EXPECTED.json").exists()) if FIXTURE_RUNS.exists() else []
)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fixture_expectations_for_timing_and_kl_rules(scenario):
    path = fixture_run(scenario)
    exp = expected(path)
    found, outcomes, _ = findings(load_dir(path))
    fired = {f.rule for f in found}
    assert not [o for o in outcomes.values() if o.status == "error"]
    assert set(exp["must_fire"]) & set(TIMING_AND_KL) <= fired
    assert not fired & set(exp["must_not_fire"])


def test_sequential_await_reports_counterfactual_and_overlays():
    found, _, _ = findings(load_dir(fixture_run("sl_sequential_await")), ["pipelining-gap"])
    gap = next(f for f in found if f.fingerprint == "pipelining-gap:sequential-fb-optim")
    assert gap.seconds_lost > 0 and 0 < gap.fraction_of_wall < 1
    assert gap.time_ranges_us and all(b > a for a, b in gap.time_ranges_us)
    assert gap.evidence["pipelined_wall_s"] < gap.evidence["wall_s"]


def test_untimed_sampling_alone_is_not_a_pipelining_gap():
    rows = [
        {"step": i, "progress/batch": i, "optim/kl_sample_train_v1": 1e-5, "time/train": 5.0, "time/total": 60.0}
        for i in range(20)
    ]
    _, outcomes, _ = findings(run_from_rows(rows), ["pipelining-gap"])
    assert outcomes["pipelining-gap"].status == "not_applicable"
    assert "untimed" in outcomes["pipelining-gap"].reason


def test_submit_ahead_zero_without_trace_fires_from_config():
    rows = [
        {
            "step": i,
            "train_mean_nll": 1.0,
            "time/get_batch": 0.3,
            "time/submit_batch": 0.4,
            "time/step": 2.0,
            "time/finish_batch": 2.1,
        }
        for i in range(12)
    ]
    found, _, _ = findings(run_from_rows(rows, trainer="sl", submit_ahead=0), ["pipelining-gap"])
    assert [f.fingerprint for f in found] == ["pipelining-gap:submit-ahead-0"]
    assert found[0].seconds_lost == pytest.approx(0.4 * 11)


def _sl_rows(get_batch):
    return [
        {"step": i, "train_mean_nll": 1.0, "time/get_batch": g, "time/step": 2.0, "time/total": 2.5 + g}
        for i, g in enumerate(get_batch)
    ]


def test_slow_first_get_batch_is_warmup_not_bottleneck():
    found, outcomes, _ = findings(
        run_from_rows(_sl_rows([290.0] + [0.2] * 30)), ["get-batch-bottleneck", "warmup-slowness"]
    )
    rules = by_rule(found)
    assert "get-batch-bottleneck" not in rules
    assert rules["warmup-slowness"][0].evidence["dominant_phase"] == "get_batch"


def test_steady_slow_get_batch_is_a_bottleneck():
    rng = np.random.default_rng(3)
    found, _, _ = findings(run_from_rows(_sl_rows(list(3.0 + rng.normal(0, 0.1, 20)))), ["get-batch-bottleneck"])
    assert found and found[0].fraction_of_wall > 0.5 and found[0].seconds_lost > 50


def test_periodic_eval_spikes_are_attributed_and_unexplained_spike_reported():
    rng = np.random.default_rng(4)
    rows = []
    for i in range(40):
        total = float(100 + rng.normal(0, 3))
        row = {"step": i, "progress/batch": i, "time/train": 20.0, "time/total": total}
        if i % 10 == 5:
            row["time/run_evals"], row["time/total"] = 1500.0, total + 1500.0
        if i == 23:
            row["time/total"] = 20000.0  # host asleep: outside every timed phase
        rows.append(row)
    found, _, _ = findings(run_from_rows(rows), ["inconsistent-step-times", "scheduled-work"])
    prints = {f.fingerprint: f for f in found}
    # Scheduled work is reported by scheduled-work, never as inconsistency.
    assert prints["scheduled-work:eval"].steps == [5, 15, 25, 35]
    assert not [p for p in prints if p.startswith("inconsistent-step-times:periodic")]
    unexplained = prints["inconsistent-step-times:unexplained"]
    assert unexplained.steps == [23] and "sleep" in unexplained.message


def test_healthy_flat_series_passes_every_timing_rule():
    rng = np.random.default_rng(5)
    rows = [
        {"step": i, "progress/batch": i, "time/train": 5.0, "time/total": float(10 + rng.normal(0, 0.3))}
        for i in range(30)
    ]
    found, _, _ = findings(run_from_rows(rows))
    assert found == []


def test_caller_track_strips_private_sdk_call_tracks_only():
    """0.6.1 puts each SDK call on `<caller>:<call>:<tid>` (tid >= 1e6); pairing fb with optim needs the caller."""
    import polars as pl

    from trace_doctor.derive.pipelining import caller_track

    frame = pl.DataFrame(
        {
            "track": [
                "Task-1:forward_backward:1000123",
                "Task-1:forward_backward:1000123",
                "a:b:c:2000001",
                "main",
                "x:y:1000005",
                None,
            ],
            "tid": [1000123, 5, 2000001, 1000777, 1000006, 1000008],
        }
    )
    callers = frame.select(caller_track(pl.col("track"), pl.col("tid"))).to_series().to_list()
    assert callers == ["Task-1", "Task-1:forward_backward:1000123", "a:b", "main", "x:y:1000005", None]
