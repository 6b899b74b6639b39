"""The shareable HTML report: one self-contained file rendered from an Analysis.

plotly.js (a partial bundle: assets/README.md) is inlined once and the full JSON document is
embedded for tools to scrape, so the file opens offline and makes no network request. A fleet's
per-run pages are the exception: they load one plotly.js written beside them
(`write_shared_plotly`), or 500 runs would carry 500 copies of it. The renderer draws what the
tables, the rule context and the findings already say; it diagnoses nothing itself.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import orjson
import polars as pl

from trace_doctor import __version__
from trace_doctor.derive import dump_cadence
from trace_doctor.derive.loop_phases import SAMPLING_PHASES
from trace_doctor.derive.timekeys import parent_of
from trace_doctor.humanize import format_seconds, json_dumps, printable
from trace_doctor.knowledge.tinker import ROLLOUT_GROUP_SPAN, ROLLOUT_SAMPLE_SPAN, ROLLOUT_WORKER_SPAN, SAMPLE_CALLS
from trace_doctor.model import Analysis, Finding
from trace_doctor.report import downsample, figures, findings_view, gantt_rows, health_view, timeline_figure
from trace_doctor.report.downsample import Budget, Summarised
from trace_doctor.report.json_doc import build_document
from trace_doctor.report.redaction_notice import UNREDACTED, unredacted
from trace_doctor.report.terminal_text import inert

SIZE_BUDGET_BYTES = 10 * 1024 * 1024
LOG_KINDS_SHOWN = ("error", "warning", "heartbeat", "gil-monitor")
EVIDENCE_VALUE_CHARS = 400
OVERLAY_RANGES_MAX = 300
# Steps of a finding are marked on the step-time chart only when they are a minority of the run.
MARKED_STEP_SHARE = 0.3
GANTT_LEGEND_NAMES = 12
LAST_DUMP_TASKS = 12
# The file a fleet's per-run pages load plotly.js from, in their own folder.
SHARED_PLOTLY = "plotly.min.js"


def script_json(value: Any) -> str:
    """JSON safe inside a <script> block: `<`, `>` and `&` as \\u escapes, so no string can close it."""
    text = value if isinstance(value, str) else json_dumps(value, orjson.OPT_SERIALIZE_NUMPY).decode()
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


# plotly.js with only the trace types the reports draw (scatter, bar, icicle): 1.2 MB where the
# full bundle is 4.8 MB. Built from plotly.js's own sources, see assets/README.md.
PLOTLY_ASSET = Path(__file__).with_name("assets") / "plotly-trace-doctor.min.js"


def plotly_source() -> str:
    """The partial plotly.js bundle the reports load (read once per process)."""
    global _PLOTLY_SOURCE
    if _PLOTLY_SOURCE is None:
        _PLOTLY_SOURCE = PLOTLY_ASSET.read_text(encoding="utf-8")
    return _PLOTLY_SOURCE


_PLOTLY_SOURCE: str | None = None


def _plotly_js() -> str:
    source = plotly_source()
    # A literal "</script" would end the inline block early; the shipped bundle has none.
    return source.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")


def write_shared_plotly(folder: Path) -> Path:
    """Write plotly.js once into `folder` for the pages there that load it instead of inlining it.

    Written to a temporary file and moved into place, so a page opened (or a second fleet writing
    into the same folder) never sees half a file.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # Not mkstemp: its file is private (0600) and a shared folder's readers could not load it; "x"
    # creates it with the umask's ordinary permissions, and the name is this writer's alone.
    temporary = folder / f".{SHARED_PLOTLY}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        with temporary.open("x", encoding="utf-8") as out:
            out.write(plotly_source())
        os.replace(temporary, folder / SHARED_PLOTLY)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return folder / SHARED_PLOTLY


@dataclass
class Chart:
    """One plot div of the report with its figure JSON and what the reader should know about it."""

    id: str
    figure_json: str
    # Buttons that switch the chart between views (linear/log, steady/full range), and why it
    # opens on the view it does.
    views: list[dict[str, Any]]
    active_view: int = 0
    why: str = ""
    # The colour key drawn as HTML under the chart, when the chart has one there.
    legend: list[dict[str, str]] = field(default_factory=list)


def _figure(chart_id: str, fig) -> Chart:
    offered = figures.views(fig) or {}
    buttons = [
        {"label": v["label"], "layout": json.dumps(v["layout"]), "visible": json.dumps(v.get("visible"))}
        for v in offered.get("views", [])
    ]
    return Chart(
        chart_id,
        script_json(fig.to_json(engine="json", validate=False)),
        buttons,
        offered.get("active", 0),
        offered.get("why", ""),
    )


