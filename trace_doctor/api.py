"""The Python API the CLI is built on: load_run(paths) -> RunTables; analyze(run) -> Analysis.

>>> from trace_doctor import load_run, analyze
>>> run = load_run("path/to/log_path")          # doctest: +SKIP
>>> result = analyze(run)                        # doctest: +SKIP
>>> [f.rule for f in result.findings]            # doctest: +SKIP
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from trace_doctor.discover import discover
from trace_doctor.ingest.checkpoints import parse_checkpoint_files
from trace_doctor.ingest.config import parse_config, trainer_from_metric_keys
from trace_doctor.ingest.dumps import parse_dump_files
from trace_doctor.ingest.logs import parse_log_files
from trace_doctor.ingest.metrics import parse_metrics_files
from trace_doctor.ingest.profiles import parse_profile_files
from trace_doctor.ingest.timing_spans import parse_timing_spans_files
from trace_doctor.ingest.trace_events import parse_trace_files
from trace_doctor.model import Analysis, IngestWarning, RunMeta, RunTables


class NothingToAnalyze(Exception):
    """The paths do not exist or hold no readable input (the CLI exits 2 with this message)."""


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

    run = RunTables()
    run.passed_over = found.passed_over
    warnings = run.warnings
    files = found.files

    # The trace is by far the largest input: it is read on a worker thread (polars releases the
    # GIL) while the other inputs are read here. timing_spans.jsonl, the next largest, waits until
    # the trace's bytes are read, so it shares the machine with span building (which leaves part of
    # it idle) rather than with the read (which does not). Each parser gets its own warning list,
    # merged in a fixed order, so the account never depends on thread timing.
    trace_read = threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-ingest") as pool:
        trace_warnings: list[IngestWarning] = []
        trace_future = pool.submit(
            parse_trace_files, files["trace"], trace_warnings, progress=progress, on_read=trace_read.set
        )
        meta = RunMeta()
        for path in files["config"]:
            meta, info = parse_config(path, warnings)
            run.inputs.append(info)
        run.steps, infos = parse_metrics_files(files["metrics"], warnings)
        run.inputs += infos
        later_warnings: list[IngestWarning] = []
        run.checkpoints, checkpoint_infos = parse_checkpoint_files(files["checkpoints"], later_warnings)
        run.frames, run.profiles, profile_infos = parse_profile_files(files["profile"], later_warnings)
        run.task_snapshots, run.stack_snapshots, dump_infos = parse_dump_files(files["dump"], later_warnings)
        # Dumps are usually captured stdout, which also carries GIL-monitor and SDK lines.
        run.log_events, log_infos = parse_log_files(files["log"] + files["dump"] + files["code_diff"], later_warnings)
        trace_read.wait()
        span_warnings: list[IngestWarning] = []
        run.step_spans, span_infos = parse_timing_spans_files(files["spans"], span_warnings)
        later_inputs = span_infos + checkpoint_infos + profile_infos + dump_infos + log_infos
        later_warnings = span_warnings + later_warnings
        run.spans, infos = trace_future.result()
    run.inputs += infos + later_inputs
    warnings += trace_warnings + later_warnings

    first = Path(flat[0])
    meta.path = str(first)
    if meta.trainer == "unknown":
        meta.trainer = trainer_from_metric_keys(run.steps.columns)
    run.meta = meta

    if run.records_read == 0:
        skipped = run.records_skipped
        raise NothingToAnalyze(
            f"found {found.count} input file(s) but no readable record in them ({skipped} skipped); "
            + "; ".join(f"{w.path}:{w.line or '-'} {w.problem}" for w in warnings[:3])
        )
    return run


def analyze(
    run: RunTables,
    *,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    baseline: RunTables | None = None,
) -> Analysis:
    """Run the rules over a loaded run (and compare with a baseline when given)."""
    from trace_doctor.rules.engine import run_rules
    from trace_doctor.summary import summarize

    findings, outcomes, ctx = run_rules(run, select=select, ignore=ignore, overrides=overrides)
    summary = summarize(ctx)
    derived = {"step_times": ctx.step_times, "warmup_steps": summary.get("warmup_steps", 0)}
    result = Analysis(run=run, findings=findings, outcomes=outcomes, summary=summary, derived=derived)
    if baseline is not None:
        from trace_doctor.compare import compare

        compare(result, baseline, select=select, ignore=ignore, overrides=overrides)
    return result
