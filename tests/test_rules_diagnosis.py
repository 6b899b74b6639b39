"""The right name for each stall: blocking call vs GIL stall, serialization, the service's side, warm-up vs stall."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from conftest import fixture_run
from test_policy_thresholds import pipelined_loop_served_late

from trace_doctor import analyze, load_run
from trace_doctor.derive.warmup import change_points, noise_sigma, warmup_length
from trace_doctor.model import LOG_EVENTS_SCHEMA, RunTables

SYNC_WARNING = (
    "Synchronous method 'TrainingClient.forward_backward()' called from async context. "
    "Use 'TrainingClient.forward_backward_async()' instead."
)


def _logs(*messages: str, kind: str = "sdk-warning") -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "source": "logs.log",
                "line": i,
                "timestamp": None,
                "logger": "tinker.lib.sync_only",
                "level": "WARNING",
                "kind": kind,
                "message": m,
                "fields": "{}",
            }
            for i, m in enumerate(messages, start=1)
        ],
        schema=LOG_EVENTS_SCHEMA,
    )


def _outcomes(result) -> dict:
    return {o.rule: o for o in result.outcomes}


def test_sdk_sync_from_async_warnings_are_a_blocking_call_not_a_gil_stall():
    run = RunTables()
    run.log_events = _logs(SYNC_WARNING, SYNC_WARNING)
    result = analyze(run, select=["blocking-call-in-async", "gil-stall"])
    (finding,) = result.findings
    assert finding.rule == "blocking-call-in-async"
    assert finding.evidence["readings"][0]["methods"] == ["TrainingClient.forward_backward"]
    assert "not a GIL stall" in finding.message
    assert _outcomes(result)["gil-stall"].status == "not_applicable"


def test_no_blocking_reading_passes():
    result = analyze(load_run(fixture_run("sl_healthy_pipelined")), select=["blocking-call-in-async"])
    assert _outcomes(result)["blocking-call-in-async"].status == "passed"


def test_slow_submits_alone_are_serialization_not_a_gil_stall():
    result = analyze(load_run(fixture_run("sl_steady_slow")))
    rules = {f.rule for f in result.findings}
    assert "gil-stall" not in rules
    (serialization,) = [f for f in result.findings if f.rule == "serialization-stall"]
    assert serialization.fingerprint == "serialization-stall:trace-submits"
    assert serialization.confidence == "medium"
    assert "forward_backward" in serialization.message


def test_service_late_by_cycles_with_a_prompt_pipelined_client_is_server_side():
    run = pipelined_loop_served_late()
    run.log_events = _logs("ServiceClient initialized for session 3f2a9c1e-77aa-4b1d-9e0c-5d6f7a8b9c0d", kind="session")
    result = analyze(run, select=["server-side-wait", "pipelining-gap", "serialization-stall"])
    (finding,) = result.findings
    assert finding.rule == "server-side-wait" and finding.severity == "info"
    assert finding.evidence["cycles_per_wait"] > 3
    assert finding.evidence["session_ids"] == ["3f2a9c1e-77aa-4b1d-9e0c-5d6f7a8b9c0d"]
    assert "trace-doctor bundle" in finding.message
    # Results are 3-5 cycles late; a pipelined step needs two: the rest of each wait is the service's.
    assert 0 < finding.seconds_lost < sum(k * 0.1 for k in [3, 4, 5, 4, 3, 5, 4, 3, 4, 5] * 2)


def test_a_healthy_pipelined_loop_is_not_a_server_problem():
    result = analyze(load_run(fixture_run("sl_healthy_pipelined")), select=["server-side-wait"])
    outcome = _outcomes(result)["server-side-wait"]
    assert outcome.status == "passed", outcome.reason
    assert "within what the service needs" in outcome.reason


def _warmup(values: list[float]) -> int:
    x = np.log(np.asarray(values, dtype=float))
    sigma = noise_sigma(x)
    cps = change_points(x, 2.0 * sigma**2 * math.log(len(x)))
    return warmup_length(x, cps, 0.3, sigma)


def test_a_stall_after_normal_steps_is_not_warm_up():
    steady = [1.0, 1.01, 0.99] * 9
    assert _warmup(steady[:9] + [4000.0] + steady) == 0
    # Slightly slow first steps are warm-up; the stall after them is not part of it.
    assert _warmup([1.1, 1.1, 1.12, 5000.0] + steady) == 3


def test_a_decaying_prefix_is_warm_up():
    assert _warmup([5.0, 3.0, 2.0, 1.5] + [1.0, 1.01, 0.99] * 9) == 4