# ---- whole-run series -------------------------------------------------------------------


def _step_times(result: Analysis) -> pl.DataFrame:
    """The rule context's per-step times; without them, the metrics' own `time/total` column."""
    derived = result.derived.get("step_times")
    if isinstance(derived, pl.DataFrame) and "step" in derived.columns and "total_s" in derived.columns:
        return derived.sort("step")
    live = downsample.live_steps(result.run.steps)
    if "time/total" not in live.columns or live.is_empty():
        return pl.DataFrame(schema={"step": pl.Int64, "total_s": pl.Float64})
    return live.select("step", pl.col("time/total").alias("total_s")).unique("step", keep="last").sort("step")


def _phase_columns(step_times: pl.DataFrame, prefix: str = "phase:") -> dict[str, str]:
    """Phase name -> column for the top-level (`phase:<name>`) or nested (`inner:<name>`) timers."""
    return {c.removeprefix(prefix): c for c in step_times.columns if c.startswith(prefix)}


def _direct_children(phases: dict[str, str], inners: dict[str, str]) -> dict[str, list[str]]:
    """Top-level phase -> the nested timers directly inside it (a timer nested in a nested one is left
    to its own parent, so no second counts)."""
    present = set(phases) | set(inners)
    children: dict[str, list[str]] = {}
    for name in sorted(inners):
        parent = parent_of(name, present)
        if parent in phases:
            children.setdefault(parent, []).append(name)
    return children


def _phase_series(
    shown: pl.DataFrame, phases: dict[str, str], inners: dict[str, str]
) -> tuple[dict[str, list[float | None]], dict[str, str], dict[str, str]]:
    """Stacked series per phase, each parent split into its nested timers and "<parent> (rest)".

    Returns the series in stacking order, the phase whose colour each series takes, and what each
    series is in words. A nested part never exceeds what is left of its parent, so the parts of a
    bar add up to the parent's own seconds and nothing is counted twice.
    """
    children = _direct_children(phases, inners)
    series: dict[str, list[float | None]] = {}
    colour_of: dict[str, str] = {}
    described: dict[str, str] = {}
    for name in sorted(phases):
        parent = shown[phases[name]].to_list()
        if name not in children:
            series[name], colour_of[name] = parent, name
            continue
        left = list(parent)
        for child in children[name]:
            label = f"{child} (in {name})"
            part = []
            for i, value in enumerate(shown[inners[child]].to_list()):
                if value is None or left[i] is None:
                    part.append(None)
                    continue
                taken = min(max(value, 0.0), left[i])
                left[i] -= taken
                part.append(taken)
            series[label], colour_of[label], described[label] = part, child, f"{child}, inside {name}"
        rest = f"{name} (rest)"
        series[rest], colour_of[rest] = left, name
        described[rest] = f"{name} outside {', '.join(children[name])}"
    return series, colour_of, described


def _marked_steps(result: Analysis, step_count: int) -> dict[int, list[tuple[str, str]]]:
    """Step -> (severity, "code title") of the findings that single it out."""
    marked: dict[int, list[tuple[str, str]]] = {}
    for finding in result.findings:
        if len(finding.steps) > MARKED_STEP_SHARE * step_count:
            continue  # a finding about most steps singles none out; its card lists them
        for step in finding.steps:
            marked.setdefault(step, []).append((finding.severity, f"{finding.code} {finding.title}"))
    return marked


