"""Perfetto (.pftrace) and Chrome JSON export, parsed back with the perfetto package's protos."""

from __future__ import annotations

import json
from collections import Counter

from ci_fixtures import hand_analysis
from click.testing import CliRunner
from conftest import fixture_run
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

from trace_doctor.report.export import FINDINGS_TRACK, write_chrome_json, write_perfetto


def read_trace(path):
    trace = Trace()
    trace.ParseFromString(path.read_bytes())
    descriptors = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet if p.HasField("track_descriptor")}
    events = [p for p in trace.packet if p.HasField("track_event")]
    return descriptors, events


def track_name(descriptor) -> str:
    return descriptor.name or descriptor.process.process_name


def test_perfetto_tracks_slices_findings_and_flows(tmp_path):
    result = hand_analysis()
    descriptors, events = read_trace(write_perfetto(result, tmp_path / "run.pftrace"))
    names = {uuid: track_name(d) for uuid, d in descriptors.items()}
    # Thread groups (the trace's fake pids) with coroutine tracks below them.
    groups = {d.uuid for d in descriptors.values() if d.HasField("process")}
    assert {names[g] for g in groups} == {"MainThread (segment 0)", "asyncio_0 (segment 0)"}
    coroutines = {names[d.uuid]: names[d.parent_uuid] for d in descriptors.values() if d.parent_uuid in groups}
    assert coroutines == {
        "main": "MainThread (segment 0)",
        "sample_task_0": "MainThread (segment 0)",
        "sync:asyncio_0": "asyncio_0 (segment 0)",
    }

    begins = [e for e in events if e.track_event.type == TrackEvent.TYPE_SLICE_BEGIN]
    ends = [e for e in events if e.track_event.type == TrackEvent.TYPE_SLICE_END]
    per_track_begin = Counter(names[e.track_event.track_uuid] for e in begins)
    per_track_end = Counter(names[e.track_event.track_uuid] for e in ends)
    assert per_track_begin == per_track_end
    assert per_track_begin["main"] == 6 and per_track_begin["sync:asyncio_0"] == 1
    assert sum(
        1 for e in begins if names[e.track_event.track_uuid] not in (FINDINGS_TRACK, f"{FINDINGS_TRACK} (2)")
    ) == len(result.run.spans)

    # The findings track: pipelining-gap has two overlapping ranges -> a second lane below it.
    root = next(u for u, n in names.items() if n == FINDINGS_TRACK)
    lanes = {u for u, d in descriptors.items() if u == root or d.parent_uuid == root}
    finding_slices = [e.track_event for e in begins if e.track_event.track_uuid in lanes]
    assert Counter(s.name for s in finding_slices) == {
        "pipelining-gap": 2,
        "warmup-slowness": 1,
    }  # decoded-error: step 1 has no spans
    notes = {a.name: a for a in finding_slices[0].debug_annotations}
    assert {"message", "severity", "code"} <= set(notes)
    gap = next(s for s in finding_slices if s.name == "pipelining-gap")
    assert {a.name: a.double_value for a in gap.debug_annotations}["seconds_lost"] == 1.5

    # The unclosed sample_async span ends where its segment's trace ends.
    sample_end = next(e for e in ends if names[e.track_event.track_uuid] == "sample_task_0")
    assert sample_end.timestamp == 1000 * 1000

    # fwd_enqueue -> fwd_consume connected by one flow.
    by_name = {e.track_event.name: e.track_event for e in begins}
    assert list(by_name["fwd_enqueue"].flow_ids) == list(by_name["fwd_consume"].terminating_flow_ids) != []


def test_slices_on_each_track_nest_properly(tmp_path):
    descriptors, events = read_trace(write_perfetto(hand_analysis(), tmp_path / "run.pftrace"))
    depth: Counter = Counter()
    last_ts: dict[int, int] = {}
    for event in events:
        track = event.track_event.track_uuid
        assert event.timestamp >= last_ts.get(track, 0)
        last_ts[track] = event.timestamp
        depth[track] += 1 if event.track_event.type == TrackEvent.TYPE_SLICE_BEGIN else -1
        assert depth[track] >= 0
    assert all(v == 0 for v in depth.values())


