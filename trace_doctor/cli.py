"""The `trace-doctor` command line: argument parsing, messages and exit codes over the public API
(`from trace_doctor import ...`), which does the work."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from trace_doctor import prepare_process

prepare_process()  # before anything imports polars (it reads the allocator settings once)

import click  # noqa: E402

from trace_doctor import (  # noqa: E402
    EXIT_INTERNAL_ERROR,
    FAIL_ON_LEVELS,
    REPORT_FORMATS,
    WATCH_FORMATS,
    PolicyError,
    RequestError,
    __version__,
    analyze_paths,
    explain_rule,
    find_runs,
    fleet_internal_error_line,
    ingest_dataset,
    internal_error_line,
    list_rules,
    load_settings,
    render_report,
    report_color,
    run_console_script,
    take_machine_notes,
    terminal_progress,
    terminal_safe,
    unknown_rule,
    write_chrome_trace,
    write_escalation_bundle,
    write_html_report,
    write_perfetto_trace,
    write_report,
)

DEFAULT_HTML = "trace-doctor-report.html"
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader closed the pipe


def _where(path) -> str:
    """A path for the terminal: absolute, and nothing in it a terminal would act on (terminal_safe)."""
    return terminal_safe(str(Path(path).resolve()))


def _slugs(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]  # `--select a,b --select c`


def _no_empty_path(ctx: click.Context, param: click.Parameter, value):
    """A path option or argument given as "" is a usage error: an unset shell variable (`--baseline
    "$BASE"`) would otherwise mean no comparison, the working directory, or stdout, without a word."""
    values = value if isinstance(value, tuple) else (value,)
    if any(v == "" for v in values):  # only "": a folder may be named " "
        raise click.BadParameter("an empty path (an unset variable?); name a file or folder")
    return value


def _fail(message: str) -> None:
    click.echo(f"trace-doctor: {terminal_safe(message)}", err=True)
    sys.exit(2)


def _echo_notes(notes: list[str]) -> None:
    for note in notes:
        click.echo(f"trace-doctor: note: {terminal_safe(note)}", err=True)


class Commands(click.Group):
    """The command group: a RequestError is exit 2 with its message; anything else not a usage error, exit 3."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Abort, click.exceptions.Exit):
            raise
        except RequestError as exc:
            _fail(str(exc))
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
            click.echo(f"trace-doctor: {terminal_safe(internal_error_line(exc))}", err=True)
            sys.exit(EXIT_INTERNAL_ERROR)
        finally:
            _echo_notes(take_machine_notes())  # about this machine (not the run), e.g. an unwritable cache


def _settings(config: str | None, **options):
    """The one settings path every command takes: the configuration file, then the command-line options."""
    try:
        settings = load_settings(config).with_options(**options)
    except PolicyError as exc:
        _fail(f"configuration error: {exc}")
    _echo_notes(settings.policy.notes)
    return settings


def _html_not_written(reason: str, *, named: bool) -> None:
    """A named HTML file not written is exit 2; the default one is a by-product of the report already printed
    (a read-only working directory costs a message, the exit code is the gate's)."""
    if named:
        _fail(reason)
    click.echo(f"trace-doctor: {terminal_safe(reason)} (use --html FILE to write it elsewhere, or --no-html)", err=True)


def _write_html(answer, target: str, *, named: bool, aside: bool) -> None:
    """Write the HTML report (of a fleet: the overview, its runs' pages are written) and say where."""
    fleet = answer.fleet
    unwritten = [r.html_error for r in fleet.reports if r.html_error] if fleet is not None else []
    if unwritten:
        count = f"{len(unwritten)} of {len(fleet.reports)} run reports"
        _html_not_written(f"{count} not written: {unwritten[0]}", named=named)
    try:
        write_html_report(answer, target)
    except RequestError as exc:
        return _html_not_written(str(exc), named=named)
    where = _where(target)
    if fleet is None:
        click.echo(f"HTML report: {where}", err=aside)
    else:
        pages = _where(answer.pages_dir)
        click.echo(f"HTML overview: {where} (each run's report in {pages})", err=aside)


def _fleet_internal_errors(fleet) -> None:
    """Exit 3 when a run hit a bug (the others are reported by then): CI must know the answer is incomplete."""
    line = fleet_internal_error_line(fleet) if fleet is not None else None
    if line is not None:
        click.echo(terminal_safe(f"trace-doctor: {line}"), err=True)
        sys.exit(EXIT_INTERNAL_ERROR)


def _none_analysed(fleet, what: str) -> None:
    """Exit when no run of a fleet could be analysed: 3 when a bug is why, else 2 with `what` and the reasons."""
    if fleet is not None and not fleet.analysed:
        _fleet_internal_errors(fleet)
        _fail(what + "; ".join(f"{r.source.label}: {r.error}" for r in fleet.reports[:3]))


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trace-doctor")
def main() -> None:
    """Diagnose slow, hung or badly-training Tinker runs from their log directory."""


