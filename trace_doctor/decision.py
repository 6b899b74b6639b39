"""The two decisions every output shows, made once per analysis: the run's verdict and the CI gate.

Renderers (terminal, Markdown, JUnit, HTML) and the CLI's exit code only display these, so they can
never disagree about whether the gate tripped or whether little could be checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trace_doctor.humanize import format_range, format_seconds
from trace_doctor.knowledge.triage import (
    BENIGN_TIME,
    COMPARISON_RULES,
    PROGRESS_RULES,
    SERVICE_TIME,
    TRAINING_QUALITY,
)
from trace_doctor.model import (
    SEVERITY_RANK,
    Analysis,
    BaselineComparison,
    Finding,
    QualityComparison,
    RuleOutcome,
    TimeAccount,
)

FAIL_ON_LEVELS = ("never", "info", "warning", "error")
REGRESSION_RULE = "step-time-regression"
QUALITY_REGRESSION_RULE = "quality-regression"
CONFIDENCE_RANK = {"high": 2, "medium": 1, "low": 0}


@dataclass(frozen=True)
class Verdict:
    """What the run amounts to: the worst severity (or clear / limited), counts, worst and costliest finding."""

    # "error" | "warning" | "info" (the worst problem's severity), "clear" (no problem: at most hints),
    # or "limited": no problem, but fewer than half of the rules had the input they need, so silence
    # is not health.
    status: str
    headline: str
    counts: dict[str, int]
    checked: int  # rules that ran to a judgement (passed)
    total: int  # rules selected
    worst: Finding | None = None  # the worst problem (never a hint)
    costliest: Finding | None = None  # the root cause: costliest finding no other finding explains
    # The training-quality problem to fix: worst unexplained quality finding (time and quality are
    # different axes, so a run can have both a root cause and a quality cause).
    quality: Finding | None = None
    # Hints: info findings and low-confidence guesses, shown as notes, never the verdict's lead.
    notes: tuple[Finding, ...] = ()

    @property
    def limited(self) -> bool:
        return self.status == "limited"

    @property
    def main(self) -> Finding | None:
        """The run's main finding, the one a table of runs names (fleet, `ingest --out`'s `runs`):
        the root cause; with no time cause, the training-quality cause unless another finding is
        more severe; else the worst finding. None when the run has only hints (they are notes)."""
        if self.costliest is not None:
            return self.costliest
        if self.quality is None or self.worst is None:
            return self.quality or self.worst
        return self.worst if SEVERITY_RANK[self.worst.severity] > SEVERITY_RANK[self.quality.severity] else self.quality


@dataclass(frozen=True)
class Gate:
    """The CI gate: whether it tripped and why. The CLI exits 1 exactly when `tripped`."""

    fail_on: str
    fail_on_inconclusive: bool
    tripped: bool
    reasons: tuple[str, ...]
    # Rules whose findings (or, for the baseline comparison, whose verdict) tripped the gate.
    tripping_rules: frozenset[str] = field(default_factory=frozenset)
    baseline_verdict: str | None = None

    @property
    def set(self) -> bool:
        """Whether anything can trip it: a severity level, or a baseline to regress against."""
        return self.fail_on != "never" or self.baseline_verdict is not None

    @property
    def criteria(self) -> str:
        """What can trip it, for people: `--fail-on warning`, a regression against the baseline, or both."""
        parts = [f"--fail-on {self.fail_on}"] if self.fail_on != "never" else []
        if self.baseline_verdict is not None:
            inconclusive = " (or an inconclusive comparison)" if self.fail_on_inconclusive else ""
            parts.append(f"a regression against the baseline{inconclusive}")
        return " or ".join(parts) or "nothing (--fail-on never)"

    def trips_on(self, finding: Finding) -> bool:
        """Whether this finding alone reaches the gate's severity level."""
        return self.fail_on != "never" and SEVERITY_RANK[finding.severity] >= SEVERITY_RANK[self.fail_on]


def is_hint(finding: Finding) -> bool:
    """An info finding or a low-confidence guess: worth a note, never the cause to fix first (an error
    is never a hint, whatever its confidence: it says something broke)."""
    if finding.severity == "error":
        return False
    return finding.severity == "info" or finding.confidence == "low"


def can_lead(finding: Finding) -> bool:
    """Whether the finding may be the verdict's root cause or training cause: not a hint, not a
    low-confidence error. The service's side is the exception: server-side-wait is info because
    nothing in the loop is to fix, but its seconds are measured, and the verdict says to escalate."""
    if finding.rule in SERVICE_TIME:
        return finding.confidence != "low"
    return not is_hint(finding) and finding.confidence != "low"


