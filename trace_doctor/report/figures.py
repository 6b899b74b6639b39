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

from trace_doctor.humanize import format_seconds
from trace_doctor.report.terminal_text import inert

SEVERITY_COLOUR = {"error": "#cf222e", "warning": "#bf8700", "info": "#0969da"}
UNTIMED_COLOUR = "#d5dae0"
WARMUP_COLOUR = "#8c959f"
STEADY_COLOUR = "#2f6fb3"
HEALTHY_COLOUR = "#1a7f37"
HEALTHY_BAND_COLOUR = "rgba(45, 164, 78, 0.14)"
CLIPPED_COLOUR = "#57606a"
# Dump labels are event loops, not phases; neither may look like a severity.
LABEL_COLOUR = {"main": "#2f6fb3", "holder": "#6e40c9"}
FONT = "Inter, -apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
MAX_LABEL_CHARS = 140
MAX_DEPTH_LAYERS = 6
# A step-time series whose slowest step is this many times its median squashes the steady regime
# into the floor of a linear axis: such charts open on a log axis (the reader can switch back).
LOG_SCALE_RATIO = 20.0
# In a stacked chart (which a log axis would distort) bars above this many medians run off the top.
CLIP_RATIO = 5.0

# One colour family per kind of work, shared by the Gantt bars and the per-phase breakdown, so
# violet means data loading everywhere in the report. Red, amber and green are left out: red and
# amber are severities and green is "healthy". Names in one family get its shades in turn, so two
# phases of a chart never share a colour.
TRAIN_SHADES = ("#4a8fd6", "#2c5a8a", "#93bde8")
PHASE_FAMILIES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("get_batch", "dataloader", "load_batch"), ("#8250df", "#b08af0", "#5a32a3")),
    (("forward_backward", "fwd_bwd", "forward"), ("#1f5f9e", "#6d9fd3", "#173f6b")),
    (("optim",), ("#4c4fb0", "#8487d8")),
    (("checkpoint", "save_"), ("#8a7f72", "#b3aa9f", "#645b52", "#cfc8bf")),
    (("eval",), ("#a0529b", "#c98bc4")),
    (("kl",), ("#546e7a", "#90a4ae")),
    (("finish", "assemble", "prepare", "result"), ("#7a6a8a", "#a89bb5", "#564a63")),
    (("train",), TRAIN_SHADES),
    (("sampl", "rollout", "env_", "reward", "policy"), ("#14868c", "#4fb5ae", "#0b5d61", "#8fd3cb")),
    (("submit",), ("#86c5da", "#b9dfea")),
    # Last: "step" also appears in env_step and the like, which belong to the families above.
    (("step",), TRAIN_SHADES),
)
FALLBACK_COLOURS = ("#57606a", "#5e4b8b", "#3b6e6e", "#7d6b91", "#4d5b6a", "#2e4a62", "#6b7f95", "#8c959f")
SEVERITY_LIKE = ("#cf222e", "#bf8700", "#0969da")


def plot_text(value: Any) -> str:
    """Input text made inert for plotly's HTML-ish labels (markup escaped; bidi, zero-width and control
    characters shown as their escapes, as everywhere else in the report), shortened for hover boxes."""
    text = inert(str(value))
    if len(text) > MAX_LABEL_CHARS:
        text = text[: MAX_LABEL_CHARS - 1] + "…"
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _family(name: str) -> int | None:
    key = name.lower().removeprefix("time/")
    for index, (keywords, _) in enumerate(PHASE_FAMILIES):
        if any(k in key for k in keywords):
            return index
    return None


def phase_colour(name: str) -> str:
    """The base colour of a span or phase name (its family's first shade), ignoring other names."""
    family = _family(name)
    if family is None:
        return FALLBACK_COLOURS[zlib.crc32(name.lower().encode()) % len(FALLBACK_COLOURS)]
    return PHASE_FAMILIES[family][1][0]


def assign_phase_colours(names: list[str]) -> dict[str, str]:
    """A distinct colour per name: each takes the next free shade of its family, then a free neutral.

    Names are served in the order given (callers pass the names that matter most first), so the
    assignment is deterministic and the same name gets the same colour in every chart.
    """
    colours: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        if name in colours:
            continue
        family = _family(name)
        shades = PHASE_FAMILIES[family][1] if family is not None else ()
        preferred = phase_colour(name)
        choice = next((c for c in shades if c not in used), None)
        if choice is None:
            choice = next((c for c in (preferred, *FALLBACK_COLOURS) if c not in used), preferred)
        colours[name] = choice
        used.add(choice)
    return colours


def base_layout(height: int, **extra: Any) -> dict[str, Any]:
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


SEVERITY_ORDER = ("error", "warning", "info")


def _worst(severities: list[str]) -> str:
    return min(severities, key=lambda s: SEVERITY_ORDER.index(s) if s in SEVERITY_ORDER else len(SEVERITY_ORDER))


