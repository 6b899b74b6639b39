"""The one-line verdict every renderer leads with."""

from __future__ import annotations

from trace_doctor.model import Analysis


def format_seconds(value: float | None) -> str:
    """Seconds for people: ms below 0.1 s, minutes above 2 min, hours above 1 h."""
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


def verdict(result: Analysis) -> str:
    """Counts by severity, the worst finding, and the costliest one.

    Seconds lost are never summed across findings: several rules explain the same idle time
    (a GIL stall is also a heartbeat stall and a slow step), so a sum would overstate the cost.
    """
    findings = result.findings
    if not findings:
        ran = [o for o in result.outcomes if o.status == "passed"]
        total = len(result.outcomes)
        if len(ran) * 2 < total:
            return f"No problems found, but little could be checked: only {len(ran)} of {total} rules had the input they need."
        return f"No problems found: {len(ran)} of {total} rules checked this run and passed."
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("error", "warning", "info")}
    parts = [f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
    text = f"{', '.join(parts)}. Worst: {findings[0].title}."
    costly = [f for f in findings if f.seconds_lost and f.severity != "info"]
    if costly:
        top = max(costly, key=lambda f: (f.seconds_lost, f.code))
        share = f", {top.fraction_of_wall:.0%} of wall time" if top.fraction_of_wall else ""
        text += f" Costliest: {top.title} (≈{format_seconds(top.seconds_lost)}{share})."
    return text
