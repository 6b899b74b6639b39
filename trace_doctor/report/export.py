"""Export the run's spans and the findings for the Perfetto UI (native protobuf) or chrome://tracing.

Tracks: one per (segment, thread) — the trace's fake pid — with one child per coroutine track; a
"trace-doctor findings" track whose slices cover each finding's time ranges; flows join each
`<x>_enqueue` span to its `<x>_consume` span.

A run with no trace (metrics only, as most real runs are) is exported from its `time/*` keys: each
step a slice with its phases inside, laid end to end (report/metrics_timeline); a run with neither
has nothing to export, and `nothing_to_export` says why.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from trace_doctor.model import Analysis, Finding
from trace_doctor.report.export_tracks import Slice, Track
from trace_doctor.report.metrics_timeline import metrics_timeline

FINDINGS_TRACK = "trace-doctor findings"
ENQUEUE, CONSUME = "_enqueue", "_consume"


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _span_rows(spans: pl.DataFrame) -> list[dict[str, Any]]:
    """Spans in a deterministic order, unclosed ones ending where their segment's trace ends."""
    if spans.is_empty():
        return []
    rows = spans.sort(["segment", "pid", "tid", "track", "start_us", "depth", "name"], nulls_last=True).to_dicts()
    last: dict[Any, float] = {}
    for row in rows:
        for value in (row.get("end_us"), row.get("start_us")):
            value = _finite(value)
            if value is not None:
                last[row.get("segment")] = max(last.get(row.get("segment"), value), value)
    kept = []
    for row in rows:
        start = _finite(row.get("start_us"))
        if start is None:
            continue
        end = _finite(row.get("end_us"))
        row["start_us"], row["end_us"] = (
            start,
            max(start, end if end is not None else last.get(row.get("segment"), start)),
        )
        kept.append(row)
    return kept


def _span_args(row: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {}
    text = row.get("args")
    if text:
        try:
            parsed = orjson.loads(text)
            if isinstance(parsed, dict):
                args.update(parsed)
        except orjson.JSONDecodeError:
            args["args"] = text
    if row.get("step") is not None:
        args["step"] = int(row["step"])
    if row.get("closed") is False:
        args["closed"] = False
    return args


def _flows(rows: list[dict[str, Any]]) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Pair the k-th `<x>_enqueue` with the k-th `<x>_consume` per segment and step, in time order."""
    queues: dict[tuple, dict[str, list[int]]] = {}
    for index in sorted(range(len(rows)), key=lambda i: (rows[i]["start_us"], i)):
        name = rows[index]["name"] or ""
        for suffix in (ENQUEUE, CONSUME):
            if name.endswith(suffix):
                key = (rows[index].get("segment"), rows[index].get("step"), name[: -len(suffix)])
                queues.setdefault(key, {ENQUEUE: [], CONSUME: []})[suffix].append(index)
    out: dict[int, list[int]] = {}
    into: dict[int, list[int]] = {}
    flow_id = 0
    for key in sorted(queues, key=repr):
        for enq, con in zip(queues[key][ENQUEUE], queues[key][CONSUME], strict=False):
            flow_id += 1
            out.setdefault(enq, []).append(flow_id)
            into.setdefault(con, []).append(flow_id)
    return out, into


def _lanes(slices: list[Slice]) -> list[list[Slice]]:
    """Split slices into lanes in which every two slices are nested or disjoint (a track's rule)."""
    lanes: list[tuple[list[Slice], list[float]]] = []
    for item in sorted(slices, key=lambda s: (s.start_us, -s.end_us, s.name)):
        for members, open_ends in lanes:
            while open_ends and open_ends[-1] <= item.start_us:
                open_ends.pop()
            if not open_ends or item.end_us <= open_ends[-1]:
                members.append(item)
                open_ends.append(item.end_us)
                break
        else:
            lanes.append(([item], [item.end_us]))
    return [members for members, _ in lanes]


def span_tracks(result: Analysis, spans: pl.DataFrame | None = None) -> list[Track]:
    """The run's spans grouped into thread groups and coroutine tracks (overlaps split into lanes)."""
    rows = _span_rows(result.run.spans if spans is None else spans)
    flows_out, flows_in = _flows(rows)
    grouped: dict[tuple, list[Slice]] = {}
    labels: dict[tuple, tuple[str, str]] = {}
    for index, row in enumerate(rows):
        segment, pid = row.get("segment") or 0, row.get("pid")
        thread = row.get("thread") or f"pid {pid}"
        track = row.get("track") or f"tid {row.get('tid')}"
        key = (segment, pid if pid is not None else -1, thread, track)
        labels[key] = (f"{thread} (segment {segment})", track)
        grouped.setdefault(key, []).append(
            Slice(
                name=row.get("name") or "?",
                start_us=row["start_us"],
                end_us=row["end_us"],
                args=_span_args(row),
                flows_out=flows_out.get(index, []),
                flows_in=flows_in.get(index, []),
            )
        )
    tracks: list[Track] = []
    for key in sorted(grouped, key=repr):
        group, name = labels[key]
        for lane, members in enumerate(_lanes(grouped[key])):
            tracks.append(Track(group, name if lane == 0 else f"{name} (overlap {lane})", members))
    return tracks


def _finding_args(finding: Finding) -> dict[str, Any]:
    args: dict[str, Any] = {
        "code": finding.code,
        "severity": finding.severity,
        "title": finding.title,
        "message": finding.message,
        "fingerprint": finding.fingerprint or finding.rule,
    }
    for name in ("seconds_lost", "fraction_of_wall"):
        value = _finite(getattr(finding, name))
        if value is not None:
            args[name] = value
    for key, value in sorted(finding.evidence.items()):
        if isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)):
            args[f"evidence.{key}"] = value
    return args


