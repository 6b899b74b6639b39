"""The HTML overview of a fleet: many runs side by side in one self-contained file.

Each run was analysed on its own and has its own full report (`RunReport.html_path`); the overview
links to them and puts the runs side by side: the fleet table, every run's step time on one chart, the
findings by run, and the configuration keys that differ between runs next to each run's outcome. It
is a renderer only: every verdict, finding and number comes from the runs' reports.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import markupsafe

from trace_doctor import __version__
from trace_doctor.derive.environment_diff import describe_group_difference
from trace_doctor.fleet import SWEEP_KEYS, Fleet, RunReport
from trace_doctor.humanize import format_seconds, printable
from trace_doctor.report import figures
from trace_doctor.report.html import _environment, _plotly_js, script_json
from trace_doctor.report.json_doc import _clean
from trace_doctor.report.redaction_notice import UNREDACTED, fleet_unredacted
from trace_doctor.report.terminal_text import inert

# The stylesheet's colour class of each verdict (the one-run report calls a clear run "ok").
VERDICT_CLASS = {
    "error": "error",
    "warning": "warning",
    "info": "info",
    "clear": "ok",
    "limited": "limited",
    "failed": "failed",
}
SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
# Line colours of the runs on the step-time chart, then the same again dashed, then dotted. Neither
# the verdict colours' meaning nor the table's depend on them: they only tell the lines apart.
RUN_COLOURS = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#b07aa1",
    "#9c755f",
    "#ff9da7",
    "#17becf",
    "#8c8c2a",
    "#6b6b6b",
    "#1f3b73",
)
RUN_DASHES = ("solid", "dash", "dot")
# The chart opens on a log axis when its slowest step is this many times its fastest.
LOG_RANGE_RATIO = 100.0
# Points drawn over all runs together: a long series is thinned further when there are many runs.
CHART_POINTS_MAX = 40_000
CHART_POINTS_MIN_PER_RUN = 60
# Up to this many runs the legend sits above the chart; beyond, it is a column on the right.
LEGEND_ABOVE_MAX = 6
LEGEND_LABEL_CHARS = 44
# A run's label over its column of the findings matrix (written upwards).
COLUMN_LABEL_CHARS = 26
CONFIG_VALUE_CHARS = 80
MISSING = object()


def _short(text: str, limit: int) -> str:
    """A run label shortened from the left: the end of a path is what tells runs apart."""
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def _display_labels(labels: list[str]) -> list[str]:
    """Labels without the folders every run shares (the header names them), for narrow columns and legends."""
    parts = [label.split("/") for label in labels]
    common = 0
    while parts and all(len(p) > common + 1 for p in parts) and len({p[common] for p in parts}) == 1:
        common += 1
    return ["/".join(p[common:]) for p in parts]


def _breakable(text: Any) -> markupsafe.Markup:
    """Escaped text that may wrap after a path separator or underscore rather than mid-word."""
    escaped = str(markupsafe.escape(inert(str(text))))
    return markupsafe.Markup(escaped.replace("/", "/<wbr>").replace("_", "_<wbr>"))


def _legend_rows(names: list[str], width_px: float = 1000.0) -> int:
    """How many rows a horizontal plotly legend of these names takes, roughly (6.5 px a character)."""
    rows, used = 1, 0.0
    for name in names:
        item = 44 + 6.5 * len(name)
        if used and used + item > width_px:
            rows, used = rows + 1, 0.0
        used += item
    return rows


def _href(report: RunReport, base_dir: Path | None) -> str | None:
    """The link from the overview's folder to the run's own report (relative, URL-quoted)."""
    if not report.html_path:
        return None
    target = Path(report.html_path)
    if base_dir is None:
        return target.resolve().as_uri() if target.is_absolute() else quote(target.as_posix())
    relative = os.path.relpath(target.resolve(), Path(base_dir).resolve())
    return quote(Path(relative).as_posix())


def _colour(index: int) -> tuple[str, str]:
    return RUN_COLOURS[index % len(RUN_COLOURS)], RUN_DASHES[(index // len(RUN_COLOURS)) % len(RUN_DASHES)]


def _runs(fleet: Fleet, base_dir: Path | None) -> list[dict[str, Any]]:
    """One row of the fleet table per run, in the fleet's order."""
    rows = []
    shown = _display_labels([r.source.label for r in fleet.reports])
    for index, report in enumerate(fleet.reports):
        row = report.row
        colour, dash = _colour(index)
        rows.append(
            {
                "index": index + 1,
                "label": report.source.label,
                "shown": shown[index],
                "short": _short(shown[index], LEGEND_LABEL_CHARS),
                "tiny": _short(shown[index], COLUMN_LABEL_CHARS),
                "path": report.source.path or str(report.source.root),
                "href": _href(report, base_dir),
                "trainer": row["trainer"],
                "model": row["model"],
                "steps": row["steps"],
                "steady": row["steady_step_time_s"],
                "status": report.status,
                "css": VERDICT_CLASS.get(report.status, "limited"),
                "headline": report.headline,
                "main": report.main_finding,
                "quality": report.quality_finding,
                "lost": report.seconds_lost,
                "gate": report.gate_tripped,
                "gate_reasons": "; ".join(report.gate_reasons),
                "error": report.error,
                "colour": colour,
                "dash": dash,
                "has_series": bool(report.step_series),
            }
        )
    return rows


