"""What a rule is: metadata (slug, code, docs, declared inputs, thresholds) plus one pure check function.

A rule is declared once, in its module's `Rule(...)`: its policy class, its triage stage and the
training-health panels its findings are shaded on. Every table keyed by slug (the policy classes,
the triage stages, the panels) is read from the registry (rules/catalogue.py), and `register`
refuses a declaration that names an unknown stage or panel.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from trace_doctor.derive.training_health import PANEL_IDS
from trace_doctor.knowledge.triage import STAGE_NAMES
from trace_doctor.policy import describe
from trace_doctor.rules.requires import Requires

if TYPE_CHECKING:
    from trace_doctor.model import Finding
    from trace_doctor.rules.context import RuleContext


class NotApplicable(Exception):
    """Raised by a check when the run lacks what it needs beyond its declared inputs; the message says what."""


@dataclass(frozen=True)
class RuleDocs:
    what: str  # what it detects
    why: str  # why it matters
    evidence: str  # which data it reads and how to check it
    fix: str  # what to do


# A rule's policy dataclass: `check` sees `ctx.thresholds` as this type.
P = TypeVar("P")


@dataclass(frozen=True)
class Rule(Generic[P]):
    slug: str
    code: str
    title: str
    severity: str  # default severity of its findings
    needs: str  # the inputs it reads, for people
    docs: RuleDocs
    check: Callable[[RuleContext[P]], list[Finding]]
    # Its thresholds: a frozen dataclass of `threshold(...)` fields (trace_doctor/policy/).
    policy: type[P]
    # Its stage in the debug guide's triage order (knowledge/triage.STAGE_NAMES): which of two findings
    # claiming the same second is the earlier cause.
    stage: str
    # Checked by the engine before `check` runs: a missing one makes the rule not applicable.
    requires: tuple[Requires, ...] = ()
    # Shared knobs (SharedPolicy fields) the rule's judgement depends on, for its docs.
    shared: tuple[str, ...] = ()
    # Training-health panels (derive/training_health.PANEL_IDS) the report shades its findings on when
    # their evidence names no drawn metric.
    panels: tuple[str, ...] = ()
    baseline_only: bool = False
    tags: tuple[str, ...] = field(default_factory=tuple)

    def describe(self, thresholds: P | None = None, shared: Any | None = None) -> str:
        """The rule's docs, inputs and thresholds (`thresholds`: its policy instance, defaults if None)."""

        def para(text: str, indent: str = "  ") -> str:
            return textwrap.fill(text, width=96, initial_indent=indent, subsequent_indent=indent)

        lines = [
            f"{self.code} {self.slug} — {self.title}",
            f"default severity: {self.severity}",
            f"needs: {self.needs}",
        ]
        if self.requires:
            lines += ["", "Inputs checked before it runs (else not applicable)"]
            lines += [para(f"- {r.describe()}", "  ") for r in self.requires]
        lines += [
            "",
            "What it detects",
            para(self.docs.what),
            "",
            "Why it matters",
            para(self.docs.why),
            "",
            "Evidence it uses",
            para(self.docs.evidence),
            "",
            "How to fix",
            para(self.docs.fix),
        ]
        infos = describe(thresholds if thresholds is not None else self.policy())
        if infos:
            lines += ["", f"Thresholds ([tool.trace-doctor.rules.{self.slug}])"]
            lines += _threshold_lines(infos)
        if self.shared:
            from trace_doctor.policy import SharedPolicy

            wanted = [i for i in describe(shared if shared is not None else SharedPolicy()) if i.name in self.shared]
            lines += ["", "Shared knobs it depends on ([tool.trace-doctor.shared])"]
            lines += _threshold_lines(wanted)
        return "\n".join(lines)


def _threshold_lines(infos: list) -> list[str]:
    lines = []
    for info in infos:
        changed = "" if info.value == info.default else f"  (default {info.default!r})"
        limits = f"; {info.bounds.describe()}" if info.bounds.describe() else ""
        lines.append(f"  {info.name} = {info.value!r}{changed}  [{info.unit}{limits}]")
        lines.append(textwrap.fill(info.why, width=96, initial_indent="      ", subsequent_indent="      "))
    return lines


REGISTRY: dict[str, Rule[Any]] = {}


def declaration_errors(rule: Rule[Any]) -> list[str]:
    """What is wrong with a rule's declaration: a policy that is not a dataclass of thresholds, an
    unknown triage stage, an unknown training-health panel (empty when it is sound)."""
    errors = []
    if not (isinstance(rule.policy, type) and dataclasses.is_dataclass(rule.policy)):
        errors.append(f"rule {rule.slug}: policy {rule.policy!r} is not a policy dataclass (trace_doctor/policy/)")
    elif any("unit" not in f.metadata for f in dataclasses.fields(rule.policy)):
        errors.append(f"rule {rule.slug}: every field of {rule.policy.__name__} is declared with threshold(...)")
    if rule.stage not in STAGE_NAMES:
        errors.append(f"rule {rule.slug}: unknown triage stage {rule.stage!r} (knowledge/triage.STAGE_NAMES)")
    unknown = [p for p in rule.panels if p not in PANEL_IDS]
    if unknown:
        errors.append(f"rule {rule.slug}: unknown training-health panel(s) {unknown} (known: {list(PANEL_IDS)})")
    return errors


def register(rule: Rule[P]) -> Rule[P]:
    """Add a rule to the registry; slugs and codes are unique and never reused, its declaration sound."""
    if rule.slug in REGISTRY:
        raise ValueError(f"duplicate rule slug {rule.slug}")
    if any(r.code == rule.code for r in REGISTRY.values()):
        raise ValueError(f"duplicate rule code {rule.code}")
    errors = declaration_errors(rule)
    if errors:
        raise ValueError("; ".join(errors))
    REGISTRY[rule.slug] = rule
    return rule
