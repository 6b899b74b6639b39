"""The HTML report's "Training health" view: small multiples over steps, with findings marked.

Which panels and series exist is chosen by `derive.training_health` from the run's metric keys;
what is marked comes from the findings alone (their `steps`, and `evidence["metric"]` for where).
Each mark carries the finding's own number and colour, the ones its card and the timeline show.
Long runs are averaged into bins (`downsample.bin_steps`) so a 10,000-step run stays small; marks
keep their real steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
import polars as pl

from trace_doctor.derive.training_health import Panel, health_panels, panels_of_finding, sampler_saves
from trace_doctor.model import Analysis, Finding
from trace_doctor.report import downsample
from trace_doctor.report.downsample import Budget, Summarised
from trace_doctor.report.figures import CLIPPED_COLOUR, HEALTHY_BAND_COLOUR, HEALTHY_COLOUR, base_layout, plot_text
from trace_doctor.report.timeline_figure import LANE_DIMMED_OPACITY, SHADE_DIMMED_OPACITY
from trace_doctor.rules.catalogue import panels_of_rule

# Training series in ink and greys (the findings own the Okabe-Ito colours), told apart by dash;
# eval series in violet, dotted, with diamond markers, so they never read as training values.
SERIES_STYLE = (("#24292f", "solid"), ("#6e7781", "dash"), ("#8c959f", "dot"))
EVAL_COLOUR = "#6e40c9"
EVAL_MARKERS_MAX = 60
PANEL_HEIGHT_PX = 240
# Each panel gets this share of the step-points budget (several panels and series share a page).
PANEL_POINTS_SHARE = 0.25
# A finding's steps are shaded as contiguous runs; beyond this many, the nearest runs merge.
MARK_RUNS_MAX = 40
MARK_CHIPS_MAX = 6
HEALTH_SHADE_OPACITY = 0.22
LOG_AXIS_RATIO = 100.0
# Save steps drawn as lines on the KL panel up to this many; past it they would grey the chart out.
SAVE_LINES_MAX = 200
EVENT_LINE_COLOUR = "#9ca3af"


@dataclass
class Plan:
    """The panels a run has and, for each finding, the panels it is marked on (before colours exist)."""

    panels: list[Panel]
    marked: dict[int, list[str]] = field(default_factory=dict)  # finding index -> panel ids


@dataclass
class HealthChart:
    """One drawn panel: its plot id, figure, and the findings marked on it (chips under the plot)."""

    id: str
    panel: Panel
    figure: go.Figure
    chips: list[dict[str, Any]]
    x_range: list[float]


def plan(result: Analysis, kl_band: float) -> Plan:
    """Panels from the run's metric keys; findings placed on them by their evidence, else by the panels
    their rule declares (`Rule.panels`).

    `kl_band` is the stable-KL bound the rules judged against (the policy's shared knob)."""
    live = _rows(result.run.steps)
    config = result.run.meta.config
    # Names first (a run can log thousands of keys), then only the candidates are checked for values.
    wanted = {s.column for p in health_panels(live.columns, config, max_stable_kl=kl_band) for s in p.series}
    present = [c for c in sorted(wanted) if live.schema[c].is_numeric() and live[c].drop_nulls().len() > 0]
    saves = tuple(sampler_saves(result.run.checkpoints))
    panels = health_panels(present, config, max_stable_kl=kl_band, saves=saves if len(saves) <= SAVE_LINES_MAX else ())
    marked = {}
    if panels:
        for i, finding in enumerate(result.findings):
            where = panels_of_finding(finding.evidence, panels, panels_of_rule(finding.rule))
            if where:
                marked[i] = where
    return Plan(panels, marked)


def _rows(steps: pl.DataFrame) -> pl.DataFrame:
    """Rows that count (a resumed run's superseded rows out); eval-only rows kept for eval series."""
    if "superseded" in steps.columns:
        return steps.filter(~pl.col("superseded").fill_null(False))
    return steps


def _finite(values: list[Any]) -> list[float | None]:
    return [float(v) if v is not None and math.isfinite(v) else None for v in values]


def _series_frame(rows: pl.DataFrame, columns: list[str], *, eval_rows: bool) -> pl.DataFrame:
    if not columns:
        return pl.DataFrame(schema={"step": pl.Int64})
    frame = rows
    if not eval_rows and "is_eval_row" in frame.columns:
        frame = frame.filter(~pl.col("is_eval_row").fill_null(False))
    return (
        frame.select("step", *columns)
        .filter(pl.col("step").is_not_null() & pl.any_horizontal([pl.col(c).is_not_null() for c in columns]))
        .unique("step", keep="last")
        .sort("step")
    )


def _runs(steps: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs of steps; at most MARK_RUNS_MAX, the closest runs merged first."""
    runs: list[list[int]] = []
    for step in sorted(set(steps)):
        if runs and step == runs[-1][1] + 1:
            runs[-1][1] = step
        else:
            runs.append([step, step])
    if len(runs) > MARK_RUNS_MAX:
        gaps = sorted(range(1, len(runs)), key=lambda k: (runs[k][0] - runs[k - 1][1], k), reverse=True)
        breaks = sorted(gaps[: MARK_RUNS_MAX - 1])
        merged, start = [], 0
        for b in [*breaks, len(runs)]:
            merged.append([runs[start][0], runs[b - 1][1]])
            start = b
        runs = merged
    return [(a, b) for a, b in runs]


def _value_at(steps: list[int], values: list[float | None], step: int) -> float | None:
    """The drawn value at `step`, or at the last drawn point before it (binned runs)."""
    best = None
    for s, v in zip(steps, values, strict=True):
        if s > step:
            break
        if v is not None:
            best = v
    return best


def _hover(column: str, note: str = "") -> str:
    """One hover template per series, not a string per point (a long run's panels stay small).
    The name is input: made inert for plotly's HTML, and no `%{` left to read as a placeholder."""
    name = plot_text(column).replace("%{", "% {")
    return f"step %{{x}}{note}<br>{name} = %{{y:.4g}}<extra></extra>"


def _figure(
    panel: Panel,
    train: pl.DataFrame,
    evals: pl.DataFrame,
    marks: list[dict[str, Any]],
) -> go.Figure:
    fig = go.Figure()
    all_values: list[float] = []
    first_series: tuple[list[int], list[float | None]] | None = None
    train_columns = [s for s in panel.series if s.role == "train"]
    for k, series in enumerate(train_columns):
        steps, values = train["step"].to_list(), _finite(train[series.column].to_list())
        first_series = first_series or (steps, values)
        all_values += [v for v in values if v is not None]
        colour, dash = SERIES_STYLE[k % len(SERIES_STYLE)]
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=values,
                name=plot_text(series.label),
                mode="lines+markers" if len(steps) <= 120 else "lines",
                line={"color": colour, "width": 1.6, "dash": dash},
                marker={"size": 3},
                hovertemplate=_hover(series.column),
                connectgaps=False,
            )
        )
    for series in (s for s in panel.series if s.role == "eval"):
        own = evals.filter(pl.col(series.column).is_not_null()) if series.column in evals.columns else evals
        steps, values = own["step"].to_list(), _finite(own[series.column].to_list()) if len(own) else []
        first_series = first_series or (steps, values)
        all_values += [v for v in values if v is not None]
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=values,
                name=plot_text(f"eval {series.label}"),
                # Diamonds while they stay apart; a thousand evals read as a dotted line alone.
                mode="lines+markers" if len(steps) <= EVAL_MARKERS_MAX else "lines",
                line={"color": EVAL_COLOUR, "width": 1.4, "dash": "dot"},
                marker={"size": 7, "symbol": "diamond"},
                hovertemplate=_hover(series.column, " (eval)"),
            )
        )
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    log_axis = False
    if panel.band is not None:
        positive = bool(all_values) and min(all_values) > 0
        log_axis = positive and max(all_values) / min(all_values) > LOG_AXIS_RATIO
        low = min(all_values) / 2 if log_axis else 0
        shapes += [
            {"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "y0": low, "y1": panel.band,
             "fillcolor": HEALTHY_BAND_COLOUR, "line": {"width": 0}, "layer": "below"},
            {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": panel.band, "y1": panel.band,
             "line": {"color": HEALTHY_COLOUR, "dash": "dash", "width": 1}, "layer": "below"},
        ]  # fmt: skip
        annotations.append(
            {
                "xref": "paper",
                "x": 0,
                "y": math.log10(panel.band) if log_axis else panel.band,
                "text": f"stable: KL &lt; {panel.band:g}",
                "showarrow": False,
                "xanchor": "left",
                "yanchor": "bottom",
                "font": {"size": 10, "color": HEALTHY_COLOUR},
            }
        )
    if panel.limit is not None:
        shapes.append(
            {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": panel.limit, "y1": panel.limit,
             "line": {"color": CLIPPED_COLOUR, "dash": "dash", "width": 1.2}}
        )  # fmt: skip
        annotations.append(
            {"xref": "paper", "x": 1, "y": panel.limit, "text": plot_text(panel.limit_label), "showarrow": False,
             "xanchor": "right", "yanchor": "bottom", "font": {"size": 10, "color": CLIPPED_COLOUR}}
        )  # fmt: skip
    for step in panel.events_at:
        shapes.append(
            {"type": "line", "xref": "x", "yref": "paper", "x0": step, "x1": step, "y0": 0, "y1": 1,
             "line": {"color": EVENT_LINE_COLOUR, "dash": "dot", "width": 1}, "layer": "below"}
        )  # fmt: skip
    if panel.events_at:
        annotations.append(
            {"xref": "paper", "yref": "paper", "x": 1, "y": 1, "text": plot_text(f"┆ {panel.events_label}"),
             "showarrow": False, "xanchor": "right", "yanchor": "bottom", "font": {"size": 10, "color": "#6b7280"}}
        )  # fmt: skip
    for mark in marks:
        for a, b in mark["runs"]:
            shapes.append(
                {"type": "rect", "xref": "x", "yref": "paper", "x0": a - 0.5, "x1": b + 0.5, "y0": 0, "y1": 1,
                 "fillcolor": mark["colour"], "opacity": HEALTH_SHADE_OPACITY, "line": {"width": 0},
                 "layer": "below", "name": f"finding-{mark['index']}"}
            )  # fmt: skip
        if first_series is None:
            continue
        chip_x, chip_y = [], []
        for a, _ in mark["runs"][:MARK_CHIPS_MAX]:
            y = _value_at(*first_series, a)
            if y is not None:
                chip_x.append(a)
                chip_y.append(y)
        if chip_x:
            fig.add_trace(
                go.Scatter(
                    x=chip_x,
                    y=chip_y,
                    mode="markers+text",
                    marker={"size": 17, "color": mark["colour"], "line": {"color": "#ffffff", "width": 1}},
                    text=[str(mark["number"])] * len(chip_x),
                    textposition="middle center",
                    textfont={"color": mark["ink"], "size": 10},
                    hovertext=[plot_text(mark["label"])] * len(chip_x),
                    hoverinfo="text",
                    showlegend=False,
                    meta={"finding": mark["index"]},
                )
            )
    yaxis: dict[str, Any] = {"gridcolor": "#eef1f4", "zeroline": False, "title": {"text": panel.y_label}}
    if log_axis:
        top = max(max(all_values), panel.band or 0) * 2
        yaxis.update(type="log", range=[math.log10(min(all_values) / 2), math.log10(top)])
    elif panel.share:
        yaxis.update(range=[-0.02, 1.02])
    elif panel.band is not None or panel.limit is not None:
        yaxis.update(rangemode="tozero")
    layout = base_layout(
        PANEL_HEIGHT_PX,
        shapes=shapes,
        annotations=annotations,
        margin={"l": 56, "r": 12, "t": 30, "b": 40},
        meta={
            "shade_opacity": HEALTH_SHADE_OPACITY,
            "dimmed_shade_opacity": SHADE_DIMMED_OPACITY / 2,
            "dimmed_opacity": LANE_DIMMED_OPACITY,
        },
    )
    layout["yaxis"] = yaxis
    layout["xaxis"] = {"gridcolor": "#eef1f4", "zeroline": False, "title": {"text": "step"}}
    layout["legend"] = {"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0, "font": {"size": 10}}
    fig.update_layout(layout)
    return fig


def charts(
    result: Analysis,
    planned: Plan,
    painted: dict[int, dict[str, str]],
    number: dict[int, int],
    budget: Budget,
    notes: Summarised,
) -> tuple[list[HealthChart], dict[int, dict[str, Any]]]:
    """The drawn panels, and for each marked finding the panel its card's button shows."""
    if not planned.panels:
        return [], {}
    rows = _rows(result.run.steps)
    points = max(50, int(budget.step_points * PANEL_POINTS_SHARE))
    out: list[HealthChart] = []
    targets: dict[int, dict[str, Any]] = {}
    for panel in planned.panels:
        train_columns = [s.column for s in panel.series if s.role == "train"]
        eval_columns = [s.column for s in panel.series if s.role == "eval"]
        train = _series_frame(rows, train_columns, eval_rows=False)
        train = downsample.bin_steps(train, train_columns, points, notes, f"The training-health panel “{panel.title}”")
        evals = _series_frame(rows, eval_columns, eval_rows=True)
        evals = downsample.bin_steps(evals, eval_columns, points, notes, f"The eval series of “{panel.title}”")
        chart_id = f"chart-health-{panel.id}"
        marks, chips = [], []
        for i, where in sorted(planned.marked.items(), key=lambda item: number[item[0]]):
            if panel.id not in where:
                continue
            finding: Finding = result.findings[i]
            paint = painted.get(i, {"colour": "#57606a", "ink": "#ffffff"})
            runs = _runs(finding.steps)
            label = f"#{number[i]} {finding.code} {finding.rule}: {finding.title}"
            marks.append({"index": i, "number": number[i], "runs": runs, "label": label, **paint})
            chips.append(
                {"index": i, "number": number[i], "code": finding.code, "rule": finding.rule, "whole_run": not runs,
                 **paint}
            )  # fmt: skip
        all_steps = train["step"].to_list() + evals["step"].to_list()
        x_range = [min(all_steps) - 1.5, max(all_steps) + 1.5] if all_steps else [-1.5, 1.5]
        for chip in chips:
            targets.setdefault(chip["index"], {"chart": chart_id, "range": x_range})
        out.append(HealthChart(chart_id, panel, _figure(panel, train, evals, marks), chips, x_range))
    return out, targets
