"""The findings as the diagnosis reads: each cause followed by the symptoms it explains."""

from __future__ import annotations

from trace_doctor.model import SEVERITY_RANK, Finding
from trace_doctor.triage.locate import finding_key


def diagnosis_order(findings: list[Finding]) -> list[tuple[Finding, int]]:
    """(finding, depth) in reading order: roots by severity, then by their rule's total cost, each followed
    by the findings it explains, depth first. A symptom with several causes sits under the first
    (triage order); one whose causes are all missing from the list is shown as a root."""
    keys = {finding_key(f) for f in findings}
    children: dict[str, list[Finding]] = {}
    roots: list[Finding] = []
    for f in findings:
        parent = next((k for k in f.explained_by if k in keys and k != finding_key(f)), None)
        if parent is None:
            roots.append(f)
        else:
            children.setdefault(parent, []).append(f)
    out: list[tuple[Finding, int]] = []
    seen: set[int] = set()

    def visit(f: Finding, depth: int) -> None:
        if id(f) in seen:
            return
        seen.add(id(f))
        out.append((f, depth))
        for child in children.get(finding_key(f), []):
            visit(child, depth + 1)

    # A cause's findings read together, causes ranked by what each costs in all (its facets are one fix).
    totals: dict[str, float] = {}
    for f in roots:
        totals[f.rule] = totals.get(f.rule, 0.0) + (f.seconds_lost or 0.0)
    position = {id(f): i for i, f in enumerate(findings)}
    roots.sort(key=lambda f: (-SEVERITY_RANK[f.severity], -totals[f.rule], f.rule, position[id(f)]))
    for f in roots:
        visit(f, 0)
    # A cycle of explanations (never built by the triage table) would leave findings unvisited.
    for f in findings:
        visit(f, 0)
    return out
