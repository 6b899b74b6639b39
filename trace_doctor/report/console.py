"""The terminal verdict: what was read, what is wrong, what it cost, what to do."""

from __future__ import annotations

import io
import os
import shutil
import sys
import textwrap

from rich.console import Console
from rich.markup import escape as markup_escape
from rich.table import Table

from trace_doctor.humanize import format_range, format_seconds, launches_line
from trace_doctor.model import Analysis, RunTables, TimeAccount
from trace_doctor.report.account_text import shows_account, structure_items, to_explain_rest
from trace_doctor.report.redaction_notice import UNREDACTED, unredacted
from trace_doctor.report.terminal_text import inert
from trace_doctor.triage.locate import finding_key
from trace_doctor.triage.tree import diagnosis_order

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
MAX_WARNINGS_SHOWN = 8
INDENT = 8
WIDTH = 110  # for pipes and files, and when the terminal does not say
MIN_WIDTH, MAX_WIDTH = 60, 200


def color_enabled() -> bool:
    """Colour when stdout is a terminal; NO_COLOR (no-color.org) turns it off, FORCE_COLOR on (pipes, CI logs)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR", "0") not in ("", "0"):
        return True
    return sys.stdout.isatty()


def terminal_width() -> int:
    """The terminal's width (or $COLUMNS), else WIDTH for pipes and files; kept readable at the extremes."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        width = int(columns)
    elif sys.stdout.isatty():
        width = shutil.get_terminal_size((WIDTH, 24)).columns
    else:
        width = WIDTH
    return max(MIN_WIDTH, min(width, MAX_WIDTH))


def _console(buffer: io.StringIO, width: int | None = None) -> Console:
    color = color_enabled()
    return Console(
        file=buffer,
        width=width or terminal_width(),
        force_terminal=color,
        no_color=not color,
        # Forced colour into a pipe or CI log: plain 16-colour codes, which every log viewer renders.
        color_system=("auto" if sys.stdout.isatty() else "standard") if color else None,
        highlight=False,
        soft_wrap=False,
    )


def escape(text: str) -> str:
    """Input text for rich: its markup characters escaped, what a terminal would act on shown inert."""
    return markup_escape(inert(text))


def _block(text: str, *, width: int, label: str = "", style: str = "") -> str:
    """Indented, wrapped paragraph (rich markup-escaped), with an optional styled label.

    Lines break between words only: a path or a `file:line` is never split, so it can be copied.
    """
    wrapped = markup_escape(
        textwrap.fill(
            inert(text),
            width=width - INDENT,
            initial_indent=" " * INDENT,
            subsequent_indent=" " * INDENT,
            break_long_words=False,
            break_on_hyphens=False,
        )
    )
    if label and style:
        wrapped = wrapped.replace(label, f"[{style}]{label}[/]", 1)
    return wrapped


# A run writes one rollout-summary file per iteration: past this many they are one line (JSON lists all).
MAX_ROLLOUT_FILES_LISTED = 4


def _rollout_files_line(rollouts: list) -> str:
    """One line for a run's many rollout-summary files (one per iteration): first, last, totals."""
    records = sum(i.records for i in rollouts)
    skipped = sum(i.skipped for i in rollouts)
    more = f", {skipped:,} skipped" if skipped else ""
    return (
        f"  {'rollouts':<11} {len(rollouts):,} files, {rollouts[0].path} … {rollouts[-1].path}  "
        f"({records:,} records{more})"
    )


def ingest_account(run: RunTables) -> str:
    """Short account of what was read and skipped, per input file."""
    lines = [f"Ingested {run.records_read:,} records from {len(run.inputs)} input(s); skipped {run.records_skipped:,}."]
    rollouts = [info for info in run.inputs if info.kind == "rollouts"]
    folded = len(rollouts) > MAX_ROLLOUT_FILES_LISTED
    for info in run.inputs:
        if folded and info.kind == "rollouts":
            if info is rollouts[0]:
                lines.append(_rollout_files_line(rollouts))
            continue
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


def _indented(block: str, indent: str) -> str:
    return "\n".join(indent + line if line else line for line in block.split("\n")) if indent else block


def account_line(account: TimeAccount) -> str:
    """Where the wall time went, in one sentence (the triage's account)."""
    wall = account.wall_time_s
    parts = []
    if account.useful_service_s is not None:
        parts.append(f"service work {format_seconds(account.useful_service_s)}")
    parts += [f"{label} {format_seconds(seconds)} ({note})" for label, seconds, note in structure_items(account)]
    by_rule: dict[str, float] = {}
    for row in account.causes:
        by_rule[row.rule] = by_rule.get(row.rule, 0.0) + row.seconds
    parts += [f"{rule} {format_seconds(seconds)}" for rule, seconds in sorted(by_rule.items(), key=lambda kv: -kv[1])]
    if account.unexplained_s >= 0.005 * wall:
        rest = to_explain_rest(account)
        parts.append(f"unexplained {format_seconds(account.unexplained_s)}" + (f" ({rest})" if rest else ""))
    low, high = account.counterfactual.range_s
    fixed = format_range(low, high, wall)
    return f"{format_seconds(wall)} of wall = " + " + ".join(parts) + f"; with every fix ≈{fixed}."


