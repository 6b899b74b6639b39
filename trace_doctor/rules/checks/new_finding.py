"""TD402 new-finding: a finding the candidate has and the baseline does not.

Runs only with `--baseline` (compare.py calls it after running the normal rules on both runs).
Findings are matched by fingerprint — rule plus what it is about (phase, span name, thread role) —
so the same problem at different step numbers or with different seconds is not "new".

A finding is new only where its rule judged the baseline (passed or fired there): a rule that
could not run on the baseline (a run recorded without a trace, a rule that failed) does not know
whether the baseline had the problem, so its findings are listed as not compared instead.
"""

from __future__ import annotations

from trace_doctor.model import Finding, NewFindings
from trace_doctor.policy.baseline import NewFindingPolicy
from trace_doctor.rules.base import Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import baseline_run, requires


def fingerprint_of(finding: Finding) -> str:
    return finding.fingerprint or finding.rule


def new_fingerprints(candidate: list[Finding], baseline: list[Finding]) -> list[str]:
    """Fingerprints of candidate findings absent from the baseline, sorted."""
    seen = {fingerprint_of(f) for f in baseline}
    return sorted({fingerprint_of(f) for f in candidate} - seen)


JUDGED = ("passed", "fired")  # rule outcomes on the baseline that say whether it had a finding


def not_compared(candidate: list[Finding], baseline_statuses: dict[str, str]) -> list[dict[str, str]]:
    """Candidate findings whose rule did not judge the baseline: {rule, fingerprint, baseline_status}, sorted."""
    unjudged = {
        (f.rule, fingerprint_of(f), baseline_statuses[f.rule])
        for f in candidate
        if baseline_statuses.get(f.rule, "passed") not in JUDGED
    }
    return [{"rule": r, "fingerprint": k, "baseline_status": s} for r, k, s in sorted(unjudged)]


def compare_findings(
    candidate: list[Finding], baseline: list[Finding], baseline_statuses: dict[str, str]
) -> NewFindings:
    """The candidate's new fingerprints where their rule judged the baseline, and the ones it did not."""
    skipped = not_compared(candidate, baseline_statuses)
    unjudged = {item["fingerprint"] for item in skipped}
    fresh = set(new_fingerprints(candidate, baseline)) - unjudged
    return NewFindings(fingerprints=sorted(fresh), not_compared=skipped)


def check(ctx: RuleContext[NewFindingPolicy]) -> list[Finding]:
    """One finding per candidate finding whose fingerprint the baseline does not have."""
    compared = ctx.new_findings  # derived once; the baseline block reads the same record
    skipped, fresh = compared.not_compared, set(compared.fingerprints)
    if not fresh:
        if skipped:
            rules = ", ".join(sorted({item["rule"] for item in skipped}))
            return ctx.passed(
                f"no candidate finding is new where its rule judged the baseline; not compared: "
                f"{len(skipped)} finding(s) of {rules}, which could not run on the baseline"
            )
        return ctx.passed(
            f"all {len(ctx.candidate_findings)} candidate finding(s) are also in the baseline"
            if ctx.candidate_findings
            else "the candidate has no findings"
        )
    found = []
    for original in ctx.candidate_findings:
        key = fingerprint_of(original)
        if key not in fresh:
            continue
        fresh.discard(key)  # one new-finding per fingerprint, from the most severe instance
        found.append(
            ctx.finding(
                severity=original.severity,
                title=f"New since the baseline: {original.title}",
                message=(
                    f"{original.code} {original.rule} fires on the candidate but not on the baseline: "
                    f"{original.message}"
                ),
                fix=original.fix,
                steps=list(original.steps),
                time_ranges_us=[list(r) for r in original.time_ranges_us],
                evidence={"new_fingerprint": key, "rule": original.rule, "code": original.code},
                seconds_lost=original.seconds_lost,
                fraction_of_wall=original.fraction_of_wall,
                confidence=original.confidence,
                fingerprint=f"new-finding:{key}",
            )
        )
    return found


register(
    Rule(
        slug="new-finding",
        code="TD402",
        title="A finding absent from the baseline",
        severity="warning",
        needs="--baseline PATH",
        docs=RuleDocs(
            what=(
                "Runs the normal rules on the baseline too and reports every candidate finding whose "
                "fingerprint (rule + phase, span name or thread role it is about) the baseline lacks."
            ),
            why=(
                "A change that introduces a new problem (a sequential wait, a GIL stall, a KL jump) is "
                "worth a look even when the step time has not moved yet. The new finding keeps the "
                "severity of the finding it repeats, so --fail-on decides whether it fails CI."
            ),
            evidence="the new fingerprints are listed in the baseline block of the JSON document",
            fix="The fix of the finding it repeats.",
        ),
        check=check,
        policy=NewFindingPolicy,
        stage="comparison",
        requires=(requires("needs --baseline PATH", baseline_run()),),
        baseline_only=True,
        tags=("regression", "baseline"),
    )
)
