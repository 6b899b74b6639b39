"""What a rule is: metadata (slug, code, docs, needs, thresholds) plus one pure check function."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trace_doctor.model import Finding
    from trace_doctor.rules.context import RuleContext


class NotApplicable(Exception):
    """Raised by a check when the run lacks the input it needs; the message says which."""


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
    needs: str  # human description of the inputs it needs
    docs: RuleDocs
    check: Callable[[RuleContext], list[Finding]]
    baseline_only: bool = False
    tags: tuple[str, ...] = field(default_factory=tuple)

    def describe(self, thresholds: dict[str, Any]) -> str:
        def para(text: str) -> str:
            return textwrap.fill(text, width=96, initial_indent="  ", subsequent_indent="  ")

        lines = [
            f"{self.code} {self.slug} — {self.title}",
            f"default severity: {self.severity}",
            f"needs: {self.needs}",
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
        if thresholds:
            lines += ["", f"Thresholds ([tool.trace-doctor.rules.{self.slug}])"]
            lines += [f"  {k} = {v!r}" for k, v in sorted(thresholds.items())]
        return "\n".join(lines)


REGISTRY: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    """Add a rule to the registry; slugs and codes are unique and never reused."""
    if rule.slug in REGISTRY:
        raise ValueError(f"duplicate rule slug {rule.slug}")
    if any(r.code == rule.code for r in REGISTRY.values()):
        raise ValueError(f"duplicate rule code {rule.code}")
    REGISTRY[rule.slug] = rule
    return rule
