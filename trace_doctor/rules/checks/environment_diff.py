"""TD404 environment-diff: the baseline and the candidate ran in different environments.

The debug guide's "works on one machine, not the other": when two runs of one recipe end
differently, the first thing to compare is what Step 1's environment check prints on each machine
(Python, the tinker SDK, pydantic, torch, transformers...) and their `pip freeze`. The comparison
itself is derive/environment_diff.py; this rule weighs it against whether the outcomes differ:
a step-time or quality regression, or findings the baseline does not have.
"""

from __future__ import annotations

from trace_doctor.derive.environment_diff import (
    ASPECTS,
    CAPTURE,
    compare_environments,
    describe_difference,
    recorded_aspects,
    run_environment,
)
from trace_doctor.model import Finding
from trace_doctor.policy.baseline import EnvironmentDiffPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import baseline_run, requires


def outcome_changes(ctx: RuleContext) -> tuple[list[str], list[str]]:
    """(How the candidate ended worse than the baseline, in words; what was compared).

    The regressions are read from the records step-time-regression and quality-regression derived
    (they run before this rule, in code order), never derived here: a deselected rule stays out of
    the baseline block. New findings are compared here, so deselecting new-finding changes nothing."""
    from trace_doctor.rules.checks.new_finding import compare_findings

    changes, compared = [], []
    for record, axis in (("step_time_comparison", "step time"), ("quality_comparison", "training quality")):
        comparison = ctx.derived(record)
        if comparison is None:
            continue
        compared.append(axis)
        if comparison.verdict == "regression":
            changes.append(f"{axis} regressed ({comparison.message})")
    fresh = compare_findings(ctx.candidate_findings, ctx.baseline_findings, ctx.baseline_statuses).fingerprints
    compared.append("findings")
    if fresh:
        shown = ", ".join(fresh[:3]) + (f" and {len(fresh) - 3} more" if len(fresh) > 3 else "")
        changes.append(f"{len(fresh)} finding(s) the baseline does not have ({shown})")
    return changes, compared


def _capture(missing: list[dict[str, str]], side: str) -> str:
    return "; ".join(f"{m['aspect']}: {m['capture']}" for m in missing if m["side"] == side)


def check(ctx: RuleContext[EnvironmentDiffPolicy]) -> list[Finding]:
    """A warning when environments and outcomes both differ; info when only the environments do."""
    baseline_ctx = ctx.baseline_ctx
    assert baseline_ctx is not None  # declared: needs --baseline
    baseline, candidate = run_environment(baseline_ctx.run), run_environment(ctx.run)
    if not recorded_aspects(baseline) and not recorded_aspects(candidate):
        raise NotApplicable(
            "neither run records its environment; capture "
            + "; ".join(f"{aspect}: {CAPTURE[aspect]}" for aspect in ASPECTS)
        )
    diff = compare_environments(baseline, candidate)
    if not diff.compared:
        side = "baseline" if not recorded_aspects(baseline) else "candidate"
        raise NotApplicable(
            f"only the {'candidate' if side == 'baseline' else 'baseline'} records its environment; for the "
            f"{side} capture {_capture(diff.missing, side)}"
        )
    gaps = ""
    if diff.missing:
        gaps = " Not compared: " + "; ".join(
            f"the {m['side']} does not record its {m['aspect']} (capture {m['capture']})" for m in diff.missing
        )
    if not diff.differ:
        return ctx.passed(
            f"same environment over what both record ({', '.join(diff.compared)}; "
            f"{diff.same_packages} package version(s) alike).{gaps}"
        )
    limit = int(ctx.thresholds.max_named)
    named = [describe_difference(d) for d in diff.differences[:limit]]
    more = len(diff.differences) - len(named)
    listed = "; ".join(named) + (f"; and {more} more (see the evidence)" if more > 0 else "")
    changes, outcomes_compared = outcome_changes(ctx)
    evidence = {**diff.to_dict(), "outcome_changes": changes, "outcomes_compared": outcomes_compared}
    known_bad = any(d["known_bad"] for d in diff.differences)
    if not changes:
        return [
            ctx.finding(
                severity="info",
                title="The environment differs from the baseline's, no effect seen",
                message=f"The environment differs, no effect seen: {listed}. The outcomes match (compared: "
                f"{', '.join(outcomes_compared)}; no regression, no new finding).{gaps}",
                fix="Nothing to do for this comparison; pin the versions (a lock file) so the runs stay comparable.",
                evidence=evidence,
                confidence="high",
                fingerprint="environment-diff:no-effect",
            )
        ]
    return [
        ctx.finding(
            severity="warning",
            title="The candidate ran in another environment and ended differently",
            message=f"The environment differs from the baseline's: {listed}; and the outcome differs: "
            f"{'; '.join(changes)}.{gaps}",
            fix=(
                "Rerun the candidate with the baseline's versions (`pip install -r` the baseline's requirements.txt, "
                "same Python), starting with the first difference named; if the outcome comes back, that "
                "difference is the cause. Known-bad versions first: see known-bad-dependency."
            ),
            evidence=evidence,
            # The environment is one candidate cause among the code and config changes a diff does not see.
            confidence="high" if known_bad else "medium",
            fingerprint="environment-diff",
        )
    ]


register(
    Rule(
        slug="environment-diff",
        code="TD404",
        title="The environment differs from the baseline's",
        severity="warning",
        needs="--baseline PATH; a record of the environment in either run (pip freeze, version lines, W&B metadata)",
        docs=RuleDocs(
            what=(
                "Compares what both runs recorded about the environment that trained them: every package "
                "version both list (a pip-freeze requirements.txt, the environment check's version lines), "
                "the Python version, the machine (CPU count, GPU, CUDA, OS and host kind from W&B's "
                "wandb-metadata.json) and the cookbook commit (code.diff). The differences are named most "
                "likely cause first: a known-bad version, the tinker SDK, Python, the hot-path packages "
                "(torch, transformers, pydantic...), the cookbook, the machine, then the rest. It warns "
                "when the candidate also ended worse (a step-time or quality regression, or a finding the "
                "baseline does not have) and says 'differs, no effect seen' (info) when it did not."
            ),
            why=(
                "The debug guide's 'works on one machine, not the other' case: the same code on another "
                "machine resolves other versions (an SDK release, a pydantic beta, a Python 3.14 that lacks "
                "pkg_resources), and its Step 1 environment check is the first thing support asks for "
                "(FORMATS.md 5.5, 7). A version difference next to a changed outcome is the first thing to "
                "rule out; one next to the same outcome is safe to keep."
            ),
            evidence=(
                "the finding's evidence: every difference (aspect, name, baseline and candidate value, "
                "known-bad record ids), the aspects compared, the ones only one side records with what to "
                "capture (`pip freeze`, `python -V`, W&B metadata, the cookbook commit), and the outcome "
                "changes it weighed."
            ),
            fix=(
                "Rerun with the baseline's environment (`pip install -r` its requirements.txt, the same "
                "Python), the first named difference first; record `pip freeze` and `python -V` in every run."
            ),
        ),
        check=check,
        policy=EnvironmentDiffPolicy,
        stage="comparison",
        requires=(requires("needs --baseline PATH", baseline_run()),),
        baseline_only=True,
        tags=("regression", "baseline", "environment"),
    )
)
