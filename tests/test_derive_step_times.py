"""Per-step time table: nesting-aware phases, totals, untimed share, live rows only."""

from __future__ import annotations

import pytest
from rule_helpers import run_from_rows

from trace_doctor.derive.step_times import step_times
from trace_doctor.derive.timekeys import parse_time_key


def test_parse_time_key_splits_only_aggregate_suffixes():
    assert parse_time_key("time/policy_sample:total").name == "policy_sample"
    assert parse_time_key("time/policy_sample:total").aggregate == "total"
    assert parse_time_key("time/train/fwd_bwd_substep_0_mb_1_enqueue").name == "train/fwd_bwd_substep_0_mb_1_enqueue"
    assert parse_time_key("time/weird:thing").name == "weird:thing"
    assert parse_time_key("loss:sum") is None
    assert parse_time_key("time_total").name == "total"


def test_nested_timers_are_not_summed_twice():
    # dphuang2-style row: do_train_step ⊃ prepare_minibatch ⊃ incorporate_kl_penalty, train ⊃ train_step.
    row = {
        "step": 0,
        "progress/batch": 0,
        "time/sample": 28.3,
        "time/prepare_minibatch": 4.55,
        "time/incorporate_kl_penalty": 4.41,
        "time/compute_kl_penalty": 4.41,
        "time/train": 4.62,
        "time/train_step": 4.62,
        "time/compute_full_batch_metrics_and_get_sampling_client": 1.62,
        "time/do_train_step_and_get_sampling_client": 10.79,
        "time/policy_sample:total": 3200.0,
        "time/policy_sample:count": 128,
        "time/total": 39.1,
    }
    times = step_times(run_from_rows([row]))
    phases = sorted(c for c in times.columns if c.startswith("phase:"))
    assert phases == ["phase:do_train_step_and_get_sampling_client", "phase:sample"]
    assert times["untimed_s"][0] == pytest.approx(39.1 - 28.3 - 10.79)
    assert "inner:train_step" in times.columns


def test_untimed_sampling_shows_as_untimed_share():
    rows = [
        {"step": i, "progress/batch": i, "time/train": 5.0, "time/save_checkpoint": 1.0, "time/total": 60.0}
        for i in range(4)
    ]
    times = step_times(run_from_rows(rows))
    assert times["untimed_s"].to_list() == [54.0] * 4


def test_sft_without_total_is_rebuilt_from_top_level_phases():
    rows = [
        {
            "step": i,
            "train_mean_nll": 1.0,
            "time/get_batch": 0.4,
            "time/submit_batch": 0.5,
            "time/step": 5.0,
            "time/finish_batch": 5.2,
        }
        for i in range(3)
    ]
    times = step_times(run_from_rows(rows))
    assert times["total_s"].to_list() == pytest.approx([5.7] * 3)
    assert times["total_source"][0] == "sum of top-level phases"
    assert "inner:get_batch" in times.columns and "phase:get_batch" not in times.columns


def test_eval_rows_and_repeats_are_dropped_last_row_wins():
    rows = [
        {"step": 0, "progress/batch": 0, "time/total": 10.0},
        {"step": 1, "progress/batch": 1, "time/total": 11.0},
        {"step": 1, "test/env/all/reward/total": 0.5},
        {"step": 0, "progress/batch": 0, "time/total": 30.0},  # resumed process: new segment
    ]
    times = step_times(run_from_rows(rows))
    # The relaunch ran step 0 again: the first launch's step 0 is superseded (one row per step).
    assert times.select("segment", "step", "total_s").rows() == [(0, 1, 11.0), (1, 0, 30.0)]
