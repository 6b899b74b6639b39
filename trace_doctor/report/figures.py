"""Plotly figures of the HTML report, one function per chart, drawn from already-chosen data.

Figures only draw: which steps, spans and frames to show is decided in `downsample`, and every
number shown comes from the tables, the rule context or the findings. Plotly renders a subset of
HTML inside labels and hover text, so every string that came from input goes through `plot_text`.
"""

from __future__ import annotations

import zlib
from typing import Any

import plotly.graph_objects as go
import polars as pl

SEVERITY_COLOUR = {"error": "#cf222e", "warning": "#bf8700", "info": "#0969da"}
UNTIMED_COLOUR = "#c9ced6"
WARMUP_COLOUR = "#8c959f"
STEADY_COLOUR = "#2f6fb3"
OUTLIER_COLOUR = "#cf222e"
HEALTHY_BAND_COLOUR = "rgba(45, 164, 78, 0.14)"
LABEL_COLOUR = {"main": "#2f6fb3", "holder": "#e16f24"}
FONT = "Inter, -apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
MAX_LABEL_CHARS = 140
MAX_DEPTH_LAYERS = 6

# One colour per kind of work, shared by the Gantt bars and the per-phase breakdown, so "green"
# means sampling everywhere in the report. Matched on the first keyword the name contains.
PHASE_COLOURS: tuple[tuple[str, str], ...] = (
    ("get_batch", "#d4a72c"),
    ("dataloader", "#d4a72c"),
    ("forward_backward", "#2f6fb3"),
    ("fwd_bwd", "#2f6fb3"),
    ("train_step", "#4a8fd6"),
    ("optim", "#6f42c1"),
    ("sample", "#2da44e"),
    ("rollout", "#56c271"),
    ("env_", "#7fd196"),
    ("reward", "#a2dfb3"),
    ("kl", "#e16f24"),
    ("checkpoint", "#8c6d4f"),
    ("save_", "#8c6d4f"),
    ("eval", "#bf3989"),
    ("assemble", "#1b7c83"),
    ("prepare", "#1b7c83"),
    ("submit", "#54aeff"),
    ("finish", "#1b7c83"),
    ("result", "#8c959f"),
    ("step", "#4a8fd6"),
    ("train", "#4a8fd6"),
)
# No red or green here: red means an error and green means sampling or healthy in this report.
FALLBACK_COLOURS = ("#57606a", "#8250df", "#9a6700", "#0550ae", "#bc4c00", "#6e7781", "#0a3069", "#953800")


def plot_text(value: Any) -> str:
    """Input text made inert for plotly's HTML-ish labels, shortened for hover boxes."""
    text = str(value)
    if len(text) > MAX_LABEL_CHARS:
        text = text[: MAX_LABEL_CHARS - 1] + "…"
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def phase_colour(name: str) -> str:
    """The report-wide colour of a span or phase name."""
    key = name.lower().removeprefix("time/")
    for keyword, colour in PHASE_COLOURS:
        if keyword in key:
            return colour
    return FALLBACK_COLOURS[zlib.crc32(key.encode()) % len(FALLBACK_COLOURS)]


def seconds_label(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 120:
        return f"{value / 60:.1f} min"
    if value >= 10:
        return f"{value:.0f} s"
    if value >= 0.1:
        return f"{value:.2f} s"
    return f"{value * 1000:.1f} ms"


def _layout(height: int, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": height,
        "margin": {"l": 64, "r": 24, "t": 16, "b": 48},
        "font": {"family": FONT, "size": 12, "color": "#24292f"},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "#ffffff",
        "hoverlabel": {"font": {"family": FONT, "size": 12}, "align": "left"},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0, "font": {"size": 11}},
        "xaxis": {"gridcolor": "#eef1f4", "zeroline": False},
        "yaxis": {"gridcolor": "#eef1f4", "zeroline": False},
    }
    layout.update(extra)
    return layout


