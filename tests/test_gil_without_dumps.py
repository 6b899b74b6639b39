"""A GIL stall read from the trace and the heartbeat alone (no thread-stack or asyncio dumps).

The guide's tell is "heartbeat warnings + slow steps": the SDK's heartbeat failed for as long as a
thread ran user code with nothing else on it moving. That names the starved threads as the cause of
the heartbeat outage (never the other way round), with less confidence than a GIL reading, and never
when the outage is as long as a wait on a slow service.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
from conftest import fixture_run

from trace_doctor.api import analyze, load_run
from trace_doctor.derive.busy_threads import Interval, busy_thread_stalls, match_outages
from trace_doctor.derive.log_signals import LogLine
from trace_doctor.model import LOG_EVENTS_SCHEMA, SPANS_SCHEMA, RunTables
from trace_doctor.rules.engine import run_rules

DUMPS_AND_PROFILE = ("task_dump.txt", "stacks.txt", "stdout.txt", "profile.json")


def without_dumps(tmp_path: Path) -> Path:
    """sl_gil_stall as a user without the debug skill's tools has it: trace, metrics, logs."""
    source = fixture_run("sl_gil_stall")
    run = tmp_path / "sl_gil_stall_no_dumps"
    shutil.copytree(source, run, ignore=shutil.ignore_patterns(*DUMPS_AND_PROFILE, "EXPECTED.json"))
    return run


def by_rule(findings, rule):
    return [f for f in findings if f.rule == rule]


def test_heartbeat_and_busy_trace_name_starved_threads_not_the_heartbeat(tmp_path):
    result = analyze(load_run(without_dumps(tmp_path)))
    (gil,) = by_rule(result.findings, "gil-stall")
    assert gil.confidence == "medium", "no reading of the GIL itself: never high"
    assert gil.title.startswith("Threads starved")
    assert "process suspended" in gil.message
    kinds = [s["kind"] for s in gil.evidence["signals"]]
    assert "heartbeat-while-busy" in kinds and "gil-monitor" not in kinds
    placed = next(s for s in gil.evidence["signals"] if s["kind"] == "heartbeat-while-busy")
    # The 3.3 s outage is the untraced regex before step 11, the 1.9 s one the regex in get_batch at step 19.
    stalls = {(m["stall"]["kind"], m["stall"]["name"]) for m in placed["matches"]}
    assert stalls == {("gap", None), ("span", "get_batch")}
    assert 19 in gil.steps
    (heartbeat,) = by_rule(result.findings, "heartbeat-stall")
    assert heartbeat.explained_by == ["gil-stall"]
    assert result.verdict.costliest is gil, "the symptom (heartbeat) must not be the root cause"
    # The stall ran inside a phase: the spike names it (its own cause, not an untimed gap).
    spike = next(f for f in result.findings if f.fingerprint.startswith("inconsistent-step-times:phase"))
    assert spike.steps == [19] and spike.explained_by[0] == "gil-stall"


def test_full_fixture_links_the_step_19_spike_to_the_gil_stall():
    result = analyze(load_run(fixture_run("sl_gil_stall")))
    (gil,) = by_rule(result.findings, "gil-stall")
    assert gil.confidence == "high" and gil.title.startswith("GIL stall")
    spike = next(f for f in result.findings if f.fingerprint.startswith("inconsistent-step-times:phase"))
    assert "gil-stall" in spike.explained_by


# --- hand-made traces -----------------------------------------------------------------------------


def span(name, start_s, dur_s, *, track="main", tid=1, depth=1, step=None, pid=0):
    return {
        "name": name,
        "pid": pid,
        "tid": tid,
        "thread": "MainThread",
        "track": track,
        "start_us": start_s * 1e6,
        "end_us": (start_s + dur_s) * 1e6,
        "dur_us": dur_s * 1e6,
        "depth": depth,
        "step": step,
        "segment": 0,
        "closed": True,
        "args": "{}",
    }


