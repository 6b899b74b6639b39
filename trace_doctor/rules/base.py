"""What a rule is: metadata (slug, code, docs, declared inputs, thresholds) plus one pure check function."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trace_doctor.policy import RULE_POLICIES, describe
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


@dataclass(frozen=True)
class Rule:
    slug: str
    code: str
    title: str
    severity: str  # default severity of its findings
    needs: str  # the inputs it reads, for people
    docs: RuleDocs
    check: Callable[[RuleContext], list[Finding]]
    # Checked by the engine before `check` runs: a missing one makes the rule not applicable.
    requires: tuple[Requires, ...] = ()
    # Shared knobs (SharedPolicy fields) the rule's judgement depends on, for its docs.
    shared: tuple[str, ...] = ()
    baseline_only: bool = False
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def policy_class(self) -> type:
        return RULE_POLICIES[self.slug]

    def describe(self, thresholds: Any | None = None, shared: Any | None = None) -> str:
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
        infos = describe(thresholds if thresholds is not None else self.policy_class())
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


REGISTRY: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    """Add a rule to the registry; slugs and codes are unique and never reused, thresholds declared."""
    if rule.slug in REGISTRY:
        raise ValueError(f"duplicate rule slug {rule.slug}")
    if any(r.code == rule.code for r in REGISTRY.values()):
        raise ValueError(f"duplicate rule code {rule.code}")
    if rule.slug not in RULE_POLICIES:
        raise ValueError(f"rule {rule.slug} has no policy class in trace_doctor.policy.RULE_POLICIES")
    REGISTRY[rule.slug] = rule
    return rule
