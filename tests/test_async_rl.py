"""Async off-policy and streaming-minibatch RL (cookbook 0.6.1 `do_async_training`,
`do_sync_training_with_stream_minibatch`): sampling overlaps training, samples are versions stale."""

from __future__ import annotations

import polars as pl
from conftest import fixture_run
from rule_helpers import by_rule, findings, load_dir, run_from_rows

from trace_doctor.derive.sample_waits import SAMPLE_WAKE_S, trainer_sample_waits
from trace_doctor.derive.stalls import main_track_gaps


def _span(name, track, start_s, end_s, depth=1, step=None):
    return {
        "name": name,
        "track": track,
        "pid": 0,
        "segment": 0,
        "depth": depth,
        "closed": True,
        "start_us": start_s * 1e6,
        "end_us": end_s * 1e6,
        "dur_us": (end_s - start_s) * 1e6,
        "step": step,
    }


def _async_trace(rollout_end_s: float) -> pl.DataFrame:
    """main awaits the loops; the training task trains step 0, idles 2 s, trains step 1; one rollout ends
    at `rollout_end_s`."""
    return pl.DataFrame(
        [
            _span("do_async_training", "main", 0.0, 10.0, depth=0),
            _span("save_checkpoint_async", "main", 0.0, 0.1),
            _span("training_loop", "training_loop", 0.1, 9.9, depth=0),
            _span("do_train_step_and_get_sampling_client", "training_loop", 1.0, 1.5, step=0),
            _span("do_train_step_and_get_sampling_client", "training_loop", 3.5, 4.0, step=1),
            _span("trajectory_group_worker", "trajectory_group_worker_loop_0", 0.2, rollout_end_s),
        ]
    )


def test_main_awaiting_the_loop_tasks_is_not_a_stall():
    # Before: main's children are only the first and last checkpoint, so the whole run was one "stall".
    run = load_dir(fixture_run("rl_async_healthy"))
    found, outcomes, _ = findings(run, ["inconsistent-step-times"])
    assert found == [] and outcomes["inconsistent-step-times"].status == "passed"
    longest = max((b - a for a, b in main_track_gaps(run.spans, 0.0)), default=0.0) / 1e6
    assert longest < 0.1  # a few ms of bookkeeping between training steps


def test_gap_ended_by_a_rollout_is_a_sample_wait_and_a_late_wake_is_not():
    delivered = _async_trace(rollout_end_s=3.5 - SAMPLE_WAKE_S / 2)
    assert [[a / 1e6, b / 1e6] for a, b in main_track_gaps(delivered, 1.0)] == []
    waits = trainer_sample_waits(delivered)
    assert waits["step"].to_list() == [1] and abs(waits["wait_s"][0] - 2.0) < 1e-9
    # The training task resumed a second after the last rollout ended: something else held it.
    late = _async_trace(rollout_end_s=2.5)
    assert [[a / 1e6, b / 1e6] for a, b in main_track_gaps(late, 1.0)] == [[1.5, 3.5]]
    assert trainer_sample_waits(late).is_empty()


def test_training_starved_of_samples_is_a_data_loading_bottleneck():
    # Before: not applicable (no time/get_batch), and the starved run looked healthy.
    starved, outcomes, _ = findings(load_dir(fixture_run("rl_async_starved")), ["get-batch-bottleneck"])
    (f,) = by_rule(starved)["get-batch-bottleneck"]
    assert f.title.startswith("Training waits for samples")
    assert 0.3 < f.evidence["share"] < 0.7 and f.evidence["max_steps_off_policy"] == 1
    assert f.time_ranges_us and f.seconds_lost > 2.0
    healthy, outcomes, _ = findings(load_dir(fixture_run("rl_async_healthy")), ["get-batch-bottleneck"])
    assert healthy == [] and outcomes["get-batch-bottleneck"].status == "passed"
    assert "first batch is not counted" in outcomes["get-batch-bottleneck"].reason


def test_starved_async_run_without_trace_abstains():
    run = load_dir(fixture_run("rl_async_starved"))
    run.spans = run.spans.clear()
    _, outcomes, _ = findings(run, ["get-batch-bottleneck"])
    assert outcomes["get-batch-bottleneck"].status == "not_applicable"
    assert "trace_events.jsonl" in outcomes["get-batch-bottleneck"].reason


def _async_rows(kl: list[float], lag: list[int]) -> list[dict]:
    return [
        {
            "step": i,
            "training_client/step": i,
            "sampling_client/step_min": i - d,
            "sampling_client/step_max": i - d,
            "sampling_client/step_mean": float(i - d),
            "async/staleness_max": d,
            "env/all/reward/total": 0.5,
            "optim/kl_sample_train_v1": v,
            "optim/kl_sample_train_v2": v / 2,
        }
        for i, (v, d) in enumerate(zip(kl, lag, strict=True))
    ]


