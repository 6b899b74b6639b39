"""The `trace-doctor` command line: a thin shell over the Python API (api.py)."""

from __future__ import annotations

import gc
import os
import sys

# polars' allocator (jemalloc) keeps freed pages for 10 s by default; span pairing frees large
# intermediates, so returning them after 200 ms lowers peak memory on big traces (~15% at
# 3000x64). Shorter is leaner but slower, longer the reverse: pages reused right away are returned
# and faulted in again (medians at 3000x64: 100 ms 1.56 s / 501 MB, 200 ms 1.58 s / 511 MB,
# 500 ms 1.52 s / 551 MB). Must be set before polars is first imported; a user's own setting wins.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:200,muzzy_decay_ms:0")
# numpy's OpenBLAS starts a spinning worker per core at import; nothing here does linear algebra
# big enough to use them, and on a 2-core CI box they take CPU from polars' own threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import importlib  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

import click  # noqa: E402

from trace_doctor import __version__  # noqa: E402
from trace_doctor.crash_report import EXIT_INTERNAL_ERROR, one_line, write_traceback  # noqa: E402
from trace_doctor.humanize import printable  # noqa: E402
from trace_doctor.model import Analysis  # noqa: E402
from trace_doctor.policy import PolicyError  # noqa: E402
from trace_doctor.report.terminal_text import inert  # noqa: E402
from trace_doctor.settings import FAIL_ON_LEVELS, Settings, load_settings  # noqa: E402

FORMATS = ("text", "json", "markdown", "junit", "sarif")
CONFIG_HELP = "Configuration file (default: nearest trace-doctor.toml or pyproject.toml)."
DEFAULT_HTML = "trace-doctor-report.html"


def _shown(value: str) -> str:
    """Text for the terminal: valid UTF-8 (printable), and nothing in it a terminal would act on
    (a run's name or path can hold escape sequences: terminal_text.py)."""
    return inert(printable(value))


