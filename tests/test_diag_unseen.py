"""Conclusions on run shapes found by the round-2 diagnosis audit (runs the fixtures never combine).

Each run is written in the cookbook's formats with Tinker magnitudes (a ~5 s clock cycle) and
analysed end to end; the assertions are the verdict a Tinker expert would give.
"""

from __future__ import annotations

import random
import shutil
from typing import Any

from conftest import ROOT
from test_unseen_shapes import SFT_CONFIG, assert_sane, fired, noisy, run_analysis, write_run


def queued_sft_rows(n: int = 40, seed: int = 5, client_jitter: float = 0.0) -> list[dict[str, Any]]:
    """tinker-cookbook 0.6.1 SFT, submit_ahead=1, against a service that runs every request 4 cycles
    late: results come back in pairs, so the wait alternates ~1 and ~5 cycles of ~5 s while the
    client's own work (get_batch + submissions) stays ~0.4 s. `client_jitter` (s) makes get_batch
    itself vary, step to step (e.g. variable-length batches tokenized on the fly)."""
    rng = random.Random(seed)
    rows = []
    for step in range(n):
        get_batch = noisy(rng, 0.4) + (rng.uniform(0.0, client_jitter) if client_jitter else 0.0)
        submit = get_batch + noisy(rng, 0.03)
        wait = noisy(rng, 5.0 if step % 2 else 25.0, 0.03)
        rows.append(
            {
                "step": step,
                "epoch": 0,
                "progress": (step + 1) / n,
                "learning_rate": 2e-4,
                "num_sequences": 128,
                "num_tokens": 301245 + rng.randint(-9000, 9000),
                "num_loss_tokens": 121873.0,
                "train_mean_nll": 0.73 - 0.1 * step / n + rng.gauss(0, 0.01),
                "time/get_batch": get_batch,
                "time/forward_backward": noisy(rng, 0.003),
                "time/optim_step": noisy(rng, 0.001),
                "time/submit_batch": submit,
                "time/step": wait,
                "time/finish_batch": wait + noisy(rng, 0.01),
            }
        )
    return rows


def test_spread_in_the_result_wait_is_not_blamed_on_the_user(tmp_path):
    """A healthy pipelined loop on a queueing service: step times alternate 5 s / 25 s, all of it in
    finish_batch. Without a trace server-side-wait cannot judge; the spread must not become the
    run's root cause with a fix pointing at the user's code."""
    result, doc = run_analysis(write_run(tmp_path, queued_sft_rows(), SFT_CONFIG))
    assert_sane(result, doc)
    spread = fired(result)["inconsistent-step-times"]
    assert [f.fingerprint for f in spread] == ["inconsistent-step-times:result-wait"]
    assert spread[0].severity == "info"
    assert spread[0].evidence["result_wait"]["phases"] == ["finish_batch"]
    assert "finish_batch" in spread[0].message and "not in your code" in spread[0].title
    assert result.verdict.costliest is None
    assert not [f for f in result.findings if f.severity in ("warning", "error")]


def test_spread_in_the_client_work_still_warns(tmp_path):
    """The same service, but get_batch itself varies by seconds: the client's work spreads, so the
    warning stays (the result-wait reading must be able to say no)."""
    result, doc = run_analysis(write_run(tmp_path, queued_sft_rows(client_jitter=12.0), SFT_CONFIG))
    assert_sane(result, doc)
    spread = fired(result)["inconsistent-step-times"]
    assert [f.fingerprint for f in spread] == ["inconsistent-step-times:unexplained"]
    assert spread[0].severity == "warning"


def test_spike_names_the_nested_timer_and_prints_subsecond_times(tmp_path):
    """A GIL stall inside get_batch at one step of a fast SFT run (steps of ~50 ms): the spike is
    placed in get_batch (not only its wrapper submit_batch), and its times read as ms, not "0 s"."""
    rows = []
    rng = random.Random(11)
    for step in range(30):
        get_batch = 1.9 if step == 19 else noisy(rng, 0.004)
        submit = get_batch + noisy(rng, 0.001)
        wait = noisy(rng, 0.045, 0.02)
        rows.append(
            {
                "step": step,
                "time/get_batch": get_batch,
                "time/submit_batch": submit,
                "time/step": wait,
                "time/finish_batch": wait + 0.0005,
                "train_mean_nll": 0.7,
            }
        )
    result, doc = run_analysis(write_run(tmp_path, rows, SFT_CONFIG))
    assert_sane(result, doc)
    spike = fired(result)["inconsistent-step-times"][0]
    assert spike.steps == [19]
    assert "mostly in `get_batch` inside `submit_batch` (1.90 s)" in spike.message
    assert "median of 50." in spike.message and " ms)" in spike.message
    assert "0.0 s" not in spike.message and "took 2 s" not in spike.message


def test_one_long_result_wait_stays_a_spike(tmp_path):
    """One step whose result wait took 40 s (a GIL hold starving the SDK thread, retries, a host
    pause) is an isolated stall for the stall rules to explain, not the service's way of returning
    results: it stays a spike (warning), named by the phase that ran long."""
    rows = queued_sft_rows()
    for row in rows:  # an unloaded service: every wait one ~5 s cycle
        row["time/step"] = row["time/finish_batch"] = 5.0 + 0.01 * (row["step"] % 3)
    rows[20]["time/step"], rows[20]["time/finish_batch"] = 40.0, 40.01
    result, doc = run_analysis(write_run(tmp_path, rows, SFT_CONFIG))
    assert_sane(result, doc)
    spread = fired(result)["inconsistent-step-times"]
    assert [(f.fingerprint, f.severity, f.steps) for f in spread] == [
        ("inconsistent-step-times:phase:step", "warning", [20])
    ]


def _trace_only(tmp_path, fixture: str):
    shutil.copy(ROOT / "fixtures" / "runs" / fixture / "trace_events.jsonl", tmp_path / "trace_events.jsonl")
    return run_analysis(tmp_path)


def test_trace_only_run_still_shows_a_stall_between_steps(tmp_path):
    """Only trace_events.jsonl (metrics lost): the 2 s host sleep after step 10 of sl_stall_after_normal
    is still seen in the trace, against the median traced step interval, instead of every timing rule
    abstaining and the verdict reading "no problems found"."""
    result, doc = _trace_only(tmp_path, "sl_stall_after_normal")
    assert_sane(result, doc)
    stall = fired(result)["inconsistent-step-times"]
    assert [f.fingerprint for f in stall] == ["inconsistent-step-times:untraced-stall"]
    assert 1.8 <= stall[0].seconds_lost <= 2.3 and stall[0].steps == [13]
    assert result.verdict.costliest is stall[0]
    # Said as what it is measured against: there is no step time in metrics to contain it.
    assert "median traced step interval" in stall[0].message and "No step time contains" not in stall[0].message


def test_trace_only_healthy_run_passes(tmp_path):
    result, doc = _trace_only(tmp_path, "sl_healthy_pipelined")
    assert_sane(result, doc)
    outcome = {o.rule: o for o in result.outcomes}["inconsistent-step-times"]
    assert outcome.status == "passed" and "no per-step times in metrics" in outcome.reason