def test_chrome_json_is_a_loadable_event_array(tmp_path):
    result = hand_analysis()
    events = json.loads(write_chrome_json(result, tmp_path / "run.json").read_text())
    assert isinstance(events, list)
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(result.run.spans)
    assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) and e["dur"] >= 0 for e in complete)
    thread_names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"main", "sample_task_0", "sync:asyncio_0", FINDINGS_TRACK} <= thread_names
    instants = [e for e in events if e["ph"] == "i"]
    assert {e["s"] for e in instants} == {"g"}
    assert Counter(e["name"] for e in instants) == {
        "pipelining-gap": 2,
        "warmup-slowness": 1,
    }  # decoded-error: step 1 has no spans
    flows = [e for e in events if e["ph"] in ("s", "f")]
    assert sorted(e["ph"] for e in flows) == ["f", "s"]


def test_export_command_on_a_fixture_run(tmp_path):
    from trace_doctor.cli import main

    run = fixture_run("sl_sequential_await")
    pftrace, chrome = tmp_path / "t.pftrace", tmp_path / "t.json"
    out = CliRunner().invoke(
        main, ["export", str(run), "--perfetto", str(pftrace), "--chrome-json", str(chrome)], catch_exceptions=False
    )
    assert out.exit_code == 0, out.output
    descriptors, events = read_trace(pftrace)
    names = {uuid: track_name(d) for uuid, d in descriptors.items()}
    assert FINDINGS_TRACK in names.values()
    finding_names = {
        e.track_event.name
        for e in events
        if names.get(e.track_event.track_uuid, "").startswith(FINDINGS_TRACK) and e.track_event.name
    }
    assert "pipelining-gap" in finding_names
    assert len([e for e in json.loads(chrome.read_text()) if e["ph"] == "X"]) > 100


def test_export_without_arguments_is_a_usage_error(tmp_path):
    from trace_doctor.cli import main

    assert CliRunner().invoke(main, ["export", str(fixture_run("sl_healthy_pipelined"))]).exit_code == 2


def _metrics_only(tmp_path, fixture: str):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes((fixture_run(fixture) / "metrics.jsonl").read_bytes())
    return run


def test_a_metrics_only_run_exports_its_steps_and_phases_laid_end_to_end(tmp_path):
    from trace_doctor.cli import main

    run = _metrics_only(tmp_path, "rl_healthy")
    pftrace, chrome = tmp_path / "t.pftrace", tmp_path / "t.json"
    out = CliRunner().invoke(main, ["export", str(run), "--perfetto", str(pftrace), "--chrome-json", str(chrome)])
    assert out.exit_code == 0, out.output
    descriptors, events = read_trace(pftrace)
    names = {uuid: track_name(d) for uuid, d in descriptors.items()}
    steps_track = next(u for u, n in names.items() if n == "steps › phases")
    on_track = [e for e in events if e.track_event.track_uuid == steps_track]
    begins = [e for e in on_track if e.track_event.type == TrackEvent.TYPE_SLICE_BEGIN]
    step_slices = [e for e in begins if e.track_event.name.startswith("step ")]
    assert [e.track_event.name for e in step_slices] == [f"step {i}" for i in range(20)]
    # Each step starts where the previous one ended: the durations are the metrics' time/total.
    totals = [json.loads(line)["time/total"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    starts = [e.timestamp for e in step_slices]
    assert [b - a for a, b in zip(starts, starts[1:], strict=False)] == [round(t * 1e9) for t in totals[:-1]]
    notes = {a.name: a.string_value for a in step_slices[0].track_event.debug_annotations}
    assert "no timestamps" in notes["timing"]
    # The phases sit inside their step (a track's slices nest), sampling and the train step among them.
    depth, phases = 0, set()
    for event in on_track:
        if event.track_event.type == TrackEvent.TYPE_SLICE_BEGIN:
            if depth == 1:
                phases.add(event.track_event.name)
            depth += 1
        else:
            depth -= 1
        assert depth in (0, 1, 2)
    assert {"sampling", "do_train_step_and_get_sampling_client"} <= phases
    complete = [e for e in json.loads(chrome.read_text()) if e["ph"] == "X"]
    assert len([e for e in complete if e["name"].startswith("step ")]) == 20


def test_a_run_with_no_times_at_all_has_nothing_to_export(tmp_path):
    from trace_doctor.cli import main

    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 0.9}\n')
    out = CliRunner().invoke(main, ["export", str(tmp_path), "--perfetto", str(tmp_path / "t.pftrace")])
    assert out.exit_code == 2
    assert "nothing to export" in out.output and "time/*" in out.output
    assert not (tmp_path / "t.pftrace").exists()
