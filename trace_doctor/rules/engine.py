"""Run the registered rules over a run: every rule ends fired, passed, not applicable or error."""

from __future__ import annotations

import traceback

from trace_doctor.did_you_mean import did_you_mean
from trace_doctor.model import Finding, RuleOutcome, RunTables
from trace_doctor.policy import Policy
from trace_doctor.rules import catalogue  # noqa: F401 - importing registers every rule
from trace_doctor.rules.base import REGISTRY, NotApplicable, Rule
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.per_writer import run_per_writer


def selected_rules(select: list[str] | None = None, ignore: list[str] | None = None) -> list[Rule]:
    """Rules in code order after --select / --ignore (slugs or codes)."""
    unknown = [s for s in [*(select or []), *(ignore or [])] if lookup(s) is None]
    if unknown:
        named = ", ".join(f"{s}{suggest_rule(s)}" for s in unknown)
        raise KeyError(f"unknown rule(s): {named} (see `trace-doctor rules`)")
    rules = sorted(REGISTRY.values(), key=lambda r: r.code)
    if select:
        wanted = {lookup(s).slug for s in select}
        rules = [r for r in rules if r.slug in wanted]
    if ignore:
        dropped = {lookup(s).slug for s in ignore}
        rules = [r for r in rules if r.slug not in dropped]
    return rules


def suggest_rule(name: str) -> str:
    """` (did you mean `slug`?)` for a mistyped rule slug or code, or ""."""
    return did_you_mean(name.strip(), [*REGISTRY, *(rule.code for rule in REGISTRY.values())])


def lookup(name: str) -> Rule | None:
    """The rule named by slug or code (case-insensitive), or None."""
    name = name.strip()
    if name in REGISTRY:
        return REGISTRY[name]
    for rule in REGISTRY.values():
        if rule.code.lower() == name.lower():
            return rule
    return None


def run_rules(
    run: RunTables,
    *,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    policy: Policy | None = None,
) -> tuple[list[Finding], list[RuleOutcome], RuleContext]:
    """Run rules, containing each rule's failure; findings come back sorted and deterministic.

    When several processes wrote the metrics at the same time, every rule judges each one apart
    (rules/per_writer); the returned context is the whole run's, for the summary and the triage."""
    ctx = RuleContext(run, policy=policy)
    findings: list[Finding] = []
    outcomes: list[RuleOutcome] = []
    for rule in selected_rules(select, ignore):
        if rule.baseline_only:
            continue  # regression rules run after the candidate's findings exist (see compare)
        found, outcome = run_per_writer(rule, ctx.writers, run_one) if ctx.writers else run_one(rule, ctx)
        findings.extend(found)
        outcomes.append(outcome)
    findings.sort(key=Finding.sort_key)
    return findings, outcomes, ctx


def run_one(rule: Rule, ctx: RuleContext) -> tuple[list[Finding], RuleOutcome]:
    """One rule: its declared inputs checked first, its exception contained as an "error" outcome."""
    ctx.current_rule = rule
    try:
        for needed in rule.requires:
            if not needed.holds(ctx):
                raise NotApplicable(needed.reason)
        found = rule.check(ctx) or []
        strays = sorted({f.rule for f in found if (f.rule, f.code) != (rule.slug, rule.code)})
        if strays:
            raise TypeError(f"findings labelled {strays} instead of {rule.slug}: build them with ctx.finding(...)")
    except NotApplicable as reason:
        return [], RuleOutcome(rule.slug, "not_applicable", str(reason))
    except Exception as exc:  # noqa: BLE001 - one broken rule never breaks the run
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return [], RuleOutcome(
            rule.slug, "error", f"{type(exc).__name__}: {exc} (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
        )
    finally:
        ctx.current_rule = None
    for finding in found:
        if finding.fingerprint is None:
            finding.fingerprint = rule.slug
    if found:
        return found, RuleOutcome(rule.slug, "fired", f"{len(found)} finding(s)")
    return [], RuleOutcome(rule.slug, "passed", ctx.pass_reasons.get(rule.slug, ""))