def step_time_figure(
    steps: list[int],
    totals: list[float | None],
    *,
    warmup_steps: int,
    steady_median_s: float | None,
    marked: dict[int, list[str]],
) -> go.Figure:
    """Step time per step: warm-up steps greyed, the warm-up boundary and steady median drawn, finding steps marked."""
    colours = [WARMUP_COLOUR if i < warmup_steps else STEADY_COLOUR for i in range(len(steps))]
    hover = [
        f"step {s}<br>{seconds_label(t)}" + ("<br>warm-up" if i < warmup_steps else "")
        for i, (s, t) in enumerate(zip(steps, totals, strict=True))
    ]
    fig = go.Figure()
    many = len(steps) > 400
    if many:
        fig.add_trace(go.Scattergl(x=steps, y=totals, mode="lines", line={"color": STEADY_COLOUR, "width": 1}, name="step time", hovertext=hover, hoverinfo="text"))
    else:
        fig.add_trace(go.Bar(x=steps, y=totals, marker={"color": colours, "line": {"width": 0}}, name="step time", hovertext=hover, hoverinfo="text"))
    if marked:
        lookup = dict(zip(steps, totals, strict=True))
        xs = [s for s in sorted(marked) if lookup.get(s) is not None]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[lookup[s] for s in xs],
                mode="markers",
                marker={"color": OUTLIER_COLOUR, "size": 9, "symbol": "diamond", "line": {"color": "#ffffff", "width": 1}},
                name="named by a finding",
                hovertext=[f"step {s}<br>{seconds_label(lookup[s])}<br>" + "<br>".join(plot_text(r) for r in marked[s]) for s in xs],
                hoverinfo="text",
            )
        )
    shapes, annotations = [], []
    if 0 < warmup_steps < len(steps):
        boundary = (steps[warmup_steps - 1] + steps[warmup_steps]) / 2
        shapes.append({"type": "line", "x0": boundary, "x1": boundary, "yref": "paper", "y0": 0, "y1": 1, "line": {"color": "#57606a", "dash": "dash", "width": 1.5}})
        annotations.append({"x": boundary, "yref": "paper", "y": 1, "text": "warm-up ends", "showarrow": False, "xanchor": "left", "yanchor": "top", "font": {"size": 11, "color": "#57606a"}, "xshift": 4})
    if steady_median_s is not None:
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": steady_median_s, "y1": steady_median_s, "line": {"color": "#1a7f37", "dash": "dot", "width": 1.5}})
        annotations.append({"xref": "paper", "x": 1, "y": steady_median_s, "text": f"steady median {seconds_label(steady_median_s)}", "showarrow": False, "xanchor": "right", "yanchor": "bottom", "font": {"size": 11, "color": "#1a7f37"}})
    fig.update_layout(
        _layout(300, shapes=shapes, annotations=annotations, showlegend=bool(marked), bargap=0.15),
        xaxis_title="step",
        yaxis_title="seconds",
    )
    return fig


def phase_figure(steps: list[int], phases: dict[str, list[float | None]], untimed: list[float | None] | None) -> go.Figure:
    """Where each step's time went, phase by phase, with the untimed remainder as its own grey band."""
    fig = go.Figure()
    many = len(steps) > 400
    series = list(phases.items()) + ([("untimed", untimed)] if untimed is not None else [])
    for name, values in series:
        colour = UNTIMED_COLOUR if name == "untimed" else phase_colour(name)
        label = "untimed (no timer covers it)" if name == "untimed" else plot_text(name)
        hover = [f"step {s}<br>{label}: {seconds_label(v)}" for s, v in zip(steps, values, strict=True)]
        if many:
            fig.add_trace(go.Scatter(x=steps, y=values, name=label, stackgroup="phases", mode="lines", line={"width": 0.5, "color": colour}, fillcolor=colour, hovertext=hover, hoverinfo="text"))
        else:
            fig.add_trace(go.Bar(x=steps, y=values, name=label, marker={"color": colour, "line": {"width": 0}}, hovertext=hover, hoverinfo="text"))
    fig.update_layout(_layout(320, barmode="stack", bargap=0.15), xaxis_title="step", yaxis_title="seconds")
    return fig


