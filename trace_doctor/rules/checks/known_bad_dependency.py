"""TD301 known-bad-dependency: versions known to stall runs or corrupt tokens, and the span-timing trap."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from trace_doctor.derive.log_signals import fields_of
from trace_doctor.derive.robust import median
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.knowledge.renderers import is_vision_language
from trace_doctor.knowledge.versions import KnownBadVersion, bad_combinations, bad_versions
from trace_doctor.model import SEVERITY_RANK, Finding
from trace_doctor.policy.environment import KnownBadDependencyPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext

WHERE_VERSIONS_COME_FROM = (
    "runs record versions nowhere explicit; they are read from the debug skill's environment "
    "check / serialization test output (`pydantic: 2.13.0b2`), a W&B requirements.txt, and "
    "site-packages paths in tracebacks or code.diff"
)
SAMPLE_SPAN = ("time/sample_async:mean", "time/sample_async")
POLICY_SAMPLE = ("time/policy_sample:mean", "time/policy_sample")


@dataclass(frozen=True)
class SeenVersion:
    """A package version read from the logs, with the first line that revealed it."""

    package: str
    version: str
    source: str
    line: int | None
    evidence: str
    text: str

    def cite(self) -> dict:
        return {"file": self.source, "line": self.line, "text": self.text[:240], "how": self.evidence}


def seen_versions(log_events: pl.DataFrame) -> list[SeenVersion]:
    """Every distinct (package, version) in the logs, first sighting kept, sorted by package."""
    if log_events.is_empty():
        return []
    rows = log_events.filter(pl.col("kind") == "version").sort("source", "line", nulls_last=True).to_dicts()
    first: dict[tuple[str, str], SeenVersion] = {}
    for row in rows:
        fields = fields_of(row.get("fields"))
        package, version = str(fields.get("package") or ""), str(fields.get("version") or "")
        # code.diff commits (`git:<repo>`) identify a checkout, not a release to check.
        if not package or not version or package.startswith("git:"):
            continue
        key = (package.lower(), version)
        if key not in first:
            first[key] = SeenVersion(
                package.lower(),
                version,
                row["source"],
                row.get("line"),
                str(fields.get("evidence") or "log line"),
                row.get("message") or "",
            )
    return sorted(first.values(), key=lambda v: (v.package, v.version))


def _column(steps: pl.DataFrame, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in steps.columns), None)


def _median(steps: pl.DataFrame, column: str) -> float | None:
    values = [v for v in steps[column].drop_nulls().to_list() if v == v]
    return median(values)


def _span_trap_finding(ctx: RuleContext[KnownBadDependencyPolicy]) -> tuple[Finding | None, bool]:
    """The cookbook<=0.5 + tinker>=0.38 + Python 3.11 signature in metrics, and whether it was checkable."""
    steps = ctx.run.steps
    sample_col, policy_col = _column(steps, SAMPLE_SPAN), _column(steps, POLICY_SAMPLE)
    if sample_col is None or policy_col is None:
        return None, False
    both = steps.filter(pl.col(sample_col).is_not_null() & pl.col(policy_col).is_not_null())
    if both.is_empty():
        return None, False
    sample, policy = _median(both, sample_col), _median(both, policy_col)
    if sample is None or policy is None or policy < float(ctx.thresholds.trap_min_policy_sample_s):
        return None, True
    share = sample / policy
    if share > float(ctx.thresholds.trap_max_sample_share):
        return None, True
    return ctx.finding(
        severity="warning",
        title="SDK spans recorded as near-zero (tinker 0.38 + Python 3.11 trap)",
        message=(
            f"`{sample_col}` has a median of {sample * 1000:.2f} ms while `{policy_col}`, which contains "
            f"it, takes {policy:.2f} s ({len(both)} steps): sample_async is timed as a near-zero sync "
            "call. That happens with tinker-cookbook <=0.5.x + tinker >=0.38 on Python 3.11, where the "
            "@deprecated wrapper hides the coroutine from inspect.iscoroutinefunction; every SDK span "
            "of the run (and rules reading them) under-reports."
        ),
        fix="Upgrade tinker-cookbook to 0.6.1+, or run on Python 3.12+ (or pin tinker<0.38).",
        evidence={
            "sample_span_median_s": sample,
            "policy_sample_median_s": policy,
            "share": round(share, 6),
            "steps": len(both),
            "columns": [sample_col, policy_col],
        },
        fingerprint="known-bad-dependency:cookbook-0.5-tinker-0.38-py311-spans",
    ), True


def _failed_at_startup(ctx: RuleContext[KnownBadDependencyPolicy], record: KnownBadVersion) -> bool:
    """Whether the logs show the failure a startup-scoped record predicts (its fix names the culprit)."""
    if not record.failure_text:
        return False
    messages = ctx.run.log_events["message"]
    return bool(messages.str.contains(record.failure_text).any())


def _scope_note(ctx: RuleContext[KnownBadDependencyPolicy], record: KnownBadVersion) -> tuple[bool, str, str | None]:
    """(applies to this run, note for the message, severity override) for a record limited to some
    runs: vision-language models only, or a failure that stops a run before it trains."""
    if record.scope == "startup":
        trained = not live_training_rows(ctx.run.steps).is_empty()
        if trained and not _failed_at_startup(ctx, record):
            return True, " This run trained, so the failure did not stop it; it may on another machine.", "info"
        return True, "", None
    if record.scope != "vl":
        return True, "", None
    meta = ctx.run.meta
    vision = is_vision_language(meta.model_name, meta.renderer_name)
    if vision is None:
        return True, " It matters only for vision-language models; this run's model is not known.", None
    if not vision:
        return False, f"{record.id} skipped: `{meta.model_name or meta.renderer_name}` is text-only", None
    return True, f" `{meta.model_name or meta.renderer_name}` is a vision-language model.", None


def check(ctx: RuleContext[KnownBadDependencyPolicy]) -> list[Finding]:
    versions = seen_versions(ctx.run.log_events)
    trap, trap_checked = _span_trap_finding(ctx)
    if not versions and not trap_checked:
        raise NotApplicable(f"no version strings found in the inputs: {WHERE_VERSIONS_COME_FROM}")
    findings: list[Finding] = []
    skipped: list[str] = []
    for seen in versions:
        for record in bad_versions(seen.package, seen.version):
            applies, note, severity = _scope_note(ctx, record)
            if not applies:
                skipped.append(note)
                continue
            title = (
                f"Upgrade available: {seen.package} {seen.version}"
                if record.outdated
                else f"Known-bad {seen.package} {seen.version}"
            )
            findings.append(
                ctx.finding(
                    severity=severity or record.severity,
                    title=title,
                    message=(
                        f"{seen.package} {seen.version} (from {seen.evidence}, {seen.source}:{seen.line}) "
                        f"matches {record.specifier}: {record.why}.{note}"
                    ),
                    fix=record.fix,
                    evidence={
                        "package": seen.package,
                        "version": seen.version,
                        "bad_versions": record.specifier,
                        "record": record.id,
                        "line": seen.cite(),
                    },
                    fingerprint=f"known-bad-dependency:{record.id}",
                )
            )
    latest = {seen.package: seen.version for seen in versions}
    for combo in bad_combinations(latest):
        cited = [seen.cite() for seen in versions if seen.package in combo.requirements]
        findings.append(
            ctx.finding(
                severity=combo.severity,
                title="Known-bad combination of versions",
                message=(
                    "Versions "
                    + ", ".join(f"{p} {latest[p]}" for p in sorted(combo.requirements) if p in latest)
                    + f" together: {combo.why}."
                ),
                fix=combo.fix,
                evidence={"combination": combo.id, "requirements": dict(combo.requirements), "lines": cited},
                fingerprint=f"known-bad-dependency:{combo.id}",
            )
        )
    if trap is not None and not any(f.fingerprint and "py311" in f.fingerprint for f in findings):
        findings.append(trap)
    findings.sort(key=lambda f: (-SEVERITY_RANK[f.severity], f.fingerprint or ""))
    if findings:
        return findings
    checked = ", ".join(f"{v.package} {v.version}" for v in versions)
    return ctx.passed(
        (f"no known-bad version among {checked}" if versions else "no version strings found")
        + "".join(f"; {note}" for note in skipped)
        + ("; SDK span timings are consistent" if trap_checked else "")
    )


RULE = register(
    Rule(
        slug="known-bad-dependency",
        code="TD301",
        title="Known-bad dependency versions",
        severity="warning",
        needs=(
            "version strings in logs (environment check, serialization test, requirements.txt, site-packages "
            "paths) or SDK span metrics"
        ),
        docs=RuleDocs(
            what=(
                "pydantic 2.13 pre-releases, transformers 5.3.0 / 5.4.* / 5.5.0-5.5.3 / 5.6.*, transformers <5.0 "
                "for vision-language models only (model or renderer says VL), litellm 1.82.7-1.82.8, Python 3.14, "
                "tinker <0.3.0 (rejected by the service; 0.3.0-0.22.x is info: upgrade available), any pre-release "
                "core dependency, and "
                "the cookbook<=0.5 + tinker>=0.38 + Python 3.11 combination (also recognised from "
                "metrics: `time/sample_async:mean` near 0 while `time/policy_sample` is large)."
            ),
            why=(
                "These versions stall serialization for minutes, load the wrong tokenizer, miscount "
                "image tokens, were compromised, or make the run's own timings lie."
            ),
            evidence=(
                "Each version with the file and line it was read from and the known-bad range it "
                "falls in; for the timing trap, the median sample_async and policy_sample times."
            ),
            fix="The fix of the matching record (FORMATS.md §7): pin or upgrade the named package.",
        ),
        check=check,
        policy=KnownBadDependencyPolicy,
        stage="environment",
        tags=("logs", "metrics"),
    )
)
