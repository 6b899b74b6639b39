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
