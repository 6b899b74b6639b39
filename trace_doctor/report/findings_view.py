"""How the HTML report presents the diagnosis: findings in reading order, numbered and coloured, and
the time account as bar segments and table rows.

Everything here is read from the Analysis (the triage's `explained_by` and `run_summary.account`);
it only decides how to show it: which number and colour a finding gets, and how wide a segment is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trace_doctor.humanize import format_seconds
from trace_doctor.model import Finding, TimeAccount
from trace_doctor.report.timeline_figure import finding_colour, ink_on
from trace_doctor.triage.locate import finding_key
from trace_doctor.triage.tree import diagnosis_order

# Account segments that are not a finding: neither may look like a finding colour or a severity.
SERVICE_WORK_COLOUR = "#8c959f"
UNEXPLAINED_COLOUR = "#eaeef2"
UNPAINTED_COLOUR = "#d0d7de"
KIND_NOTE = {"benign": "expected, not a problem to fix", "service": "on the service side"}


@dataclass(frozen=True)
class Reading:
    """The findings as the report reads them: each cause followed by the symptoms it explains."""

    order: list[tuple[int, int]]  # (index in Analysis.findings, depth under its cause)
    number: dict[int, int]  # index -> the number its card shows (1 = first read)
    index_of_key: dict[str, int]  # a finding's key (what explained_by holds) -> index


def reading(findings: list[Finding]) -> Reading:
    """Number the findings in the diagnosis' reading order (causes first, each with its symptoms)."""
    position = {id(f): i for i, f in enumerate(findings)}
    order = [(position[id(f)], depth) for f, depth in diagnosis_order(findings)]
    index_of_key: dict[str, int] = {}
    for i, f in enumerate(findings):
        index_of_key.setdefault(finding_key(f), i)
    return Reading(order, {index: n for n, (index, _) in enumerate(order, start=1)}, index_of_key)


def accounted(account: TimeAccount | None, read: Reading) -> set[int]:
    """The findings that own a segment of the time account."""
    if not account:
        return set()
    return {read.index_of_key[c.finding] for c in account.causes if c.finding in read.index_of_key}


def colours(read: Reading, shown: set[int]) -> dict[int, dict[str, str]]:
    """Colour (and the ink for its number) of each finding drawn in colour somewhere (a timeline lane,
    an account segment), handed out in reading order so neighbours differ."""
    chosen = [index for index, _ in read.order if index in shown]
    return {index: {"colour": finding_colour(k), "ink": ink_on(finding_colour(k))} for k, index in enumerate(chosen)}


def causes_of(finding: Finding, read: Reading, findings: list[Finding]) -> list[dict[str, Any]]:
    """The findings that explain this one, as links: number, index, code and rule."""
    out = []
    for key in dict.fromkeys(finding.explained_by):
        index = read.index_of_key.get(key)
        if index is None:
            out.append({"number": None, "index": None, "code": "", "rule": key})
            continue
        cause = findings[index]
        out.append({"number": read.number[index], "index": index, "code": cause.code, "rule": cause.rule})
    return out


def _share(seconds: float, wall: float) -> str:
    return f"{seconds / wall:.0%}" if wall > 0 else ""


def account_view(
    account: TimeAccount | None, read: Reading, painted: dict[int, dict[str, str]]
) -> dict[str, Any] | None:
    """The account as the page draws it: one row per part of the wall time (service work, each cause,
    unexplained), each with its bar width, and the counterfactual run time with its range."""
    if not account or not account.causes:
        return None
    wall = float(account.wall_time_s)
    rows: list[dict[str, Any]] = []

    def row(label: str, seconds: float | None, colour: str, **extra: Any) -> None:
        if seconds is None:
            return
        rows.append(
            {
                "label": label,
                "seconds": format_seconds(seconds),
                "share": _share(seconds, wall),
                "width": round(100 * seconds / wall, 3) if wall > 0 else 0.0,
                "colour": colour,
                "ink": ink_on(colour),
                "title": "",
                "index": None,
                "number": None,
                "note": "",
                "kind": "",
                **extra,
            }
        )

    row("service work", account.useful_service_s, SERVICE_WORK_COLOUR, note=account.useful_basis)
    for cause in account.causes:
        index = read.index_of_key.get(cause.finding)
        paint = painted.get(index, {}) if index is not None else {}
        row(
            cause.rule,
            cause.seconds,
            paint.get("colour", UNPAINTED_COLOUR),
            title=cause.title,
            index=index,
            number=read.number.get(index) if index is not None else None,
            note=KIND_NOTE.get(cause.kind, ""),
            kind=cause.kind,
        )
    row("unexplained", account.unexplained_s, UNEXPLAINED_COLOUR, note="no finding accounts for it")
    counterfactual = account.counterfactual
    low, high = counterfactual.range_s
    return {
        "wall": format_seconds(wall),
        "wall_basis": account.wall_basis,
        "rows": rows,
        "lost": format_seconds(account.lost_s),
        "fixed_low": format_seconds(low),
        "fixed_high": format_seconds(high),
        "fixed_width": round(100 * low / wall, 3) if wall > 0 else 0.0,
        "range_width": round(100 * (high - low) / wall, 3) if wall > 0 else 0.0,
        "speedup": f"{counterfactual.speedup:.1f}" if counterfactual.speedup else None,
        "note": counterfactual.note,
    }
