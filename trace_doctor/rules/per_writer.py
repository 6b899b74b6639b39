"""One rule judged once per process, when several wrote the run's metrics at the same time.

Each writer's context sees only its own rows (derive/writers), so a series never mixes two writers
and a finding true of one writer is not blamed on the run. What every writer found alike (a log
line, a dependency, anything read from the shared trace) is kept once, as it reads for the run; what
only some writers found names its writer in the title, the message, the evidence and the fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from trace_doctor.derive.writers import Writer
from trace_doctor.model import Finding, RuleOutcome
from trace_doctor.rules.base import Rule
from trace_doctor.rules.context import RuleContext

# Outcomes of the writers combined: the first status any writer reached, in this order.
STATUS_ORDER = ("fired", "error", "passed", "not_applicable")


def _same(finding: Finding) -> bytes:
    return orjson.dumps(finding.to_dict(), option=orjson.OPT_SORT_KEYS, default=str)


def name_writer(finding: Finding, writer: Writer) -> Finding:
    """The finding said of one writer: its title, message, evidence and fingerprint name it."""
    finding.title = f"{finding.title} ({writer.label})"
    finding.message = f"{writer.describe()[:1].upper()}{writer.describe()[1:]}: {finding.message}"
    finding.evidence = {**finding.evidence, "writer": writer.to_dict()}
    finding.fingerprint = f"{finding.fingerprint or finding.rule}:{writer.key}"
    return finding


def _combined(rule: Rule, outcomes: list[tuple[Writer, RuleOutcome]], fired: int) -> RuleOutcome:
    if fired:
        return RuleOutcome(rule.slug, "fired", f"{fired} finding(s)")
    status = min((o.status for _, o in outcomes), key=STATUS_ORDER.index)
    reasons = {o.reason for _, o in outcomes}
    if len(reasons) == 1:
        return RuleOutcome(rule.slug, status, reasons.pop())
    return RuleOutcome(rule.slug, status, "; ".join(f"{w.label}: {o.reason}" for w, o in outcomes))


def run_per_writer(
    rule: Rule,
    writers: list[tuple[Writer, RuleContext]],
    run_one: Callable[[Rule, RuleContext], tuple[list[Finding], RuleOutcome]],
) -> tuple[list[Finding], RuleOutcome]:
    """`rule` run on each writer's context; findings every writer made alike kept once, the others
    named after their writer."""
    results = [(writer, *run_one(rule, ctx)) for writer, ctx in writers]
    per_writer = [{_same(f): f for f in found} for _, found, _ in results]
    alike = set.intersection(*(set(found) for found in per_writer))
    findings = [f for key, f in per_writer[0].items() if key in alike]
    for (writer, _, _), found in zip(results, per_writer, strict=True):
        findings += [name_writer(f, writer) for key, f in found.items() if key not in alike]
    return findings, _combined(rule, [(w, o) for w, _, o in results], len(findings))
