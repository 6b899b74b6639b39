"""One gate: the exit code, the Markdown gate line, JUnit failures and the text output never disagree.

The gate is decided once per analysis (trace_doctor.decision); these tests run the installed command
line over real fixtures and generated baseline comparisons at every `--fail-on` level, with and
without `--fail-on-inconclusive`, and read each format's own account of the gate.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from ci_fixtures import step_times, write_sl_run
from click.testing import CliRunner
from conftest import fixture_run

from trace_doctor.cli import main

LEVELS = ("never", "info", "warning", "error")


def run_cli(*args: str):
    return CliRunner().invoke(main, ["analyze", "--no-html", *args], catch_exceptions=False)


def gate_as_shown(args: list[str]) -> dict[str, object]:
    """What each output says about the gate for one invocation."""
    markdown = run_cli(*args, "--format", "markdown")
    junit = run_cli(*args, "--format", "junit")
    text = run_cli(*args, "--format", "text")
    suite = ET.fromstring(junit.stdout)
    return {
        "exit codes": {markdown.exit_code, junit.exit_code, text.exit_code},
        "markdown failed": "**Gate: FAILED**" in markdown.stdout,
        "markdown passed": "**Gate: passed**" in markdown.stdout or "Gate: not set" in markdown.stdout,
        "junit failures": int(suite.get("failures")),
        "text tripped": "Gate: tripped" in text.stdout,
    }


def assert_agree(shown: dict[str, object]) -> None:
    (code,) = shown["exit codes"]  # every format exits the same way
    tripped = code == 1
    assert shown["markdown failed"] is tripped and shown["markdown passed"] is not tripped
    assert (shown["junit failures"] > 0) is tripped
    assert shown["text tripped"] is tripped


@pytest.fixture(scope="module")
def comparisons(tmp_path_factory):
    """Baseline, a 30 % slower candidate (regression) and a 3-step candidate (inconclusive)."""
    root = tmp_path_factory.mktemp("gate")
    baseline = write_sl_run(root / "base", step_times(20, 2.0, seed=1))
    slower = write_sl_run(root / "slow", [t if i == 0 else t * 1.3 for i, t in enumerate(step_times(20, 2.0, seed=2))])
    short = write_sl_run(root / "short", step_times(3, 2.0, seed=3))
    return {"baseline": str(baseline), "regression": str(slower), "inconclusive": str(short)}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("run", ["sl_sequential_await", "sl_healthy_pipelined", "sl_warmup_only"])
def test_formats_agree_on_fixture_runs(run, level):
    shown = gate_as_shown([str(fixture_run(run)), "--fail-on", level])
    assert_agree(shown)


@pytest.mark.parametrize("inconclusive_fails", [False, True])
@pytest.mark.parametrize("case", ["regression", "inconclusive"])
def test_formats_agree_on_baseline_comparisons(comparisons, case, inconclusive_fails):
    args = [comparisons[case], "--baseline", comparisons["baseline"]]
    if inconclusive_fails:
        args.append("--fail-on-inconclusive")
    shown = gate_as_shown(args)
    assert_agree(shown)
    expected = case == "regression" or inconclusive_fails
    assert shown["exit codes"] == {1 if expected else 0}


def test_inconclusive_gate_names_its_reason_in_markdown_and_junit(comparisons):
    args = [comparisons["inconclusive"], "--baseline", comparisons["baseline"], "--fail-on-inconclusive"]
    markdown = run_cli(*args, "--format", "markdown").stdout
    assert "**Gate: FAILED**" in markdown and "inconclusive" in markdown
    suite = ET.fromstring(run_cli(*args, "--format", "junit").stdout)
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    # The 3-step candidate is too short for both axes: step time and its final train_mean_nll window.
    assert sorted(failed) == ["quality-regression", "step-time-regression"]
