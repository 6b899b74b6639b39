"""The paste-sized summary (`--format summary`): the verdict, the top causes with what they cost, and
the fix, in a few lines a user pastes into a chat or a pull request. A sweep is a few lines too: the
verdict counts and the runs that need attention first.

Nothing is decided here: the verdict, the costliest cause and the order of the findings are the
analysis's own (decision.py); this only keeps the first few and shortens them.
"""

from __future__ import annotations

from pathlib import PurePath

from trace_doctor.humanize import format_seconds
from trace_doctor.model import Analysis, Finding
from trace_doctor.report.redaction_notice import UNREDACTED, fleet_unredacted, unredacted

TOP_CAUSES = 3
FLEET_ROWS = 8
LINE_CHARS = 160


def _short(text: str, limit: int = LINE_CHARS) -> str:
    """One line of at most `limit` characters: the first sentence when it fits."""
    line = " ".join(str(text).split())
    first = line.split(". ")[0].rstrip(".")
    if len(first) < len(line) and len(first) <= limit:
        return first + "."
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _cost(finding: Finding, wall: float | None) -> str:
    if not finding.seconds_lost:
        return finding.severity
    share = f", {finding.seconds_lost / wall:.0%} of the run" if wall else ""
    return f"~{format_seconds(finding.seconds_lost)} lost{share}"


def _causes(result: Analysis) -> list[Finding]:
    """The costliest root cause first, then the other findings by time lost, then by severity (the
    analysis's order): the few a reader acts on."""
    verdict = result.verdict
    lead = [verdict.costliest] if verdict is not None and verdict.costliest is not None else []
    rest = sorted(
        (f for f in result.findings if f not in lead),
        key=lambda f: -(f.seconds_lost or 0.0),
    )
    return (lead + rest)[:TOP_CAUSES]


def render_summary(result: Analysis) -> str:
    """A few lines: the run and its verdict, its pace, the top causes with their cost, the fix."""
    meta, summary = result.run.meta, result.run_summary
    verdict = result.verdict
    name = PurePath(meta.path).name or meta.path  # the run's folder, not where it sits on this machine
    status = verdict.status if verdict is not None else "unknown"
    headline = verdict.headline if verdict is not None else ""
    lines = [f"trace-doctor · {name} · {status}: {_short(headline)}"]
    if unredacted(result):
        lines.append(UNREDACTED)
    steps = result.run.steps
    count = steps["step"].drop_nulls().n_unique() if "step" in steps.columns else 0
    pace = [f"{count:,} steps" if count else ""]
    if summary.steady_step_time_s is not None:
        pace.append(f"steady step {format_seconds(summary.steady_step_time_s)}")
    if summary.wall_time_s is not None:
        pace.append(f"wall {format_seconds(summary.wall_time_s)}")
    if any(pace):
        lines.append(" · ".join(p for p in pace if p))
    causes = _causes(result)
    if causes:
        lines.append("Top causes:")
        for i, finding in enumerate(causes, 1):
            cost = _cost(finding, summary.wall_time_s)
            lines.append(f"  {i}. {finding.code} `{finding.rule}`: {_short(finding.title, 100)} ({cost})")
        lines.append(f"Fix: {_short(causes[0].fix, 240)}")
    else:
        lines.append("No finding.")
    return "\n".join(lines) + "\n"


def render_fleet_summary(fleet) -> str:
    """A sweep in a few lines: how many runs, the verdict counts, the runs needing attention first."""
    reports = sorted(fleet.reports, key=lambda r: r.sort_key)
    counts: dict[str, int] = {}
    for report in reports:
        counts[report.status] = counts.get(report.status, 0) + 1
    tripped = sum(1 for r in reports if r.gate_tripped)
    verdicts = ", ".join(f"{n} {status}" for status, n in counts.items())
    gate = f" · {tripped} trip the gate" if tripped else ""
    lines = [f"trace-doctor · {len(reports)} runs · {verdicts}{gate}"]
    if fleet_unredacted(fleet):
        lines.append(UNREDACTED)
    for report in reports[:FLEET_ROWS]:
        lead = report.main_finding
        what = f"{lead['code']} `{lead['rule']}`: {_short(lead['title'], 90)}" if lead else _short(report.headline, 90)
        lost = f" (~{format_seconds(report.seconds_lost)} lost)" if report.seconds_lost else ""
        lines.append(f"- {report.source.label}: {report.status} — {what}{lost}")
    if len(reports) > FLEET_ROWS:
        lines.append(f"- … and {len(reports) - FLEET_ROWS} more (--format markdown for every run)")
    return "\n".join(lines) + "\n"