def spread_ratio(values: list[float | None]) -> float:
    """Largest positive value over the median of the positive values (1.0 when there are none)."""
    positive = sorted(v for v in values if v is not None and v > 0)
    if not positive:
        return 1.0
    middle = len(positive) // 2
    median = positive[middle] if len(positive) % 2 else (positive[middle - 1] + positive[middle]) / 2
    return positive[-1] / median


def views(fig: go.Figure) -> dict[str, Any] | None:
    """The alternative views (label, trace visibility, layout changes) a chart offers, if any."""
    meta = fig.layout.meta
    return meta if isinstance(meta, dict) and meta.get("views") else None


def step_time_figure(
    steps: list[int],
    totals: list[float | None],
    *,
    warmup_steps: int,
    steady_median_s: float | None,
    marked: dict[int, list[tuple[str, str]]],
) -> go.Figure:
    """Step time per step: warm-up greyed, warm-up boundary and steady median drawn, finding steps marked.

    `marked` maps a step to (severity, text) of the findings naming it; its marker takes the worst
    severity's colour. Opens on a log axis when outliers would squash the steady steps.
    """
    colours = [WARMUP_COLOUR if i < warmup_steps else STEADY_COLOUR for i in range(len(steps))]
    hover = [
        f"step {s}<br>{format_seconds(t)}" + ("<br>warm-up" if i < warmup_steps else "")
        for i, (s, t) in enumerate(zip(steps, totals, strict=True))
    ]
    fig = go.Figure()
    many = len(steps) > 400
    if many:
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=totals,
                mode="lines",
                line={"color": STEADY_COLOUR, "width": 1},
                name="step time",
                hovertext=hover,
                hoverinfo="text",
            )
        )
    else:
        fig.add_trace(
            go.Bar(
                x=steps,
                y=totals,
                marker={"color": colours, "line": {"width": 0}},
                name="step time",
                hovertext=hover,
                hoverinfo="text",
            )
        )
    if steady_median_s is not None and steps:
        # A trace rather than a shape: it sits right on linear and log axes alike, and its label
        # goes in the legend instead of over the bars.
        fig.add_trace(
            go.Scatter(
                x=[steps[0] - 0.5, steps[-1] + 0.5],
                y=[steady_median_s, steady_median_s],
                mode="lines",
                line={"color": HEALTHY_COLOUR, "dash": "dot", "width": 1.5},
                name=f"steady median {format_seconds(steady_median_s)}",
                hoverinfo="skip",
            )
        )
    lookup = dict(zip(steps, totals, strict=True))
    by_severity: dict[str, list[int]] = {}
    for step in sorted(marked):
        if lookup.get(step) is not None:
            by_severity.setdefault(_worst([sev for sev, _ in marked[step]]), []).append(step)
    for severity in sorted(by_severity, key=SEVERITY_ORDER.index):
        xs = by_severity[severity]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[lookup[s] for s in xs],
                mode="markers",
                marker={
                    "color": SEVERITY_COLOUR[severity],
                    "size": 10,
                    "symbol": "diamond",
                    "line": {"color": "#ffffff", "width": 1},
                },
                name=f"named by {'an' if severity in ('error', 'info') else 'a'} {severity}",
                hovertext=[
                    f"step {s}<br>{format_seconds(lookup[s])}<br>"
                    + "<br>".join(plot_text(text) for _, text in marked[s])
                    for s in xs
                ],
                hoverinfo="text",
            )
        )
    shapes, annotations = [], []
    if 0 < warmup_steps < len(steps):
        boundary = (steps[warmup_steps - 1] + steps[warmup_steps]) / 2
        shapes.append(
            {
                "type": "line",
                "x0": boundary,
                "x1": boundary,
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "line": {"color": "#57606a", "dash": "dash", "width": 1.5},
            }
        )
        annotations.append(
            {
                "x": boundary,
                "yref": "paper",
                "y": 1,
                "text": "warm-up ends",
                "showarrow": False,
                "xanchor": "left",
                "yanchor": "top",
                "font": {"size": 11, "color": "#57606a"},
                "xshift": 4,
            }
        )
    ratio = spread_ratio(totals)
    log_first = ratio > LOG_SCALE_RATIO
    # One tick per decade on the log axis: plotly's default labels 2 and 5 between decades too.
    linear = {"yaxis.type": "linear", "yaxis.title.text": "seconds", "yaxis.autorange": True, "yaxis.dtick": None}
    log = {"yaxis.type": "log", "yaxis.title.text": "seconds (log scale)", "yaxis.autorange": True, "yaxis.dtick": 1}
    fig.update_layout(
        base_layout(300, shapes=shapes, annotations=annotations, showlegend=True, bargap=0.15),
        xaxis_title="step",
        yaxis={
            "type": "log" if log_first else "linear",
            "title": {"text": "seconds (log scale)" if log_first else "seconds"},
            "gridcolor": "#eef1f4",
            "zeroline": False,
            **({"dtick": 1} if log_first else {}),
        },
        meta={
            "views": [{"label": "Linear", "layout": linear}, {"label": "Log scale", "layout": log}],
            "active": 1 if log_first else 0,
            "why": f"Opens on a log axis: the slowest step is {ratio:.0f}× the median step." if log_first else "",
        },
    )
    return fig