def step_ranges_us(spans: pl.DataFrame | pl.LazyFrame) -> dict[int, tuple[float, float]]:
    """Each step's extent on the spans timeline (the last segment wins: a resume re-runs steps)."""
    spans = spans.lazy()
    if "step" not in spans.collect_schema().names():
        return {}
    extent = (
        spans.filter(pl.col("step").is_not_null() & pl.col("start_us").is_not_null())
        .group_by(["segment", "step"])
        .agg(pl.col("start_us").min().alias("a"), pl.col("end_us").max().alias("b"))
        .sort(["segment", "step"], nulls_last=False)
        .collect()
    )
    ranges: dict[int, tuple[float, float]] = {}
    for row in extent.iter_rows(named=True):
        start = float(row["a"])
        end = _finite(row["b"])
        ranges[int(row["step"])] = (start, end if end is not None and end >= start else start)
    return ranges


def _finding_ranges(finding: Finding, steps: dict[int, tuple[float, float]]) -> list[tuple[float, float]]:
    """The finding's own time ranges, else the extent of its affected steps merged into runs."""
    ranges = []
    for bounds in finding.time_ranges_us:
        start = _finite(bounds[0]) if bounds else None
        end = _finite(bounds[1]) if len(bounds) > 1 else None
        if start is not None:
            ranges.append((start, max(start, end if end is not None else start)))
    if ranges or not steps:
        return ranges
    merged: list[tuple[float, float]] = []
    for step in sorted(set(finding.steps)):
        if step not in steps:
            continue
        start, end = steps[step]
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def nothing_to_export(result: Analysis) -> str | None:
    """Why the run has nothing to export (no trace spans and no step times), or None when it has."""
    if result.run.height("spans") or metrics_timeline(_step_times(result))[0]:
        return None
    return (
        "nothing to export: the run has no trace spans (trace_events.jsonl) and no step times "
        "(`time/*` keys in metrics.jsonl), so there is no slice to draw"
    )