def _whole_run_charts(result: Analysis, budget: Budget, notes: Summarised, colours: dict[str, str]) -> list[Chart]:
    times = _step_times(result)
    if times.is_empty() or times["total_s"].drop_nulls().is_empty():
        return []
    phases = _phase_columns(times)
    inners = _phase_columns(times, "inner:") if phases else {}
    value_columns = ["total_s", *phases.values(), *inners.values()] + (
        ["untimed_s"] if "untimed_s" in times.columns else []
    )
    shown = downsample.bin_steps(
        times.select("step", *value_columns), value_columns, budget.step_points, notes, "The whole-run charts"
    )
    steps = shown["step"].to_list()
    totals = shown["total_s"].to_list()
    warmup = int(result.derived.get("warmup_steps", result.run_summary.warmup_steps or 0) or 0)
    if len(shown) < len(times):
        # Binned: the boundary falls in the bin that holds the first steady step.
        first_steady = times["step"][warmup] if warmup < len(times) else None
        warmup = sum(1 for s in steps if first_steady is not None and s < first_steady)
    marked = _marked_steps(result, max(len(times), 1))
    charts = [
        _figure(
            "chart-step-time",
            figures.step_time_figure(
                steps,
                totals,
                warmup_steps=warmup,
                steady_median_s=result.run_summary.steady_step_time_s,
                marked=marked,
            ),
        )
    ]
    if phases:
        series, colour_of, described = _phase_series(shown, phases, inners)
        if "untimed_s" in shown.columns:
            # Overlapping timers can make the remainder negative; there is then no untimed time to draw.
            untimed = [None if u is None else max(u, 0.0) for u in shown["untimed_s"].to_list()]
        else:
            parts = shown.select(pl.sum_horizontal([pl.col(c).fill_null(0) for c in phases.values()]).alias("timed"))[
                "timed"
            ].to_list()
            untimed = [None if t is None else max(t - p, 0.0) for t, p in zip(totals, parts, strict=True)]
        series_colours = {
            label: colours.get(phase) or figures.phase_colour(phase) for label, phase in colour_of.items()
        }
        chart = _figure(
            "chart-phases", figures.phase_figure(steps, series, untimed, colours=series_colours, hover_names=described)
        )
        chart.legend = [{"name": label, "colour": series_colours[label]} for label in series]
        chart.legend.append({"name": "untimed (no timer covers it)", "colour": figures.UNTIMED_COLOUR})
        charts.append(chart)
    return charts


def _colour_names(result: Analysis) -> list[str]:
    """Every phase and span name the report colours, most prominent first, for one shared palette."""
    times = _step_times(result)
    phase_names = sorted(_phase_columns(times)) + sorted(_phase_columns(times, "inner:"))
    spans = result.run.scan("spans")
    span_names: list[str] = []
    if result.run.height("spans") and "name" in spans.collect_schema().names():
        busiest = (
            spans.group_by("name")
            .agg(pl.col("dur_us").sum())
            .sort(["dur_us", "name"], descending=[True, False], nulls_last=True)
            .collect()
        )
        span_names = [n for n in busiest["name"].to_list() if n is not None]
    return phase_names + span_names


def kl_band(result: Analysis) -> float:
    """The healthy KL band the rules judged against (the user's shared knob, else its default)."""
    from trace_doctor.policy import Policy

    return (result.policy or Policy()).shared.max_stable_kl


# ---- the Gantt --------------------------------------------------------------------------

# Spans that draw an RL step's sampling: the loop's phase, the rollouts and the SDK's sample calls.
SAMPLING_SPAN_NAMES = frozenset({*SAMPLING_PHASES, *SAMPLE_CALLS, ROLLOUT_SAMPLE_SPAN, ROLLOUT_GROUP_SPAN})
# Above this share of the median step, sampling missing from the chart is said in its caption.
SAMPLING_MOST_OF_STEP = 0.5


def _row_labels(spans: pl.DataFrame, windows: pl.DataFrame) -> tuple[list[str], list[str], list[str]]:
    """The rows in display order, each span's row label (thread · track, raw text; short-lived task
    tracks share rows across windows: report/gantt_rows) and its own track, folding quiet tracks."""
    pids = spans["pid"].to_list()
    labels, own = gantt_rows.packed_labels(spans, [(a, b) for _, a, b in windows.iter_rows()])
    busy: dict[str, float] = {}
    first: dict[str, tuple[int, float]] = {}
    for label, pid, start, dur in zip(
        labels, pids, spans["start_us"].to_list(), spans["dur_us"].to_list(), strict=True
    ):
        busy[label] = busy.get(label, 0.0) + (dur or 0.0)
        first.setdefault(label, (pid if pid is not None else 0, start))
    if len(busy) > downsample.TRACK_ROWS_MAX:
        keep = set(sorted(busy, key=lambda k: (-busy[k], k))[: downsample.TRACK_ROWS_MAX - 1])
        folded = f"{len(busy) - len(keep)} other tracks"
        labels = [label if label in keep else folded for label in labels]
        first = {k: v for k, v in first.items() if k in keep}
        first[folded] = (1 << 30, 0.0)
    rows = sorted(first, key=lambda k: (first[k], k))
    return rows, labels, own


