"""A bug is exit 3 with one line, never a traceback nor exit 1 (the gate); files that cannot be
written are a message, not a crash; a fleet reports every other run when one of them breaks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, fixture_run

from trace_doctor import cli
from trace_doctor.cli import main
from trace_doctor.fleet import analyze_sources
from trace_doctor.runs import RunSource, split_runs
from trace_doctor.settings import Settings

ONE_LINE = "trace-doctor: internal error (a bug in trace-doctor, not a problem with your run"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def traceback_file(stderr: str) -> Path:
    return Path(stderr.split("traceback in ", 1)[1].split(";", 1)[0])


def broken(*args, **kwargs):
    raise ZeroDivisionError("a bug\nwith a second line")


@pytest.fixture(autouse=True)
def _tracebacks_in_tmp_path(tmp_path, monkeypatch):
    # Tracebacks go to the temporary directory: this test's, not the machine's.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return Path(shutil.copytree(fixture_run("sl_gil_stall"), tmp_path / "run"))


COMMANDS = {
    "analyze": lambda run, out: ["analyze", str(run), "--no-html"],
    "demo": lambda run, out: ["demo", "--no-html"],
    "rules": lambda run, out: ["rules"],
    "rules SLUG": lambda run, out: ["rules", "gil-stall"],
    "ingest": lambda run, out: ["ingest", str(run), "--out", str(out / "dataset")],
    "export": lambda run, out: ["export", str(run), "--chrome-json", str(out / "trace.json")],
    "bundle": lambda run, out: ["bundle", str(run), "-o", str(out / "bundle.zip")],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bug_in_any_command_is_exit_3_and_one_line(command, run_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "load_settings", broken)  # every command reads its settings first
    result = invoke(*COMMANDS[command](run_dir, tmp_path))
    assert result.exit_code == 3
    [line] = result.stderr.splitlines()
    assert line.startswith(ONE_LINE) and "ZeroDivisionError: a bug;" in line and "please report it" in line
    assert "Traceback" not in result.output
    assert traceback_file(line).parent == tmp_path
    saved = traceback_file(line).read_text()
    assert "Traceback (most recent call last)" in saved and 'raise ZeroDivisionError("a bug' in saved
    assert saved.startswith("trace-doctor ")


def test_a_bug_during_ingest_on_the_loading_thread_is_exit_3(run_dir, monkeypatch):
    import trace_doctor.ingest.kinds.metrics as metrics_kind

    monkeypatch.setattr(metrics_kind, "parse_metrics_files", broken)
    result = invoke("analyze", str(run_dir), "--no-html", "--fail-on", "warning")
    assert result.exit_code == 3 and result.stderr.startswith(ONE_LINE)


def test_an_eof_error_is_a_bug_not_aborted_exit_1(run_dir, monkeypatch):
    """click turns EOFError (a truncated gzip's) and Ctrl-C into 'Aborted!' and exit 1: the gate."""
    import trace_doctor.ingest.kinds.metrics as metrics_kind

    def eof(*args, **kwargs):
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")

    monkeypatch.setattr(metrics_kind, "parse_metrics_files", eof)
    assert invoke("analyze", str(run_dir), "--no-html").exit_code == 3

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(metrics_kind, "parse_metrics_files", interrupt)
    result = invoke("analyze", str(run_dir), "--no-html")
    assert result.exit_code == 130 and result.stderr == "trace-doctor: interrupted\n"


def test_the_console_script_exits_3_without_a_traceback(run_dir):
    """The installed entry point (`run`, which leaves through os._exit) keeps the contract."""
    script = (
        "import trace_doctor.cli as cli\n"
        "def broken(*a, **k):\n    raise RuntimeError('boom')\n"
        "cli.load_settings = broken\n"
        "import sys; sys.argv = ['trace-doctor', 'analyze', sys.argv[1], '--no-html']\n"
        "cli.run()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(run_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith(ONE_LINE) and "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


# -- a folder of runs: the broken run is a row, the others report ------------------------------------


def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    for name in ("sl_gil_stall", "sl_healthy_pipelined", "sl_steady_slow"):
        shutil.copytree(fixture_run(name), root / name)
    return root


def test_a_bug_in_one_run_of_a_fleet_is_its_row_and_exit_3(tmp_path, monkeypatch):
    import trace_doctor.fleet as fleet

    real = fleet._analyze_into

    def breaks_one(report, *args, **kwargs):
        if report.source.label.endswith("sl_steady_slow"):
            raise ZeroDivisionError("a bug in one run")
        return real(report, *args, **kwargs)

    monkeypatch.setattr(fleet, "_analyze_into", breaks_one)
    result = invoke("analyze", str(sweep(tmp_path)), "--no-html", "--format", "json", "--fail-on", "warning")
    assert result.exit_code == 3  # a bug wins over a tripped gate: the answer is incomplete
    document = json.loads(result.stdout)
    rows = {row["run"].rsplit("/", 1)[-1]: row for row in document["fleet"]["table"]}
    assert rows["sl_steady_slow"]["verdict"] == "failed"
    assert rows["sl_steady_slow"]["error"] == "internal error: ZeroDivisionError: a bug in one run"
    assert {rows["sl_gil_stall"]["verdict"], rows["sl_healthy_pipelined"]["verdict"]} <= {"warning", "error", "clear"}
    [line] = result.stderr.splitlines()
    assert "internal error (a bug in trace-doctor, not a problem with your runs) in 1 of 3 run(s)" in line
    assert "ZeroDivisionError" in traceback_file(line).read_text()


class WorkerKiller(RunSource):
    """A run whose unpickling in the worker kills that process, as an out-of-memory kill would."""

    def __reduce__(self):
        return (os._exit, (9,))


def test_a_worker_that_dies_costs_only_its_run(tmp_path):
    split = split_runs([sweep(tmp_path)])
    victim = split.runs[0]
    sources = [WorkerKiller(**{f: getattr(victim, f) for f in victim.__dataclass_fields__}), *split.runs[1:]]
    fleet = analyze_sources(sources, Settings(), jobs=2)
    assert len(fleet.reports) == 3 and len(fleet.analysed) == 2
    [dead] = fleet.internal_errors
    assert dead.source.label == victim.label and dead.crash_log is None
    assert dead.error.startswith("internal error: the worker process analysing it died")


# -- files that cannot be written -----------------------------------------------------------------


def read_only(*args, **kwargs):
    raise PermissionError(30, "Read-only file system")


@pytest.mark.parametrize(("fail_on", "code"), [("never", 0), ("warning", 1)])
def test_a_read_only_working_directory_costs_the_html_only(run_dir, monkeypatch, fail_on, code):
    """The default report file is a by-product: the analysis is printed, stderr says why there is no
    HTML, and the exit code is the gate's, as if --no-html had been given."""
    import trace_doctor.report.html as html

    monkeypatch.setattr(html, "write_html", read_only)
    result = invoke("analyze", str(run_dir), "--format", "json", "--fail-on", fail_on)
    assert result.exit_code == code
    assert json.loads(result.stdout)["findings"]
    assert result.stderr == (
        "trace-doctor: cannot write the HTML report to trace-doctor-report.html: Read-only file system "
        "(use --html FILE to write it elsewhere, or --no-html)\n"
    )


def test_a_read_only_working_directory_for_a_fleet(tmp_path, monkeypatch):
    import trace_doctor.report.fleet_html as fleet_html
    import trace_doctor.report.html as html

    monkeypatch.setattr(html, "write_html", read_only)
    monkeypatch.setattr(html, "write_shared_plotly", read_only)  # the run pages' plotly.min.js
    monkeypatch.setattr(fleet_html, "write_fleet_html", read_only)
    monkeypatch.chdir(tmp_path)  # should anything still be written, not into the checkout
    result = invoke("analyze", str(sweep(tmp_path)), "--format", "json")
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)["runs"]) == 3
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and all("Read-only file system" in line for line in lines)
    assert lines[0].startswith("trace-doctor: 3 of 3 run reports not written: cannot write trace-doctor-report-runs/")


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "{run}", "--html", "{out}/report.html"],
        ["analyze", "{run}", "--no-html", "--output", "{out}/report.json"],
        ["export", "{run}", "--perfetto", "{out}/trace.pftrace"],
        ["bundle", "{run}", "-o", "{out}/bundle.zip"],
        ["ingest", "{run}", "--out", "{out}/dataset"],
    ],
)
def test_a_file_the_user_named_that_cannot_be_written_is_exit_2(run_dir, tmp_path, args):
    blocker = tmp_path / "not a folder"
    blocker.write_text("a file where a folder is needed")
    result = invoke(*[a.format(run=run_dir, out=blocker) for a in args])
    assert result.exit_code == 2, result.output
    assert "cannot write " in result.stderr and "Traceback" not in result.output


def test_a_crash_report_carries_no_credential(run_dir, monkeypatch):
    # "please report it": the one line and the traceback file get shared, and an exception's message can
    # quote the run (polars names a duplicate metric key, a JSON error quotes a config value).
    from planted_secrets import CONTEXTS, SECRETS, leaks

    import trace_doctor.ingest.kinds.metrics as metrics_kind

    def quoting(*args, **kwargs):
        raise ValueError(f"column 'env/{CONTEXTS['tinker']}' is duplicate\n{CONTEXTS['aws_secret']}")

    monkeypatch.setattr(metrics_kind, "parse_metrics_files", quoting)
    monkeypatch.setattr(sys, "argv", ["trace-doctor", "bundle", str(run_dir), "--api-key", SECRETS["openai"]])
    result = invoke("bundle", str(run_dir), "-o", str(run_dir / "b.zip"))
    assert result.exit_code == 3 and result.stderr.startswith(ONE_LINE)
    assert "ValueError: column 'env/env: TINKER_API_KEY=[REDACTED]" in result.stderr
    saved = traceback_file(result.stderr).read_text()
    assert "Traceback (most recent call last)" in saved and "[REDACTED]" in saved
    assert leaks(result.stderr) == [] and leaks(saved) == []
