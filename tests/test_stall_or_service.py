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
from guide_cases import profile_awaiting_results, replayed_dumps

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


# --- the main thread held in BLAS while the SDK thread runs (sl_blas_main_thread) ------------------


def blas_hold_in_a_long_run(extra_idle_blocks: int = 20):
    """sl_blas_main_thread with `extra_idle_blocks` more watchdog blocks of idle threads (copies of its first
    block): the 5-block BLAS hold becomes a small share of the samples, as in a long run."""
    import polars as pl

    run = load_run(fixture_run("sl_blas_main_thread"))
    stacks = run.stack_snapshots
    first = stacks.filter(pl.col("snapshot") == stacks["snapshot"].min())
    last = int(stacks["snapshot"].max())
    copies = [
        first.with_columns(pl.lit(last + 1 + i, dtype=first.schema["snapshot"]).alias("snapshot"))
        for i in range(extra_idle_blocks)
    ]
    run.stack_snapshots = pl.concat([stacks, *copies])
    return run


def test_main_thread_held_in_blas_is_named_as_cpu_work_with_the_sdk_thread_running():
    result = analyze(load_run(fixture_run("sl_blas_main_thread")))
    (cpu,) = [f for f in of_rule(result, "cpu-bound-main-thread") if f.fingerprint == "cpu-bound-main-thread:stacks"]
    assert cpu.evidence["longest_hold_samples"] >= 3
    assert "matrix product (@, BLAS)" in cpu.message and "not a GIL stall" in cpu.message
    (blocking,) = of_rule(result, "blocking-call-in-async")
    assert "SDK thread kept running" in blocking.message
    assert not of_rule(result, "gil-stall")


def test_a_long_hold_is_named_even_as_a_small_share_of_a_long_run():
    run = blas_hold_in_a_long_run()
    result = analyze(run)
    (cpu,) = [f for f in of_rule(result, "cpu-bound-main-thread") if f.fingerprint == "cpu-bound-main-thread:stacks"]
    assert cpu.evidence["share"] < 0.25 and cpu.evidence["longest_hold_samples"] >= 3


def test_a_decorator_line_is_not_a_matrix_product():
    from trace_doctor.derive.profile_stats import _MATMUL_IN_CODE

    assert _MATMUL_IN_CODE.search("product = features @ features.T")
    assert _MATMUL_IN_CODE.search("scores = (x)@w")
    assert not _MATMUL_IN_CODE.search("@trace.scope")


# --- a request pending on the service while both loops run; a profile awaiting results -------------


def test_a_request_pending_90_s_with_both_loops_running_waits_on_the_service(tmp_path):
    dump = tmp_path / "task_dump.txt"
    replayed_dumps(dump, pending_dumps=92)
    result = analyze(load_run(dump))
    (wait,) = of_rule(result, "server-side-wait")
    assert wait.fingerprint == "server-side-wait:pending-request" and wait.severity == "info"
    (request,) = wait.evidence["requests"]
    assert request["coroutine"] == "TrainingClient._run_fwd_bwd.<locals>._run_async"
    assert request["pending_at_least_s"] >= 90
    assert not of_rule(result, "gil-stall") and not of_rule(result, "blocking-call-in-async")


def test_a_short_pending_request_is_the_ordinary_wait(tmp_path):
    dump = tmp_path / "task_dump.txt"
    replayed_dumps(dump, pending_dumps=20)
    assert not of_rule(analyze(load_run(dump)), "server-side-wait")


def test_a_request_pending_across_a_stop_of_both_loops_is_not_the_services(tmp_path):
    dump = tmp_path / "task_dump.txt"
    replayed_dumps(dump, pending_dumps=92, stop_both_at=40)
    result = analyze(load_run(dump))
    assert not of_rule(result, "server-side-wait")
    assert of_rule(result, "gil-stall")


def test_a_profile_mostly_awaiting_results_is_waiting_on_the_server(tmp_path):
    profile = tmp_path / "profile.json"
    profile_awaiting_results(profile)
    result = analyze(load_run(profile))
    (wait,) = of_rule(result, "server-side-wait")
    assert wait.fingerprint.startswith("server-side-wait:profile") and wait.evidence["share"] >= 0.5
    assert not of_rule(result, "cpu-bound-main-thread") and not of_rule(result, "profile-without-async-mode")


def test_a_profile_of_ordinary_waits_is_neither_the_service_nor_a_gil_stall():
    # fixtures/profiles/profile_async.json: an idle await of a future another thread completes (37% of the
    # profile), serialization and CPU work: no service reading, and no GIL stall from an idle wait.
    from conftest import ROOT

    result = analyze(load_run(ROOT / "fixtures" / "profiles" / "profile_async.json"))
    assert not of_rule(result, "server-side-wait") and not of_rule(result, "gil-stall")
