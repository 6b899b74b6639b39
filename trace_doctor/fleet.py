"""Many runs side by side: each run analysed on its own, in parallel processes, then summed up as a fleet.

Every run gets its own tables, rules, verdict, gate and report, exactly as if it had been named
alone; what comes back to the parent is a small picklable `RunReport` (the run's JSON document, its
verdict and gate, a row for the fleet table, its step times for the overview chart, and the run's
own rendering of the output format asked for), so memory stays bounded by the number of workers.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_doctor.crash_report import describe, write_traceback
from trace_doctor.ingest.parsers.config import find_setting
from trace_doctor.model import PassedOver
from trace_doctor.peers import fleet_peers
from trace_doctor.runs import RunSource
from trace_doctor.settings import Settings
from trace_doctor.whole_file import replacing

# Config keys compared across runs in the overview (a sweep varies these), in display order.
SWEEP_KEYS = (
    "model_name",
    "renderer_name",
    "learning_rate",
    "lora_rank",
    "batch_size",
    "group_size",
    "groups_per_batch",
    "max_tokens",
    "temperature",
    "kl_penalty_coef",
    "num_substeps",
    "loss_fn",
)
# Points of a run's step-time series kept for the overview chart.
MAX_SERIES_POINTS = 600
# Formats whose fleet output is made of each run's own rendering.
PER_RUN_FORMATS = ("markdown", "junit", "sarif")
STATUS_ORDER = {"error": 0, "warning": 1, "failed": 2, "info": 3, "limited": 4, "clear": 5}
# Verdicts whose runs' environments are compared (environment-diff across a folder): a run that went
# well against one that did not. "limited" (too little to judge) and "failed" (not analysed) are neither.
HEALTHY_VERDICTS = ("clear", "info")
FAILING_VERDICTS = ("error", "warning")


@dataclass
class RunReport:
    """One run's analysis, reduced to what fleet outputs show."""

    source: RunSource
    document: dict[str, Any] | None = None
    status: str = "failed"  # the verdict's status, or "failed" when the run could not be analysed
    headline: str = ""
    gate_tripped: bool = False
    gate_reasons: tuple[str, ...] = ()
    main_finding: dict[str, Any] | None = None
    # The verdict's training-quality finding (summary.quality_cause), when it is not the main finding.
    quality_finding: dict[str, Any] | None = None
    seconds_lost: float | None = None
    config: dict[str, Any] = field(default_factory=dict)
    step_series: list[tuple[int, float]] = field(default_factory=list)
    rendered: str | None = None
    html_path: str | None = None
    dataset_rows: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    # A bug while analysing the run (not a problem with its files): the fleet still reports, the
    # command exits 3. `crash_log` is where the traceback was written (None: nowhere could be).
    internal_error: bool = False
    crash_log: str | None = None
    html_error: str | None = None  # the run's HTML report could not be written (the analysis stands)
    notes: list[str] = field(default_factory=list)  # about the machine, not the run (e.g. the cache)
    # What the run recorded about the environment that trained it (derive.environment_diff.run_environment).
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def sort_key(self) -> tuple:
        """Runs that need attention first: worst verdict, then most seconds lost, then name."""
        return (STATUS_ORDER.get(self.status, 9), -(self.seconds_lost or 0.0), self.source.label)

    @property
    def row(self) -> dict[str, Any]:
        doc = self.document or {}
        run = doc.get("run", {})
        summary = doc.get("summary") or {}
        return {
            "run": self.source.label,
            "run_id": self.source.run_id,
            "trainer": run.get("trainer"),
            "model": run.get("model_name"),
            "steps": run.get("steps"),
            "steady_step_time_s": summary.get("steady_step_time_s"),
            "verdict": self.status,
            "main_finding": self.main_finding,
            "quality_finding": self.quality_finding,
            "seconds_lost": self.seconds_lost,
            "gate_tripped": self.gate_tripped,
            "error": self.error,
        }


