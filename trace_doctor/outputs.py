"""What a command puts out, and the checks before it: the report in any format as a string, that report
written to a file, the HTML report, the trace exports and the escalation bundle.

An output is checked before anything is read (`check_outputs`): one that names an input file would destroy
the run it reports on, and two naming one file would leave only the second. A file that cannot be written
raises `OutputNotWritten` with the reason in words, never a bare OSError.

    >>> check_outputs(["run/metrics.jsonl"], [("--output", "report.json"), ("--html", "report.json")])
    Traceback (most recent call last):
    ...
    trace_doctor.errors.OutputRefused: --output and --html name the same file (report.json): one would replace the other
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from trace_doctor.errors import OutputNotWritten, OutputRefused
from trace_doctor.humanize import printable
from trace_doctor.whole_file import replacing

if TYPE_CHECKING:
    from trace_doctor.model import Analysis
    from trace_doctor.named_runs import PathsAnalysis

# The formats a report is rendered in (`trace-doctor analyze --format`), in the order the help lists them.
REPORT_FORMATS = ("text", "json", "markdown", "junit", "sarif", "summary")
# What `watch` prints: plain lines (or a status redrawn on a terminal), or one JSON event per line.
WATCH_FORMATS = ("text", "jsonl")
# An output: what messages call it (a command-line flag, or words) and the path named, None when not asked.
Output = tuple[str, "str | os.PathLike[str] | None"]

T = TypeVar("T")


def check_outputs(inputs: Iterable[str | os.PathLike[str]], outputs: Sequence[Output]) -> None:
    """Raise OutputRefused when an output names one of `inputs` (writing it would overwrite the run:
    `-o run/metrics.jsonl`), or when two outputs name one file (/dev/null excepted)."""
    taken = {os.path.realpath(f) for f in inputs}
    named: dict[str, str] = {}
    for name, value in outputs:
        if not value:
            continue
        where = os.path.realpath(value)
        if where in taken:
            raise OutputRefused(
                f"{name} {value} is one of the run's input files; writing there would overwrite it: name another file"
            )
        if where in named and where != os.path.realpath(os.devnull):
            raise OutputRefused(f"{named[where]} and {name} name the same file ({value}): one would replace the other")
        named[where] = name


def write_output(
    path: str | os.PathLike[str], write: Callable[[Path], T], what: str, *, make_folder: bool = False
) -> T:
    """`write(temporary path)` the new version of the file at `path`, renamed into place once complete
    (whole_file.replacing: a kill leaves the previous file or the new one, never a part), and return what
    `write` returns; OutputNotWritten naming `what` and the reason when it cannot be written. `make_folder`:
    the output's folder is created when missing (the HTML report and the bundle)."""
    try:
        with replacing(path, make_folder=make_folder) as temp:
            return write(temp)
    except OSError as exc:
        raise OutputNotWritten(f"cannot write {what} to {path}: {why_not_written(exc)}") from exc


def why_not_written(exc: OSError) -> str:
    """Why a file could not be written, in words. Creating its folder where a file of that name is raises
    FileExistsError, whose own words ("File exists") read as if the output itself were in the way."""
    if isinstance(exc, FileExistsError) and exc.filename:
        return f"{exc.filename} is a file, not a folder"
    return exc.strerror or str(exc)


def render_report(answer: PathsAnalysis | Analysis, fmt: str, *, show_skipped: bool = False) -> str:
    """The report of one run or of a fleet in `fmt` (one of REPORT_FORMATS). `show_skipped`: the text
    report lists every rule that had no input."""
    from trace_doctor.named_runs import PathsAnalysis

    if not isinstance(answer, PathsAnalysis):
        answer = PathsAnalysis(analysis=answer)
    if answer.fleet is not None:
        from trace_doctor.fleet import PER_RUN_FORMATS
        from trace_doctor.report.fleet import render_fleet

        if fmt in PER_RUN_FORMATS and fmt != answer.fleet_format:
            raise ValueError(f"a fleet's {fmt} is made of each run's own: analyse it with fmt={fmt!r}")
        return render_fleet(answer.fleet, fmt)
    from trace_doctor.report import formats

    return formats.render(answer.analysis, fmt, show_skipped=show_skipped)


def write_report(text: str, path: str | os.PathLike[str], fmt: str) -> None:
    """Write a rendered report (as UTF-8, whatever the run's bytes were) to `path`."""
    write_output(path, lambda temp: temp.write_text(printable(text), encoding="utf-8"), f"the {fmt} report")


def fleet_pages_dir(html: str | os.PathLike[str]) -> Path:
    """Where a fleet's per-run HTML pages go: beside its overview, `<name>-runs/`."""
    target = Path(html)
    return target.with_name(f"{target.stem}-runs")


def write_html_report(answer: PathsAnalysis | Analysis, path: str | os.PathLike[str]) -> Path:
    """Write the HTML report of one run, or a fleet's overview (its runs' pages were written beside their
    analyses: `RunReport.html_error` says which could not be). Returns the file written."""
    from trace_doctor.named_runs import PathsAnalysis

    target = Path(path)
    if isinstance(answer, PathsAnalysis) and answer.fleet is not None:
        from trace_doctor.report.fleet_html import write_fleet_html

        fleet = answer.fleet
        write_output(
            target,
            lambda temp: write_fleet_html(fleet, temp, base_dir=target.parent),
            "the HTML report",
            make_folder=True,
        )
        return target
    from trace_doctor.report.html import write_html

    result = answer.analysis if isinstance(answer, PathsAnalysis) else answer
    write_output(target, lambda temp: write_html(result, temp), "the HTML report", make_folder=True)
    return target


def _exportable(result: Analysis) -> None:
    """Raise NothingToExport (a request error: exit 2) when the run has nothing a trace could draw."""
    from trace_doctor.errors import NothingToExport
    from trace_doctor.report.export import nothing_to_export

    why = nothing_to_export(result)
    if why is not None:
        raise NothingToExport(f"{printable(str(result.run.meta.path or 'the run'))}: {why}")


def write_perfetto_trace(result: Analysis, path: str | os.PathLike[str]) -> Path:
    """The run's spans and findings as a native Perfetto trace (.pftrace); with no trace, its steps and
    phases from the metrics laid end to end. NothingToExport when it has neither."""
    from trace_doctor.report.export import write_perfetto

    _exportable(result)
    return write_output(path, lambda temp: write_perfetto(result, temp), "the Perfetto trace")


def write_chrome_trace(result: Analysis, path: str | os.PathLike[str]) -> Path:
    """The run's spans and findings as a Chrome trace JSON array (chrome://tracing, the Perfetto UI); with
    no trace, its steps and phases from the metrics. NothingToExport when it has neither."""
    from trace_doctor.report.export import write_chrome_json

    _exportable(result)
    return write_output(path, lambda temp: write_chrome_json(result, temp), "the Chrome trace JSON")


def write_escalation_bundle(result: Analysis, path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The escalation bundle (a zip: report, findings, environment, metrics, log excerpts, profiles, config;
    secrets redacted: analyse with redact=True), replacing `path` whole or not at all. Returns its
    manifest, one entry per file."""
    from trace_doctor.report.bundle import write_bundle

    return write_output(path, lambda temp: write_bundle(result, temp), "the bundle", make_folder=True)