def sl_loop(n: int, *, slow_step: int | None = None, slow: str = "get_batch", extra_s: float = 0.0) -> list[dict]:
    """A pipelined SL loop, 1 s a step: get_batch, submits, then the result wait (`step`)."""
    rows = [span("main", 0, n + extra_s + 1, depth=0)]
    t = 0.0
    for i in range(n):
        get_batch = 0.1 + (extra_s if slow_step == i and slow == "get_batch" else 0.0)
        wait = 0.8 + (extra_s if slow_step == i and slow == "step" else 0.0)
        rows.append(span("get_batch", t, get_batch, step=i))
        rows.append(span("forward_backward", t + get_batch, 0.01, depth=1, step=i))
        rows.append(span("step", t + get_batch + 0.05, wait, step=i))
        t += get_batch + 0.05 + wait + 0.05
    return rows


def heartbeat_log(*seconds: float) -> pl.DataFrame:
    rows = [
        {
            "source": "logs.log",
            "line": 10 + 7 * i,
            "timestamp": None,
            "logger": "tinker.lib.internal_client_holder",
            "level": "WARNING",
            "kind": "heartbeat",
            "message": f"Session heartbeat failed for {s} seconds for session abc-1. Last exception: x.",
            "fields": "{}",
        }
        for i, s in enumerate(seconds)
    ]
    return pl.DataFrame(rows, schema=LOG_EVENTS_SCHEMA)


def traced(spans: list[dict], *heartbeats: float) -> RunTables:
    run = RunTables()
    run.spans = pl.DataFrame(spans, schema=SPANS_SCHEMA)
    run.log_events = heartbeat_log(*heartbeats)
    return run


def gil(run: RunTables):
    findings, outcomes, _ = run_rules(run, select=["gil-stall"])
    return findings, outcomes[0]


def test_heartbeat_as_long_as_a_busy_get_batch_is_a_starved_thread():
    findings, outcome = gil(traced(sl_loop(20, slow_step=12, extra_s=130.0), 134.5))
    assert outcome.status == "fired"
    (finding,) = findings
    assert finding.confidence == "medium" and 12 in finding.steps
    assert finding.seconds_lost >= 130.0


def test_heartbeat_as_long_as_a_slow_service_wait_is_never_a_gil_stall():
    # The client waited 130 s on a result while the heartbeat failed for as long: the network or the
    # service, not the GIL.
    findings, outcome = gil(traced(sl_loop(20, slow_step=12, slow="step", extra_s=130.0), 134.5))
    assert findings == [] and outcome.status == "passed"
    assert "not enough alone" in outcome.reason


def test_a_long_span_while_other_tasks_on_its_thread_ran_is_awaiting_not_holding_the_gil():
    rows = sl_loop(20, slow_step=12, extra_s=130.0)
    slow = next(r for r in rows if r["name"] == "get_batch" and r["step"] == 12)
    # Another task of the same thread (pid) logged spans during the long get_batch: the thread was free.
    for k in range(5):
        rows.append(span("env_step", slow["start_us"] / 1e6 + 10 + 20 * k, 1.0, track=f"Task-{k}", tid=50 + k))
    findings, outcome = gil(traced(rows, 134.5))
    assert findings == [] and outcome.status == "passed"


def test_heartbeat_outage_of_another_length_places_nothing():
    findings, outcome = gil(traced(sl_loop(20, slow_step=12, extra_s=130.0), 600.0))
    assert findings == [] and outcome.status == "passed"


def test_match_outages_pairs_by_length_and_prefers_the_service_when_as_close():
    def outage(seconds: float) -> list[LogLine]:
        return [LogLine("logs.log", 1, "", {"seconds": seconds, "session": "s"})]

    busy = [
        Interval("span", "get_batch", "MainThread", 3, 0, 0.0, 130e6),
        Interval("gap", None, None, 9, 0, 200e6, 500e6),
    ]
    matched, service = match_outages([outage(310.0), outage(128.0)], busy, [], 2.0)
    assert [(m.seconds, m.stall.name) for m in matched] == [(128.0, "get_batch"), (310.0, None)]
    assert service == []
    waits = [Interval("wait", "step", "MainThread", 5, 0, 0.0, 129e6)]
    matched, service = match_outages([outage(128.0)], busy[:1], waits, 2.0)
    assert matched == [] and len(service) == 1


def test_busy_thread_stalls_skip_sdk_calls_and_waits():
    rows = sl_loop(5) + [span("forward_backward", 20.0, 5.0), span("step", 30.0, 5.0)]
    stalls = busy_thread_stalls(pl.DataFrame(rows, schema=SPANS_SCHEMA).lazy(), 0.5)
    assert all(s.name not in ("forward_backward", "step") for s in stalls)