def kl_figure(steps: list[int], series: dict[str, list[float | None]], band: float) -> go.Figure:
    """KL per step with the healthy band [0, band] shaded."""
    fig = go.Figure()
    palette = ("#e16f24", "#8250df", "#0969da", "#1a7f37")
    for i, (name, values) in enumerate(sorted(series.items())):
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=values,
                name=plot_text(name),
                mode="lines+markers" if len(steps) <= 200 else "lines",
                line={"color": palette[i % len(palette)], "width": 1.6},
                marker={"size": 4},
                hovertext=[f"step {s}<br>{plot_text(name)} = {v:.3g}" if v is not None else f"step {s}" for s, v in zip(steps, values, strict=True)],
                hoverinfo="text",
            )
        )
    values = [v for vs in series.values() for v in vs if v is not None]
    positive = bool(values) and min(values) > 0
    log_axis = positive and max(values) / min(values) > 100
    low = min(values) / 2 if log_axis else 0
    shapes = [{"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "y0": low, "y1": band, "fillcolor": HEALTHY_BAND_COLOUR, "line": {"width": 0}, "layer": "below"}]
    annotations = [{"xref": "paper", "x": 0, "y": band, "text": f"healthy: KL &lt; {band:g}", "showarrow": False, "xanchor": "left", "yanchor": "bottom", "font": {"size": 11, "color": "#1a7f37"}}]
    if log_axis:
        import math

        axis = {"type": "log", "range": [math.log10(low), math.log10(max(max(values), band) * 2)]}
    else:
        axis = {"rangemode": "tozero"}
    fig.update_layout(_layout(280, shapes=shapes, annotations=annotations), xaxis_title="step", yaxis_title="KL (nats/token)")
    fig.update_yaxes(**axis)
    return fig


def gantt_figure(
    spans: pl.DataFrame,
    *,
    origin_us: float,
    rows: list[str],
    row_of: list[str],
    overlays: list[dict[str, Any]],
    windows: list[dict[str, Any]],
    initial_range: list[float] | None,
) -> go.Figure:
    """Spans as bars per thread/track row (nested spans drawn thinner on top), with finding overlays."""
    fig = go.Figure()
    start_s = ((spans["start_us"] - origin_us) / 1e6).to_list()
    dur_s = (spans["dur_us"] / 1e6).to_list()
    names = spans["name"].to_list()
    depths = spans["depth"].fill_null(0).to_list()
    steps = spans["step"].to_list()
    closed = spans["closed"].fill_null(True).to_list()
    layers: dict[int, list[int]] = {}
    for i, depth in enumerate(depths):
        layers.setdefault(min(int(depth), MAX_DEPTH_LAYERS), []).append(i)
    for depth in sorted(layers):
        idx = layers[depth]
        fig.add_trace(
            go.Bar(
                orientation="h",
                base=[start_s[i] for i in idx],
                x=[dur_s[i] for i in idx],
                y=[row_of[i] for i in idx],
                width=0.78 * (0.8**depth),
                marker={"color": [phase_colour(names[i]) for i in idx], "line": {"width": 0}},
                hovertext=[
                    f"<b>{plot_text(names[i])}</b><br>{seconds_label(dur_s[i])} from {start_s[i]:.3f} s"
                    + (f"<br>step {steps[i]}" if steps[i] is not None else "")
                    + ("" if closed[i] else "<br>never closed (no end event)")
                    + f"<br>{row_of[i]}"
                    for i in idx
                ],
                hoverinfo="text",
                showlegend=False,
                name=f"depth {depth}",
            )
        )
    for overlay in overlays:
        xs: list[float | None] = []
        ys: list[float | None] = []
        for x0, x1 in overlay["ranges_s"]:
            xs += [x0, x1, x1, x0, x0, None]
            ys += [0, 0, 1, 1, 0, None]
        colour = SEVERITY_COLOUR.get(overlay["severity"], "#57606a")
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                yaxis="y2",
                fill="toself",
                mode="lines",
                line={"width": 1, "color": colour},
                fillcolor=with_alpha(colour, 0.16),
                hoveron="fills",
                hoverinfo="text",
                text=f"{overlay['code']} {overlay['rule']}: {plot_text(overlay['title'])}",
                name=f"{overlay['code']} {overlay['rule']}",
                legendgroup=overlay["rule"],
                showlegend=False,
            )
        )
    annotations = [
        {"x": w["x0"], "yref": "paper", "y": 1, "yanchor": "bottom", "xanchor": "left", "text": w["label"], "showarrow": False, "font": {"size": 11, "color": "#57606a"}}
        for w in windows
    ]
    shapes = [
        {"type": "line", "x0": w["x0"], "x1": w["x0"], "yref": "paper", "y0": 0, "y1": 1, "line": {"color": "#afb8c1", "width": 1, "dash": "dot"}}
        for w in windows
    ]
    height = max(260, 64 + 26 * len(rows))
    fig.update_layout(
        _layout(height, barmode="overlay", annotations=annotations, shapes=shapes, showlegend=False, hovermode="closest"),
        margin={"l": 210, "r": 24, "t": 40, "b": 48},
        xaxis={"title": "seconds since the trace began", "range": initial_range, "gridcolor": "#eef1f4", "zeroline": False},
        yaxis={"type": "category", "categoryorder": "array", "categoryarray": list(reversed(rows)), "automargin": False, "tickfont": {"size": 11}},
        yaxis2={"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True},
    )
    return fig


def with_alpha(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, {alpha})"


def icicle_figure(frames: pl.DataFrame) -> go.Figure:
    """One pyinstrument profile as an icicle: width is time, colour says whose code it is."""
    ids = [str(i) for i in frames["frame_id"].to_list()]
    parents = ["" if p is None else str(p) for p in frames["parent_id"].to_list()]
    known = set(ids)
    parents = [p if p in known else "" for p in parents]
    functions = frames["function"].fill_null("?").to_list()
    files = frames["file_path"].fill_null("").to_list()
    lines = frames["line_no"].to_list()
    app = frames["is_application_code"].fill_null(False).to_list()
    synthetic = frames["synthetic"].fill_null(False).to_list()
    self_times = frames["self_time_s"].fill_null(0.0).to_list()
    times = frames["time_s"].fill_null(0.0).to_list()
    colours = ["#c9ced6" if s else ("#2f6fb3" if a else "#8fb8de") for a, s in zip(app, synthetic, strict=True)]
    hover = [
        f"<b>{plot_text(fn)}</b><br>{plot_text(fp)}" + (f":{ln}" if ln is not None else "") + f"<br>total {seconds_label(t)} · self {seconds_label(st)}"
        for fn, fp, ln, t, st in zip(functions, files, lines, times, self_times, strict=True)
    ]
    fig = go.Figure(
        go.Icicle(
            ids=ids,
            parents=parents,
            labels=[plot_text(f) for f in functions],
            values=times,
            branchvalues="total",
            marker={"colors": colours, "line": {"width": 0.5, "color": "#ffffff"}},
            hovertext=hover,
            hoverinfo="text",
            tiling={"orientation": "v"},
            sort=False,
            maxdepth=12,
        )
    )
    fig.update_layout(_layout(440, margin={"l": 8, "r": 8, "t": 8, "b": 8}))
    return fig


def dump_cadence_figure(per_label: dict[str, tuple[list[Any], list[int]]]) -> go.Figure:
    """One row per dump label with a dot for every second that label dumped: a silence is a gap in its row."""
    fig = go.Figure()
    labels = sorted(per_label)
    for label in labels:
        times, counts = per_label[label]
        colour = LABEL_COLOUR.get(label, phase_colour(label))
        fig.add_trace(
            go.Scatter(
                x=times,
                y=[plot_text(label)] * len(times),
                name=plot_text(label),
                mode="markers",
                marker={"color": colour, "size": 9, "symbol": "line-ns", "line": {"color": colour, "width": 3}},
                hovertext=[f"[{plot_text(label)}] {n} dump(s) at {t}" for t, n in zip(times, counts, strict=True)],
                hoverinfo="text",
                showlegend=False,
            )
        )
    fig.update_layout(
        _layout(90 + 44 * len(labels), margin={"l": 80, "r": 24, "t": 12, "b": 48}),
        xaxis_title="time (local, from the dump headers)",
        yaxis={"type": "category", "categoryorder": "array", "categoryarray": [plot_text(l) for l in reversed(labels)], "gridcolor": "#eef1f4"},
    )
    return fig