def _finding_anchor_steps(finding: Finding, spans: pl.DataFrame) -> list[int]:
    """The steps a finding is about: its own, else those its first time range overlaps or lies between."""
    if finding.steps:
        return sorted(finding.steps)
    if not finding.time_ranges_us or "step" not in spans.columns:
        return []
    start, end = finding.time_ranges_us[0][:2]
    stepped = spans.filter(pl.col("step").is_not_null())
    overlapping = stepped.filter((pl.col("start_us") < end) & (pl.col("end_us") > start))
    if len(overlapping):
        return sorted(set(overlapping["step"].to_list()))[:2]
    # A gap where nothing ran: show the steps on either side of it.
    before = stepped.filter(pl.col("end_us") <= start).sort("end_us").tail(1)["step"].to_list()
    after = stepped.filter(pl.col("start_us") >= end).sort("start_us").head(1)["step"].to_list()
    return sorted(set(before + after))


def _timeline(
    result: Analysis,
    budget: Budget,
    notes: Summarised,
    colours: dict[str, str],
    read: findings_view.Reading,
    painted_elsewhere: set[int],
) -> tuple[Chart | None, dict[int, dict[str, Any]], dict[str, Any]]:
    """The Gantt chart, each finding's target x range on it, the step buttons and colour key around it,
    and the colour of every finding drawn in colour (a lane here, and `painted_elsewhere`: a segment of
    the time account, a mark on the training-health panels)."""
    # Read by filtered scans: the drawn steps' spans, and aggregates of the rest (a stored table of
    # millions of spans is never read whole for a chart of a few steps).
    spans = result.run.scan("spans")
    none: dict[str, Any] = {
        "buttons": [],
        "legend": [],
        "lanes": {},
        "painted": findings_view.colours(read, painted_elsewhere),
    }
    if result.run.height("spans") == 0:
        return None, {}, none
    spans = spans.filter(pl.col("start_us").is_not_null() & pl.col("end_us").is_not_null())
    has_step = "step" in spans.collect_schema().names()
    extent = spans.select(pl.len().alias("n"), pl.col("start_us").min().alias("origin")).collect()
    if extent["n"][0] == 0:
        return None, {}, none
    origin = float(extent["origin"][0])
    stepped = (
        spans.filter(pl.col("step").is_not_null()).select("step", "start_us", "end_us").collect()
        if has_step
        else pl.DataFrame(schema={"step": pl.Int64, "start_us": pl.Float64, "end_us": pl.Float64})
    )
    traced = set(stepped["step"].to_list())
    anchors = {i: _finding_anchor_steps(f, stepped) for i, f in enumerate(result.findings)}
    choice = downsample.choose_gantt_steps(_step_times(result), [a for a in anchors.values() if a], traced)
    windows = downsample.step_windows(spans, choice.steps, _step_times(result))
    shown = downsample.spans_in_windows(spans, windows, budget.spans, notes)
    untraced = len(traced) - len(choice.steps)
    if untraced > 0:
        notes.add(
            f"The timeline draws {len(choice.steps)} of {len(traced):,} traced steps in full "
            f"({', '.join(f'step {s}: ' + ' & '.join(choice.reasons[s]) for s in choice.steps)}); "
            "the whole-run charts cover every step."
        )
    rows, row_of, track_of = _row_labels(shown, windows)
    window_rows = [
        {
            "step": s,
            "x0": (a - origin) / 1e6,
            "x1": (b - origin) / 1e6,
            "label": f"step {s} · {' & '.join(choice.reasons.get(s, []))}",
        }
        for s, a, b in windows.iter_rows()
    ]
    window_of = {w["step"]: w for w in window_rows}
    overlays = _finding_overlays(result, window_of, origin, notes)
    painted = findings_view.colours(read, {o["finding"] for o in overlays} | painted_elsewhere)
    for overlay in overlays:
        overlay.update(colour=painted[overlay["finding"]]["colour"], number=read.number[overlay["finding"]])
    overlays.sort(key=lambda o: o["number"])  # lanes top-down in the order the cards read
    targets = {}
    for i, finding in enumerate(result.findings):
        anchored = [window_of[s] for s in anchors[i] if s in window_of][:2]
        if not finding.time_ranges_us:
            anchored = anchored[:1]
        first_range = [o["ranges_s"][0] for o in overlays if o["finding"] == i and o["ranges_s"]]
        edges = [(w["x0"], w["x1"]) for w in anchored] + first_range
        if edges:
            targets[i] = _padded(min(e[0] for e in edges), max(e[1] for e in edges))
    first_view = next(iter(targets.values()), None)
    if first_view is None and window_rows:
        typical = next((w for w in window_rows if "typical" in w["label"]), window_rows[0])
        first_view = _padded(typical["x0"], typical["x1"])
    fig = timeline_figure.gantt_figure(
        shown,
        origin_us=origin,
        rows=rows,
        row_of=row_of,
        track_of=track_of,
        overlays=overlays,
        windows=window_rows,
        initial_range=first_view,
        colours=colours,
    )
    step_buttons = [{"label": w["label"], "range": _padded(w["x0"], w["x1"])} for w in window_rows]
    busiest = (
        shown.group_by("name")
        .agg(pl.col("dur_us").sum())
        .sort(["dur_us", "name"], descending=[True, False])
        .head(GANTT_LEGEND_NAMES)
    )
    legend = [{"name": n, "colour": colours.get(n) or figures.phase_colour(n)} for n in busiest["name"].to_list()]
    lanes = [
        {
            "index": o["finding"],
            "number": o["number"],
            "label": f"{o['code']} {o['rule']}",
            "hatched": not o["ranges_s"],
            **painted[o["finding"]],
        }
        for o in overlays
    ]
    targets_by_finding = {i: {"chart": "chart-gantt", "range": r} for i, r in targets.items()}
    extras = {
        "buttons": step_buttons,
        "legend": legend,
        "lanes": lanes,
        "painted": painted,
        "note": _untraced_sampling_note(result, shown),
    }
    return _figure("chart-gantt", fig), targets_by_finding, extras