@dataclass
class Fleet:
    """Every run's report, in the order the fleet table shows them."""

    reports: list[RunReport]
    # Files under the folders named that belong to no single run, with the reason.
    passed_over: list[PassedOver] = field(default_factory=list)

    @property
    def gate_tripped(self) -> bool:
        return any(r.gate_tripped for r in self.reports)

    @property
    def analysed(self) -> list[RunReport]:
        return [r for r in self.reports if r.document is not None]

    @property
    def internal_errors(self) -> list[RunReport]:
        return [r for r in self.reports if r.internal_error]

    @property
    def notes(self) -> list[str]:
        """Every worker's notes, each once."""
        return list(dict.fromkeys(note for r in self.reports for note in r.notes))

    def summary(self) -> dict[str, Any]:
        """The `fleet` block of the multi-run JSON document."""
        counts: dict[str, int] = {}
        for report in self.reports:
            counts[report.status] = counts.get(report.status, 0) + 1
        return {
            "runs": len(self.reports),
            "analysed": len(self.analysed),
            "verdicts": dict(sorted(counts.items())),
            "gate_tripped": self.gate_tripped,
            "tripped_runs": [r.source.label for r in self.reports if r.gate_tripped],
            "passed_over": [{"path": p.path, "reason": p.reason} for p in self.passed_over],
            "environment": self.environment_differences(),
            "table": [r.row for r in self.reports],
        }

    def environment_differences(self) -> dict[str, Any]:
        """environment-diff across the folder: the recorded facts (package versions, Python, machine,
        cookbook commit) where a failing run has a value no healthy run has, and
        the analysed runs that recorded no environment (what to capture: derive.environment_diff.CAPTURE)."""
        from trace_doctor.derive.environment_diff import compare_groups, recorded_aspects

        recorded = [r for r in self.analysed if recorded_aspects(r.environment)]
        unrecorded = sorted({r.source.label for r in self.analysed} - {r.source.label for r in recorded})
        healthy = {r.source.label: r.environment for r in recorded if r.status in HEALTHY_VERDICTS}
        failing = {r.source.label: r.environment for r in recorded if r.status in FAILING_VERDICTS}
        return {
            "healthy_runs": len(healthy),
            "failing_runs": len(failing),
            "differences": compare_groups(healthy, failing) if healthy and failing else [],
            "unrecorded_runs": unrecorded,
        }


