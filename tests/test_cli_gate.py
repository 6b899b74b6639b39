"""The CI gate through the command line: exit codes 0/1/2, baseline verdicts, JUnit and SARIF output."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest
from ci_fixtures import step_times, write_sl_run
from click.testing import CliRunner
from conftest import fixture_run

from trace_doctor.cli import main


def run_cli(*args: str):
    return CliRunner().invoke(main, ["analyze", "--no-html", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def baseline_dir(tmp_path_factory):
    return str(write_sl_run(tmp_path_factory.mktemp("base") / "run", step_times(20, 2.0, seed=1)))


def test_healthy_fixture_passes_fail_on_warning():
    result = run_cli(str(fixture_run("sl_healthy_pipelined")), "--fail-on", "warning")
    assert result.exit_code == 0, result.output


def test_sequential_await_fixture_fails_fail_on_warning():
    result = run_cli(str(fixture_run("sl_sequential_await")), "--fail-on", "warning", "--format", "json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert "pipelining-gap" in {f["rule"] for f in document["findings"]}


def test_gate_never_does_not_fail_on_findings():
    assert run_cli(str(fixture_run("sl_sequential_await"))).exit_code == 0


def test_thirty_percent_slower_candidate_fails_with_a_phase_explanation(tmp_path, baseline_dir):
    times = [t if i == 0 else t * 1.3 for i, t in enumerate(step_times(20, 2.0, seed=2))]
    candidate = write_sl_run(tmp_path / "cand", times)
    result = run_cli(str(candidate), "--baseline", baseline_dir, "--format", "json")
    assert result.exit_code == 1  # a regression trips the gate even with --fail-on never
    block = json.loads(result.stdout)["baseline"]
    assert block["verdict"] == "regression"
    assert {p["phase"] for p in block["breakdown"]} >= {"waits", "get_batch", "untimed", "other/interaction"}
    markdown = run_cli(str(candidate), "--baseline", baseline_dir, "--format", "markdown").stdout
    assert "**regression**" in markdown and "| waits |" in markdown


def test_three_step_candidate_is_inconclusive_and_fails_only_when_asked(tmp_path, baseline_dir):
    candidate = str(write_sl_run(tmp_path / "cand", step_times(3, 2.0, seed=3)))
    plain = run_cli(candidate, "--baseline", baseline_dir, "--format", "json")
    assert plain.exit_code == 0
    assert json.loads(plain.stdout)["baseline"]["verdict"] == "inconclusive"
    assert run_cli(candidate, "--baseline", baseline_dir, "--fail-on-inconclusive").exit_code == 1


@pytest.mark.parametrize(
    "args",
    [
        ("--fail-on", "sometimes"),
        ("--format", "yaml"),
        ("--select", "no-such-rule"),
    ],
)
def test_usage_errors_exit_2(baseline_dir, args):
    assert run_cli(baseline_dir, *args).exit_code == 2


def test_missing_path_and_missing_baseline_exit_2(tmp_path, baseline_dir):
    assert run_cli(str(tmp_path / "nowhere")).exit_code == 2
    assert run_cli(baseline_dir, "--baseline", str(tmp_path / "nowhere")).exit_code == 2


def test_junit_and_sarif_outputs_parse(tmp_path):
    run = str(fixture_run("sl_sequential_await"))
    junit_file, sarif_file = tmp_path / "td.xml", tmp_path / "td.sarif"
    assert run_cli(run, "--fail-on", "warning", "--format", "junit", "--output", str(junit_file)).exit_code == 1
    suite = ET.parse(junit_file).getroot().find("testsuite")
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert "pipelining-gap" in failed
    assert int(suite.get("failures")) == len(failed)
    assert run_cli(run, "--format", "sarif", "--output", str(sarif_file)).exit_code == 0
    sarif = json.loads(sarif_file.read_text())
    assert sarif["version"] == "2.1.0"
    assert "pipelining-gap" in {r["ruleId"] for r in sarif["runs"][0]["results"]}


@pytest.mark.parametrize(
    "args",
    [
        ("analyze", "{run}", "--baseline", ""),
        ("analyze", ""),
        ("analyze", "{run}", "--output", ""),
        ("analyze", "{run}", "--html", ""),
        ("bundle", "", "-o", "{tmp}/b.zip"),
        ("ingest", "{run}", "--out", ""),
        ("export", "{run}", "--chrome-json", ""),
    ],
)
def test_an_empty_path_is_a_usage_error(tmp_path, monkeypatch, baseline_dir, args):
    # `--baseline "$BASE"` with BASE unset ran no comparison and exited 0 (a CI gate silently off); an empty
    # PATH analysed or bundled the working directory. Run from a folder holding a run, so "" would find one.
    monkeypatch.chdir(baseline_dir)
    argv = [a.format(run=baseline_dir, tmp=tmp_path) for a in args]
    result = CliRunner().invoke(main, argv, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "empty path" in result.output
    assert not (tmp_path / "b.zip").exists()


def test_a_file_where_the_output_folder_should_be_is_named(tmp_path, baseline_dir):
    # bundle creates the zip's folder; a file of that name made it say "File exists", as if the zip were.
    (tmp_path / "out").write_text("a file, not a folder")
    result = CliRunner().invoke(main, ["bundle", baseline_dir, "-o", str(tmp_path / "out" / "b.zip")])
    assert result.exit_code == 2
    assert f"{tmp_path / 'out'} is a file, not a folder" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ("analyze", "{run}", "--no-html", "--output", "{run}/metrics.jsonl"),
        ("analyze", "{run}", "--html", "{run}/./metrics.jsonl"),
        ("analyze", "{other}", "--no-html", "--baseline", "{run}", "-o", "{run}/metrics.jsonl"),
        ("export", "{run}", "--chrome-json", "{run}/metrics.jsonl"),
        ("bundle", "{run}", "-o", "{run}/metrics.jsonl"),
    ],
)
def test_an_output_over_an_input_file_is_refused_before_anything_is_written(tmp_path, args):
    # `-o run/metrics.jsonl` (a slip of the shell's completion) replaced the run's metrics with the report.
    run = write_sl_run(tmp_path / "run", step_times(12, 2.0, seed=4))
    other = write_sl_run(tmp_path / "other", step_times(12, 2.0, seed=5))
    before = (run / "metrics.jsonl").read_bytes()
    argv = [a.format(run=run, other=other) for a in args]
    result = CliRunner().invoke(main, argv, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "is one of the run's input files" in result.output
    assert (run / "metrics.jsonl").read_bytes() == before


@pytest.mark.parametrize(
    "args",
    [
        ("analyze", "{run}", "--html", "{tmp}/r.out", "--output", "{tmp}/./r.out"),
        ("analyze", "{run}", "--output", "trace-doctor-report.html"),  # the default HTML's name
        ("export", "{run}", "--perfetto", "{tmp}/t.out", "--chrome-json", "{tmp}/t.out"),
    ],
)
def test_two_outputs_naming_one_file_are_refused(tmp_path, monkeypatch, args):
    # The second write replaced the first: `-o trace-doctor-report.html` printed the report, then the
    # default HTML report overwrote it, with exit 0.
    monkeypatch.chdir(tmp_path)
    run = write_sl_run(tmp_path / "run", step_times(12, 2.0, seed=4))
    result = CliRunner().invoke(main, [a.format(run=run, tmp=tmp_path) for a in args], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "name the same file" in result.output
    assert not list(tmp_path.glob("*.out")) and not (tmp_path / "trace-doctor-report.html").exists()
    both_null = ["analyze", str(run), "--html", os.devnull, "--output", os.devnull]
    assert CliRunner().invoke(main, both_null, catch_exceptions=False).exit_code == 0