def _is_sampling_span(name: str) -> bool:
    return name in SAMPLING_SPAN_NAMES or name.startswith(ROLLOUT_WORKER_SPAN)


def _untraced_sampling_note(result: Analysis, shown: pl.DataFrame) -> str | None:
    """What the chart caption says when an RL step's time went mostly to sampling (its `time/*` keys)
    and the drawn steps hold no sampling span: the bars are not where the time went."""
    times = _step_times(result)
    columns = [f"phase:{name}" for name in SAMPLING_PHASES if f"phase:{name}" in times.columns]
    if result.run.meta.trainer != "rl" or not columns or "total_s" not in times.columns:
        return None
    step = times["total_s"].drop_nulls().median()
    sampling = times.select(pl.max_horizontal(columns)).to_series().drop_nulls().median()
    if not step or sampling is None or sampling / step < SAMPLING_MOST_OF_STEP:
        return None
    if any(_is_sampling_span(n) for n in shown["name"].unique().to_list()):
        return None
    return (
        f"The trace has no sampling spans, but the metrics say sampling took {sampling / step:.0%} of a step "
        f"({format_seconds(sampling)} of {format_seconds(step)}, medians): that time is not drawn here."
    )


def _finding_overlays(
    result: Analysis, window_of: dict[int, dict[str, Any]], origin_us: float, notes: Summarised
) -> list[dict[str, Any]]:
    """One lane per finding the timeline can show: its time ranges, or else the drawn steps it names
    (marked whole). The caller gives each its number and colour."""
    overlays: list[dict[str, Any]] = []
    for i, finding in enumerate(result.findings):
        ranges_s = _overlay_ranges(finding, origin_us, notes)
        steps_s = (
            []
            if ranges_s
            else [[window_of[s]["x0"], window_of[s]["x1"], s] for s in sorted(set(finding.steps)) if s in window_of]
        )
        if not ranges_s and not steps_s:
            continue
        overlays.append(
            {
                "finding": i,
                "code": finding.code,
                "rule": finding.rule,
                "title": finding.title,
                "ranges_s": ranges_s,
                "steps_s": steps_s,
            }
        )
    return overlays


def _overlay_ranges(finding: Finding, origin_us: float, notes: Summarised) -> list[list[float]]:
    """A finding's time ranges in seconds on the Gantt's clock, at most OVERLAY_RANGES_MAX of them."""
    ranges = sorted(r[:2] for r in finding.time_ranges_us if len(r) >= 2 and r[0] is not None and r[1] is not None)
    if len(ranges) > OVERLAY_RANGES_MAX:
        notes.add(
            f"Finding {finding.code} shades its first {OVERLAY_RANGES_MAX} of {len(ranges):,} time ranges "
            "on the timeline."
        )
        ranges = ranges[:OVERLAY_RANGES_MAX]
    return [[(a - origin_us) / 1e6, (b - origin_us) / 1e6] for a, b in ranges]


