"""The rules as `trace-doctor rules` shows them: the list in code order, and one rule explained with the
thresholds a configuration sets.

    >>> [rule.slug for rule in list_rules()][:2]
    ['pipelining-gap', 'get-batch-bottleneck']
    >>> explain_rule("TD101").splitlines()[0]
    'TD101 pipelining-gap — Calls awaited one by one instead of pipelined'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trace_doctor.settings import Settings

if TYPE_CHECKING:
    from trace_doctor.rules.base import Rule


def list_rules() -> list[Rule]:
    """Every rule, in code order."""
    from trace_doctor.rules import catalogue  # noqa: F401 - importing registers every rule
    from trace_doctor.rules.base import REGISTRY

    return sorted(REGISTRY.values(), key=lambda r: r.code)


def unknown_rule(name: str) -> str:
    """What to say of a name no rule has, with the nearest slug or code when one is close."""
    from trace_doctor.rules.engine import suggest_rule

    return f"unknown rule {name!r}{suggest_rule(name)} (see `trace-doctor rules`)"


def explain_rule(name: str, settings: Settings | None = None) -> str | None:
    """What the rule named (slug or code) checks, why, its evidence, its fix and the thresholds `settings`
    put in effect; None for a name no rule has."""
    from trace_doctor.rules.engine import lookup

    rule = lookup(name)
    if rule is None:
        return None
    policy = (settings or Settings()).policy
    return rule.describe(policy.rule(rule.slug), policy.shared)
