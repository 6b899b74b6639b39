"""Runs named by their paths, analysed as every command analyses them: one run, or several (each alone,
then summed up as a fleet), with a baseline, redaction and the result cache.

Two steps, so a caller can refuse a request before anything is read: `find_runs` splits the paths into
runs and checks the outputs against their files; `analyze_paths` analyses what it found.

    >>> from trace_doctor import analyze_paths, find_runs, sample_run_path
    >>> named = find_runs([str(sample_run_path())], outputs=(("--output", "report.json"),))
    >>> answer = analyze_paths(named, fail_on="warning")
    >>> answer.analysis.verdict.status, answer.fleet, answer.gate_tripped
    ('error', None, True)
    >>> find_runs([str(sample_run_path())], outputs=(("-o", str(sample_run_path() / "metrics.jsonl")),))
    Traceback (most recent call last):
    ...
    trace_doctor.errors.OutputRefused: -o .../metrics.jsonl is one of the run's input files; ...

Heavy modules (ingest, the rules, the fleet's process pool) are imported when first used, so importing
this one costs nothing on a command that does not analyse.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trace_doctor.errors import NothingToAnalyze, RequestError
from trace_doctor.outputs import Output, check_outputs, fleet_pages_dir
from trace_doctor.settings import Settings

if TYPE_CHECKING:
    from trace_doctor.fleet import Fleet
    from trace_doctor.model import Analysis, RunTables
    from trace_doctor.runs import RunSource, RunSplit

# What an analysis needs after ingest; imported while the inputs are read, since ingest spends most
# of its time in polars (which releases the GIL) and a large run's analysis waits on both.
# numpy.ma: np.median imports it on first use (its NaN check), ~20 ms inside the clock-cycle fit.
ANALYSIS_MODULES = (
    "trace_doctor.rules.engine",
    "trace_doctor.summary",
    "trace_doctor.triage",
    "trace_doctor.decision",
    "trace_doctor.derive.training_machine",
    "trace_doctor.report.formats",
    "trace_doctor.report.json_doc",
    "numpy.ma",
)

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class NamedRuns:
    """The runs the paths hold, found (and the outputs checked against their files) before anything is read."""

    paths: tuple[str, ...]
    split: RunSplit
    # The one run a command of one run reads when the folder named is a run holding others below it.
    own_run: RunSource | None = None

    @property
    def several(self) -> bool:
        """Several runs, analysed as a fleet (never merged into one)."""
        return self.own_run is None and len(self.split.runs) > 1


@dataclass(frozen=True)
class PathsAnalysis:
    """What `analyze_paths` found: one run's `analysis`, or (several runs) the `fleet` of their reports."""

    analysis: Analysis | None = None
    fleet: Fleet | None = None
    # The format each run of a fleet was rendered in beside its analysis (report.fleet's per-run formats).
    fleet_format: str = "json"
    # Where each run of a fleet has its HTML page, when the fleet was analysed for an HTML overview.
    pages_dir: Path | None = None

    @property
    def gate_tripped(self) -> bool:
        """Exactly when the command exits 1: the run's gate, or any run's in a fleet."""
        return self.fleet.gate_tripped if self.fleet is not None else bool(self.analysis and self.analysis.gate.tripped)

    @property
    def notes(self) -> list[str]:
        """What the fleet's workers noted about this machine (e.g. a cache folder that cannot be written)."""
        return self.fleet.notes if self.fleet is not None else []


