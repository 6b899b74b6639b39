"""The Gantt of the HTML report: spans per thread/track row, each finding in a lane of its own colour.

Like the other figures it only draws what `html._timeline` chose. Two things are its own job: the
finding palette (handed out by `findings_view.colours`, shared by a finding's lane, the number chip on
its card and its segment of the time account) and row labels that fit (wrapped, shortened with the
full name kept for a tooltip, margin sized to them).
"""

from __future__ import annotations

import re
from typing import Any

import plotly.graph_objects as go
import polars as pl

from trace_doctor.humanize import format_seconds
from trace_doctor.report.figures import MAX_DEPTH_LAYERS, base_layout, phase_colour, plot_text, with_alpha
from trace_doctor.report.terminal_text import inert

# The Okabe-Ito palette (Wong, "Color blindness", Nature Methods 8:441, 2011): its eight colours
# stay apart under protanopia, deuteranopia and tritanopia. Findings take them in reading order.
# Colour is never the only cue: each finding also has its own lane, labelled with its card number.
FINDING_COLOURS = ("#E69F00", "#56B4E9", "#009E73", "#CC79A7", "#0072B2", "#D55E00", "#F0E442", "#000000")

# Row labels: at most two lines of this many characters; longer names end in "…" and keep their
# full text in the tick's tooltip and in every bar's hover.
LABEL_LINE_CHARS = 22
# A Gantt narrower than NARROW_BELOW_PX (a phone) gets shorter labels, so the spans keep the room.
NARROW_LABEL_LINE_CHARS = 12
NARROW_BELOW_PX = 520
# A generous average glyph width of the 11 px tick font, so the margin errs wide, never clipping:
# a label's tail is kept (`_cut`), and tails are digits and round letters ("…cy_0" is ~6.5 px a glyph).
LABEL_CHAR_PX = 6.6
LABEL_PAD_PX = 14
# Invisible ticks keep the labels a few pixels off the bars that start at the plot's left edge.
LABEL_STANDOFF = {"ticks": "outside", "ticklen": 6, "tickcolor": "rgba(0, 0, 0, 0)"}
ROW_PX = 26
ROW_PX_TWO_LINES = 34
# The spans area never shrinks below this, so one row still reads as a timeline.
MIN_ROWS_PX = 150
LANE_PX = 16
LANE_GAP_PX = 6
MARGIN = {"r": 24, "t": 40, "b": 48}
# A finding's time ranges are shaded behind the spans with its colour at FILL_ALPHA, drawn at
# SHADE_OPACITY; the page raises a selected finding's shading to full opacity and dims the others.
SHADE_FILL_ALPHA = 0.3
SHADE_OPACITY = 0.4
SHADE_DIMMED_OPACITY = 0.12
LANE_DIMMED_OPACITY = 0.25
LANE_OUTLINE = "rgba(31, 35, 40, 0.45)"
BREAK_CHARS = re.compile(r"[\s/_.:\-]")


def finding_colour(k: int) -> str:
    """The colour of the k-th finding drawn in colour (0 = the first in reading order)."""
    return FINDING_COLOURS[k % len(FINDING_COLOURS)]


