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
from typing import Any

from trace_doctor.model import Analysis, Finding, RunTables
from trace_doctor.policy import Policy
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.engine import run_one, run_rules, selected_rules

STEP_TIME_RULE = "step-time-regression"
QUALITY_RULE = "quality-regression"


class BaselineContext(RuleContext):
    """A rule context over the candidate that also sees the baseline's context and both finding lists."""

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
        # What the baseline-only rules measured, gathered into result.baseline afterwards.
        self.comparison: dict[str, Any] = {}


def _verdict(step_outcome, comparison: dict[str, Any]) -> tuple[str, str]:
    if step_outcome is None:
        return "no regression", f"{STEP_TIME_RULE} was not selected: step times were not compared"
    if "step_time" in comparison:
        return comparison["step_time"]["verdict"], comparison["step_time"]["message"]
    if step_outcome.status == "error":
        return "inconclusive", f"{STEP_TIME_RULE} failed: {step_outcome.reason}"
    return "inconclusive", step_outcome.reason or "step times could not be compared"


def _quality(outcome, comparison: dict[str, Any]) -> dict[str, Any] | None:
    """The quality block, or None when the rule was not selected or neither run has a quality metric."""
    if outcome is None or outcome.status == "not_applicable":
        return None
    if "quality" in comparison:
        return comparison["quality"]
    return {"verdict": "inconclusive", "message": f"{QUALITY_RULE} failed: {outcome.reason}", "metrics": []}


def combined_verdict(step_time: str, quality: dict[str, Any] | None) -> str:
    """A regression on either axis; else inconclusive when either could not judge; else no regression."""
    verdicts = {step_time, quality["verdict"] if quality else "no regression"}
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
) -> dict[str, Any]:
    """Run the regression rules against `baseline`, add their findings to `result`, fill `result.baseline`."""
    from trace_doctor.summary import summarize

    policy = policy or Policy()
    base_findings, base_outcomes, base_ctx = run_rules(baseline, select=select, ignore=ignore, policy=policy)
    candidate_findings = list(result.findings)
    ctx = BaselineContext(
        result.run,
        policy=policy,
        baseline_ctx=base_ctx,
        candidate_findings=candidate_findings,
        baseline_findings=base_findings,
        run_wall_s=(result.summary or {}).get("wall_time_s"),
        baseline_statuses={o.rule: o.status for o in base_outcomes},
    )
    step_outcome = quality_outcome = None
    for rule in selected_rules(select, ignore):
        if not rule.baseline_only:
            continue
        found, outcome = run_one(rule, ctx)
        result.findings.extend(found)
        result.outcomes.append(outcome)
        if rule.slug == STEP_TIME_RULE:
            step_outcome = outcome
        elif rule.slug == QUALITY_RULE:
            quality_outcome = outcome
    result.findings.sort(key=Finding.sort_key)

    verdict, message = _verdict(step_outcome, ctx.comparison)
    quality = _quality(quality_outcome, ctx.comparison)
    step_time = ctx.comparison.get("step_time", {})
    structural = dict(step_time.get("structural", {}))
    structural["findings_by_rule"] = _findings_by_rule(candidate_findings, base_findings)
    result.baseline = {
        "path": baseline.meta.path,
        "verdict": combined_verdict(verdict, quality),
        "message": message,
        "step_time_verdict": verdict,
        "quality": quality,
        "statistics": step_time.get("statistics"),
        "breakdown": step_time.get("breakdown", []),
        "structural": structural,
        "new_fingerprints": ctx.comparison.get("new_fingerprints", []),
        "not_compared": ctx.comparison.get("not_compared", []),
        "summary": summarize(base_ctx),
        "rules": [o.to_dict() for o in base_outcomes],
    }
    return result.baseline