def _step_times(result: Analysis) -> pl.DataFrame:
    from trace_doctor.derive.step_times import step_times

    times = result.derived.get("step_times")
    return times if isinstance(times, pl.DataFrame) else step_times(result.run)


def timeline(result: Analysis, spans: pl.DataFrame | None = None) -> tuple[list[Track], dict[int, tuple[float, float]]]:
    """The slice tracks to export and each step's extent on their timeline: the trace's spans, or for
    a run with no trace at all, its steps and phases laid end to end from the metrics' step times."""
    if result.run.height("spans"):
        return span_tracks(result, spans), step_ranges_us(result.run.scan("spans"))
    return metrics_timeline(_step_times(result))


def finding_tracks(result: Analysis, steps: dict[int, tuple[float, float]] | None = None) -> list[Track]:
    """The findings' time ranges as slices named by rule, split into lanes where they overlap.

    A finding without time ranges covers its affected steps (`steps`: each step's extent, by default
    the trace's); the findings track always exists.
    """
    if steps is None:
        steps = step_ranges_us(result.run.scan("spans"))
    slices = [
        Slice(finding.rule, start, end, _finding_args(finding))
        for finding in result.findings
        for start, end in _finding_ranges(finding, steps)
    ]
    lanes = _lanes(slices) or [[]]
    return [
        Track(FINDINGS_TRACK, FINDINGS_TRACK if lane == 0 else f"{FINDINGS_TRACK} ({lane + 1})", members)
        for lane, members in enumerate(lanes)
    ]


def _annotation(packet_event, key: str, value: Any) -> None:
    note = packet_event.debug_annotations.add()
    note.name = key
    if isinstance(value, bool):
        note.bool_value = value
    elif isinstance(value, int):
        note.int_value = value
    elif isinstance(value, float):
        note.double_value = value
    else:
        note.string_value = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()