def test_off_policy_kl_within_the_bound_is_not_drift():
    # |v1| 0.012 on samples two updates old: 0.006 per update, the policy's own movement. Before: a warning.
    rows = _async_rows([1e-4, 0.006] + [0.012] * 18, [0, 1] + [2] * 18)
    found, outcomes, _ = findings(run_from_rows(rows, trainer="rl", trainer_mode="async"), ["kl-drift"])
    assert found == [] and outcomes["kl-drift"].status == "passed"
    assert "per policy update" in outcomes["kl-drift"].reason and "up to 2 updates old" in outcomes["kl-drift"].reason
    # The same KL on a sync loop is drift.
    sync = [
        {k: v for k, v in r.items() if not k.startswith(("sampling_client", "async", "training_client"))} for r in rows
    ]
    found, _, _ = findings(run_from_rows(sync, trainer="rl", trainer_mode="sync"), ["kl-drift"])
    assert [f.rule for f in found] == ["kl-drift"]


def test_off_policy_kl_too_large_for_its_lag_is_drift():
    # |v1| 0.05 two updates behind is 0.025 per update: each update moves the policy past the band.
    rows = _async_rows([1e-4, 0.01] + [0.05] * 18, [0, 1] + [2] * 18)
    found, _, _ = findings(run_from_rows(rows, trainer="rl", trainer_mode="async"), ["kl-drift"])
    (f,) = found
    assert "per policy update" in f.message and f.steps[0] == 2
    assert f.evidence["staleness"]["lag_max"] == 2 and f.evidence["median"] < 0.05


def test_async_kl_without_a_logged_lag_abstains():
    rows = [
        {k: v for k, v in r.items() if not k.startswith(("sampling_client", "async"))}
        for r in _async_rows([1e-4] + [0.03] * 19, [0] * 20)
    ]
    found, outcomes, _ = findings(run_from_rows(rows, trainer="rl", trainer_mode="async"), ["kl-drift"])
    assert found == [] and outcomes["kl-drift"].status == "not_applicable"
    assert "without a logged lag" in outcomes["kl-drift"].reason


def test_streaming_step_waits_between_minibatches_inside_its_window():
    # The streaming train step is open while it awaits the rollout queue: its span does not cover the wait.
    spans = pl.DataFrame(
        [
            _span("training_loop", "training_loop", 0.1, 9.9, depth=0),
            _span("do_train_step_streaming_and_get_sampling_client", "training_loop", 1.0, 4.0, step=3),
            _span("prepare_minibatch", "training_loop", 1.0, 1.1, depth=2, step=3),
            _span("prepare_minibatch", "training_loop", 3.5, 3.6, depth=2, step=3),
            _span("trajectory_group_worker", "trajectory_group_worker_loop_0", 0.2, 3.49),
        ]
    )
    waits = trainer_sample_waits(spans)
    assert waits["step"].to_list() == [3] and abs(waits["wait_s"][0] - 2.4) < 1e-9
    assert main_track_gaps(spans, 1.0) == []
    # Before: the streaming run's waits were inside time/total and get-batch-bottleneck saw none.
    found, _, _ = findings(load_dir(fixture_run("rl_async_stream_starved")), ["get-batch-bottleneck"])
    (f,) = found
    assert f.evidence["share"] > 0.25 and f.evidence["waits"] > f.evidence["share"] * 20


def test_a_straggler_trained_late_is_the_0_6_1_loop_by_design_not_an_unenforced_bound():
    # 0.6.1 trains a slow rollout when it finishes (AsyncConfig docs); before: "error, the loop does not
    # enforce its staleness bound".
    lag = [min(i, 1) for i in range(20)]
    lag[8], lag[12] = 5, 4
    rows = _async_rows([1e-3] * 20, lag)
    config = {"async_config": {"max_steps_off_policy": 1, "groups_per_batch": 4}}
    found, _, _ = findings(run_from_rows(rows, trainer="rl", trainer_mode="async", config=config), ["stale-sampler"])
    (f,) = found
    assert f.severity == "info" and f.fingerprint == "stale-sampler:stragglers:async"
    assert "up to 5 updates old" in f.message and f.steps == [8, 12]
    # A loop that logs no async/staleness_* (before 0.6.1) requeued stale groups: there it is a broken bound.
    old = [{k: v for k, v in r.items() if not k.startswith("async/")} for r in rows]
    found, _, _ = findings(run_from_rows(old, trainer="rl", trainer_mode="async", config=config), ["stale-sampler"])
    assert [(f.severity, f.fingerprint) for f in found] == [("error", "stale-sampler:over-bound:async")]
