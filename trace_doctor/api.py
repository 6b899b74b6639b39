"""The Python API the CLI is built on: load a run, analyse it, compare it with a baseline.

>>> from trace_doctor import analyze, load_run, sample_run_path
>>> run = load_run(sample_run_path())
>>> result = analyze(run, fail_on="warning")
>>> result.findings[0].rule, result.verdict.status
('decoded-error', 'error')
>>> result.gate.tripped, result.gate.reasons
(True, ('9 finding(s) at or above warning',))
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from trace_doctor.discover import discover
from trace_doctor.errors import NothingToAnalyze
from trace_doctor.file_names import input_path
from trace_doctor.ingest.read_run import read_run
from trace_doctor.model import Analysis, RunTables
from trace_doctor.policy import Policy
from trace_doctor.settings import Settings


def load_run(*paths: str | os.PathLike[str], progress: Any = None) -> RunTables:
    """Discover and ingest every input under `paths` into one RunTables.

    Raises NothingToAnalyze when a path is missing or nothing readable was found.
    """
    flat: list[str | os.PathLike[str]] = []
    for p in paths:
        flat.extend(p if isinstance(p, (list, tuple)) else [p])
    if not flat:
        raise NothingToAnalyze("no path given")
    found = discover(flat)
    if found.missing:
        raise NothingToAnalyze(f"path does not exist: {', '.join(found.missing)}")
    if found.count == 0:
        examples = "; ".join(f"{Path(p.path).name}: {p.reason}" for p in found.passed_over[:3])
        looked = (
            f" ({len(found.passed_over)} file(s) looked at, none recognised: {examples})" if found.passed_over else ""
        )
        raise NothingToAnalyze(f"no trace-doctor input found in {', '.join(map(str, flat))}{looked}")

    # Every registered input kind parsed into its tables (ingest/read_run.py: the trace on a worker
    # thread, the account of inputs and warnings in the kinds' fixed order).
    run = read_run(found.files, progress=progress)
    run.passed_over = found.passed_over
    run.meta.path = str(input_path(flat[0]))
    warnings = run.warnings

    if run.records_read == 0:
        skipped = run.records_skipped
        raise NothingToAnalyze(
            f"found {found.count} input file(s) but no readable record in them ({skipped} skipped); "
            + "; ".join(f"{w.path}:{w.line or '-'} {w.problem}" for w in warnings[:3])
        )
    return run


def _settings(
    settings: Settings | None,
    *,
    select: list[str] | None,
    ignore: list[str] | None,
    policy: Policy | None,
    overrides: dict[str, dict[str, Any]] | None,
    fail_on: str | None,
    fail_on_inconclusive: bool | None,
) -> Settings:
    """`settings` (defaults if None) with the keyword options applied over it, as the CLI applies flags."""
    chosen = (settings or Settings()).with_options(
        select=select, ignore=ignore, fail_on=fail_on, fail_on_inconclusive=fail_on_inconclusive
    )
    if policy is not None and overrides is not None:
        raise ValueError("give policy= or overrides=, not both")
    if overrides is not None:
        policy = Policy.from_config(rules=overrides)
    return replace(chosen, policy=policy) if policy is not None else chosen


def analyze(
    run: RunTables,
    *,
    settings: Settings | None = None,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    policy: Policy | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    baseline: RunTables | None = None,
    fail_on: str | None = None,
    fail_on_inconclusive: bool | None = None,
) -> Analysis:
    """Run the rules over a loaded run (and compare with a baseline when given); decide verdict and gate.

    `settings` is what `load_settings()` read from a configuration file; the keyword options win over
    it, as command-line options do. `overrides` is `{slug: {threshold: value}}`, checked like a file's.
    """
    from trace_doctor.derive.training_machine import training_machine
    from trace_doctor.rules.engine import run_rules
    from trace_doctor.summary import summarize

    chosen = _settings(
        settings,
        select=select,
        ignore=ignore,
        policy=policy,
        overrides=overrides,
        fail_on=fail_on,
        fail_on_inconclusive=fail_on_inconclusive,
    )
    rule_select, rule_ignore = list(chosen.select) or None, list(chosen.ignore) or None
    findings, outcomes, ctx = run_rules(run, select=rule_select, ignore=rule_ignore, policy=chosen.policy)
    summary = summarize(ctx)
    summary["training_machine"] = training_machine(run)
    # What the run recorded about its environment: the fleet compares runs by it, and a cached analysis
    # answers without reading the log tables it comes from.
    from trace_doctor.derive.environment_diff import run_environment

    derived = {
        "step_times": ctx.step_times,
        "warmup_steps": summary.get("warmup_steps", 0),
        "environment": run_environment(run),
    }
    result = Analysis(
        run=run, findings=findings, outcomes=outcomes, summary=summary, derived=derived, policy=chosen.policy
    )
    if baseline is not None:
        from trace_doctor.comparison import compare_with_baseline

        compare_with_baseline(result, baseline, select=rule_select, ignore=rule_ignore, policy=chosen.policy)
    _triage(result, ctx)
    _decide(result, chosen)
    return result


def _triage(result: Analysis, ctx) -> None:
    """Link symptoms to causes and give each lost second to one cause (trace_doctor.triage)."""
    from trace_doctor.triage import triage

    result.findings, account = triage(
        result.findings,
        wall=ctx.wall,
        step_extents=ctx.step_extents,
        wait_spans=ctx.service_waits,
        step_times=ctx.step_times,
        trainer=ctx.run.meta.trainer,
        clock_cycle=ctx.clock_cycle,
        structure=ctx.loop_phases,
    )
    result.findings.sort(key=lambda f: f.sort_key())
    result.summary["account"] = account


def compare(
    run: RunTables,
    baseline: RunTables,
    *,
    settings: Settings | None = None,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    policy: Policy | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    fail_on: str | None = None,
    fail_on_inconclusive: bool | None = None,
) -> Analysis:
    """Analyse `run` against `baseline`: every rule, plus the regression rules; `result.baseline` holds
    the comparison (verdict "regression", "no regression" or "inconclusive").

        >>> from trace_doctor import compare, load_run, sample_run_path
        >>> result = compare(load_run(sample_run_path()), load_run(sample_run_path()))
        >>> result.baseline["verdict"], result.gate.tripped
        ('no regression', False)
    """
    return analyze(
        run,
        settings=settings,
        select=select,
        ignore=ignore,
        policy=policy,
        overrides=overrides,
        baseline=baseline,
        fail_on=fail_on,
        fail_on_inconclusive=fail_on_inconclusive,
    )


def _decide(result: Analysis, settings: Settings) -> None:
    from trace_doctor.decision import decide

    decide(result, fail_on=settings.fail_on, fail_on_inconclusive=settings.fail_on_inconclusive)


def sample_run_path() -> Path:
    """The sample run shipped inside the package (what `trace-doctor demo` analyses)."""
    from importlib.resources import files

    return Path(str(files("trace_doctor") / "sample_run"))
