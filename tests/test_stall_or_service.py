"""A stall or the service: late results are the service's only when the SDK thread could poll them.

The guide rules the GIL out (Step 5) before the network and the service (Steps 6-7). A run whose
results come back cycles late (sl_server_queue: the service runs every request 4 cycles late) is
the service's — unless the asyncio task dumps show the SDK loop stopped for much of that time: a
starved SDK thread cannot poll its results, which delays them as a queue does, and gil-stall reads
it from the dumps without a GIL monitor.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from conftest import fixture_run

from trace_doctor.api import analyze, load_run

BLOCK = re.compile(
    r"\n===== (?P<ts>[\d-]+ [\d:]+) asyncio task dump \[(?P<label>\w+)\].*?"
    r"\n===== [\d-]+ [\d:]+ end \[(?P=label)\] =====\n",
    re.DOTALL,
)


def both_loops_silent(tmp_path: Path, seconds: tuple[str, ...]) -> Path:
    """sl_server_queue with every [main] and [holder] dump of these seconds removed: both loops stopped
    at once, as they do when user code holds the GIL in C (the guide's "SDK thread stopped logging")."""
    run = tmp_path / "sl_server_queue_loops_silent"
    shutil.copytree(fixture_run("sl_server_queue"), run, ignore=shutil.ignore_patterns("EXPECTED.json"))
    dump = run / "task_dump.txt"
    text = dump.read_text()
    kept = BLOCK.sub(lambda m: "\n" if m["ts"].split()[1] in seconds else m[0], text)
    assert kept != text
    dump.write_text(kept)
    return run


def of_rule(result, rule):
    return [f for f in result.findings if f.rule == rule]


def outcome(result, rule):
    return next(o for o in result.outcomes if o.rule == rule)


def test_service_queue_is_the_service():
    result = analyze(load_run(fixture_run("sl_server_queue")))
    (wait,) = of_rule(result, "server-side-wait")
    assert wait.seconds_lost > 2.0
    assert not of_rule(result, "gil-stall")


def test_sdk_loop_stopped_with_main_is_not_blamed_on_the_service(tmp_path):
    run = both_loops_silent(tmp_path, ("00:46:07", "00:46:08", "00:46:09"))
    result = analyze(load_run(run))
    assert not of_rule(result, "server-side-wait")
    reason = outcome(result, "server-side-wait").reason
    assert "SDK loop's task dumps stopped" in reason and "gil-stall" in reason
    (gil,) = of_rule(result, "gil-stall")
    assert "all-loops-silent" in [s["kind"] for s in gil.evidence["signals"]]
    assert "gil-monitor" not in [s["kind"] for s in gil.evidence["signals"]]


def test_a_short_silence_does_not_clear_the_service(tmp_path):
    # One second of silent dumps against several seconds of late results: the queue is still the reading.
    run = both_loops_silent(tmp_path, ("00:46:08",))
    result = analyze(load_run(run))
    assert of_rule(result, "server-side-wait")


def test_healthy_long_cycle_is_not_a_service_problem():
    result = analyze(load_run(fixture_run("sl_long_cycle_healthy")))
    assert not of_rule(result, "server-side-wait")
    assert not of_rule(result, "gil-stall")
    assert not of_rule(result, "network-latency")


# --- a GIL stall without the GIL monitor (sl_gil_stall_unmonitored) --------------------------------


def test_gil_stall_without_a_monitor_is_read_from_submits_gaps_steps_and_dumps():
    result = analyze(load_run(fixture_run("sl_gil_stall_unmonitored")))
    (gil,) = of_rule(result, "gil-stall")
    kinds = {s["kind"] for s in gil.evidence["signals"]}
    assert {"all-loops-silent", "trace-submit-loop-stopped", "trace-gap", "step-times"} <= kinds
    assert not kinds & {"gil-monitor", "heartbeat", "heartbeat-while-busy"}
    submits = next(s for s in gil.evidence["signals"] if s["kind"] == "trace-submit-loop-stopped")
    assert {span["step"] for span in submits["spans"]} == {6, 21}
    assert result.verdict.costliest is gil


def test_long_submits_with_the_sdk_loop_stopped_are_not_a_blocking_call():
    result = analyze(load_run(fixture_run("sl_gil_stall_unmonitored")))
    assert not of_rule(result, "blocking-call-in-async")
    reason = outcome(result, "blocking-call-in-async").reason
    assert "did not keep running" in reason and "gil-stall" in reason
    assert not of_rule(result, "server-side-wait")


def test_loops_that_stop_together_are_not_one_loops_silence():
    from trace_doctor.derive.dump_cadence import process_silences, silences

    dumps = load_run(fixture_run("sl_gil_stall_unmonitored")).task_snapshots
    # [main] and [holder] went quiet over the same seconds: a process silence, not "[main] stopped while
    # [holder] kept dumping" (which would read as a blocking call with the SDK thread alive).
    assert silences(dumps, min_intervals=2.5, min_seconds=0.5) == []
    assert len(process_silences(dumps, min_intervals=2.5, min_seconds=0.5)) == 4


def test_a_main_loop_blocked_alone_is_still_its_own_silence():
    from trace_doctor.derive.dump_cadence import silences

    dumps = load_run(fixture_run("sl_blocking_result")).task_snapshots
    assert {s.label for s in silences(dumps, min_intervals=2.5, min_seconds=0.5)} == {"main"}