def find_runs(
    paths: Sequence[str | os.PathLike[str]],
    *,
    baseline: str | None = None,
    outputs: Sequence[Output] = (),
    one_run: bool = False,
    require_runs: bool = False,
) -> NamedRuns:
    """The runs under `paths`, checked before anything is read.

    Raises `OutputRefused` when an output (`(name, path)` pairs, named in messages as given) is one of the
    runs' or the baseline's input files, or two outputs name one file; `RequestError` when the baseline
    (or, with `one_run`, the paths) hold several runs. With `require_runs`, NothingToAnalyze when a path
    is missing or no run is found (else loading the run says so).
    """
    from trace_doctor.runs import split_runs

    if baseline:
        _one_run((baseline,), "baseline: ", outputs)
    if one_run:
        split, own = _one_run(tuple(paths), "", outputs)
        return NamedRuns(tuple(map(str, paths)), split, own)
    split = split_runs(list(paths))
    if require_runs and split.missing:
        raise NothingToAnalyze(f"path does not exist: {', '.join(split.missing)}")
    if require_runs and not split.runs:
        raise NothingToAnalyze(f"no trace-doctor input found in {', '.join(map(str, paths))}")
    check_outputs(_inputs(split.runs), outputs)
    return NamedRuns(tuple(map(str, paths)), split)


def _inputs(runs: list[RunSource]) -> list[Path]:
    return [f for run in runs for f in run.files]


def _one_run(paths: tuple[str, ...], what: str, outputs: Sequence[Output]) -> tuple[RunSplit, RunSource | None]:
    """The split of `paths` and None when they hold one run (read them as named); the folder's own run when
    the one folder named is a run that also holds others below it (runs.folder_run); else RequestError
    naming the runs (a trace, a bundle or a baseline is of one run: read as one, a folder of runs would be
    merged into one). `what` prefixes the message."""
    from trace_doctor.runs import folder_run, split_runs

    split = split_runs(list(paths))
    runs = split.runs
    check_outputs(_inputs(runs), outputs)
    if len(runs) <= 1:
        return split, None
    own = folder_run(list(paths), runs)
    if own is None:
        names = ", ".join(run.path for run in runs[:3]) + (", ..." if len(runs) > 3 else "")
        raise RequestError(f"{what}{', '.join(paths)} holds {len(runs)} runs; name one of them ({names})")
    return split, own


def analyze_paths(
    paths: NamedRuns | Sequence[str | os.PathLike[str]],
    settings: Settings | None = None,
    *,
    baseline: str | None = None,
    redact: bool = False,
    jobs: int | None = None,
    fmt: str = "json",
    html: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    fail_on: str | None = None,
    fail_on_inconclusive: bool | None = None,
) -> PathsAnalysis:
    """Analyse the runs `paths` hold (or what `find_runs` found in them), each alone.

    One run: its Analysis, the stored one when nothing it depends on changed (result_cache.py).
    Several: each in its own process (`jobs` at a time), reduced to a `Fleet`; `fmt` is the format
    the fleet will be rendered in (markdown, JUnit and SARIF are made of each run's own rendering,
    done beside its analysis) and `html`, when given, is where its HTML overview will be written:
    each run's page goes beside it (`fleet_pages_dir`). `redact` removes credentials before the
    rules read anything; `baseline` is one run to compare every run with. `progress(label, done,
    total)` hears of long reads. `select`, `ignore`, `fail_on` and `fail_on_inconclusive` win over
    `settings`, as `analyze`'s do.

    Raises `NothingToAnalyze` (a path, or the baseline, holds nothing readable) or `RequestError`
    (a setting names an unknown rule, the baseline holds several runs).
    """
    named = paths if isinstance(paths, NamedRuns) else find_runs(paths, baseline=baseline)
    chosen = (settings or Settings()).with_options(
        select=select, ignore=ignore, fail_on=fail_on, fail_on_inconclusive=fail_on_inconclusive
    )
    if named.several:
        fleet = _analyze_fleet(named.split, chosen, baseline=baseline, redact=redact, jobs=jobs, fmt=fmt, html=html)
        return PathsAnalysis(fleet=fleet, fleet_format=fmt, pages_dir=fleet_pages_dir(html) if html else None)
    analysis = _cached_analysis(named.paths, chosen, baseline, redact=redact, source=named.own_run, progress=progress)
    return PathsAnalysis(analysis=analysis)


