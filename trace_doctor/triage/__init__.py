"""Triage: from a list of findings to a diagnosis.

Runs after the rules (and the baseline comparison), before the verdict: links each symptom to the
findings that explain it (links), gives each lost second to one cause (account), and hands the
renderers findings whose seconds add up to at most the run's wall time. It decides nothing a rule
measured; it only relates what the rules found.
"""

from __future__ import annotations

from trace_doctor.triage.account import attribute, service_time_s, time_account
from trace_doctor.triage.links import link_findings

__all__ = ["attribute", "link_findings", "time_account", "triage"]


def triage(findings, *, wall, step_extents, wait_spans, step_times, trainer, clock_cycle, structure=None):
    """(findings linked and attributed, the time account) — see links and account. `wall` is
    (seconds, basis) as derive.wall.wall_time gives it; `step_extents` the trace's spans or their extent per
    step (locate.step_windows), `wait_spans` its spans or only its result waits (account.service_time_s);
    `structure` the steps' time by the loop's structure (derive.loop_phases), which explains the time no
    finding holds."""
    wall_s, wall_basis = wall
    linked = link_findings(findings, spans=step_extents, step_times=step_times)
    # Both steps weigh claims against the service's waits: read them from the spans once.
    service = service_time_s(wait_spans, step_times) if wall_s and wall_s > 0 else None
    attributed, floor = attribute(
        linked,
        wall_s=wall_s,
        spans=wait_spans,
        step_times=step_times,
        trainer=trainer,
        clock_cycle=clock_cycle,
        service=service,
    )
    account = time_account(
        attributed,
        wall_s=wall_s,
        wall_basis=wall_basis,
        spans=wait_spans,
        step_times=step_times,
        clock_cycle=clock_cycle,
        floor_s=floor,
        service=service,
        structure=structure,
    )
    return attributed, account