def phase_figure(
    steps: list[int],
    phases: dict[str, list[float | None]],
    untimed: list[float | None] | None,
    *,
    colours: dict[str, str],
    hover_names: dict[str, str] | None = None,
) -> go.Figure:
    """Where each step's time went, phase by phase, with the untimed remainder as its own grey band.

    `phases` is in stacking order (bottom first); `hover_names` says what a series is in hover
    text when its legend name is short (e.g. the part of a phase outside its nested timers). When
    a few steps dwarf the rest, the chart opens on the steady range and marks the clipped bars.
    """
    fig = go.Figure()
    many = len(steps) > 400
    hover_names = hover_names or {}
    series = list(phases.items()) + ([("untimed", untimed)] if untimed is not None else [])
    for name, values in series:
        colour = UNTIMED_COLOUR if name == "untimed" else colours.get(name, phase_colour(name))
        label = "untimed (no timer covers it)" if name == "untimed" else plot_text(name)
        described = plot_text(hover_names.get(name, name)) if name != "untimed" else label
        hover = [f"step {s}<br>{described}: {format_seconds(v)}" for s, v in zip(steps, values, strict=True)]
        if many:
            fig.add_trace(
                go.Scatter(
                    x=steps,
                    y=values,
                    name=label,
                    stackgroup="phases",
                    mode="lines",
                    line={"width": 0.5, "color": colour},
                    fillcolor=colour,
                    hovertext=hover,
                    hoverinfo="text",
                )
            )
        else:
            fig.add_trace(
                go.Bar(
                    x=steps,
                    y=values,
                    name=label,
                    marker={"color": colour, "line": {"width": 0}},
                    hovertext=hover,
                    hoverinfo="text",
                )
            )
    stacked = (
        [sum(v or 0.0 for v in column) for column in zip(*(values for _, values in series), strict=True)]
        if series
        else []
    )
    # The colour key is HTML under the chart: plotly's legend turns long nested names into a
    # scrolling box that squeezes the plot.
    fig.update_layout(
        base_layout(320, barmode="stack", bargap=0.15, showlegend=False, margin={"l": 64, "r": 24, "t": 12, "b": 48}),
        xaxis_title="step",
        yaxis_title="seconds",
    )
    if spread_ratio(stacked) > LOG_SCALE_RATIO:
        _clip_outliers(fig, steps, stacked)
    return fig


def _clip_outliers(fig: go.Figure, steps: list[int], stacked: list[float]) -> None:
    """Open a stacked chart on the range of its ordinary steps, marking the bars that run off the top."""
    positive = sorted(v for v in stacked if v > 0)
    median = positive[len(positive) // 2]
    ordinary = [v for v in stacked if v <= CLIP_RATIO * median]
    ceiling = (max(ordinary) if ordinary else median) * 1.15
    clipped = [(s, v) for s, v in zip(steps, stacked, strict=True) if v > ceiling]
    fig.add_trace(
        go.Scatter(
            x=[s for s, _ in clipped],
            y=[ceiling] * len(clipped),
            mode="markers",
            cliponaxis=False,
            marker={
                "symbol": "triangle-up",
                "size": 10,
                "color": CLIPPED_COLOUR,
                "line": {"color": "#ffffff", "width": 1},
            },
            name="runs off the top",
            showlegend=False,
            hovertext=[f"step {s}: {format_seconds(v)} in all (off the chart)" for s, v in clipped],
            hoverinfo="text",
        )
    )
    tallest_step, tallest = max(clipped, key=lambda c: (c[1], -c[0]))
    traces = len(fig.data)
    fig.update_layout(
        yaxis={
            "range": [0, ceiling],
            "autorange": False,
            "title": {"text": "seconds"},
            "gridcolor": "#eef1f4",
            "zeroline": False,
        },
        meta={
            "views": [
                {
                    "label": "Steady range",
                    "layout": {"yaxis.range": [0, ceiling], "yaxis.autorange": False},
                    "visible": [True] * traces,
                },
                {
                    "label": "Full range",
                    "layout": {"yaxis.autorange": True},
                    "visible": [True] * (traces - 1) + [False],
                },
            ],
            "active": 0,
            "why": (
                f"{len(clipped)} step(s) run off the top (▲; tallest: step {tallest_step}, "
                f"{format_seconds(tallest)}); “Full range” shows them."
            ),
        },
    )


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
        f"<b>{plot_text(fn)}</b><br>{plot_text(fp)}"
        + (f":{ln}" if ln is not None else "")
        + f"<br>total {format_seconds(t)} · self {format_seconds(st)}"
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
    fig.update_layout(base_layout(440, margin={"l": 8, "r": 8, "t": 8, "b": 8}))
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
        base_layout(90 + 44 * len(labels), margin={"l": 80, "r": 24, "t": 12, "b": 48}),
        xaxis_title="time (local, from the dump headers)",
        yaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": [plot_text(label) for label in reversed(labels)],
            "gridcolor": "#eef1f4",
        },
    )
    return fig