def _analyze_fleet(
    split: RunSplit,
    settings: Settings,
    *,
    baseline: str | None,
    redact: bool,
    jobs: int | None,
    fmt: str,
    html: str | os.PathLike[str] | None,
) -> Fleet:
    """Several runs: each analysed alone in its own process; one table, one document, one gate."""
    from trace_doctor.fleet import analyze_sources

    if redact:
        from trace_doctor.redact import redact_split

        split = redact_split(split)  # the runs' names and paths, as every fleet output shows them
    if baseline:
        _baseline_tables(baseline)  # refused here, once, rather than in every run's row
    pages = str(fleet_pages_dir(html)) if html else None
    fleet = analyze_sources(split.runs, settings, jobs=jobs, fmt=fmt, html_dir=pages, baseline=baseline, redact=redact)
    fleet.passed_over = split.passed_over
    return fleet


def _baseline_tables(baseline: str) -> RunTables:
    from trace_doctor.fleet import one_run_tables

    try:
        return one_run_tables(baseline)
    except NothingToAnalyze as exc:
        raise NothingToAnalyze(f"baseline: {exc}") from exc


def _cached_analysis(
    paths: tuple[str, ...],
    settings: Settings,
    baseline: str | None,
    *,
    redact: bool,
    source: RunSource | None,
    progress: Progress | None,
) -> Analysis:
    """The analysis of `paths` (or of `source`, one run of them): the stored one when nothing it depends
    on changed (result_cache.py)."""
    from trace_doctor import result_cache

    if source is not None:
        passed = tuple((p.path, p.reason) for p in source.passed_over)
        request = result_cache.Request(source.files, settings, baseline, redact, naming=(source.path, False, passed))
    else:
        request = result_cache.Request(tuple(paths), settings, baseline, redact)
    return result_cache.cached(
        request,
        compute=lambda: _fresh_analysis(paths, settings, baseline, redact=redact, source=source, progress=progress),
        reload=lambda: _tables(paths, redact=redact, source=source),
    )


def _tables(paths: tuple[str, ...], *, redact: bool, source: RunSource | None) -> RunTables:
    """The run's tables read again, for a renderer of a stored analysis that needs them."""
    from trace_doctor.api import load_run

    if source is not None:
        from trace_doctor.fleet import source_tables

        return source_tables(source, redact)
    run = load_run(*paths)
    if redact:
        from trace_doctor.redact import redact_run

        run = redact_run(run)
    return run


def _fresh_analysis(
    paths: tuple[str, ...],
    settings: Settings,
    baseline: str | None,
    *,
    redact: bool,
    source: RunSource | None,
    progress: Progress | None,
) -> Analysis:
    from trace_doctor.api import analyze
    from trace_doctor.policy import PolicyError

    run = _load(paths, progress) if source is None else _tables(paths, redact=False, source=source)
    base = _baseline_tables(baseline) if baseline else None
    if redact:
        # Before the rules, which normalise quoted lines (trace_doctor/redact/__init__.py says why).
        from trace_doctor.redact import redact_run

        run, base = redact_run(run), redact_run(base) if base is not None else None
    try:
        return analyze(run, settings=settings, baseline=base)
    except (KeyError, PolicyError) as exc:
        raise RequestError(str(exc).strip("'\"")) from exc


def _load(paths: tuple[str, ...], progress: Progress | None) -> RunTables:
    """load_run on a worker thread while the analysis modules are imported here."""
    from trace_doctor.api import load_run

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="load-run") as pool:
        loading = pool.submit(load_run, *paths, progress=progress)
        for module in ANALYSIS_MODULES:
            importlib.import_module(module)
        return loading.result()


def take_machine_notes() -> list[str]:
    """Notes about this machine (not the run) gathered since last asked, e.g. a cache folder that cannot
    be written. Empty when nothing has used the table cache (it is not imported for this)."""
    cache = sys.modules.get("trace_doctor.ingest.storage.cache")
    return cache.take_notes() if cache is not None else []
