"""Compare a candidate run's analysis with a baseline run: the regression rules and the baseline block.

The public entry points are `trace_doctor.compare(run, baseline)` and `analyze(run, baseline=...)`.

The normal rules run on the baseline too (for new-finding); then the baseline-only rules
(step-time-regression, quality-regression, new-finding) run over a context that sees both runs.
Their findings and outcomes join the candidate's, and `result.baseline` carries the comparison for
every renderer. Speed and training quality are two axes: `step_time_verdict` and `quality.verdict`
say each, `verdict` combines them (a regression on either is a regression).
"""

from __future__ import annotations

from collections import Counter
from functools import cached_property
from typing import Any

from trace_doctor.model import (
    Analysis,
    BaselineComparison,
    Finding,
    NewFindings,
    QualityComparison,
    RuleOutcome,
    RunTables,
    StepTimeComparison,
)
from trace_doctor.policy import Policy
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.engine import run_one, run_rules, selected_rules

STEP_TIME_RULE = "step-time-regression"
QUALITY_RULE = "quality-regression"


class BaselineContext(RuleContext):
    """A rule context over the candidate that also sees the baseline's context and both finding lists.

    What each baseline-only rule measures is derived here, once, the first time its rule asks; the
    rule turns it into findings, and `compare_with_baseline` gathers the same records into the
    baseline block. No rule writes into the context.
    """

    def __init__(
        self,
        run: RunTables,
        *,
        policy: Policy,
        baseline_ctx: RuleContext,
        candidate_findings: list[Finding],
        baseline_findings: list[Finding],
        run_wall_s: float | None,
        baseline_statuses: dict[str, str] | None = None,
    ):
        super().__init__(run, policy=policy)
        self.baseline_ctx = baseline_ctx
        self.candidate_findings = candidate_findings
        self.baseline_findings = baseline_findings
        # How each normal rule ended on the baseline: a rule that could not judge it (not_applicable,
        # error) says nothing about whether its finding is new.
        self.baseline_statuses = baseline_statuses or {}
        self.run_wall_s = run_wall_s

    # Each raises NotApplicable when the runs lack what it compares (the rule's outcome says so).
    @cached_property
    def step_time_comparison(self) -> StepTimeComparison:
        from trace_doctor.rules.checks.step_time_regression import compare_step_times

        return compare_step_times(self, self.baseline_ctx, self.policy.rule(STEP_TIME_RULE))

    @cached_property
    def quality_comparison(self) -> QualityComparison:
        from trace_doctor.rules.checks.quality_regression import compare_quality

        return compare_quality(self, self.baseline_ctx, self.policy.rule(QUALITY_RULE), self.shared.max_stable_kl)

    @cached_property
    def new_findings(self) -> NewFindings:
        from trace_doctor.rules.checks.new_finding import compare_findings

        return compare_findings(self.candidate_findings, self.baseline_findings, self.baseline_statuses)

    def derived(self, record: str) -> Any:
        """One of the records above if its rule derived it; None when the rule was not selected, or
        stopped before (not applicable, or an error)."""
        return self.__dict__.get(record)


def _verdict(step_outcome: RuleOutcome | None, step_time: StepTimeComparison | None) -> tuple[str, str]:
    if step_outcome is None:
        return "no regression", f"{STEP_TIME_RULE} was not selected: step times were not compared"
    if step_time is not None:
        return step_time.verdict, step_time.message
    if step_outcome.status == "error":
        return "inconclusive", f"{STEP_TIME_RULE} failed: {step_outcome.reason}"
    return "inconclusive", step_outcome.reason or "step times could not be compared"


def _quality(outcome: RuleOutcome | None, quality: QualityComparison | None) -> QualityComparison | None:
    """The quality block, or None when the rule was not selected or neither run has a quality metric."""
    if outcome is None or outcome.status == "not_applicable":
        return None
    if quality is not None:
        return quality
    return QualityComparison("inconclusive", f"{QUALITY_RULE} failed: {outcome.reason}", [])


def combined_verdict(step_time: str, quality: QualityComparison | None) -> str:
    """A regression on either axis; else inconclusive when either could not judge; else no regression."""
    verdicts = {step_time, quality.verdict if quality else "no regression"}
    for verdict in ("regression", "inconclusive"):
        if verdict in verdicts:
            return verdict
    return "no regression"


def _findings_by_rule(candidate: list[Finding], baseline: list[Finding]) -> dict[str, dict[str, int]]:
    """Per-rule finding counts in both runs: structural signals (e.g. sequential waits) beside wall time."""
    before, after = Counter(f.rule for f in baseline), Counter(f.rule for f in candidate)
    return {rule: {"baseline": before[rule], "candidate": after[rule]} for rule in sorted(set(before) | set(after))}


def compare_with_baseline(
    result: Analysis,
    baseline: RunTables,
    *,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    policy: Policy | None = None,
) -> BaselineComparison:
    """Run the regression rules against `baseline`, add their findings to `result`, fill `result.baseline`."""
    from trace_doctor.summary import measure_steps

    policy = policy or Policy()
    base_findings, base_outcomes, base_ctx = run_rules(baseline, select=select, ignore=ignore, policy=policy)
    candidate_findings = list(result.findings)
    ctx = BaselineContext(
        result.run,
        policy=policy,
        baseline_ctx=base_ctx,
        candidate_findings=candidate_findings,
        baseline_findings=base_findings,
        run_wall_s=result.run_summary.wall_time_s,
        baseline_statuses={o.rule: o.status for o in base_outcomes},
    )
    outcomes: dict[str, RuleOutcome] = {}
    for rule in selected_rules(select, ignore):
        if not rule.baseline_only:
            continue
        found, outcome = run_one(rule, ctx)
        result.findings.extend(found)
        result.outcomes.append(outcome)
        outcomes[rule.slug] = outcome
    result.findings.sort(key=Finding.sort_key)

    step_outcome, quality_outcome = outcomes.get(STEP_TIME_RULE), outcomes.get(QUALITY_RULE)
    step_time: StepTimeComparison | None = ctx.derived("step_time_comparison")
    new: NewFindings | None = ctx.derived("new_findings")
    verdict, message = _verdict(step_outcome, step_time)
    quality = _quality(quality_outcome, ctx.derived("quality_comparison"))
    structural = dict(step_time.structural) if step_time is not None else {}
    structural["findings_by_rule"] = _findings_by_rule(candidate_findings, base_findings)
    result.baseline = BaselineComparison(
        path=baseline.meta.path,
        verdict=combined_verdict(verdict, quality),
        message=message,
        step_time_verdict=verdict,
        quality=quality,
        statistics=step_time.statistics if step_time is not None else None,
        breakdown=step_time.breakdown if step_time is not None else [],
        structural=structural,
        new_fingerprints=new.fingerprints if new is not None else [],
        not_compared=new.not_compared if new is not None else [],
        summary=measure_steps(base_ctx),
        rules=tuple(base_outcomes),
    )
    return result.baseline