def ink_on(hex_colour: str) -> str:
    """Black or white, whichever reads better on the colour (WCAG relative luminance)."""

    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(int(hex_colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    # Contrast with black (L + 0.05) / 0.05 against white 1.05 / (L + 0.05): equal at L ≈ 0.179.
    return "#000000" if luminance > 0.179 else "#ffffff"


def _first_line(text: str, width: int) -> str:
    """The start of `text` that fits in `width`, ending after a space, slash, dot, colon, dash or
    underscore when one falls in its second half, else cut at `width`."""
    breaks = [m.end() for m in BREAK_CHARS.finditer(text[: width + 1]) if m.end() <= width]
    cut = breaks[-1] if breaks and breaks[-1] > width // 2 else width
    return text[:cut].strip()


def _cut(text: str, width: int) -> str:
    """`text` in `width` characters, cut in the middle: names that share a long head differ at their
    end (trajectory_group_worker_loop_0 … _7, ThreadPoolExecutor-0_0 … _3), so the tail stays."""
    if len(text) <= width:
        return text
    tail = width // 3
    return text[: width - 1 - tail].rstrip() + "…" + text[len(text) - tail :].lstrip()


def label_lines(label: str, width: int = LABEL_LINE_CHARS, *, split: bool = False) -> list[str]:
    """A row label as one or two lines of at most `width` characters.

    A "thread · track" label that does not fit on one line (or any, with `split`) breaks at the
    " · ", so the thread is on one line and the track on the next, each cut in its middle with "…"
    if need be (the track tells rows apart, so it is never dropped, nor is its end). Any other label
    wraps, its second line cut in the middle with "…" when the text goes on.
    """
    label = label.strip()
    if len(label) <= width and not (split and " · " in label):
        return [label]
    parts = [part.strip() for part in label.split(" · ")]
    if len(parts) == 2:
        return [_cut(part, width) for part in parts]
    first = _first_line(label, width)
    rest = label[len(first) :].strip()
    return [first, _cut(rest, width)] if rest else [first]


def _tick_texts(rows: list[str], width: int) -> tuple[list[str], dict[str, str], int]:
    """Tick label per row at a line width, the full name behind each shortened one (keyed by the
    text the tick's SVG holds: its lines without breaks) and the longest line."""
    # When one label breaks, all break at their " · ": every row reads thread above track.
    # Measured and keyed as drawn: a name's bidi or control characters show as their escapes.
    drawn = {row: inert(row) for row in rows}
    split = any(len(text.strip()) > width for text in drawn.values())
    shown = {row: label_lines(drawn[row], width, split=split) for row in rows}
    tooltips: dict[str, str] = {}
    for row, lines in shown.items():
        if lines != [drawn[row].strip()]:
            key = "".join(lines)
            tooltips[key] = drawn[row] if key not in tooltips else f"{tooltips[key]}\n{drawn[row]}"
    ticks = ["<br>".join(plot_text(line) for line in shown[row]) for row in rows]
    widest = max((len(line) for lines in shown.values() for line in lines), default=0)
    return ticks, tooltips, widest


def _margin_for(chars: int) -> int:
    return max(int(chars * LABEL_CHAR_PX) + LABEL_PAD_PX, 60)


def _row_axis(rows: list[str]) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The y axis of the span rows (full names as categories, wrapped text as tick labels), what the
    page needs for the rows (tooltips; the narrow-screen labels and margin) and the row height."""
    ticks, tooltips, widest = _tick_texts(rows, LABEL_LINE_CHARS)
    narrow_ticks, narrow_tooltips, narrow_widest = _tick_texts(rows, NARROW_LABEL_LINE_CHARS)
    axis = {
        "type": "category",
        "categoryorder": "array",
        "categoryarray": [plot_text(row) for row in reversed(rows)],
        "tickmode": "array",
        "tickvals": [plot_text(row) for row in rows],
        "ticktext": ticks,
        # Plotly widens the margin if a label still would not fit: nothing is ever cut off.
        "automargin": True,
        "tickfont": {"size": 11},
        **LABEL_STANDOFF,
    }
    page = {
        "row_tooltips": {**narrow_tooltips, **tooltips},
        "wide": {"ticktext": ticks, "margin_l": _margin_for(widest)},
        "narrow": {"ticktext": narrow_ticks, "margin_l": _margin_for(narrow_widest), "below_px": NARROW_BELOW_PX},
    }
    two_lines = any("<br>" in t for t in ticks + narrow_ticks)
    return axis, page, ROW_PX_TWO_LINES if two_lines else ROW_PX


def _span_traces(
    fig: go.Figure,
    spans: pl.DataFrame,
    origin_us: float,
    row_of: list[str],
    track_of: list[str],
    colours: dict[str, str],
):
    start_s = ((spans["start_us"] - origin_us) / 1e6).to_list()
    dur_s = (spans["dur_us"] / 1e6).to_list()
    names = spans["name"].to_list()
    depths = spans["depth"].fill_null(0).to_list()
    steps = spans["step"].to_list()
    closed = spans["closed"].fill_null(True).to_list()
    rows = [plot_text(r) for r in row_of]
    tracks = [plot_text(t) for t in track_of]
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
                y=[rows[i] for i in idx],
                width=0.78 * (0.8**depth),
                marker={"color": [colours.get(names[i]) or phase_colour(names[i]) for i in idx], "line": {"width": 0}},
                hovertext=[
                    f"<b>{plot_text(names[i])}</b><br>{format_seconds(dur_s[i])} from {start_s[i]:.3f} s"
                    + (f"<br>step {steps[i]}" if steps[i] is not None else "")
                    + ("" if closed[i] else "<br>never closed (no end event)")
                    + f"<br>{tracks[i]}"
                    for i in idx
                ],
                hoverinfo="text",
                showlegend=False,
                name=f"depth {depth}",
            )
        )


def lane_label(overlay: dict[str, Any]) -> str:
    """What a finding's lane is called on the chart and in its key: its card number and rule code."""
    return f"#{overlay['number']} {overlay['code']}"


def _lane_traces(fig: go.Figure, overlays: list[dict[str, Any]], rows_top: float) -> list[dict[str, Any]]:
    """Each finding's lane along the top (its measured ranges solid, steps it names hatched), and
    its ranges shaded behind the spans; returns the shading shapes."""
    shading: list[dict[str, Any]] = []
    lanes = len(overlays)
    for k, overlay in enumerate(overlays):
        colour, finding = overlay["colour"], overlay["finding"]
        centre = lanes - k - 0.5  # the first card's lane on top
        about = f"{lane_label(overlay)} {overlay['rule']}: {plot_text(overlay['title'])}"
        common = {
            "orientation": "h",
            "yaxis": "y2",
            "width": 0.72,
            "hoverinfo": "text",
            "showlegend": False,
            "name": lane_label(overlay),
            "meta": {"finding": finding},
        }
        if overlay["ranges_s"]:
            fig.add_trace(
                go.Bar(
                    base=[a for a, _ in overlay["ranges_s"]],
                    x=[b - a for a, b in overlay["ranges_s"]],
                    y=[centre] * len(overlay["ranges_s"]),
                    marker={"color": colour, "line": {"color": LANE_OUTLINE, "width": 1}},
                    hovertext=[
                        f"{about}<br>{a:.3f}–{b:.3f} s ({format_seconds(b - a)})" for a, b in overlay["ranges_s"]
                    ],
                    **common,
                )
            )
        if overlay["steps_s"]:
            fig.add_trace(
                go.Bar(
                    base=[a for a, _, _ in overlay["steps_s"]],
                    x=[b - a for a, b, _ in overlay["steps_s"]],
                    y=[centre] * len(overlay["steps_s"]),
                    marker={
                        "color": colour,
                        "line": {"color": LANE_OUTLINE, "width": 1},
                        "pattern": {"shape": "/", "fillmode": "replace", "solidity": 0.45},
                    },
                    hovertext=[
                        f"{about}<br>names step {s} (the whole step is marked)" for _, _, s in overlay["steps_s"]
                    ],
                    **common,
                )
            )
        shading += [
            {
                "type": "rect",
                "name": f"finding-{finding}",
                "x0": a,
                "x1": b,
                "yref": "paper",
                "y0": 0,
                "y1": rows_top,
                "fillcolor": with_alpha(colour, SHADE_FILL_ALPHA),
                "opacity": SHADE_OPACITY,
                "line": {"width": 0},
                "layer": "below",
            }
            for a, b in overlay["ranges_s"]
        ]
    return shading


def gantt_figure(
    spans: pl.DataFrame,
    *,
    origin_us: float,
    rows: list[str],
    row_of: list[str],
    overlays: list[dict[str, Any]],
    track_of: list[str] | None = None,
    windows: list[dict[str, Any]],
    initial_range: list[float] | None,
    colours: dict[str, str],
) -> go.Figure:
    """Spans as bars per thread/track row (nested spans drawn thinner on top), with finding lanes.

    `rows` and `row_of` hold the rows' full (raw) names; `track_of` each span's own thread · track
    for its hover (a row may hold several short-lived tracks), its row's name by default. Each overlay
    (`finding` index, `number`, `code`, `rule`, `title`, `colour`, `ranges_s`, `steps_s` as
    [start, end, step]) gets a lane of its own above the spans, and its time ranges are shaded lightly
    behind the bars in its colour.
    Traces and shapes of a finding carry its index (`meta.finding`, `finding-<i>`) for the page.
    """
    fig = go.Figure()
    _span_traces(fig, spans, origin_us, row_of, track_of or row_of, colours)
    row_axis, rows_page, row_px = _row_axis(rows)
    rows_px = max(row_px * len(rows), MIN_ROWS_PX)
    lanes_px = (LANE_PX * len(overlays) + LANE_GAP_PX) if overlays else 0
    plot_px = rows_px + lanes_px
    rows_top = rows_px / plot_px
    shading = _lane_traces(fig, overlays, rows_top)
    annotations = [
        {
            "x": w["x0"],
            "yref": "paper",
            "y": 1,
            "yanchor": "bottom",
            "xanchor": "left",
            "text": w["label"],
            "showarrow": False,
            "font": {"size": 11, "color": "#57606a"},
        }
        for w in windows
    ]
    shapes = shading + [
        {
            "type": "line",
            "x0": w["x0"],
            "x1": w["x0"],
            "yref": "paper",
            "y0": 0,
            "y1": 1,
            "line": {"color": "#afb8c1", "width": 1, "dash": "dot"},
        }
        for w in windows
    ]
    layout = base_layout(
        plot_px + MARGIN["t"] + MARGIN["b"],
        barmode="overlay",
        annotations=annotations,
        shapes=shapes,
        showlegend=False,
        hovermode="closest",
        margin={"l": rows_page["wide"]["margin_l"], **MARGIN},
        meta={
            **rows_page,
            "shade_opacity": SHADE_OPACITY,
            "dimmed_shade_opacity": SHADE_DIMMED_OPACITY,
            "dimmed_opacity": LANE_DIMMED_OPACITY,
        },
    )
    fig.update_layout(
        layout,
        xaxis={
            "title": "seconds since the trace began",
            "range": initial_range,
            "gridcolor": "#eef1f4",
            "zeroline": False,
        },
        yaxis={**row_axis, "domain": [0, rows_top]},
    )
    if overlays:
        lanes = len(overlays)
        fig.update_layout(
            yaxis2={
                "domain": [(rows_px + LANE_GAP_PX) / plot_px, 1],
                "range": [0, lanes],
                "tickmode": "array",
                "tickvals": [lanes - k - 0.5 for k in range(lanes)],
                "ticktext": [f'<span style="color:{o["colour"]}">■</span> {lane_label(o)}' for o in overlays],
                "tickfont": {"size": 11},
                **LABEL_STANDOFF,
                "showgrid": False,
                "zeroline": False,
                "fixedrange": True,
                "anchor": "x",
                "automargin": True,
            }
        )
    return fig