def _split(values: tuple[str, ...]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _no_empty_path(ctx: click.Context, param: click.Parameter, value):
    """A path option or argument given as "" is a usage error: an unset shell variable (`--baseline
    "$BASE"`) would otherwise mean no comparison, the working directory, or stdout, without a word."""
    values = value if isinstance(value, tuple) else (value,)
    if any(v == "" for v in values):  # only "": a folder may be named " "
        raise click.BadParameter("an empty path (an unset variable?); name a file or folder")
    return value


def _fail(message: str) -> None:
    click.echo(f"trace-doctor: {_shown(message)}", err=True)
    sys.exit(2)


def _write_output(path: str, write, what: str):
    """`write()` a file the user named (--output, --perfetto, -o ...) and return what it returns; a file
    that cannot be written is a usage error (exit 2) naming it, not a traceback."""
    try:
        return write()
    except OSError as exc:
        _fail(f"cannot write {what} to {path}: {_why(exc)}")


def _why(exc: OSError) -> str:
    """Why a file could not be written, in words. Creating its folder where a file of that name is raises
    FileExistsError, whose own words ("File exists") read as if the output itself were in the way."""
    if isinstance(exc, FileExistsError) and exc.filename:
        return f"{exc.filename} is a file, not a folder"
    return exc.strerror or str(exc)


def _write_html(write, target: Path, *, named: bool) -> bool:
    """Write an HTML report. When the user named the file, failing to is a usage error (exit 2); the
    default file in the working directory is a by-product of the analysis already printed, so a
    read-only directory costs a message on stderr and leaves the exit code to the gate."""
    try:
        write()
    except OSError as exc:
        _html_not_written(f"cannot write the HTML report to {target}: {_why(exc)}", named=named)
        return False
    return True


def _html_not_written(reason: str, *, named: bool) -> None:
    if named:
        _fail(reason)
    click.echo(f"trace-doctor: {_shown(reason)} (use --html FILE to write it elsewhere, or --no-html)", err=True)


def _internal_error(exc: BaseException) -> None:
    """A bug: one line on stderr saying so and where its traceback is, and exit 3 (never 1, the gate)."""
    click.echo(f"trace-doctor: {_shown(one_line(exc, write_traceback(exc)))}", err=True)
    sys.exit(EXIT_INTERNAL_ERROR)


# 128 + SIGPIPE: what a shell reports for a writer whose reader closed the pipe.
EXIT_BROKEN_PIPE = 141


class Commands(click.Group):
    """The command group: whatever a command raises that is not a usage error becomes `_internal_error`."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Abort, click.exceptions.Exit):
            raise
        except KeyboardInterrupt:
            # click would report Ctrl-C as "Aborted!" with exit 1, which CI reads as a tripped gate.
            click.echo("trace-doctor: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            # The reader went away (`trace-doctor ... | head`): not a bug. Quiet, with the shell's code
            # for a process ended by SIGPIPE; stdout goes to /dev/null so the final flush cannot fail again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(EXIT_BROKEN_PIPE)
        except Exception as exc:  # noqa: BLE001 - every bug ends as one line and exit 3
            _internal_error(exc)
        finally:
            # Notes about this machine (not the run), e.g. a cache folder that cannot be written.
            cache = sys.modules.get("trace_doctor.ingest.storage.cache")
            if cache is not None:
                _echo_notes(cache.take_notes())


def _progress():
    """A progress printer for long ingests when stderr is an interactive terminal, else None."""
    if not sys.stderr.isatty() or os.environ.get("CI"):
        return None
    from trace_doctor.report.progress import TerminalProgress

    return TerminalProgress()


# What `analyze` needs after ingest; imported while the inputs are read, since ingest spends most
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


def _load(paths: tuple[str, ...], warm_imports: tuple[str, ...] = ()):
    from trace_doctor.api import NothingToAnalyze, load_run

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="load-run") as pool:
        loading = pool.submit(load_run, *paths, progress=_progress())
        for module in warm_imports:
            importlib.import_module(module)
        try:
            return loading.result()
        except NothingToAnalyze as exc:
            _fail(str(exc))


def _settings(config: str | None, **options) -> Settings:
    """The one settings path every command takes: the configuration file, then the command-line options."""
    try:
        settings = load_settings(config).with_options(**options)
    except PolicyError as exc:
        _fail(f"configuration error: {exc}")
    for note in settings.policy.notes:
        click.echo(f"trace-doctor: note: {_shown(note)}", err=True)
    return settings


def _echo_report(text: str, fmt: str) -> None:
    """Print a report; the text report keeps its colour exactly when the console renderer used it
    (FORCE_COLOR into a pipe, none with NO_COLOR): click would strip it from anything but a terminal.
    Other formats leave colour to click, and never import the console renderer (rich)."""
    color = None
    if fmt == "text":
        from trace_doctor.report.console import color_enabled

        color = color_enabled()
    click.echo(text, nl=not text.endswith("\n"), color=color)


def _spare_inputs(runs, outputs: tuple[tuple[str, str | None], ...]) -> None:
    """Exit 2 before anything is read when an output file named (`(flag, path)` pairs) is one of the runs'
    input files (writing it would destroy the run it reports on: `-o run/metrics.jsonl`), or when two
    outputs name one file (the second would replace the first; /dev/null excepted)."""
    inputs = {os.path.realpath(f) for run in runs for f in run.files}
    named: dict[str, str] = {}
    for flag, value in outputs:
        if not value:
            continue
        where = os.path.realpath(value)
        if where in inputs:
            _fail(
                f"{flag} {value} is one of the run's input files; writing there would overwrite it: name another file"
            )
        if where in named and where != os.path.realpath(os.devnull):
            _fail(f"{named[where]} and {flag} name the same file ({value}): one would replace the other")
        named[where] = flag


def _one_run(paths: tuple[str, ...], what: str = "", outputs: tuple[tuple[str, str | None], ...] = ()):
    """None when `paths` hold one run (read them as named); the folder's own run when the one folder named is
    a run that also holds others below it (runs.folder_run); else exit 2 naming the runs (a trace, a bundle
    or a baseline is of one run: read as one, a folder of runs would be merged into one). `what` prefixes
    the message."""
    from trace_doctor.runs import folder_run, split_runs

    runs = split_runs(list(paths)).runs
    _spare_inputs(runs, outputs)
    if len(runs) <= 1:
        return None
    own = folder_run(list(paths), runs)
    if own is None:
        names = ", ".join(run.path for run in runs[:3]) + (", ..." if len(runs) > 3 else "")
        _fail(f"{what}{', '.join(paths)} holds {len(runs)} runs; name one of them ({names})")
    return own


def _analysis(
    paths: tuple[str, ...], settings: Settings, baseline: str | None = None, *, redact: bool = False, source=None
) -> Analysis:
    """The analysis of `paths` (or of `source`, one run of them: _one_run): the stored one when nothing it
    depends on changed (result_cache.py)."""
    from trace_doctor import result_cache

    if source is not None:
        passed = tuple((p.path, p.reason) for p in source.passed_over)
        request = result_cache.Request(source.files, settings, baseline, redact, naming=(source.path, False, passed))
    else:
        request = result_cache.Request(tuple(paths), settings, baseline, redact)
    return result_cache.cached(
        request,
        compute=lambda: _fresh_analysis(paths, settings, baseline, redact=redact, source=source),
        reload=lambda: _tables(paths, redact=redact, source=source),
    )


def _tables(paths: tuple[str, ...], *, redact: bool, source=None):
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
    paths: tuple[str, ...], settings: Settings, baseline: str | None = None, *, redact: bool = False, source=None
) -> Analysis:
    from trace_doctor.api import NothingToAnalyze, analyze

    run = _load(paths, ANALYSIS_MODULES) if source is None else _tables(paths, redact=False, source=source)
    base = None
    if baseline:
        from trace_doctor.fleet import one_run_tables

        try:
            base = one_run_tables(baseline)
        except NothingToAnalyze as exc:
            _fail(f"baseline: {exc}")
    if redact:
        # Before the rules, which normalise quoted lines (trace_doctor/redact/__init__.py says why).
        from trace_doctor.redact import redact_run

        run, base = redact_run(run), redact_run(base) if base is not None else None
    try:
        return analyze(run, settings=settings, baseline=base)
    except (KeyError, PolicyError) as exc:
        _fail(str(exc).strip("'\""))


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trace-doctor")
def main() -> None:
    """Diagnose slow, hung or badly-training Tinker runs from their log directory."""


def _analyze(
    paths: tuple[str, ...],
    *,
    html: str | None,
    no_html: bool,
    fmt: str,
    output: str | None,
    fail_on: str | None,
    fail_on_inconclusive: bool,
    baseline: str | None,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    config: str | None,
    jobs: int | None,
    show_skipped: bool,
    redact: bool,
) -> None:
    settings = _settings(
        config,
        select=_split(select),
        ignore=_split(ignore),
        fail_on=fail_on,
        fail_on_inconclusive=fail_on_inconclusive,
    )
    from trace_doctor.runs import split_runs

    # The HTML report is written unless --no-html, to DEFAULT_HTML unless named: `-o trace-doctor-report.html`
    # would be replaced by it.
    html_flag = "--html" if html else "the HTML report (add --no-html, or --html FILE)"
    outputs = (("--output", output), (html_flag, None if no_html else (html or DEFAULT_HTML)))
    if baseline:
        _one_run((baseline,), "baseline: ", outputs=outputs)
    split = split_runs(list(paths))
    _spare_inputs(split.runs, outputs)
    if len(split.runs) > 1:
        _analyze_fleet(
            split,
            settings,
            html=None if no_html else (html or DEFAULT_HTML),
            html_named=bool(html),
            fmt=fmt,
            output=output,
            baseline=baseline,
            jobs=jobs,
            redact=redact,
        )
        return
    result = _analysis(paths, settings, baseline, redact=redact)
    from trace_doctor.report import formats

    text = formats.render(result, fmt, show_skipped=show_skipped)
    if output:
        _write_output(output, lambda: Path(output).write_text(printable(text), encoding="utf-8"), f"the {fmt} report")
    else:
        _echo_report(text, fmt)
    if not no_html:
        from trace_doctor.report.html import write_html

        target = Path(html or DEFAULT_HTML)
        if _write_html(lambda: write_html(result, target), target, named=bool(html)):
            click.echo(f"HTML report: {_shown(str(target.resolve()))}", err=fmt != "text" or bool(output))
    if result.gate.tripped:
        sys.exit(1)


def _analyze_fleet(
    split,
    settings: Settings,
    *,
    html: str | None,
    html_named: bool,
    fmt: str,
    output: str | None,
    baseline: str | None,
    jobs: int | None,
    redact: bool = False,
) -> None:
    """Several runs: each analysed alone in its own process, then one table, one document, one gate."""
    from trace_doctor.fleet import analyze_sources
    from trace_doctor.report.fleet import render_fleet

    if jobs is not None and jobs < 1:
        _fail("--jobs must be at least 1")
    if redact:
        from trace_doctor.redact import redact_split

        split = redact_split(split)  # the runs' names and paths, as every fleet output shows them
    if baseline:
        from trace_doctor.api import NothingToAnalyze
        from trace_doctor.fleet import one_run_tables

        try:
            one_run_tables(baseline)
        except NothingToAnalyze as exc:
            _fail(f"baseline: {exc}")
    html_dir = None
    if html:
        target = Path(html)
        html_dir = str(target.with_name(f"{target.stem}-runs"))
    fleet = analyze_sources(
        split.runs, settings, jobs=jobs, fmt=fmt, html_dir=html_dir, baseline=baseline, redact=redact
    )
    fleet.passed_over = split.passed_over
    _echo_notes(fleet.notes)
    if not fleet.analysed:
        _fleet_internal_errors(fleet)
        _fail(
            "none of the runs could be analysed: "
            + "; ".join(f"{r.source.label}: {r.error}" for r in fleet.reports[:3])
        )
    text = render_fleet(fleet, fmt)
    if output:
        _write_output(output, lambda: Path(output).write_text(printable(text), encoding="utf-8"), f"the {fmt} report")
    else:
        _echo_report(text, fmt)
    if html:
        from trace_doctor.report.fleet_html import write_fleet_html

        unwritten = [r.html_error for r in fleet.reports if r.html_error]
        if unwritten:
            count = f"{len(unwritten)} of {len(fleet.reports)} run reports"
            _html_not_written(f"{count} not written: {unwritten[0]}", named=html_named)
        if _write_html(lambda: write_fleet_html(fleet, Path(html)), Path(html), named=html_named):
            click.echo(
                f"HTML overview: {_shown(str(Path(html).resolve()))} "
                f"(each run's report in {_shown(str(Path(html_dir).resolve()))})",
                err=fmt != "text" or bool(output),
            )
    _fleet_internal_errors(fleet)
    if fleet.gate_tripped:
        sys.exit(1)


def _fleet_internal_errors(fleet) -> None:
    """Exit 3 with one line when a run hit a bug; the other runs have been reported by then. A bug wins
    over a tripped gate: CI must know the fleet's answer is incomplete."""
    crashed = fleet.internal_errors
    if not crashed:
        return
    from trace_doctor.crash_report import where_written

    names = ", ".join(r.source.label for r in crashed[:3]) + (", ..." if len(crashed) > 3 else "")
    logs = "; ".join(where_written(r.crash_log) for r in crashed[:3])
    click.echo(
        _shown(
            f"trace-doctor: internal error (a bug in trace-doctor, not a problem with your runs) in "
            f"{len(crashed)} of {len(fleet.reports)} run(s) ({names}): "
            f"{crashed[0].error.removeprefix('internal error: ')}; {logs}; please report it"
        ),
        err=True,
    )
    sys.exit(EXIT_INTERNAL_ERROR)


def _echo_notes(notes: list[str]) -> None:
    for note in notes:
        click.echo(f"trace-doctor: note: {_shown(note)}", err=True)


def _analyze_options(func):
    options = [
        click.option(
            "--html",
            "html",
            metavar="FILE",
            callback=_no_empty_path,
            help=f"Write the HTML report here (default: {DEFAULT_HTML}).",
        ),
        click.option("--no-html", is_flag=True, help="Do not write the HTML report."),
        click.option(
            "--format",
            "fmt",
            type=click.Choice(FORMATS),
            default="text",
            show_default=True,
            help="What goes to stdout (or --output).",
        ),
        click.option(
            "--output",
            "-o",
            metavar="FILE",
            callback=_no_empty_path,
            help="Write the --format output to FILE instead of stdout.",
        ),
        click.option(
            "--fail-on",
            type=click.Choice(FAIL_ON_LEVELS),
            default=None,
            help="Exit 1 when a finding at or above this severity is reported (default never).",
        ),
        click.option(
            "--fail-on-inconclusive",
            is_flag=True,
            help="With --baseline: also exit 1 when the comparison is inconclusive.",
        ),
        click.option(
            "--baseline",
            metavar="PATH",
            callback=_no_empty_path,
            help="Compare against a baseline run (regression rules).",
        ),
        click.option("--select", multiple=True, metavar="SLUG,...", help="Run only these rules."),
        click.option("--ignore", multiple=True, metavar="SLUG,...", help="Skip these rules."),
        click.option("--config", metavar="FILE", callback=_no_empty_path, help=CONFIG_HELP),
        click.option(
            "--show-skipped",
            is_flag=True,
            help="List every rule that had no input, with what it needs (text output; collapsed by default).",
        ),
        click.option(
            "--redact",
            is_flag=True,
            help="Remove credentials (API keys, tokens, passwords, URL credentials, private keys) from every output.",
        ),
        click.option(
            "--jobs",
            "-j",
            type=int,
            default=None,
            metavar="N",
            help="With several runs: analyse N at a time in separate processes (default: the machine's cores).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@main.command("analyze")
@click.argument("paths", nargs=-1, required=True, callback=_no_empty_path)
@_analyze_options
def analyze_command(paths, **kwargs) -> None:
    """Analyse a run directory or single files (metrics, trace, profile, dump, log)."""
    _analyze(paths, **kwargs)


def sample_run_path() -> Path:
    from importlib.resources import files  # only `demo` needs it: not imported on every command

    return Path(str(files("trace_doctor") / "sample_run"))


@main.command("demo")
@_analyze_options
def demo_command(**kwargs) -> None:
    """Analyse the sample run shipped inside the package."""
    _analyze((str(sample_run_path()),), **kwargs)


@main.command("rules")
@click.argument("slug", required=False)
@click.option(
    "--config", metavar="FILE", callback=_no_empty_path, help="Show thresholds as this configuration file sets them."
)
def rules_command(slug: str | None, config: str | None) -> None:
    """List the rules, or explain one (what, why, evidence, fix, thresholds in effect)."""
    from trace_doctor.rules.base import REGISTRY
    from trace_doctor.rules.engine import lookup

    settings = _settings(config)
    if slug:
        rule = lookup(slug)
        if rule is None:
            from trace_doctor.rules.engine import suggest_rule

            _fail(f"unknown rule {slug!r}{suggest_rule(slug)} (see `trace-doctor rules`)")
        click.echo(rule.describe(settings.policy.rule(rule.slug), settings.policy.shared))
        return
    for rule in sorted(REGISTRY.values(), key=lambda r: r.code):
        click.echo(f"{rule.code}  {rule.slug:<28} {rule.severity:<8} {rule.title}")


@main.command("ingest")
@click.argument("paths", nargs=-1, required=True, callback=_no_empty_path)
@click.option(
    "--out", "out", required=True, metavar="DIR", callback=_no_empty_path, help="Directory of the Parquet dataset."
)
@click.option("--config", metavar="FILE", callback=_no_empty_path, help=CONFIG_HELP)
@click.option("--jobs", "-j", type=int, default=None, metavar="N", help="Runs ingested at a time (default: cores).")
@click.option("--redact", is_flag=True, help="Remove credentials from what is written (names and values).")
def ingest_command(paths, out: str, config: str | None, jobs: int | None, redact: bool) -> None:
    """Write every table as a Parquet dataset partitioned by run: DIR/<table>/run=<run id>/part-0.parquet.

    Findings and a one-row-per-run `runs` table are included, so a folder of runs is one queryable dataset.
    """
    from trace_doctor.fleet import analyze_sources
    from trace_doctor.runs import split_runs

    settings = _settings(config)
    split = split_runs(list(paths))
    if split.missing:
        _fail(f"path does not exist: {', '.join(split.missing)}")
    if not split.runs:
        _fail(f"no trace-doctor input found in {', '.join(paths)}")
    if jobs is not None and jobs < 1:
        _fail("--jobs must be at least 1")
    if redact:
        from trace_doctor.redact import redact_split

        split = redact_split(split)
    fleet = analyze_sources(split.runs, settings, jobs=jobs, dataset_dir=out, redact=redact)
    _echo_notes(fleet.notes)
    if not fleet.analysed:
        _fleet_internal_errors(fleet)
        _fail("; ".join(f"{r.source.label}: {r.error}" for r in fleet.reports[:3]))
    tables: dict[str, int] = {}
    for report in sorted(fleet.reports, key=lambda r: r.source.label):
        if report.error:
            click.echo(_shown(f"  {report.source.label}: not ingested: {report.error}"))
            continue
        inputs = (report.document or {}).get("run", {}).get("inputs", [])
        records = sum(i["records"] for i in inputs)
        skipped = sum(i["skipped"] for i in inputs)
        click.echo(
            f"  run={report.source.run_id}  {records:,} records from {len(inputs)} input(s), {skipped:,} skipped"
        )
        for name, rows in report.dataset_rows.items():
            tables[name] = tables.get(name, 0) + rows
    click.echo(f"Parquet dataset in {_shown(str(Path(out).resolve()))} ({len(fleet.analysed)} run(s)):")
    for name, rows in tables.items():
        click.echo(f"  {name}/  {rows:,} rows")
    _fleet_internal_errors(fleet)


@main.command("export")
@click.argument("paths", nargs=-1, required=True, callback=_no_empty_path)
@click.option(
    "--perfetto",
    "perfetto_file",
    metavar="FILE",
    callback=_no_empty_path,
    help="Write a native Perfetto trace (.pftrace).",
)
@click.option(
    "--chrome-json", "chrome_file", metavar="FILE", callback=_no_empty_path, help="Write a Chrome trace JSON array."
)
@click.option("--config", metavar="FILE", callback=_no_empty_path, help=CONFIG_HELP)
@click.option("--redact", is_flag=True, help="Remove credentials from what is written (names and values).")
def export_command(paths, perfetto_file: str | None, chrome_file: str | None, config: str | None, redact: bool) -> None:
    """Export the run's spans and the findings for the Perfetto UI or chrome://tracing."""
    if not perfetto_file and not chrome_file:
        _fail("give --perfetto FILE and/or --chrome-json FILE")
    from trace_doctor.report.export import write_chrome_json, write_perfetto

    source = _one_run(paths, outputs=(("--perfetto", perfetto_file), ("--chrome-json", chrome_file)))
    result = _analysis(paths, _settings(config), redact=redact, source=source)
    if perfetto_file:
        _write_output(perfetto_file, lambda: write_perfetto(result, Path(perfetto_file)), "the Perfetto trace")
        click.echo(f"Perfetto trace: {_shown(str(Path(perfetto_file).resolve()))}")
    if chrome_file:
        _write_output(chrome_file, lambda: write_chrome_json(result, Path(chrome_file)), "the Chrome trace JSON")
        click.echo(f"Chrome trace JSON: {_shown(str(Path(chrome_file).resolve()))}")


@main.command("bundle")
@click.argument("paths", nargs=-1, required=True, callback=_no_empty_path)
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    metavar="FILE.zip",
    callback=_no_empty_path,
    help="The escalation bundle to write.",
)
@click.option("--config", metavar="FILE", callback=_no_empty_path, help=CONFIG_HELP)
def bundle_command(paths, output: str, config: str | None) -> None:
    """Write an escalation bundle: report, findings, environment, profiles, config — secrets redacted."""
    from trace_doctor.report.bundle import write_bundle

    result = _analysis(paths, _settings(config), redact=True, source=_one_run(paths, outputs=(("-o", output),)))
    manifest = _write_output(output, lambda: write_bundle(result, Path(output)), "the bundle")
    click.echo(f"Escalation bundle: {_shown(str(Path(output).resolve()))} ({len(manifest)} files, secrets redacted)")


def run() -> None:
    """The console-script entry point: the CLI, then an immediate process exit.

    Interpreter shutdown would free every table (hundreds of MB on a large run, ~0.07 s) only for
    the OS to reclaim the memory anyway. Output is flushed first; nothing else registers exit work.
    Tests call `main` itself (click's CliRunner), which exits normally.
    """
    # One short-lived command: the tables live in polars, not in Python objects, so the cyclic
    # collector finds nothing worth its passes (~2% of a large analysis).
    gc.disable()
    try:
        main()
        code = 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            # A message as exit status is no verdict: never 1, which CI reads as a tripped gate.
            sys.stderr.write(_shown(exc.code) + "\n")
            code = EXIT_INTERNAL_ERROR
        else:
            code = exc.code or 0
    except Exception as exc:  # noqa: BLE001 - outside any command (the group catches theirs): still one line
        sys.stderr.write(f"trace-doctor: {_shown(one_line(exc, write_traceback(exc)))}\n")
        code = EXIT_INTERNAL_ERROR
    if "logging" in sys.modules:
        import logging

        logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
