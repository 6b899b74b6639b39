"""gil-stall (TD105) and the dump-cadence silences it reads: fixtures, hand-made dumps and traces."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from trace_doctor.api import load_run
from trace_doctor.derive.dump_cadence import cadence, longest_gaps, process_silences, silences
from trace_doctor.model import LOG_EVENTS_SCHEMA, SPANS_SCHEMA, TASK_SNAPSHOTS_SCHEMA, RunTables
from trace_doctor.rules.engine import run_rules

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
T0 = datetime(2026, 3, 5, 12, 0, 0)


def outcome(run: RunTables, slug: str = "gil-stall"):
    findings, outcomes, _ = run_rules(run, select=[slug])
    return findings, outcomes[0]


def dumps(schedule: list[tuple[float, str]], interval: float = 1.0) -> pl.DataFrame:
    """Task-dump rows for (seconds after T0, label) in print order, one task per dump."""
    rows = []
    for index, (offset, label) in enumerate(schedule):
        rows.append(
            {
                "source": "stdout.txt",
                "line": 10 * index + 1,
                "timestamp": T0 + timedelta(seconds=int(offset)),
                "label": label,
                "snapshot": index,
                "task_count": 1,
                "interval_s": interval,
                "task_name": "Task-1",
                "state": "pending",
                "coroutine": "<coroutine object x>",
            }
        )
    return pl.DataFrame(rows, schema=TASK_SNAPSHOTS_SCHEMA)


def steady(labels: tuple[str, ...], start: int, end: int) -> list[tuple[float, str]]:
    return [(t, label) for t in range(start, end) for label in labels]


def span(
    name: str,
    start_s: float,
    dur_s: float,
    track: str = "main",
    tid: int = 1,
    thread: str = "MainThread",
    depth: int = 1,
) -> dict:
    return {
        "name": name,
        "pid": 0,
        "tid": tid,
        "thread": thread,
        "track": track,
        "start_us": start_s * 1e6,
        "end_us": (start_s + dur_s) * 1e6,
        "dur_us": dur_s * 1e6,
        "depth": depth,
        "step": int(start_s),
        "segment": 0,
        "closed": True,
        "args": "{}",
    }


def traced_run(spans: list[dict]) -> RunTables:
    run = RunTables()
    run.spans = pl.DataFrame(spans, schema=SPANS_SCHEMA)
    return run


# --- dump cadence ---------------------------------------------------------------------------


def test_holder_silence_while_main_keeps_dumping_is_found_with_its_lines():
    schedule = (
        steady(("holder", "main"), 0, 5) + [(t, "main") for t in range(5, 12)] + steady(("holder", "main"), 12, 15)
    )
    found = silences(dumps(schedule), min_intervals=2.5)
    assert [s.label for s in found] == ["holder"]
    gap = found[0]
    assert gap.start == T0 + timedelta(seconds=4) and gap.end == T0 + timedelta(seconds=12)
    assert gap.other_dumps == {"main": 8}
    assert gap.lower_bound_s >= 6.0
    assert process_silences(dumps(schedule), min_intervals=2.5) == []


def test_longest_gap_is_the_silence_the_rule_sees_and_never_spans_two_files():
    schedule = (
        steady(("holder", "main"), 0, 5) + [(t, "main") for t in range(5, 12)] + steady(("holder", "main"), 12, 15)
    )
    first = dumps(schedule)
    # A second process's stdout, started 100 s later: no gap runs from one file into the other.
    second = dumps(steady(("holder", "main"), 100, 103)).with_columns(pl.lit("stdout-2.txt").alias("source"))
    gaps = {g.label: g for g in longest_gaps(pl.concat([first, second]))}
    holder = gaps["holder"]
    assert holder.gap_s == 8.0 and holder.at == T0 + timedelta(seconds=12)
    assert holder.dumps == 8 + 3 and holder.interval_s == 1.0
    (silence,) = silences(first, min_intervals=2.5)
    assert silence.end == holder.at and silence.clock_gap_s == holder.gap_s
    assert gaps["main"].gap_s == 1.0


def test_both_labels_quiet_together_is_a_process_silence_not_a_label_silence():
    schedule = steady(("holder", "main"), 0, 5) + steady(("holder", "main"), 9, 12)
    table = dumps(schedule)
    assert silences(table, min_intervals=2.5) == []
    together = process_silences(table, min_intervals=2.5)
    assert len(together) == 1 and together[0].label == "*"
    assert together[0].clock_gap_s == 5.0 and together[0].lower_bound_s == 4.0


def test_regular_dumps_have_no_silence_and_cadence_gaps_equal_the_interval():
    table = dumps(steady(("holder", "main"), 0, 20))
    assert silences(table, min_intervals=2.5) == [] and process_silences(table, min_intervals=2.5) == []
    gaps = cadence(table).filter(pl.col("label") == "main")["gap_s"].drop_nulls()
    assert set(gaps.to_list()) == {1.0}


# --- gil-stall on hand-made inputs ----------------------------------------------------------


def test_not_applicable_names_what_it_would_need():
    findings, result = outcome(RunTables())
    assert findings == [] and result.status == "not_applicable"
    assert "GIL-monitor" in result.reason and "task dump" in result.reason


def test_heartbeat_alone_is_not_enough_and_the_reason_says_so():
    run = RunTables()
    run.log_events = pl.DataFrame(
        [
            {
                "source": "logs.log",
                "line": 7,
                "timestamp": None,
                "logger": "tinker.lib.internal_client_holder",
                "level": "WARNING",
                "kind": "heartbeat",
                "message": "Session heartbeat failed for 130.2 seconds for session abc-1. Last exception: x.",
                "fields": "{}",
            }
        ],
        schema=LOG_EVENTS_SCHEMA,
    )
    _, result = outcome(run)
    assert result.status == "not_applicable" and "heartbeat-stall" in result.reason


def test_holder_silence_alone_fires_with_medium_confidence():
    run = RunTables()
    run.task_snapshots = dumps(
        steady(("holder", "main"), 0, 5) + [(t, "main") for t in range(5, 12)] + steady(("holder", "main"), 12, 14)
    )
    findings, result = outcome(run)
    assert result.status == "fired"
    (finding,) = findings
    assert finding.confidence == "medium"
    assert finding.title.startswith("GIL stall")
    assert [s["kind"] for s in finding.evidence["signals"]] == ["holder-silent"]
    assert finding.seconds_lost >= 6.0


def test_main_silence_alone_is_a_blocking_call_not_a_gil_stall():
    # [main] stops dumping while the SDK loop's [holder] keeps going: the SDK thread was not starved.
    run = RunTables()
    run.task_snapshots = dumps(
        steady(("holder", "main"), 0, 5) + [(t, "holder") for t in range(5, 12)] + steady(("holder", "main"), 12, 14)
    )
    found, gil = outcome(run)
    assert not found and gil.status == "passed"
    assert "SDK thread itself was starved" in gil.reason
    (finding,), blocked = outcome(run, "blocking-call-in-async")
    assert blocked.status == "fired"
    assert finding.evidence["readings"][0]["kind"] == "main-silent"
    assert finding.confidence == "medium"
    assert finding.seconds_lost >= 6.0


def test_long_submit_overlapping_a_stretched_sample_is_strong_trace_evidence():
    spans = [span("main", 0, 40, depth=0)]
    for i in range(10):
        spans.append(span("train_step", 4 * i, 3.999))
        spans.append(span("forward_backward_async", 4 * i, 0.002, depth=2))
        spans.append(span("sample_async", 4 * i, 1.0, track=f"Task-{i}", tid=100 + i))
    spans.append(span("forward_backward_async", 20.5, 2.5, depth=2))
    spans.append(span("sample_async", 20.2, 4.0, track="Task-99", tid=199))
    findings, result = outcome(traced_run(spans))
    assert result.status == "fired"
    signal = findings[0].evidence["signals"][0]
    assert signal["kind"] == "trace-submit" and signal["strength"] == 2.0
    assert signal["spans"][0]["overlapping_round_trips"][0]["name"] == "sample_async"
    assert findings[0].time_ranges_us == [[20.5e6, 23.0e6]]
    assert findings[0].seconds_lost == pytest.approx(2.498, abs=0.01)


def test_healthy_trace_passes_and_a_lone_main_gap_is_only_supporting():
    spans = [span("main", 0, 40, depth=0)] + [span("submit_batch", 2 * i, 1.9) for i in range(20)]
    _, result = outcome(traced_run(spans))
    assert result.status == "passed"
    gapped = [span("main", 0, 40, depth=0), span("submit_batch", 0, 1.0), span("submit_batch", 5.0, 1.0)]
    _, result = outcome(traced_run(gapped))
    assert result.status == "passed", "a main-track gap alone cannot tell a stall from untraced work"


# --- fixtures made by the real writer ----------------------------------------------------------

needs_fixtures = pytest.mark.skipif(not (RUNS / "sl_gil_stall").exists(), reason="fixtures/runs not generated")


@needs_fixtures
def test_sl_gil_stall_fixture_is_a_high_confidence_gil_stall():
    (finding,), result = outcome(load_run(RUNS / "sl_gil_stall"))
    kinds = {s["kind"] for s in finding.evidence["signals"]}
    assert {"gil-monitor", "all-loops-silent", "stack-watchdog", "heartbeat", "trace-gap"} <= kinds
    assert finding.confidence == "high"
    # The fixture holds the GIL ~3 s then ~1.8 s; the monitor measured 3.25 + 1.78 s of jitter.
    assert 4.0 <= finding.seconds_lost <= 6.0
    assert finding.time_ranges_us and all(b > a for a, b in finding.time_ranges_us)
    monitor = next(s for s in finding.evidence["signals"] if s["kind"] == "gil-monitor")
    assert all(line["file"].endswith("stdout.txt") and line["line"] >= 1 for line in monitor["lines"])
    # The SDK thread is never in a trace or profile: the verdict must say it reads effects only.
    assert "never appears in a trace or profile" in finding.message


@needs_fixtures
@pytest.mark.parametrize("scenario", sorted(p.name for p in RUNS.iterdir()) if RUNS.exists() else [])
def test_fixture_expectations(scenario):
    expected = json.loads((RUNS / scenario / "EXPECTED.json").read_text())
    _, result = outcome(load_run(RUNS / scenario))
    assert result.status != "error", result.reason
    if "gil-stall" in expected["must_fire"]:
        assert result.status == "fired"
    if "gil-stall" in expected["must_not_fire"] or scenario.startswith(("sl_healthy", "rl_healthy")):
        assert result.status != "fired", result.reason