def _analyze(paths: tuple[str, ...], *, html, no_html, fmt, output, baseline, jobs, show_skipped, redact, **rules):
    settings = _settings(**rules)  # config, select, ignore, fail_on, fail_on_inconclusive
    # The HTML report is written unless --no-html (`-o trace-doctor-report.html` would be replaced by it).
    target = None if no_html else (html or DEFAULT_HTML)
    html_flag = "--html" if html else "the HTML report (add --no-html, or --html FILE)"
    named = find_runs(paths, baseline=baseline, outputs=(("--output", output), (html_flag, target)))
    if named.several and jobs is not None and jobs < 1:
        _fail("--jobs must be at least 1")
    answer = analyze_paths(
        named, settings, baseline=baseline, redact=redact, jobs=jobs, fmt=fmt, html=target, progress=terminal_progress()
    )
    _echo_notes(answer.notes)
    _none_analysed(answer.fleet, "none of the runs could be analysed: ")
    text = render_report(answer, fmt, show_skipped=show_skipped)
    if output:
        write_report(text, output, fmt)
    else:  # the text report keeps its colour exactly when its renderer used it (click strips it from pipes)
        click.echo(text, nl=not text.endswith("\n"), color=report_color(fmt))
    if target:
        _write_html(answer, target, named=bool(html), aside=fmt != "text" or bool(output))
    _fleet_internal_errors(answer.fleet)
    if answer.gate_tripped:
        sys.exit(1)


def _path_option(*decls: str, metavar: str = "FILE", **kwargs):
    """An option naming a file or folder; "" is refused (_no_empty_path)."""
    return click.option(*decls, metavar=metavar, callback=_no_empty_path, **kwargs)


# What `analyze --help` says of each option it shares with `demo`.
HELP = {
    "format": "What goes to stdout (or --output).",
    "fail-on": "Exit 1 when a finding at or above this severity is reported (default never).",
    "fail-on-inconclusive": "With --baseline: also exit 1 when the comparison is inconclusive.",
    "show-skipped": "List every rule that had no input, with what it needs (text output; collapsed by default).",
    "redact": "Remove credentials from every output (the default); --no-redact keeps them and says so in the header.",
    "jobs": "With several runs: analyse N at a time in separate processes (default: the machine's cores).",
}
CONFIG_OPTION = _path_option(
    "--config", help="Configuration file (default: nearest trace-doctor.toml or pyproject.toml)."
)
ANALYZE_OPTIONS = (
    _path_option("--html", "html", help=f"Write the HTML report here (default: {DEFAULT_HTML})."),
    click.option("--no-html", is_flag=True, help="Do not write the HTML report."),
    click.option(
        "--format", "fmt", type=click.Choice(REPORT_FORMATS), default="text", show_default=True, help=HELP["format"]
    ),
    _path_option("--output", "-o", help="Write the --format output to FILE instead of stdout."),
    click.option("--fail-on", type=click.Choice(FAIL_ON_LEVELS), default=None, help=HELP["fail-on"]),
    click.option("--fail-on-inconclusive", is_flag=True, help=HELP["fail-on-inconclusive"]),
    _path_option("--baseline", metavar="PATH", help="Compare against a baseline run (regression rules)."),
    click.option("--select", multiple=True, metavar="SLUG,...", callback=_slugs, help="Run only these rules."),
    click.option("--ignore", multiple=True, metavar="SLUG,...", callback=_slugs, help="Skip these rules."),
    CONFIG_OPTION,
    click.option("--show-skipped", is_flag=True, help=HELP["show-skipped"]),
    click.option("--redact/--no-redact", default=True, help=HELP["redact"]),
    click.option("--jobs", "-j", type=int, default=None, metavar="N", help=HELP["jobs"]),
)


def _analyze_options(func):
    return functools.reduce(lambda f, option: option(f), reversed(ANALYZE_OPTIONS), func)


@main.command("analyze")
@click.argument("paths", nargs=-1, required=True, callback=_no_empty_path)
@_analyze_options
def analyze_command(paths, **kwargs) -> None:
    """Analyse a run directory or single files (metrics, trace, profile, dump, log)."""
    _analyze(paths, **kwargs)


@main.command("demo")
@_analyze_options
def demo_command(**kwargs) -> None:
    """Analyse the sample run shipped inside the package."""
    from trace_doctor import sample_run_path  # the API's loader: imported only by the commands that read a run

    _analyze((str(sample_run_path()),), **kwargs)


@main.command("rules")
@click.argument("slug", required=False)
@_path_option("--config", help="Show thresholds as this configuration file sets them.")
def rules_command(slug: str | None, config: str | None) -> None:
    """List the rules, or explain one (what, why, evidence, fix, thresholds in effect)."""
    settings = _settings(config)
    if slug:
        text = explain_rule(slug, settings)
        if text is None:
            _fail(unknown_rule(slug))
        click.echo(text)
        return
    for rule in list_rules():
        click.echo(f"{rule.code}  {rule.slug:<28} {rule.severity:<8} {rule.title}")


