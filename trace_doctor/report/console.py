"""The terminal verdict: what was read, what is wrong, what it cost, what to do."""

from __future__ import annotations

import io
import sys
import textwrap

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trace_doctor.humanize import format_seconds, launches_line
from trace_doctor.model import Analysis, RunTables

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
MAX_WARNINGS_SHOWN = 8
INDENT = 8
WIDTH = 110


def _console(buffer: io.StringIO, width: int = WIDTH) -> Console:
    color = sys.stdout.isatty()
    return Console(file=buffer, width=width, force_terminal=color, no_color=not color, highlight=False, soft_wrap=False)


def _block(text: str, *, label: str = "", style: str = "") -> str:
    """Indented, wrapped paragraph (rich markup-escaped), with an optional styled label."""
    wrapped = escape(
        textwrap.fill(text, width=WIDTH - INDENT, initial_indent=" " * INDENT, subsequent_indent=" " * INDENT)
    )
    if label and style:
        wrapped = wrapped.replace(label, f"[{style}]{label}[/]", 1)
    return wrapped


def ingest_account(run: RunTables) -> str:
    """Short account of what was read and skipped, per input file."""
    lines = [f"Ingested {run.records_read:,} records from {len(run.inputs)} input(s); skipped {run.records_skipped:,}."]
    for info in run.inputs:
        skipped = f", {info.skipped:,} skipped" if info.skipped else ""
        noun = "record" if info.records == 1 else "records"
        lines.append(f"  {info.kind:<11} {info.path}  ({info.records:,} {noun}{skipped})")
    if run.passed_over:
        lines.append(f"  passed over {len(run.passed_over)} file(s):")
        for item in run.passed_over[:MAX_WARNINGS_SHOWN]:
            lines.append(f"    {item.path}: {item.reason}")
        if len(run.passed_over) > MAX_WARNINGS_SHOWN:
            lines.append(f"    … and {len(run.passed_over) - MAX_WARNINGS_SHOWN} more")
    if run.warnings:
        lines.append(f"  {len(run.warnings):,} ingest warning(s):")
        for w in run.warnings[:MAX_WARNINGS_SHOWN]:
            where = f"{w.path}:{w.line}" if w.line else w.path
            lines.append(f"    {where}: {w.problem}")
        if len(run.warnings) > MAX_WARNINGS_SHOWN:
            lines.append(f"    … and {len(run.warnings) - MAX_WARNINGS_SHOWN:,} more (all listed in --format json)")
    return "\n".join(lines)


def render_text(result: Analysis) -> str:
    buffer = io.StringIO()
    out = _console(buffer)
    run = result.run
    meta = run.meta
    summary = result.summary
    out.print(f"[bold]trace-doctor[/] {escape(meta.path)}")
    details = [f"trainer {meta.trainer}" + (f" ({meta.trainer_mode})" if meta.trainer_mode else "")]
    if meta.model_name:
        details.append(f"model {escape(meta.model_name)}")
    if meta.renderer_name:
        details.append(f"renderer {escape(meta.renderer_name)}")
    out.print("  " + " · ".join(details))
    if summary.get("wall_time_s") is not None:
        out.print(
            f"  wall {format_seconds(summary.get('wall_time_s'))} · median step "
            f"{format_seconds(summary.get('step_time_p50_s'))}"
            f" · steady step {format_seconds(summary.get('steady_step_time_s'))} · warm-up steps "
            f"{summary.get('warmup_steps') if summary.get('warmup_steps') is not None else '-'}"
        )
    out.print()
    launches = launches_line(run.launches)
    if launches:
        out.print(f"  [bold]{escape(launches)}[/]")
    out.print(escape(ingest_account(run)))
    out.print()
    out.print(f"[bold]Verdict:[/] {escape(result.verdict.headline)}")
    for finding in result.findings:
        out.print()
        style = SEVERITY_STYLE[finding.severity]
        lost = f" · lost {format_seconds(finding.seconds_lost)}" if finding.seconds_lost else ""
        share = f" ({finding.fraction_of_wall:.0%} of wall)" if finding.fraction_of_wall else ""
        confidence = f" · confidence {finding.confidence}" if finding.confidence else ""
        out.print(
            f"[{style}]{finding.severity.upper():<7}[/] [bold]{finding.code} {finding.rule}[/] — "
            f"{escape(finding.title)}{lost}{share}{confidence}"
        )
        out.print(_block(finding.message))
        if finding.steps:
            shown = ", ".join(str(s) for s in finding.steps[:12])
            more = f" … (+{len(finding.steps) - 12})" if len(finding.steps) > 12 else ""
            out.print(_block(f"steps: {shown}{more}", label="steps:", style="dim"))
        out.print(_block(f"fix: {finding.fix}", label="fix:", style="green"))
    quiet = [o for o in result.outcomes if o.status in ("not_applicable", "error")]
    if quiet:
        out.print()
        table = Table(
            title="Rules that could not run",
            title_justify="left",
            show_header=True,
            header_style="bold",
            box=None,
            pad_edge=False,
        )
        table.add_column("rule")
        table.add_column("status")
        table.add_column("why")
        for outcome in quiet:
            table.add_row(outcome.rule, outcome.status.replace("_", " "), escape(outcome.reason))
        out.print(table)
    if result.baseline:
        out.print()
        verdict_text = result.baseline.get("verdict", "")
        out.print(f"[bold]Baseline:[/] {escape(str(verdict_text))} — {escape(str(result.baseline.get('message', '')))}")
    gate = result.gate
    if gate.set:
        out.print()
        if gate.tripped:
            out.print(f"[bold red]Gate: tripped[/] (--fail-on {gate.fail_on}) — {escape('; '.join(gate.reasons))}")
        else:
            out.print(f"Gate: passed (--fail-on {gate.fail_on})")
    return buffer.getvalue()