# ---- step time of every run ------------------------------------------------------------


def _step_chart(fleet: Fleet, runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Every run's step time on one chart, one line per run; log axis when the range spans > 100x."""
    with_series = [r for r in fleet.reports if r.step_series]
    if not with_series:
        return None
    per_run = max(CHART_POINTS_MIN_PER_RUN, CHART_POINTS_MAX // len(with_series))
    traces = []
    values: list[float] = []
    for report, run in zip(fleet.reports, runs, strict=True):
        series = report.step_series
        if not series:
            continue
        stride = max(1, math.ceil(len(series) / per_run))
        shown = series[::stride]
        steps = [s for s, _ in shown]
        seconds = [t for _, t in shown]
        values.extend(t for t in seconds if t > 0)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers" if len(shown) <= 40 else "lines",
                "x": steps,
                "y": seconds,
                "name": figures.plot_text(f"#{run['index']} {run['short']}"),
                "line": {"color": run["colour"], "dash": run["dash"], "width": 1.6},
                "marker": {"size": 4, "color": run["colour"]},
                "text": [format_seconds(t) for t in seconds],
                "hovertemplate": "<b>%{fullData.name}</b><br>step %{x}<br>%{text}<extra></extra>",
            }
        )
    ratio = max(values) / min(values) if values else 1.0
    log_first = ratio > LOG_RANGE_RATIO
    above = len(traces) <= LEGEND_ABOVE_MAX
    legend_rows = _legend_rows([t["name"] for t in traces]) if above else 0
    legend = (
        {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0, "font": {"size": 11}}
        if above
        else {"orientation": "v", "y": 1, "yanchor": "top", "x": 1.02, "xanchor": "left", "font": {"size": 11}}
    )
    height = 380 if above else max(380, min(720, 22 * len(traces) + 60))
    margin = {"l": 64, "r": 24, "t": 12 + 22 * legend_rows if above else 16, "b": 48}
    layout = {
        "height": height,
        "margin": margin,
        "font": {"family": figures.FONT, "size": 12, "color": "#24292f"},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "#ffffff",
        "hoverlabel": {"font": {"family": figures.FONT, "size": 12}, "align": "left"},
        "hovermode": "closest",
        "showlegend": True,
        "legend": legend,
        "xaxis": {"title": {"text": "step"}, "gridcolor": "#eef1f4", "zeroline": False},
        "yaxis": {
            "title": {"text": "seconds (log scale)" if log_first else "seconds"},
            "type": "log" if log_first else "linear",
            "gridcolor": "#eef1f4",
            "zeroline": False,
            **({"dtick": 1} if log_first else {}),
        },
    }
    linear = {"yaxis.type": "linear", "yaxis.title.text": "seconds", "yaxis.autorange": True, "yaxis.dtick": None}
    log = {"yaxis.type": "log", "yaxis.title.text": "seconds (log scale)", "yaxis.autorange": True, "yaxis.dtick": 1}
    return {
        "id": "chart-fleet-step-time",
        "figure_json": script_json({"data": traces, "layout": layout}),
        "views": [
            {"label": "Linear", "layout": json.dumps(linear), "visible": "null"},
            {"label": "Log scale", "layout": json.dumps(log), "visible": "null"},
        ],
        "active_view": 1 if log_first else 0,
        "why": f"Opens on a log axis: the slowest step is {ratio:,.0f}× the fastest." if log_first else "",
    }