def _padded(x0: float, x1: float) -> list[float]:
    pad = max((x1 - x0) * 0.04, 0.02)
    return [round(x0 - pad, 6), round(x1 + pad, 6)]


# ---- profiles, dumps, logs --------------------------------------------------------------


def _profiles(result: Analysis, budget: Budget, notes: Summarised) -> list[dict[str, Any]]:
    frames = result.run.frames
    if frames.is_empty():
        return []
    roots = (
        frames.filter(pl.col("parent_id").is_null())
        .group_by("profile")
        .agg(pl.col("time_s").sum().alias("total"))
        .sort(["total", "profile"], descending=[True, False])
    )
    names = roots["profile"].to_list()
    if len(names) > downsample.PROFILES_MAX:
        notes.add(f"The report draws the {downsample.PROFILES_MAX} longest of {len(names)} profiles.")
    info = (
        {row["profile"]: row for row in result.run.profiles.iter_rows(named=True)}
        if not result.run.profiles.is_empty()
        else {}
    )
    shown = []
    for index, name in enumerate(names[: downsample.PROFILES_MAX]):
        own = frames.filter(pl.col("profile") == name)
        pruned = downsample.prune_frames(own, budget.frame_nodes, notes, Path(name).name)
        hot = (
            own.filter(~pl.col("synthetic").fill_null(False))
            .sort(["self_time_s", "frame_id"], descending=[True, False])
            .head(10)
            .select("function", "file_path", "line_no", "self_time_s", "time_s", "is_application_code")
            .to_dicts()
        )
        meta = info.get(name, {})
        shown.append(
            {
                "name": name,
                "chart": _figure(f"chart-profile-{index}", figures.icicle_figure(pruned)),
                "hot": hot,
                "duration_s": meta.get("duration_s"),
                "async_mode": meta.get("async_mode"),
                "format": meta.get("format"),
                "total_s": roots.filter(pl.col("profile") == name)["total"][0],
            }
        )
    return shown


def _dump_cadence(result: Analysis, budget: Budget, notes: Summarised) -> tuple[Chart | None, list[dict[str, Any]]]:
    """The dump-cadence chart and each label's longest gap, both from derive.dump_cadence (the
    derivation the GIL-stall rule's silences come from, so the page and the finding agree)."""
    dumps = dump_cadence.dump_times(result.run.task_snapshots).filter(pl.col("timestamp").is_not_null())
    if dumps.is_empty():
        return None, []
    silences = [
        {"label": gap.label, "gap_s": gap.gap_s, "at": str(gap.at), "dumps": gap.dumps, "interval_s": gap.interval_s}
        for gap in dump_cadence.longest_gaps(result.run.task_snapshots)
    ]
    per_label = {}
    for label in sorted(dumps["label"].drop_nulls().unique().to_list()):
        own = dumps.filter(pl.col("label") == label)
        seconds = own.group_by("timestamp").agg(pl.len().alias("dumps")).sort("timestamp")
        if len(seconds) > budget.dump_points:
            notes.add(
                f"Task-dump cadence of [{label}] marks the first {budget.dump_points:,} of {len(seconds):,} "
                "seconds with dumps."
            )
            seconds = seconds.head(budget.dump_points)
        per_label[label] = ([str(t) for t in seconds["timestamp"].to_list()], seconds["dumps"].to_list())
    return _figure("chart-dumps", figures.dump_cadence_figure(per_label)), silences


def _last_dumps(result: Analysis) -> list[dict[str, Any]]:
    """The tasks of each label's last dump: what was pending when the dumps stopped."""
    snaps = result.run.task_snapshots
    if snaps.is_empty():
        return []
    rows = []
    for label in sorted(snaps["label"].drop_nulls().unique().to_list()):
        own = snaps.filter(pl.col("label") == label).sort("timestamp", "source", "snapshot", nulls_last=True)
        last = own.filter((pl.col("source") == own["source"][-1]) & (pl.col("snapshot") == own["snapshot"][-1]))
        tasks = last.filter(pl.col("task_name").is_not_null()).sort("task_name").head(LAST_DUMP_TASKS)
        rows.append(
            {
                "label": label,
                "at": str(last["timestamp"][0]),
                "count": len(last),
                "tasks": tasks.select("task_name", "state", "coroutine").to_dicts(),
            }
        )
    return rows


