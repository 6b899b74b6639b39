"""GitHub-flavoured Markdown for a CI job summary: verdict, gate, baseline comparison, findings.

Always under 1 MiB (GitHub's job-summary limit): long lists are cut with a note saying how many
items were left out and where the full list is (--format json). Everything that can come from
input goes through markdown_text (`cell`, `code`, `html_text`), so it renders as plain text.
"""

from __future__ import annotations

from trace_doctor import __version__
from trace_doctor.humanize import format_range, format_seconds, launches_line
from trace_doctor.model import Analysis, BaselineComparison, Finding
from trace_doctor.report.account_text import shows_account, structure_items, to_explain_rest
from trace_doctor.report.markdown_text import code, html_text, prose
from trace_doctor.report.redaction_notice import UNREDACTED, unredacted
from trace_doctor.triage.locate import finding_key
from trace_doctor.triage.tree import diagnosis_order

MAX_BYTES = 1024 * 1024
MAX_FINDINGS = 60
MAX_DETAILS = 25
MAX_WARNINGS = 20
MAX_MESSAGE = 600
SEVERITY_ICON = {"error": "🔴", "warning": "🟠", "info": "🔵"}


def cell(text: object, limit: int = MAX_MESSAGE, *, table: bool = True) -> str:
    """Text safe in a table cell (or, `table=False`, a line of prose): inert Markdown and HTML, code
    spans kept as code, newlines as <br>, length capped."""
    return prose(text, limit, table=table)


def gate_line(result: Analysis) -> str:
    """Whether the CI gate tripped, and because of what (decided by the analysis, shown here)."""
    gate = result.gate
    if gate.tripped:
        return f"**Gate: FAILED** — {cell(' and '.join(gate.reasons), table=False)}."
    if not gate.set:
        return "Gate: not set (`--fail-on never`)."
    return f"**Gate: passed** (trips on {cell(gate.criteria, table=False)})."


def _summary(result: Analysis) -> list[str]:
    meta, summary = result.run.meta, result.run_summary
    lines = ["| | |", "|---|---|"]
    lines.append(f"| run | {code(meta.path, 200)} |")
    lines.append(
        f"| trainer | {cell(meta.trainer)}{' (' + cell(meta.trainer_mode) + ')' if meta.trainer_mode else ''} |"
    )
    if meta.model_name:
        lines.append(f"| model | {cell(meta.model_name)} |")
    lines.append(f"| wall time | {format_seconds(summary.wall_time_s)} |")
    lines.append(f"| median step | {format_seconds(summary.step_time_p50_s)} |")
    lines.append(f"| steady step | {format_seconds(summary.steady_step_time_s)} |")
    lines.append(f"| warm-up steps | {summary.warmup_steps if summary.warmup_steps is not None else '–'} |")
    launches = launches_line(result.run.launches)
    if launches:
        lines.append(f"| launches | {cell(launches)} |")
    return lines


def _number(value: object, digits: str = ".3g") -> str:
    return format(value, digits) if isinstance(value, (int, float)) else "–"


VERDICT_ICON = {"regression": "🔴", "inconclusive": "⚪", "no regression": "🟢"}