# ---- findings by run --------------------------------------------------------------------


def _matrix(fleet: Fleet, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows = rules that fired in any run; a cell per run with the worst severity, the count and the titles."""
    fired: dict[str, dict[str, Any]] = {}
    for column, report in enumerate(fleet.reports):
        for position, finding in enumerate((report.document or {}).get("findings") or []):
            rule = str(finding.get("rule"))
            entry = fired.setdefault(rule, {"rule": rule, "code": finding.get("code") or "", "cells": {}})
            cell = entry["cells"].setdefault(column, {"severity": None, "count": 0, "titles": [], "anchor": position})
            severity = finding.get("severity")
            if cell["severity"] is None or SEVERITY_RANK.get(severity, 9) < SEVERITY_RANK.get(cell["severity"], 9):
                cell["severity"] = severity
            cell["count"] += 1
            title = str(finding.get("title") or "")
            if title and title not in cell["titles"]:
                cell["titles"].append(title)
    rows = []
    for entry in fired.values():
        cells = []
        for column, report in enumerate(fleet.reports):
            run = runs[column]
            cell = entry["cells"].get(column)
            if cell is not None:
                lead = f"{run['label']} · {entry['code']} {entry['rule']}: {cell['count']} {cell['severity']}"
                cells.append(
                    {
                        "kind": "fired",
                        "severity": cell["severity"],
                        "count": cell["count"],
                        "title": lead + " — " + "; ".join(cell["titles"]),
                        "href": f"{run['href']}#finding-{cell['anchor']}" if run["href"] else None,
                    }
                )
                continue
            if report.document is None:
                cells.append({"kind": "absent", "title": f"{run['label']}: not analysed"})
                continue
            outcome = next((o for o in report.document.get("rules") or [] if o.get("rule") == entry["rule"]), None)
            status = outcome.get("status") if outcome else "not run"
            reason = outcome.get("reason") if outcome else "the rule was not selected"
            cells.append({"kind": status, "title": f"{run['label']} · {entry['rule']}: {status} — {reason}"})
        worst = min((c["severity"] for c in entry["cells"].values()), key=lambda s: SEVERITY_RANK.get(s, 9))
        rows.append({**entry, "cells": cells, "worst": worst, "runs": len(entry["cells"])})
    rows.sort(key=lambda r: (SEVERITY_RANK.get(r["worst"], 9), -r["runs"], r["code"], r["rule"]))
    return rows


# ---- configuration differences ----------------------------------------------------------


def _value_text(value: Any) -> dict[str, str]:
    """A config value for the table (long floats to 6 significant digits, long text cut) and exactly (tooltip)."""
    if isinstance(value, bool):
        exact = text = "true" if value else "false"
    elif isinstance(value, float):
        exact = repr(value)
        text = exact if len(exact) <= 10 else f"{value:.6g}"
    else:
        exact = text = str(value)
    if len(text) > CONFIG_VALUE_CHARS:
        text = text[: CONFIG_VALUE_CHARS - 1] + "…"
    return {"text": text, "exact": exact}


def _config(fleet: Fleet) -> dict[str, Any]:
    """The sweep keys whose values differ between runs (with each run's value), and those that do not."""
    configured = [r.config for r in fleet.reports if r.config]
    keys = [k for k in SWEEP_KEYS if any(k in c for c in configured)]
    keys += sorted({k for c in configured for k in c} - set(keys))
    differing, same = [], []
    for key in keys:
        seen = []
        for config in configured:
            value = config.get(key, MISSING)
            # 0.0002 and 2e-4 are one value; True and 1 are not.
            marker = (type(value) is bool, value) if value is not MISSING else MISSING
            if marker not in seen:
                seen.append(marker)
        if len(seen) > 1:
            numeric = all(
                isinstance(c[key], (int, float)) and not isinstance(c[key], bool) for c in configured if key in c
            )
            differing.append({"key": key, "numeric": numeric})
        else:
            same.append({"key": key, "value": _value_text(configured[0][key])})
    rows = []
    for report in fleet.reports:
        values = []
        for column in differing:
            value = report.config.get(column["key"], MISSING)
            values.append(None if value is MISSING else _value_text(value))
        rows.append({"configured": bool(report.config), "values": values})
    return {"differing": differing, "same": same, "rows": rows, "configured": len(configured)}


# ---- environment differences ------------------------------------------------------------


def _environment_differences(fleet: Fleet) -> dict[str, Any]:
    """The fleet's environment comparison (Fleet.environment_differences), each difference in words."""
    compared = fleet.environment_differences()
    return {**compared, "lines": [describe_group_difference(d) for d in compared["differences"]]}


# ---- the page ---------------------------------------------------------------------------


def _common_path(fleet: Fleet) -> str:
    # The runs' paths as the documents name them (redacted with --redact), not where the files are.
    paths = [r.source.path or str(r.source.root) for r in fleet.reports]
    if not paths:
        return ""
    try:
        return os.path.commonpath(paths)
    except ValueError:  # mixed absolute and relative paths
        return ""


def render_fleet_html(fleet: Fleet, base_dir: Path | None = None) -> str:
    """The overview as one HTML string; links to each run's report are relative to `base_dir`."""
    runs = _runs(fleet, base_dir)
    counts: dict[str, int] = {}
    for report in fleet.reports:
        counts[report.status] = counts.get(report.status, 0) + 1
    order = ("error", "warning", "failed", "info", "limited", "clear")
    context = {
        "version": __version__,
        "root": _common_path(fleet),
        "unredacted": UNREDACTED if fleet_unredacted(fleet) else None,
        "runs": runs,
        "run_count": len(runs),
        "analysed": len(fleet.analysed),
        "tripped": sum(1 for r in fleet.reports if r.gate_tripped),
        "has_baseline": any(r.document and r.document.get("baseline") for r in fleet.reports),
        "verdict_counts": [
            {"status": s, "css": VERDICT_CLASS.get(s, "limited"), "count": counts[s]}
            for s in (*order, *sorted(set(counts) - set(order)))
            if counts.get(s)
        ],
        "chart": _step_chart(fleet, runs),
        "matrix": _matrix(fleet, runs),
        "config": _config(fleet),
        "environment": _environment_differences(fleet),
        "fleet_json": script_json(_clean(fleet.summary())),
        "plotly_js": _plotly_js(),
        "severity_colour": figures.SEVERITY_COLOUR,
    }
    env = _environment()
    env.filters["breakable"] = _breakable
    return env.get_template("fleet.html.j2").render(**context)


def write_fleet_html(fleet: Fleet, path: Path, *, base_dir: Path | None = None) -> None:
    """Write the overview to `path`, linking each run's own report relative to `base_dir` (default: `path`'s
    folder; the folder the overview ends up in when `path` is a temporary name)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    links_from = path.parent if base_dir is None else base_dir
    path.write_text(printable(render_fleet_html(fleet, base_dir=links_from)), encoding="utf-8")