def render_text(result: Analysis, *, show_skipped: bool = False) -> str:
    """The terminal report; rules that had no input are one line unless `show_skipped` lists why."""
    buffer = io.StringIO()
    out = _console(buffer)
    width = out.width
    run = result.run
    meta = run.meta
    summary = result.run_summary
    out.print(f"[bold]trace-doctor[/] {escape(meta.path)}")
    if unredacted(result):
        out.print(f"  [bold red]{escape(UNREDACTED)}[/]")
    details = [f"trainer {escape(meta.trainer)}" + (f" ({escape(meta.trainer_mode)})" if meta.trainer_mode else "")]
    if meta.model_name:
        details.append(f"model {escape(meta.model_name)}")
    if meta.renderer_name:
        details.append(f"renderer {escape(meta.renderer_name)}")
    out.print("  " + " · ".join(details))
    if summary.wall_time_s is not None:
        out.print(
            f"  wall {format_seconds(summary.wall_time_s)} · median step "
            f"{format_seconds(summary.step_time_p50_s)}"
            f" · steady step {format_seconds(summary.steady_step_time_s)} · warm-up steps "
            f"{summary.warmup_steps if summary.warmup_steps is not None else '-'}"
        )
    out.print()
    launches = launches_line(run.launches)
    if launches:
        out.print(f"  [bold]{escape(launches)}[/]")
    out.print(escape(ingest_account(run)), soft_wrap=True)  # paths stay whole, never folded
    out.print()
    out.print(f"[bold]Verdict:[/] {escape(result.verdict.headline)}")
    account = summary.account
    if shows_account(account):
        out.print(f"[bold]Time:[/] {escape(account_line(account))}")
    rule_of = {finding_key(f): f.rule for f in result.findings}
    for finding, depth in diagnosis_order(result.findings):
        out.print()
        indent = "    " * min(depth, 2)
        style = SEVERITY_STYLE[finding.severity]
        lost = f" · lost {format_seconds(finding.seconds_lost)}" if finding.seconds_lost else ""
        share = f" ({finding.fraction_of_wall:.0%} of wall)" if finding.fraction_of_wall else ""
        confidence = f" · confidence {finding.confidence}" if finding.confidence else ""
        arrow = "↳ " if depth else ""
        out.print(
            f"{indent}{arrow}[{style}]{finding.severity.upper():<7}[/] [bold]{finding.code} {finding.rule}[/] — "
            f"{escape(finding.title)}{lost}{share}{confidence}"
        )
        body = width - len(indent)
        if finding.explained_by:
            out.print(
                _indented(
                    _block(
                        "explained by: "
                        + ", ".join(dict.fromkeys(rule_of.get(k, k) for k in finding.explained_by))
                        + (" (its time is counted there)" if finding.evidence.get("own_estimate_s") else ""),
                        width=body,
                        label="explained by:",
                        style="cyan",
                    ),
                    indent,
                )
            )
        out.print(_indented(_block(finding.message, width=body), indent))
        if finding.steps:
            shown = ", ".join(str(s) for s in finding.steps[:12])
            more = f" … (+{len(finding.steps) - 12})" if len(finding.steps) > 12 else ""
            out.print(_indented(_block(f"steps: {shown}{more}", width=body, label="steps:", style="dim"), indent))
        out.print(_indented(_block(f"fix: {finding.fix}", width=body, label="fix:", style="green"), indent))
    errors = [o for o in result.outcomes if o.status == "error"]
    skipped = [o for o in result.outcomes if o.status == "not_applicable"]
    quiet = errors + skipped if show_skipped else errors
    if skipped and not show_skipped:
        out.print()
        names = ", ".join(o.rule for o in skipped)
        out.print(
            f"[dim]Not applicable ({len(skipped)}, no input for them): {escape(names)} — "
            "--show-skipped says what each needs.[/]"
        )
    if quiet:
        out.print()
        table = Table(
            title="Rules that could not run" if show_skipped else "Rules that failed",
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
        block = result.baseline
        quality = block.quality
        if quality is None:
            out.print(f"[bold]Baseline:[/] {escape(block.verdict)} — {escape(block.message)}")
        else:
            # Two axes: how fast each step is, and how well the run trained.
            out.print(f"[bold]Baseline:[/] {escape(block.verdict)}")
            out.print(f"  step time: {escape(block.step_time_verdict)} — {escape(block.message)}")
            out.print(f"  training quality: {escape(quality.verdict)} — {escape(quality.message)}")
    gate = result.gate
    if gate.set:
        out.print()
        if gate.tripped:
            # The reasons say what tripped it (a finding level, a regression), not the option's value.
            out.print(f"[bold red]Gate: tripped[/] — {escape('; '.join(gate.reasons))}")
        else:
            out.print(f"Gate: passed (trips on {escape(gate.criteria)})")
    return buffer.getvalue()
