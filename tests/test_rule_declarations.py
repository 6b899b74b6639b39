"""A rule is declared once: its Rule(...) names its policy class, triage stage and training-health panels,
and every slug-keyed table is read from those declarations (issue 26)."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

from trace_doctor.derive.training_health import PANEL_IDS
from trace_doctor.knowledge.triage import COMPARISON_RULES, STAGE_NAMES, TRAINING_QUALITY, stage_of, stage_rules
from trace_doctor.policy import Policy, rule_policies
from trace_doctor.policy.timing import PipeliningGapPolicy
from trace_doctor.rules.base import REGISTRY, Rule, RuleDocs, declaration_errors, register
from trace_doctor.rules.catalogue import all_rules, panels_of_rule
from trace_doctor.rules.context import RuleContext

RULES = all_rules()


def _rule(**changes) -> Rule:
    fields = dict(
        slug="a-new-rule",
        code="TD199",
        title="t",
        severity="warning",
        needs="n",
        docs=RuleDocs("w", "y", "e", "f"),
        check=lambda ctx: [],
        policy=PipeliningGapPolicy,
        stage="pipelining",
    )
    return Rule(**{**fields, **changes})


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.slug)
def test_every_registered_rule_declares_a_policy_a_known_stage_and_known_panels(rule):
    assert declaration_errors(rule) == []
    assert dataclasses.is_dataclass(rule.policy) and rule.stage in STAGE_NAMES
    assert set(rule.panels) <= set(PANEL_IDS)


def test_a_rule_without_its_declarations_cannot_be_built():
    with pytest.raises(TypeError):
        Rule(slug="x", code="TD198", title="t", severity="info", needs="n", docs=RuleDocs("w", "y", "e", "f"),
             check=lambda ctx: [])  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"stage": "the network"}, "unknown triage stage 'the network'"),
        ({"panels": ("kl", "rewards")}, "unknown training-health panel(s) ['rewards']"),
        ({"policy": dict}, "is not a policy dataclass"),
    ],
)
def test_register_refuses_an_unsound_declaration(changes, complaint):
    rule = _rule(**changes)
    assert any(complaint in error for error in declaration_errors(rule))
    with pytest.raises(ValueError, match="a-new-rule"):
        register(rule)
    assert "a-new-rule" not in REGISTRY


def test_slug_keyed_tables_are_read_from_the_declarations():
    assert dict(rule_policies()) == {r.slug: r.policy for r in RULES}
    assert TRAINING_QUALITY == {r.slug for r in RULES if r.stage == "training quality"}
    assert COMPARISON_RULES == {r.slug for r in RULES if r.baseline_only}
    assert all(stage_rules(name) for name in STAGE_NAMES), "a stage no rule declares"
    assert [stage_of(r.slug) for r in RULES] == [STAGE_NAMES.index(r.stage) for r in RULES]
    assert stage_of("no-such-rule") == len(STAGE_NAMES)
    assert panels_of_rule("entropy-collapse") == ("entropy", "groups") and panels_of_rule("pipelining-gap") == ()
    assert all(type(Policy().rule(r.slug)) is r.policy for r in RULES)


def test_the_guide_order_puts_causes_before_their_symptoms():
    assert stage_of("pipelining-gap") < stage_of("get-batch-bottleneck") < stage_of("gil-stall")
    assert stage_of("gil-stall") < stage_of("server-side-wait") < stage_of("steady-slowness")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.slug)
def test_every_check_is_typed_with_its_rules_policy(rule):
    """`check(ctx: RuleContext[ItsPolicy])`: ctx.thresholds has the type the Rule declares."""
    hints = typing.get_type_hints(rule.check, vars(inspect.getmodule(rule.check)))
    (param,) = inspect.signature(rule.check).parameters
    assert hints[param] == RuleContext[rule.policy]


@pytest.mark.parametrize(
    ("slug", "old", "knob"),
    [
        ("gil-stall", "round_trip_stretch_ratio", "round_trip_stretch_ratio"),
        ("pipelining-gap", "min_wait_s", "fb_optim_handoff_s"),
    ],
)
def test_a_knob_two_rules_share_is_still_set_where_it_used_to_be(slug, old, knob):
    """The cutoff both rules of a pair judge by is one shared knob; the old per-rule key still sets it."""
    policy = Policy.from_config(rules={slug: {old: 3.0}})
    assert getattr(policy.shared, knob) == 3.0
    assert any(f"[tool.trace-doctor.shared] {knob}" in note for note in policy.notes)