def _log_rows(result: Analysis, budget: Budget, notes: Summarised) -> list[dict[str, Any]]:
    events = result.run.log_events
    if events.is_empty():
        return []
    wanted = events.filter(pl.col("kind").is_in(LOG_KINDS_SHOWN)).sort("source", "line")
    if len(wanted) > budget.log_rows:
        notes.add(
            f"The log section lists {budget.log_rows} of {len(wanted):,} error, warning, heartbeat and "
            "GIL-monitor lines."
        )
    return wanted.head(budget.log_rows).select("source", "line", "kind", "level", "message").to_dicts()


# ---- findings and the page --------------------------------------------------------------


def _evidence_items(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    items = []
    for key in sorted(evidence):
        value = evidence[key]
        text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
        if len(text) > EVIDENCE_VALUE_CHARS:
            text = text[: EVIDENCE_VALUE_CHARS - 1] + "…"
        items.append((str(key), text))
    return items


def _finding_cards(
    result: Analysis,
    read: findings_view.Reading,
    targets: dict[int, dict[str, Any]],
    extras: dict[str, Any],
    has_step_chart: bool,
    health_targets: dict[int, dict[str, Any]],
) -> list[dict[str, Any]]:
    """The finding cards in reading order: each cause followed by the symptoms it explains (`depth`),
    numbered, in the colour the timeline and the time account give the finding."""
    hatched = {lane["index"] for lane in extras["lanes"] if lane["hatched"]}
    cards = []
    for i, depth in read.order:
        finding = result.findings[i]
        # A training-quality finding is read on the panel that shows its metric, not on the Gantt.
        target = health_targets.get(i) or targets.get(i)
        if target is None and has_step_chart and finding.steps:
            lo, hi = min(finding.steps), max(finding.steps)
            target = {"chart": "chart-step-time", "range": [lo - 1.5, hi + 1.5]}
        cards.append(
            {
                "index": i,
                "number": read.number[i],
                "depth": depth,
                "finding": finding,
                "paint": extras["painted"].get(i),
                "hatched": i in hatched,
                "explained_by": findings_view.causes_of(finding, read, result.findings),
                "time_counted_there": bool(finding.evidence.get("own_estimate_s")),
                "seconds_lost": format_seconds(finding.seconds_lost) if finding.seconds_lost else None,
                "share": f"{finding.fraction_of_wall * 100:.0f}% of wall time" if finding.fraction_of_wall else None,
                "steps": _steps_text(finding.steps),
                "evidence": _evidence_items(finding.evidence),
                "target": target,
                "target_label": _target_label(target),
            }
        )
    return cards


def _target_label(target: dict[str, Any] | None) -> str:
    if target and target["chart"] == "chart-gantt":
        return "Show on timeline"
    if target and target["chart"].startswith("chart-health-"):
        return "Show on training health"
    return "Show steps"


def _steps_text(steps: list[int]) -> str:
    if not steps:
        return ""
    ordered = sorted(steps)
    head = ", ".join(str(s) for s in ordered[:12])
    return head + (f" and {len(ordered) - 12} more" if len(ordered) > 12 else "")


def _document_json(result: Analysis, budget: Budget, notes: Summarised) -> str:
    document = build_document(result)
    cap = budget.json_warnings
    warnings = document.get("ingest_warnings") or []
    if cap is not None and len(warnings) > cap:
        document["ingest_warnings"] = warnings[:cap]
        document["embedded_note"] = (
            f"ingest_warnings truncated to {cap} of {len(warnings)} to keep the report within 10 MB; "
            "--format json has them all"
        )
        notes.add(
            f"The embedded JSON holds {cap:,} of {len(warnings):,} ingest warnings (`--format json` has them all)."
        )
    return script_json(json_dumps(document).decode())


def code_spans(text: object) -> markupsafe.Markup:
    """A message as HTML with what a rule put between backticks (a metric key, a quoted line) as
    <code>: everything is escaped first, so input can only pair backticks differently, never inject."""
    parts = inert(str(text)).split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: the last one opens no span
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    out = []
    for i, part in enumerate(parts):
        if i % 2 and part.strip():
            out.append(markupsafe.Markup("<code>{}</code>").format(part))
        else:
            out.append(markupsafe.escape(part if i % 2 == 0 else f"`{part}`"))
    return markupsafe.Markup("").join(out)


def _shown(value: object) -> object:
    """Every value a template prints, text from the run made inert: escaping keeps markup out, and
    this keeps a bidi override or zero-width character in a name from reordering or hiding it on
    the page (shown as `\u202e`, as in the text report). Markup built by the report is its own."""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return inert(value)
    return value


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("trace_doctor", "templates"),
        autoescape=True,
        finalize=_shown,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["seconds"] = format_seconds
    env.filters["basename"] = lambda p: Path(str(p)).name
    env.filters["code_spans"] = code_spans
    return env


def render_html(result: Analysis, budget: Budget | None = None, *, plotly_src: str | None = None) -> str:
    """The whole report as one HTML string.

    `plotly_src`: load plotly.js from this address relative to the page (a fleet's shared copy)
    instead of inlining it; the page then says so where its charts would be when the file is missing.
    """
    budget = budget or Budget()
    notes = Summarised()
    colours = figures.assign_phase_colours(_colour_names(result))
    read = findings_view.reading(result.findings)
    summary = result.run_summary
    account = summary.account
    planned = health_view.plan(result, kl_band(result))
    # Findings marked on the health panels take their colour in the same hand-out as the timeline's.
    gantt, targets, gantt_extras = _timeline(
        result, budget, notes, colours, read, findings_view.accounted(account, read) | set(planned.marked)
    )
    whole_run = _whole_run_charts(result, budget, notes, colours)
    health, health_targets = health_view.charts(result, planned, gantt_extras["painted"], read.number, budget, notes)
    health_charts = [_figure(h.id, h.figure) for h in health]
    profiles = _profiles(result, budget, notes)
    dumps, silences = _dump_cadence(result, budget, notes)
    logs = _log_rows(result, budget, notes)
    run = result.run
    warnings = run.warnings[: budget.warning_rows]
    if len(run.warnings) > len(warnings):
        notes.add(f"The ingest-warnings table lists {len(warnings)} of {len(run.warnings):,}.")
    outcomes = sorted(
        result.outcomes, key=lambda o: ({"error": 0, "fired": 1, "not_applicable": 2, "passed": 3}[o.status], o.rule)
    )
    decided = result.verdict
    passed = [o for o in outcomes if o.status == "passed"]
    not_applicable = [o for o in outcomes if o.status == "not_applicable"]
    document = _document_json(result, budget, notes)
    context = {
        "version": __version__,
        "run": run,
        "meta": run.meta,
        "doc": build_document(result)["run"],
        "summary": summary,
        "verdict": decided.headline,
        # The page's colour class for the verdict (the stylesheet calls a clear run "ok").
        "worst": "ok" if decided.status == "clear" else decided.status,
        "counts": decided.counts,
        "cards": _finding_cards(result, read, targets, gantt_extras, bool(whole_run), health_targets),
        "account": findings_view.account_view(account, read, gantt_extras["painted"]),
        "gantt": gantt,
        "step_buttons": gantt_extras["buttons"],
        "gantt_legend": gantt_extras["legend"],
        "lanes": gantt_extras["lanes"],
        "gantt_note": gantt_extras.get("note"),
        "last_dumps": _last_dumps(result),
        "whole_run": {c.id: c for c in whole_run},
        "health": [{"view": h, "chart": c} for h, c in zip(health, health_charts, strict=True)],
        "health_charts": health_charts,
        "profiles": profiles,
        "dumps": dumps,
        "silences": silences,
        "logs": logs,
        "outcomes": outcomes,
        "not_applicable": not_applicable,
        "passed": passed,
        "metric_rows": len(downsample.live_steps(run.steps)),
        "warnings": warnings,
        "warning_count": len(run.warnings),
        "notes": notes.notes,
        "document_json": document,
        "plotly_js": None if plotly_src else _plotly_js(),
        "plotly_src": plotly_src,
        "unredacted": UNREDACTED if unredacted(result) else None,
        "severity_colour": figures.SEVERITY_COLOUR,
    }
    return _environment().get_template("report.html.j2").render(**context)


def write_html(result: Analysis, path: Path, *, plotly_src: str | None = None) -> None:
    """Write the report to `path`, shrinking what it embeds until the file fits in 10 MB.

    `plotly_src` as in `render_html`: the page then loads plotly.js from beside it.
    """
    budget = Budget()
    text = render_html(result, budget, plotly_src=plotly_src)
    while len(text.encode()) > SIZE_BUDGET_BYTES and budget.spans > 50:
        budget = budget.scaled(0.5)
        text = render_html(result, budget, plotly_src=plotly_src)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(printable(text), encoding="utf-8")