@main.command("ingest")
@click.argument("paths", nargs=-1, required=True, callback=_no_empty_path)
@_path_option("--out", "out", required=True, metavar="DIR", help="Directory of the Parquet dataset.")
@CONFIG_OPTION
@click.option("--jobs", "-j", type=int, default=None, metavar="N", help="Runs ingested at a time (default: cores).")
@click.option("--redact/--no-redact", default=True, help="Credentials are removed from what is written (default).")
def ingest_command(paths, out: str, config: str | None, jobs: int | None, redact: bool) -> None:
    """Write every table as a Parquet dataset partitioned by run: DIR/<table>/run=<run id>/part-0.parquet.

    Findings and a one-row-per-run `runs` table are included, so a folder of runs is one queryable dataset.
    """
    settings = _settings(config)
    named = find_runs(paths, require_runs=True)
    if jobs is not None and jobs < 1:
        _fail("--jobs must be at least 1")
    dataset = ingest_dataset(named, out, settings, jobs=jobs, redact=redact)
    _echo_notes(dataset.fleet.notes)
    _none_analysed(dataset.fleet, "")
    for run in dataset.runs:
        counts = f"{run.records:,} records from {run.inputs} input(s), {run.skipped:,} skipped"
        click.echo(
            terminal_safe(f"  {run.label}: not ingested: {run.error}" if run.error else f"  run={run.run_id}  {counts}")
        )
    click.echo(f"Parquet dataset in {_where(dataset.root)} ({len(dataset.fleet.analysed)} run(s)):")
    for name, rows in dataset.tables.items():
        click.echo(f"  {name}/  {rows:,} rows")
    _fleet_internal_errors(dataset.fleet)


@main.command("export")
@click.argument("paths", nargs=-1, required=True, callback=_no_empty_path)
@_path_option("--perfetto", "perfetto_file", help="Write a native Perfetto trace (.pftrace).")
@_path_option("--chrome-json", "chrome_file", help="Write a Chrome trace JSON array.")
@CONFIG_OPTION
@click.option("--redact/--no-redact", default=True, help="Credentials are removed from what is written (default).")
def export_command(paths, perfetto_file: str | None, chrome_file: str | None, config: str | None, redact: bool) -> None:
    """Export the run's spans and the findings for the Perfetto UI or chrome://tracing."""
    if not perfetto_file and not chrome_file:
        _fail("give --perfetto FILE and/or --chrome-json FILE")
    named = find_runs(paths, one_run=True, outputs=(("--perfetto", perfetto_file), ("--chrome-json", chrome_file)))
    result = analyze_paths(named, _settings(config), redact=redact, progress=terminal_progress()).analysis
    if perfetto_file:
        write_perfetto_trace(result, perfetto_file)
        click.echo(f"Perfetto trace: {_where(perfetto_file)}")
    if chrome_file:
        write_chrome_trace(result, chrome_file)
        click.echo(f"Chrome trace JSON: {_where(chrome_file)}")


@main.command("bundle")
@click.argument("paths", nargs=-1, required=True, callback=_no_empty_path)
@_path_option("-o", "--output", "output", required=True, metavar="FILE.zip", help="The escalation bundle to write.")
@CONFIG_OPTION
def bundle_command(paths, output: str, config: str | None) -> None:
    """Write an escalation bundle: report, findings, environment, profiles, config — secrets redacted."""
    settings = _settings(config)
    named = find_runs(paths, one_run=True, outputs=(("-o", output),))
    result = analyze_paths(named, settings, redact=True, progress=terminal_progress()).analysis
    manifest = write_escalation_bundle(result, output)
    click.echo(f"Escalation bundle: {_where(output)} ({len(manifest)} files, secrets redacted)")


@main.command("watch")
@click.argument("path", callback=_no_empty_path)
@click.option("--format", "fmt", type=click.Choice(WATCH_FORMATS), default="text", help="jsonl: one event per line.")
@click.option("--interval", type=click.FloatRange(min=0.01), default=2.0, help="Seconds between looks (default 2).")
@click.option("--on-stall", metavar="CMD", help="Run CMD once per stall, the stalled event as JSON on its stdin.")
@click.option("--exit-on-stall", is_flag=True, help="End at the first stall (exit 4).")
@CONFIG_OPTION
def watch_command(path: str, config: str | None, **options) -> None:
    """Follow a live run (a folder of runs: each): each step, findings, stalls with where it is stuck (events:
    progress, finding, stalled, stopped, done). Exit 0 done, 4 stalled (--exit-on-stall), 5 crashed or
    interrupted, 130 Ctrl-C."""
    from trace_doctor import follow_run  # the watch's reader: imported only by the command that follows a run

    sys.exit(follow_run(path, _settings(config), **options))


# The console-script entry point (pyproject's `trace-doctor`): `main` in a process that exits at once.
run = run_console_script


if __name__ == "__main__":
    run()