def _baseline(block: BaselineComparison) -> list[str]:
    verdict, quality = block.verdict, block.quality
    lines = ["", "## Baseline comparison", ""]
    if quality is None:
        lines += [f"{VERDICT_ICON.get(verdict, '')} **{verdict}** — {cell(block.message, table=False)}", ""]
    else:
        step_time = block.step_time_verdict
        lines += [
            f"{VERDICT_ICON.get(verdict, '')} **{verdict}**",
            "",
            f"- step time: {VERDICT_ICON.get(step_time, '')} **{step_time}** — {cell(block.message, table=False)}",
            f"- training quality: {VERDICT_ICON.get(quality.verdict, '')} **{quality.verdict}** — "
            f"{cell(quality.message, table=False)}",
            "",
        ]
    stats = block.statistics or {}
    if stats:
        unit = stats.get("unit", "s")
        min_effect = stats.get("min_relative_effect")
        lines += [
            "| | baseline | candidate |",
            "|---|---:|---:|",
            f"| steady steps (n) | {stats.get('n_baseline', '–')} | {stats.get('n_candidate', '–')} |",
            (
                f"| median ({cell(unit)}) | {_number(stats.get('median_baseline'))} | "
                f"{_number(stats.get('median_candidate'))} |"
            ),
            "",
            f"Mann-Whitney U = {_number(stats.get('u'), '.1f')}, one-sided p = {_number(stats.get('p'))}, "
            f"relative effect = {format(stats['effect'], '+.1%') if isinstance(stats.get('effect'), float) else '–'} "
            f"(fires at p < {_number(stats.get('alpha'))} and effect ≥ "
            f"{format(min_effect, '.0%') if isinstance(min_effect, float) else '–'}).",
        ]
    breakdown = block.breakdown
    if breakdown:
        lines += [
            "",
            "Change of the median step time by phase (the parts add up to the total):",
            "",
            "| phase | baseline | candidate | change |",
            "|---|---:|---:|---:|",
        ]
        for part in breakdown:
            change = format(part["change_s"], "+.3f") + " s" if isinstance(part.get("change_s"), (int, float)) else "–"
            lines.append(
                f"| {cell(part.get('phase'))} | {format_seconds(part.get('baseline_s'))} "
                f"| {format_seconds(part.get('candidate_s'))} | {change} |"
            )
        total = sum(p["change_s"] for p in breakdown if isinstance(p.get("change_s"), (int, float)))
        lines.append(f"| **total** | | | **{total:+.3f} s** |")
    if quality and quality.metrics:
        lines += _quality_table(quality.metrics)
    fresh = block.new_fingerprints
    if fresh:
        shown = fresh[:MAX_FINDINGS]
        lines += ["", f"New since the baseline: {', '.join(code(f, 120, table=False) for f in shown)}"]
        if len(fresh) > len(shown):
            lines.append(f"… and {len(fresh) - len(shown)} more (see `--format json`).")
    unjudged = sorted({item["rule"] for item in block.not_compared})
    if unjudged:
        rules = ", ".join(code(rule, 60, table=False) for rule in unjudged)
        lines += ["", f"Not compared (the rule could not run on the baseline): {rules}"]
    return lines


