"""Import every rule module so the registry holds the whole catalogue, and the tables read from it.

Each rule declares its policy class, triage stage and training-health panels once, on its `Rule(...)`;
the lookups below are the only slug-keyed views of those declarations.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from trace_doctor.rules import checks
from trace_doctor.rules.base import REGISTRY, Rule

for _module in sorted(m.name for m in pkgutil.iter_modules(checks.__path__)):
    importlib.import_module(f"{checks.__name__}.{_module}")


def all_rules() -> list[Rule[Any]]:
    """Every registered rule, in code order."""
    return sorted(REGISTRY.values(), key=lambda r: r.code)


def policy_classes() -> dict[str, type]:
    """slug -> the policy class its rule declares."""
    return {slug: rule.policy for slug, rule in REGISTRY.items()}


def rule_stages() -> dict[str, str]:
    """slug -> the triage stage its rule declares (knowledge/triage.STAGES orders them)."""
    return {slug: rule.stage for slug, rule in REGISTRY.items()}


def panels_of_rule(slug: str) -> tuple[str, ...]:
    """The training-health panels a rule's findings are shaded on (none for an unknown slug)."""
    rule = REGISTRY.get(slug)
    return rule.panels if rule is not None else ()