def _config_subset(config: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """The sweep settings of a run, wherever its config.json nests them (SL keeps batch_size two levels down)."""
    found = {}
    for key in SWEEP_KEYS:
        value = meta.get(key)
        if value is None:
            value = find_setting(config, key)
        if isinstance(value, (str, int, float, bool)):
            found[key] = value
    return found


def _series(step_times) -> list[tuple[int, float]]:
    if step_times is None or "total_s" not in step_times.columns or step_times.is_empty():
        return []
    rows = [
        (int(s), float(t))
        for s, t in step_times.select("step", "total_s").drop_nulls().iter_rows()
        if isinstance(t, float) and math.isfinite(t)
    ]
    stride = max(1, math.ceil(len(rows) / MAX_SERIES_POINTS))
    return rows[::stride]


def analyze_source(
    source: RunSource,
    settings: Settings,
    *,
    fmt: str = "json",
    html_dir: str | None = None,
    baseline: str | None = None,
    dataset_dir: str | None = None,
    redact: bool = False,
    plotly_src: str | None = None,
    peers: dict[str, Any] | None = None,
) -> RunReport:
    """Analyse one run (in a worker process): its document, verdict, gate, row and own rendering.

    `redact`: the run (and the baseline) lose their credentials before the rules read them, and a
    failed run's reason (which may quote a path or a line) is redacted too. `plotly_src`: the run's
    HTML page loads plotly.js from this file in `html_dir` instead of inlining it. `peers`: facts about
    the folder's other runs (peers.fleet_peers) the rules read in `run.peers`.
    """
    from trace_doctor.ingest.storage import cache

    report = RunReport(source=source)
    try:
        _analyze_into(
            report,
            settings,
            fmt=fmt,
            html_dir=html_dir,
            baseline=baseline,
            dataset_dir=dataset_dir,
            redact=redact,
            plotly_src=plotly_src,
            peers=peers or {},
        )
    except Exception as exc:  # noqa: BLE001 - one broken run never breaks the fleet
        _internal_error(report, describe(exc), write_traceback(exc, context=f"analysing {source.label}"))
    if redact and report.error:
        from trace_doctor.redact import redact_text

        report.error, report.headline = redact_text(report.error), redact_text(report.headline)
    report.notes = cache.take_notes()
    return report


def _internal_error(report: RunReport, what: str, crash_log: str | None) -> RunReport:
    report.document = None
    report.status, report.error = "failed", f"internal error: {what}"
    report.headline = f"not analysed: {report.error}"
    report.internal_error, report.crash_log = True, crash_log
    return report


def _analyze_into(
    report: RunReport,
    settings: Settings,
    *,
    fmt: str,
    html_dir: str | None,
    baseline: str | None,
    dataset_dir: str | None,
    redact: bool,
    plotly_src: str | None = None,
    peers: dict[str, Any],
) -> RunReport:
    from trace_doctor import result_cache
    from trace_doctor.api import NothingToAnalyze
    from trace_doctor.derive.environment_diff import run_environment
    from trace_doctor.report import formats
    from trace_doctor.report.json_doc import build_document

    source = report.source
    request = result_cache.Request(
        (source.root,) if source.whole_folder else source.files,
        settings,
        baseline,
        redact,
        naming=(
            source.path,
            source.whole_folder,
            tuple((p.path, p.reason) for p in source.passed_over),
            *((tuple(sorted((k, tuple(v)) for k, v in peers.items())),) if peers else ()),
        ),
    )
    try:
        result = result_cache.cached(
            request,
            compute=lambda: _fresh_analysis(source, settings, baseline, redact, peers),
            reload=lambda: source_tables(source, redact),
        )
    except NothingToAnalyze as exc:
        report.error, report.headline = str(exc), f"not analysed: {exc}"
        return report
    run = result.run
    report.document = build_document(result)
    report.status, report.headline = result.verdict.status, result.verdict.headline
    report.gate_tripped, report.gate_reasons = result.gate.tripped, result.gate.reasons
    lead = result.verdict.main
    if lead is not None:
        report.main_finding = {"rule": lead.rule, "code": lead.code, "title": lead.title, "severity": lead.severity}
        report.seconds_lost = lead.seconds_lost
    quality = result.verdict.quality
    if quality is not None and quality is not lead:
        report.quality_finding = {
            "rule": quality.rule,
            "code": quality.code,
            "title": quality.title,
            "severity": quality.severity,
        }
    account = result.run_summary.account
    if account and account.lost_s:
        # The triage's seconds never overlap, so a run's loss is their sum (problems only, not warm-up).
        report.seconds_lost = account.lost_s
    report.config = _config_subset(run.meta.config, run.meta.to_dict())
    report.environment = result.derived.get("environment") or run_environment(run)
    report.step_series = _series(result.derived.get("step_times"))
    if fmt in PER_RUN_FORMATS:
        report.rendered = formats.render(result, fmt)
    if dataset_dir is not None:
        from trace_doctor.report.parquet import write_run_partition

        try:
            report.dataset_rows = write_run_partition(result, Path(dataset_dir), source.run_id, source.path)
        except OSError as exc:
            report.document, report.status = None, "failed"
            report.error = f"cannot write its tables to {dataset_dir}: {exc.strerror or exc}"
            return report
    if html_dir is not None:
        from trace_doctor.report.html import write_html

        target = Path(html_dir) / f"{source.run_id}.html"
        try:
            with replacing(target, make_folder=True) as temp:
                write_html(result, temp, plotly_src=plotly_src)
            report.html_path = str(target)
        except OSError as exc:  # the analysis stands without its page; the command says so once
            report.html_error = f"cannot write {target}: {exc.strerror or exc}"
    return report


def source_tables(source: RunSource, redact: bool):
    """The run's tables as the fleet reads them (redacted when asked), named as the fleet names it."""
    from trace_doctor.api import load_run

    run = load_run(source.root) if source.whole_folder else load_run(*source.files)
    run.meta.path = source.path
    if not source.whole_folder:
        run.passed_over = [*source.passed_over, *run.passed_over]
    if redact:
        from trace_doctor.redact import redact_run

        run = redact_run(run)
    return run


def _fresh_analysis(
    source: RunSource, settings: Settings, baseline: str | None, redact: bool, peers: dict[str, Any] | None = None
):
    """Analyse the run (and compare it with the baseline): raises NothingToAnalyze for either."""
    from trace_doctor.api import analyze

    run = source_tables(source, redact)
    run.peers = dict(peers or {})
    base = _baseline_run(baseline, redact) if baseline else None
    return analyze(run, settings=settings, baseline=base)


@functools.cache
def _baseline_run(path: str, redact: bool = False):
    """The baseline's tables, read (and redacted) once per process however many runs compare against it."""
    run = one_run_tables(path)
    if redact:
        from trace_doctor.redact import redact_run

        run = redact_run(run)
    return run


def one_run_tables(path: str):
    """The tables of the one run `path` names: the whole folder, or a folder's own run without the runs
    nested below it (runs.folder_run). Raises NothingToAnalyze when there is nothing to read."""
    from trace_doctor.api import load_run
    from trace_doctor.runs import folder_run, split_runs

    runs = split_runs([path]).runs
    own = folder_run([path], runs) if len(runs) > 1 else None
    return source_tables(own, False) if own is not None else load_run(path)


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def analyze_sources(
    sources: list[RunSource],
    settings: Settings,
    *,
    jobs: int | None = None,
    fmt: str = "json",
    html_dir: str | None = None,
    baseline: str | None = None,
    dataset_dir: str | None = None,
    redact: bool = False,
) -> Fleet:
    """Analyse every run, `jobs` at a time in separate processes; reports sorted for attention."""
    cores = default_jobs()
    requested = jobs
    jobs = max(1, min(jobs or cores, len(sources)))
    if requested is None:
        # A worker costs ~0.4 s to start (python + polars): small fleets are faster in one process
        # (benchmarks/RESULTS.md, many runs). An explicit --jobs is obeyed.
        jobs = min(jobs, max(1, math.ceil(_input_bytes(sources) / BYTES_PER_WORKER)))
    options = {
        "fmt": fmt,
        "html_dir": html_dir,
        "baseline": baseline,
        "dataset_dir": dataset_dir,
        "redact": redact,
        "plotly_src": _shared_plotly(html_dir),
    }
    peers = fleet_peers(sources) if len(sources) > 1 else {}
    if jobs == 1:
        reports = [analyze_source(source, settings, **options, peers=peers.get(source.run_id)) for source in sources]
    else:
        # spawn, not fork: polars' thread pool does not survive a fork of a process that used it.
        context = multiprocessing.get_context("spawn")
        # Each worker's polars pool would take every core: N workers x N threads thrash (-17% wall
        # with one thread per worker at --jobs 2). Workers inherit the environment when spawned.
        saved = os.environ.get("POLARS_MAX_THREADS")
        if saved is None:
            os.environ["POLARS_MAX_THREADS"] = str(max(1, cores // jobs))
        try:
            # Largest runs first, so a big one never starts last while the other workers idle.
            order = sorted(sources, key=lambda s: -_input_bytes([s]))
            reports, unfinished = _in_pool(order, settings, jobs, context, options, peers)
            # A worker that died (killed for memory, a crash in native code) breaks the whole pool:
            # the runs it took down with it are analysed again, each in a process of its own, so
            # only the run that kills its worker is a failed row.
            reports += [
                _in_own_process(source, settings, context, options | {"peers": peers.get(source.run_id)})
                for source in unfinished
            ]
        finally:
            if saved is None:
                os.environ.pop("POLARS_MAX_THREADS", None)
    return Fleet(sorted(reports, key=lambda r: r.sort_key))


def _shared_plotly(html_dir: str | None) -> str | None:
    """Write plotly.js once into the per-run pages' folder, before any worker writes a page that loads
    it (~4.6 MB a page otherwise: 2.4 GB of HTML for 500 runs). Its name for the pages, or None when
    it cannot be written: the pages then inline it as a single run's report does."""
    if html_dir is None:
        return None
    from trace_doctor.report.html import SHARED_PLOTLY, write_shared_plotly

    try:
        write_shared_plotly(Path(html_dir))
    except OSError:
        return None  # a folder that takes no file takes no page either: each run's row says so
    return SHARED_PLOTLY


def _in_pool(
    sources: list[RunSource],
    settings: Settings,
    jobs: int,
    context,
    options: dict[str, Any],
    peers: dict[str, dict[str, Any]],
):
    """(reports, runs left unfinished because a worker died and broke the pool)."""
    reports: list[RunReport] = []
    unfinished: list[RunSource] = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [
            (source, pool.submit(analyze_source, source, settings, **options, peers=peers.get(source.run_id)))
            for source in sources
        ]
        for source, future in futures:
            try:
                reports.append(future.result())
            except BrokenProcessPool:
                unfinished.append(source)
            except Exception as exc:  # noqa: BLE001 - e.g. a result that cannot be sent back: that run's row
                reports.append(_internal_error(RunReport(source=source), describe(exc), write_traceback(exc)))
    return reports, unfinished


def _in_own_process(source: RunSource, settings: Settings, context, options: dict[str, Any]) -> RunReport:
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        future = pool.submit(analyze_source, source, settings, **options)
        try:
            return future.result()
        except BrokenProcessPool:
            what = "the worker process analysing it died (killed, out of memory, or a crash in native code)"
            return _internal_error(RunReport(source=source), what, None)
        except Exception as exc:  # noqa: BLE001 - as in _in_pool
            return _internal_error(RunReport(source=source), describe(exc), write_traceback(exc))


# Input bytes one worker is worth starting for (a worker's start-up is ~0.4 s; runs are ~20 MB/s).
BYTES_PER_WORKER = 8 * 1024 * 1024


def _input_bytes(sources: list[RunSource]) -> int:
    total = 0
    for source in sources:
        for path in source.files:
            try:
                total += path.stat().st_size
            except OSError:
                continue
    return total
