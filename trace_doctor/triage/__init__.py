"""Triage: from a list of findings to a diagnosis.

Runs after the rules (and the baseline comparison), before the verdict: links each symptom to the
findings that explain it (links), gives each lost second to one cause (account), and hands the
renderers findings whose seconds add up to at most the run's wall time. It decides nothing a rule
measured; it only relates what the rules found.
"""

from __future__ import annotations

from trace_doctor.triage.account import attribute, time_account
from trace_doctor.triage.links import link_findings

__all__ = ["attribute", "link_findings", "time_account", "triage"]


def triage(findings, *, wall_s, spans, step_times, trainer, clock_cycle):
    """(findings linked and attributed, the time account) — see links and account."""
    linked = link_findings(findings, spans=spans, step_times=step_times)
    attributed, floor = attribute(
        linked, wall_s=wall_s, spans=spans, step_times=step_times, trainer=trainer, clock_cycle=clock_cycle
    )
    account = time_account(
        attributed, wall_s=wall_s, spans=spans, step_times=step_times, clock_cycle=clock_cycle, floor_s=floor
    )
    return attributed, account