def perfetto_trace_bytes(result: Analysis) -> bytes:
    """The run as a native Perfetto trace (TrackDescriptor + TrackEvent slices and flows)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent
    from perfetto.trace_builder.proto_builder import TraceProtoBuilder

    builder = TraceProtoBuilder()
    sequence = 1
    slices, steps = timeline(result)
    tracks = slices + finding_tracks(result, steps)
    uuids: dict[tuple[str, str], int] = {}
    groups: dict[str, int] = {}
    next_uuid = 1

    def new_packet():
        packet = builder.add_packet()
        packet.trusted_packet_sequence_id = sequence
        return packet

    first = new_packet()
    first.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    for track in tracks:
        if track.group != FINDINGS_TRACK and track.group not in groups:
            groups[track.group] = next_uuid
            packet = new_packet()
            packet.track_descriptor.uuid = next_uuid
            packet.track_descriptor.process.pid = len(groups)
            packet.track_descriptor.process.process_name = track.group
            next_uuid += 1
    findings_root = None
    for track in tracks:
        packet = new_packet()
        descriptor = packet.track_descriptor
        descriptor.uuid = next_uuid
        descriptor.name = track.name
        if track.group == FINDINGS_TRACK:
            if findings_root is None:
                findings_root = next_uuid
            else:
                descriptor.parent_uuid = findings_root
        else:
            descriptor.parent_uuid = groups[track.group]
        uuids[(track.group, track.name)] = next_uuid
        next_uuid += 1

    for track in tracks:
        uuid = uuids[(track.group, track.name)]
        open_slices: list[Slice] = []

        def end(item: Slice, uuid: int = uuid) -> None:
            packet = new_packet()
            packet.timestamp = _ns(item.end_us)
            packet.track_event.type = TrackEvent.TYPE_SLICE_END
            packet.track_event.track_uuid = uuid

        for item in track.slices:  # already in (start, -end) order from _lanes
            while open_slices and open_slices[-1].end_us <= item.start_us:
                end(open_slices.pop())
            packet = new_packet()
            packet.timestamp = _ns(item.start_us)
            event = packet.track_event
            event.type = TrackEvent.TYPE_SLICE_BEGIN
            event.track_uuid = uuid
            event.name = item.name
            event.flow_ids.extend(item.flows_out)
            event.terminating_flow_ids.extend(item.flows_in)
            for key, value in item.args.items():
                _annotation(event, key, value)
            open_slices.append(item)
        while open_slices:
            end(open_slices.pop())
    return builder.serialize()


# Perfetto timestamps are unsigned 64-bit nanoseconds. A trace's `ts` can be any number (a corrupt
# one of 2^63 µs, a negative one): what does not fit is pinned to the nearest end, not refused.
MAX_PERFETTO_NS = 2**64 - 1


def _ns(us: float) -> int:
    if not math.isfinite(us):
        return MAX_PERFETTO_NS if us > 0 else 0
    return min(max(int(round(us * 1000)), 0), MAX_PERFETTO_NS)


def write_perfetto(result: Analysis, path: Path) -> Path:
    """Write a .pftrace that the Perfetto UI opens directly."""
    path = Path(path)
    path.write_bytes(perfetto_trace_bytes(result))
    return path


def chrome_events(
    result: Analysis, spans: pl.DataFrame | None = None, *, with_findings: bool = True
) -> list[dict[str, Any]]:
    """Chrome trace events: M names, X spans, s/f flows, and findings as global instant events."""
    events: list[dict[str, Any]] = []
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    spans_out: list[dict[str, Any]] = []
    tracks, steps = timeline(result, spans)
    for track in tracks:
        pid = pids.setdefault(track.group, len(pids) + 1)
        if (track.group, track.name) not in tids:
            tids[(track.group, track.name)] = len(tids) + 1
        tid = tids[(track.group, track.name)]
        for item in track.slices:
            spans_out.append(
                {
                    "name": item.name,
                    "cat": "span",
                    "ph": "X",
                    "ts": item.start_us,
                    "dur": item.end_us - item.start_us,
                    "pid": pid,
                    "tid": tid,
                    "args": item.args,
                }
            )
            for flow in item.flows_out:
                spans_out.append(
                    {
                        "name": "enqueue->consume",
                        "cat": "flow",
                        "ph": "s",
                        "id": flow,
                        "ts": item.start_us,
                        "pid": pid,
                        "tid": tid,
                    }
                )
            for flow in item.flows_in:
                spans_out.append(
                    {
                        "name": "enqueue->consume",
                        "cat": "flow",
                        "ph": "f",
                        "bp": "e",
                        "id": flow,
                        "ts": item.start_us,
                        "pid": pid,
                        "tid": tid,
                    }
                )
    for group, pid in pids.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": group}})
    for (group, name), tid in tids.items():
        events.append({"name": "thread_name", "ph": "M", "pid": pids[group], "tid": tid, "args": {"name": name}})
    events.extend(spans_out)
    if with_findings:
        pid = len(pids) + 1
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": FINDINGS_TRACK}})
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": FINDINGS_TRACK}})
        for track in finding_tracks(result, steps):
            for item in track.slices:
                events.append(
                    {
                        "name": item.name,
                        "cat": "finding",
                        "ph": "i",
                        "s": "g",
                        "ts": item.start_us,
                        "pid": pid,
                        "tid": 1,
                        "args": item.args,
                    }
                )
    return events


def chrome_json_bytes(result: Analysis, spans: pl.DataFrame | None = None, *, with_findings: bool = True) -> bytes:
    return orjson.dumps(chrome_events(result, spans, with_findings=with_findings), option=orjson.OPT_SERIALIZE_NUMPY)


def write_chrome_json(result: Analysis, path: Path) -> Path:
    """Write a JSON array of trace events that chrome://tracing and the Perfetto UI load."""
    path = Path(path)
    path.write_bytes(chrome_json_bytes(result))
    return path