def _quality_table(metrics: list[dict]) -> list[str]:
    """The final window of each training-quality metric, both runs side by side."""
    lines = [
        "",
        "Training quality in the final window (the eval measure decides over the training one when it can):",
        "",
        "| metric | key | steps | baseline | candidate | p | verdict |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for entry in metrics:
        stats, window = entry.get("statistics") or {}, entry.get("window") or {}
        steps = f"{window['first_step']}–{window['last_step']}" if window else "–"
        decisive = "" if entry.get("decisive", True) else " (context)"
        lines.append(
            f"| {cell(entry.get('family'))} ({cell(entry.get('worse'))} is worse) | "
            f"{code(str(entry.get('key_candidate') or entry.get('key_baseline')), 80)} | {steps} "
            f"| {_number(stats.get('median_baseline'), '.4g')} | {_number(stats.get('median_candidate'), '.4g')} "
            f"| {_number(stats.get('p'))} | {cell(entry.get('verdict'))}{decisive} |"
        )
    return lines


def _findings(findings: list[Finding]) -> list[str]:
    if not findings:
        return ["", "## Findings", "", "No problems found by the rules that could run."]
    lines = ["", f"## Findings ({len(findings)})", "", "| | code | rule | finding | cost |", "|---|---|---|---|---:|"]
    rule_of = {finding_key(f): f.rule for f in findings}
    ordered = diagnosis_order(findings)
    findings = [f for f, _ in ordered]
    for f, depth in ordered[:MAX_FINDINGS]:
        under = "↳ " * min(depth, 2)
        cost = (
            "in " + ", ".join(dict.fromkeys(f"`{rule_of.get(k, k)}`" for k in f.explained_by))
            if f.explained_by
            else format_seconds(f.seconds_lost)
        )
        lines.append(
            f"| {SEVERITY_ICON[f.severity]} {f.severity} | {f.code} | {under}`{f.rule}` | {cell(f.title, 200)} | "
            f"{cost} |"
        )
    if len(findings) > MAX_FINDINGS:
        lines.append(f"\n… and {len(findings) - MAX_FINDINGS} more finding(s), all listed in `--format json`.")
    lines.append("")
    for f in findings[:MAX_DETAILS]:
        steps = f" Steps: {_steps(f.steps)}." if f.steps else ""
        lines += [
            f"<details><summary><b>{f.code} {html_text(f.rule)}</b> — {html_text(f.title)}</summary>",
            "",
            f"{cell(f.message, table=False)}{steps}",
            "",
            f"**Fix:** {cell(f.fix, table=False)}",
            "",
            "</details>",
        ]
    if len(findings) > MAX_DETAILS:
        lines.append(f"\nDetails of {len(findings) - MAX_DETAILS} more finding(s) are in `--format json`.")
    return lines


def _steps(steps: list[int]) -> str:
    shown = ", ".join(str(s) for s in steps[:12])
    return shown + (f" … ({len(steps)} in all)" if len(steps) > 12 else "")


def _rules(result: Analysis) -> list[str]:
    counts: dict[str, int] = {}
    for outcome in result.outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    order = ("fired", "passed", "not_applicable", "error")
    parts = [f"{counts[s]} {s.replace('_', ' ')}" for s in order if counts.get(s)]
    lines = ["", f"Rules: {', '.join(parts) or 'none ran'}."]
    broken = [o for o in result.outcomes if o.status == "error"]
    for outcome in broken[:MAX_WARNINGS]:
        lines.append(f"- rule `{outcome.rule}` failed: {cell(outcome.reason, 300, table=False)}")
    return lines


def _warnings(result: Analysis) -> list[str]:
    warnings = result.run.warnings
    if not warnings:
        return []
    lines = ["", f"<details><summary>{len(warnings)} ingest warning(s)</summary>", ""]
    for w in warnings[:MAX_WARNINGS]:
        where = f"{w.path}:{w.line}" if w.line else w.path
        lines.append(f"- {code(where, 200, table=False)} {cell(w.problem, 300, table=False)}")
    if len(warnings) > MAX_WARNINGS:
        lines.append(f"- … and {len(warnings) - MAX_WARNINGS} more (see `--format json`)")
    lines += ["", "</details>"]
    return lines


def _account(result: Analysis) -> list[str]:
    """Where the wall time went (the triage's account), and the run time with every fix."""
    account = result.run_summary.account
    if not shows_account(account):
        return []
    lines = ["", "## Where the time went", "", "| | seconds | share |", "|---|---:|---:|"]
    wall = account.wall_time_s

    def row(label: str, seconds: float) -> None:
        lines.append(f"| {label} | {format_seconds(seconds)} | {seconds / wall:.0%} |")

    if account.useful_service_s is not None:
        row("service work", account.useful_service_s)
    for label, seconds, note in structure_items(account):
        row(f"{cell(label)} ({cell(note)})", seconds)
    for cause in account.causes:
        kind = "" if cause.kind == "loss" else f" ({cell(cause.kind)}, not a problem to fix)"
        row(f"`{cause.rule}` — {cell(cause.title, 120)}{kind}", cause.seconds)
    rest = to_explain_rest(account)
    row("unexplained" + (f" ({cell(rest)})" if rest else ""), account.unexplained_s)
    low, high = account.counterfactual.range_s
    fixed = format_range(low, high, wall)
    lines += ["", f"With every fix: **≈{fixed}** instead of {format_seconds(wall)}."]
    return lines


def render_markdown(result: Analysis) -> str:
    lines = ["# trace-doctor", "", gate_line(result), ""]
    if unredacted(result):
        lines += [f"> **{UNREDACTED}**", ""]
    if result.verdict is not None:
        lines += [f"**Diagnosis:** {cell(result.verdict.headline, 600, table=False)}", ""]
    lines += _summary(result)
    lines += _account(result)
    if result.baseline:
        lines += _baseline(result.baseline)
    lines += _findings(result.findings)
    lines += _rules(result)
    lines += _warnings(result)
    lines += ["", f"<sub>trace-doctor {__version__}</sub>", ""]
    text = "\n".join(lines)
    return _fit(text)


def _fit(text: str) -> str:
    """Cut at a line boundary so the UTF-8 text stays under MAX_BYTES, with a note."""
    data = text.encode("utf-8")
    if len(data) <= MAX_BYTES:
        return text
    note = "\n\n**Summary truncated** at 1 MiB (GitHub's job-summary limit); the full report is in `--format json`.\n"
    budget = MAX_BYTES - len(note.encode("utf-8"))
    cut = data[:budget].decode("utf-8", errors="ignore")
    cut = cut[: cut.rfind("\n")] if "\n" in cut else cut
    return cut + note
