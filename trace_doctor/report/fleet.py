"""Renderers over a fleet of runs: the terminal table, the multi-run JSON document, Markdown, JUnit, SARIF.

Each run was rendered by its own worker in the format asked for (`RunReport.rendered`); these
functions only put the runs side by side, in the fleet's order (runs that need attention first).
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import orjson
from rich.padding import Padding
from rich.table import Table

from trace_doctor import __version__
from trace_doctor.derive.environment_diff import describe_group_difference
from trace_doctor.fleet import Fleet, RunReport
from trace_doctor.humanize import format_seconds, json_dumps
from trace_doctor.report.console import _console, escape, terminal_width
from trace_doctor.report.json_doc import SCHEMA_VERSION, _clean
from trace_doctor.report.markdown import _fit, cell
from trace_doctor.report.markdown_text import code, html_text
from trace_doctor.report.redaction_notice import UNREDACTED, fleet_unredacted
from trace_doctor.report.sarif import SCHEMA_URI
from trace_doctor.report.summary_text import render_fleet_summary
from trace_doctor.report.terminal_text import inert

# Columns the table needs besides the run's name: trainer 7, model 20, steps 5, steady step 11,
# verdict 12, main finding 24 at least, lost 8, and the gaps between them. Narrower: one block a run.
TABLE_OTHER_COLUMNS = 94
STATUS_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan", "failed": "bold red", "limited": "dim"}


def _main(report: RunReport) -> str:
    if report.error:
        return report.headline
    if report.main_finding is None:
        return "—"
    main = f"{report.main_finding['code']} {report.main_finding['title']}"
    quality = report.quality_finding
    # Speed and training quality are different axes: a run with both shows both.
    return f"{main} · training: {quality['code']} {quality['title']}" if quality else main


def _lost(report: RunReport) -> str:
    return format_seconds(report.seconds_lost) if report.seconds_lost else "–"


def _verdict_cell(report: RunReport) -> str:
    style = STATUS_STYLE.get(report.status, "")
    verdict = f"[{style}]{report.status}[/]" if style else report.status
    return verdict + (" [bold red]gate[/]" if report.gate_tripped else "")


def _table(out, fleet: Fleet, run_width: int) -> None:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=False)
    # The run column is as wide as the longest name (set, not a minimum: rich meets a column's minimum
    # after fitting the table, which once pushed the last column off the edge).
    table.add_column("run", no_wrap=True, width=run_width)
    for name in ("trainer", "model", "steps", "steady step", "verdict"):
        table.add_column(name, overflow="fold", justify="right" if name in ("steps", "steady step") else "left")
    table.add_column("main finding", overflow="fold", ratio=1)
    table.add_column("lost", justify="right", no_wrap=True)
    for report in fleet.reports:
        row = report.row
        table.add_row(
            escape(report.source.label),
            escape(str(row["trainer"] or "–")),
            escape(str(row["model"] or "–")),
            str(row["steps"] if row["steps"] is not None else "–"),
            format_seconds(row["steady_step_time_s"]),
            _verdict_cell(report),
            escape(_main(report)),
            _lost(report),
        )
    out.print(table)


def _blocks(out, fleet: Fleet) -> None:
    """A narrow terminal: each run's name on its own line (a longer name than the terminal is left to
    the terminal to wrap, never cut), then its row as indented text wrapped between words."""
    for report in fleet.reports:
        row = report.row
        out.print(escape(report.source.label), soft_wrap=True, style="bold")
        steps = f"{row['steps']} steps" if row["steps"] is not None else "– steps"
        facts = [
            _verdict_cell(report),
            escape(str(row["trainer"] or "–")),
            escape(str(row["model"] or "–")),
            steps,
            f"steady step {format_seconds(row['steady_step_time_s'])}",
            f"lost {_lost(report)}",
        ]
        out.print(Padding(" · ".join(facts), (0, 0, 0, 2), expand=False))
        out.print(Padding(escape(_main(report)), (0, 0, 0, 2), expand=False))


def render_fleet_text(fleet: Fleet) -> str:
    buffer = io.StringIO()
    out = _console(buffer, width=terminal_width())
    tripped = sum(1 for r in fleet.reports if r.gate_tripped)
    failed = sum(1 for r in fleet.reports if r.error)
    out.print(f"[bold]trace-doctor[/] {len(fleet.reports)} runs, each analysed on its own")
    if fleet_unredacted(fleet):
        out.print(f"  [bold red]{escape(UNREDACTED)}[/]")
    # The run's name is what tells runs apart: never split. When the names and the other columns fit
    # the terminal side by side, a table; otherwise one block per run, its name on a line of its own.
    longest = max((len(inert(r.source.label)) for r in fleet.reports), default=0)
    if max(longest, len("run")) + TABLE_OTHER_COLUMNS <= out.width:
        _table(out, fleet, max(longest, len("run")))
    else:
        _blocks(out, fleet)
    if failed:
        out.print(f"{failed} run(s) could not be analysed (see the verdict column).")
    if fleet.passed_over:
        shown = "; ".join(f"{p.path}: {p.reason}" for p in fleet.passed_over[:3])
        more = f" (and {len(fleet.passed_over) - 3} more in --format json)" if len(fleet.passed_over) > 3 else ""
        out.print(
            f"Passed over {len(fleet.passed_over)} file(s) of no single run: {escape(shown)}{more}", soft_wrap=True
        )
    differences = fleet.environment_differences()["differences"]
    if differences:
        shown = "; ".join(describe_group_difference(d) for d in differences[:3])
        more = f" (and {len(differences) - 3} more in --format json)" if len(differences) > 3 else ""
        out.print(f"Environment of failing vs healthy runs: {escape(shown)}{more}", soft_wrap=True)
    if tripped:
        out.print(f"[bold red]Gate: tripped[/] by {tripped} of {len(fleet.reports)} runs.")
    elif any(r.document and r.document.get("baseline") for r in fleet.reports):
        out.print("Gate: passed.")
    return buffer.getvalue()


def build_fleet_document(fleet: Fleet) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {
            "name": "trace-doctor",
            "version": __version__,
            **({"redacted": False} if fleet_unredacted(fleet) else {}),
        },
        "runs": [r.document for r in fleet.reports if r.document is not None],
        "fleet": _clean(fleet.summary()),
    }


def render_fleet_json(fleet: Fleet) -> str:
    return json_dumps(build_fleet_document(fleet), orjson.OPT_INDENT_2).decode() + "\n"


def render_fleet_markdown(fleet: Fleet) -> str:
    tripped = [r for r in fleet.reports if r.gate_tripped]
    lines = ["# trace-doctor — fleet", ""]
    if fleet_unredacted(fleet):
        lines += [f"> **{UNREDACTED}**", ""]
    if tripped:
        lines.append(f"**Gate: FAILED** — {len(tripped)} of {len(fleet.reports)} runs trip it.")
    else:
        lines.append(f"Gate: not tripped by any of {len(fleet.reports)} runs.")
    lines += [
        "",
        "| run | trainer | steps | steady step | verdict | main finding | lost |",
        "|---|---|---|---|---|---|---|",
    ]
    for report in fleet.reports:
        row = report.row
        gate = " (gate)" if report.gate_tripped else ""
        lines.append(
            f"| {code(report.source.label, 120)} | {cell(row['trainer'] or '–')} | {row['steps'] or '–'} "
            f"| {format_seconds(row['steady_step_time_s'])} | {cell(report.status)}{gate} | {cell(_main(report))} "
            f"| {_lost(report)} |"
        )
    for report in fleet.reports:
        if not report.rendered:
            continue
        # Each run's own summary, one heading level down, folded so the table stays the first thing read.
        body = report.rendered.replace("\n# trace-doctor\n", "\n").removeprefix("# trace-doctor\n")
        lines += [
            "",
            f"<details><summary><code>{html_text(report.source.label, 200)}</code> — "
            f"{html_text(report.headline, 600)}</summary>",
            "",
            body.strip(),
            "",
            "</details>",
        ]
    # GitHub's job summary takes 1 MiB: the fleet table first, the folded runs until the cap.
    return _fit("\n".join(lines) + "\n")


def render_fleet_junit(fleet: Fleet) -> str:
    """One testsuite per run (named by its run id), the cases as each run's own JUnit has them."""
    suites = ET.Element("testsuites", name="trace-doctor")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for report in fleet.reports:
        if report.rendered is None:
            suite = ET.SubElement(suites, "testsuite", name=report.source.run_id, tests="1", failures="0", errors="1")
            case = ET.SubElement(suite, "testcase", classname="trace-doctor.run", name="analysable")
            ET.SubElement(case, "error", message=report.error or "not analysed", type="NothingToAnalyze")
            totals["tests"] += 1
            totals["errors"] += 1
            continue
        for suite in ET.fromstring(report.rendered).iter("testsuite"):
            suite.set("name", report.source.run_id)
            suites.append(suite)
            for key in totals:
                totals[key] += int(suite.get(key, "0"))
    for key, value in totals.items():
        suites.set(key, str(value))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def render_fleet_sarif(fleet: Fleet) -> str:
    """SARIF holds several runs natively: one `runs[]` entry per analysed run."""
    runs = []
    for report in fleet.reports:
        if report.rendered:
            runs += orjson.loads(report.rendered).get("runs", [])
    document = {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": runs,
    }
    return json_dumps(document, orjson.OPT_INDENT_2).decode() + "\n"


RENDERERS = {
    "text": render_fleet_text,
    "json": render_fleet_json,
    "markdown": render_fleet_markdown,
    "junit": render_fleet_junit,
    "sarif": render_fleet_sarif,
    "summary": render_fleet_summary,
}


def render_fleet(fleet: Fleet, fmt: str) -> str:
    return RENDERERS[fmt](fleet)