def decide_verdict(
    findings: list[Finding], outcomes: list[RuleOutcome], account: TimeAccount | None = None, *, writers: int = 0
) -> Verdict:
    """Counts by severity, the worst problem, the root cause; "clear" (with notes) when the findings
    are only hints; "limited" when little could be checked.

    The root cause is ranked by the triage's non-overlapping seconds (trace_doctor.triage): a symptom
    that another finding explains is never the headline, and neither is a hint. `writers`: how many
    processes wrote the metrics at the same time (0 or 1: one at a time); the headline opens with it,
    since every number after it is then one writer's.
    """
    verdict = _verdict(findings, outcomes, account)
    if writers < 2:
        return verdict
    opening = (
        f"{writers} processes wrote this run's metrics at the same time (one command started {writers} times "
        "into one log_path?); each is judged on its own rows. "
    )
    return dataclasses.replace(verdict, headline=opening + verdict.headline)


def _verdict(findings: list[Finding], outcomes: list[RuleOutcome], account: TimeAccount | None) -> Verdict:
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("error", "warning", "info")}
    checked = sum(1 for o in outcomes if o.status == "passed")
    total = len(outcomes)
    notes = tuple(f for f in findings if is_hint(f))
    problems = [f for f in findings if not is_hint(f)]
    root, root_title, root_seconds = root_cause(findings)
    if not problems and root is None:
        # A rule that left a note had its input and judged the run, like one that passed.
        judged = checked + sum(1 for o in outcomes if o.status == "fired")
        done = (
            f"{checked} of {total} rules checked this run and passed"
            if not notes
            else f"{judged} of {total} rules checked this run"
        )
        if judged * 2 < total:
            return Verdict(
                "limited",
                (
                    f"No problems found, but little could be checked: only {judged} of {total} rules had the "
                    f"input they need.{_notes_text(notes)}"
                ),
                counts,
                checked,
                total,
                notes=notes,
            )
        return Verdict("clear", f"No problems found: {done}.{_notes_text(notes)}", counts, checked, total, notes=notes)
    parts = [f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
    # The first problem of the highest severity, in the findings' order (the analysis sorts them).
    worst = max(problems, key=lambda f: SEVERITY_RANK[f.severity]) if problems else None
    quality = quality_cause(findings)
    text = f"{', '.join(parts)}."
    # A run that crashed, hung or was cut short: what the user asks first is why it stopped and where.
    stop = next((f for f in problems if f.rule in PROGRESS_RULES), None)
    if stop is not None:
        text += f" Stopped: {stop.title}; see why first."
    if root is not None:
        share = f", {root_seconds / account.wall_time_s:.0%} of wall time" if account else ""
        todo = "escalate it, nothing in the loop to fix" if root.rule in SERVICE_TIME else "fix it first"
        if quality is not None:
            speed = f"{root_title} (≈{format_seconds(root_seconds)}{share}), {todo}"
            text += f" Speed: {speed}; Training: {_quality_text(quality)}."
        else:
            text += f" Root cause: {root_title} (≈{format_seconds(root_seconds)}{share}); {todo}."
        if worst is not None and worst not in (root, quality, stop) and worst.severity == "error":
            text += f" Also: {worst.title}."
    elif quality is not None:
        text += f" Training: {_quality_text(quality)}; fix it first."
        if worst is not None and worst not in (quality, stop) and worst.severity == "error":
            text += f" Also: {worst.title}."
    elif worst is not None and worst is not stop:
        unsure = f" ({worst.confidence} confidence)" if worst.confidence == "low" else ""
        text += f" Worst: {worst.title}{unsure}."
    if account and root is not None:
        low, high = account.counterfactual.range_s
        text += f" With every fix: ≈{format_range(low, high, account.wall_time_s)} instead of "
        text += f"{format_seconds(account.wall_time_s)}."
    status = worst.severity if worst is not None else root.severity
    return Verdict(status, text, counts, checked, total, worst=worst, costliest=root, quality=quality, notes=notes)


def _notes_text(notes: tuple[Finding, ...]) -> str:
    """` N note(s): title; title.` for a run whose findings are only hints."""
    if not notes:
        return ""
    return f" Note{'s' if len(notes) != 1 else ''}: {'; '.join(f.title for f in notes)}."


def quality_cause(findings: list[Finding]) -> Finding | None:
    """The training-quality problem to fix first: the worst finding of a training-quality rule that no
    other finding explains and that is not a hint, by severity, then confidence (then code, for a
    stable choice)."""
    candidates = [f for f in findings if f.rule in TRAINING_QUALITY and not f.explained_by and can_lead(f)]
    if not candidates:
        return None
    return min(
        candidates,
        key=lambda f: (-SEVERITY_RANK[f.severity], -CONFIDENCE_RANK.get(f.confidence or "", -1), f.code, f.title),
    )


def _quality_text(finding: Finding) -> str:
    confidence = f", {finding.confidence} confidence" if finding.confidence else ""
    return f"{finding.title} ({finding.code} {finding.rule}, {finding.severity}{confidence})"


def quality_summary(verdict: Verdict | None) -> dict[str, Any] | None:
    """`summary.quality_cause` of the JSON document: the verdict's training-quality finding, or null."""
    finding = verdict.quality if verdict is not None else None
    if finding is None:
        return None
    return {
        "rule": finding.rule,
        "code": finding.code,
        "title": finding.title,
        "severity": finding.severity,
        "confidence": finding.confidence,
        "fingerprint": finding.fingerprint,
    }


def root_cause(findings: list[Finding]) -> tuple[Finding | None, str, float]:
    """The cause to fix first, its name and its seconds: the rule whose findings no other finding
    explains, that are not hints (info, low confidence), and together cost the most (not warm-up or
    scheduled work, not a comparison with a baseline; the service's side counts: it is what the user
    must escalate). One rule's facets (optim_step awaited, next step awaited) are one fix, so they
    are ranked together; the seconds are the triage's non-overlapping ones."""
    by_rule: dict[str, list[Finding]] = {}
    for f in findings:
        if f.seconds_lost and not f.explained_by and can_lead(f):
            if f.rule not in BENIGN_TIME | COMPARISON_RULES:
                by_rule.setdefault(f.rule, []).append(f)
    if not by_rule:
        return None, "", 0.0
    rule, group = max(by_rule.items(), key=lambda kv: (sum(f.seconds_lost for f in kv[1]), kv[0]))
    top = max(group, key=lambda f: (f.seconds_lost, f.code))
    title = top.title if len(group) == 1 else rule_title(rule, top.title)
    return top, title, sum(f.seconds_lost for f in group)


def rule_title(slug: str, fallback: str) -> str:
    from trace_doctor.rules.engine import lookup

    rule = lookup(slug)
    return rule.title if rule is not None else fallback


def decide_gate(
    findings: list[Finding],
    baseline: BaselineComparison | Mapping[str, Any] | None,
    *,
    fail_on: str = "never",
    fail_on_inconclusive: bool = False,
) -> Gate:
    """Trips on a finding at or above `fail_on`, a regression against the baseline, or (when asked) an
    inconclusive comparison. `baseline` may be a block read back from a document (a mapping)."""
    if fail_on not in FAIL_ON_LEVELS:
        raise ValueError(f"fail_on must be one of {', '.join(FAIL_ON_LEVELS)}, not {fail_on!r}")
    if baseline is not None and not isinstance(baseline, BaselineComparison):
        baseline = BaselineComparison.from_dict(dict(baseline))
    reasons: list[str] = []
    rules: set[str] = set()
    if fail_on != "never":
        hits = [f for f in findings if SEVERITY_RANK[f.severity] >= SEVERITY_RANK[fail_on]]
        if hits:
            reasons.append(f"{len(hits)} finding(s) at or above {fail_on}")
            rules.update(f.rule for f in hits)
    verdict = baseline.verdict if baseline else None
    # Each axis of the comparison by its own verdict.
    step_time = baseline.step_time_verdict if baseline else None
    quality = baseline.quality if baseline else None
    quality_verdict = quality.verdict if quality else None
    if step_time == "regression":
        reasons.append("a step-time regression against the baseline")
        rules.add(REGRESSION_RULE)
    if quality_verdict == "regression":
        reasons.append(f"a training-quality regression against the baseline ({quality_reason(quality)})")
        rules.add(QUALITY_REGRESSION_RULE)
    if fail_on_inconclusive:
        if step_time == "inconclusive":
            reasons.append("the baseline comparison is inconclusive (--fail-on-inconclusive)")
            rules.add(REGRESSION_RULE)
        if quality_verdict == "inconclusive":
            reasons.append("the training-quality comparison is inconclusive (--fail-on-inconclusive)")
            rules.add(QUALITY_REGRESSION_RULE)
    return Gate(
        fail_on=fail_on,
        fail_on_inconclusive=fail_on_inconclusive,
        tripped=bool(reasons),
        reasons=tuple(reasons),
        tripping_rules=frozenset(rules),
        baseline_verdict=verdict,
    )


def quality_reason(quality: QualityComparison) -> str:
    """The regressed metrics in a few words: `family key median a -> b`."""
    parts = []
    for entry in quality.regressed():
        stats = entry.get("statistics") or {}
        before, after = stats.get("median_baseline"), stats.get("median_candidate")
        numbers = f" {before:.4g} -> {after:.4g}" if before is not None and after is not None else ""
        parts.append(f"{entry['family']} {entry['key_candidate']}{numbers}")
    return ", ".join(parts) or "see the baseline block"


def decide(result: Analysis, *, fail_on: str = "never", fail_on_inconclusive: bool = False) -> Analysis:
    """Set `result.verdict` and `result.gate` from its findings, outcomes and baseline comparison."""
    writers = result.run_summary.writers
    result.verdict = decide_verdict(
        result.findings, result.outcomes, result.run_summary.account, writers=len(writers or ())
    )
    result.summary["quality_cause"] = quality_summary(result.verdict)
    result.gate = decide_gate(
        result.findings, result.baseline, fail_on=fail_on, fail_on_inconclusive=fail_on_inconclusive
    )
    return result
