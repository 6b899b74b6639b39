"""Build RunTables for rule tests: synthetic metrics rows, fixture runs, corpus files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trace_doctor.ingest.parsers.config import parse_config, trainer_from_metric_keys
from trace_doctor.ingest.parsers.metrics import build_steps_frame, parse_metrics_files
from trace_doctor.model import RunMeta, RunTables
from trace_doctor.policy import Policy
from trace_doctor.rules.engine import run_rules

TIMING_AND_KL = [
    "get-batch-bottleneck",
    "inconsistent-step-times",
    "kl-drift",
    "pipelining-gap",
    "renderer-kl-step0",
    "steady-slowness",
    "warmup-slowness",
]


def run_from_rows(rows: list[dict[str, Any]], **meta: Any) -> RunTables:
    run = RunTables(meta=RunMeta(**meta))
    run.steps = build_steps_frame(rows, list(range(1, len(rows) + 1)), "metrics.jsonl", run.warnings)
    if run.meta.trainer == "unknown":
        run.meta.trainer = trainer_from_metric_keys(run.steps.columns)
    return run


def load_dir(path: Path) -> RunTables:
    """Load metrics, config and trace of a run directory (or a lone metrics file)."""
    run = RunTables()
    directory = path if path.is_dir() else path.parent
    metrics = [directory / "metrics.jsonl"] if path.is_dir() else [path]
    config = directory / "config.json"
    if config.exists():
        run.meta, _ = parse_config(config, run.warnings)
    run.steps, _ = parse_metrics_files(metrics, run.warnings)
    trace = directory / "trace_events.jsonl"
    if path.is_dir() and trace.exists():
        from trace_doctor.ingest.trace.trace_events import parse_trace_files

        run.spans, _ = parse_trace_files([trace], run.warnings)
    if run.meta.trainer == "unknown":
        run.meta.trainer = trainer_from_metric_keys(run.steps.columns)
    return run


def findings(run: RunTables, rules: list[str] | None = None, overrides: dict | None = None):
    policy = Policy.from_config(rules=overrides) if overrides else None
    found, outcomes, ctx = run_rules(run, select=rules or TIMING_AND_KL, policy=policy)
    return found, {o.rule: o for o in outcomes}, ctx


def by_rule(found) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in found:
        out.setdefault(f.rule, []).append(f)
    return out


def expected(path: Path) -> dict:
    return json.loads((path / "EXPECTED.json").read_text())
