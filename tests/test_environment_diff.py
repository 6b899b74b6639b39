"""TD404 environment-diff: two runs' recorded environments compared, with a baseline and across a folder.

The pairs in fixtures/training/env_rl_* (fixtures/training_gen/environment.py) differ from their
baseline only in the pip freeze W&B saved (tinker 0.41.0 and numpy 2.3.4 instead of 0.40.1 and
2.3.3) and in how they ended: one regressed and stopped early, one has the baseline's metrics.
"""

from __future__ import annotations

import shutil
from functools import cache

import orjson
import polars as pl
import pytest
from conftest import ROOT, isolated_cache

from trace_doctor.api import analyze, load_run
from trace_doctor.derive.environment_diff import compare_environments, compare_groups, run_environment
from trace_doctor.fleet import analyze_sources
from trace_doctor.model import LOG_EVENTS_SCHEMA, RunTables
from trace_doctor.report.fleet import render_fleet_text
from trace_doctor.report.fleet_html import render_fleet_html
from trace_doctor.runs import split_runs
from trace_doctor.settings import Settings

TRAINING = ROOT / "fixtures" / "training"


@cache
def compared(candidate: str, baseline: str):
    return analyze(load_run(TRAINING / candidate), baseline=load_run(TRAINING / baseline))


def outcome(result):
    (found,) = [o for o in result.outcomes if o.rule == "environment-diff"]
    return found


def findings(result):
    return [f for f in result.findings if f.rule == "environment-diff"]


def environment(**fields) -> dict:
    return {"packages": {}, "complete": False, "python": None, "machine": {}, "cookbook": None, **fields}


def versions_run(lines: list[tuple[str, str, str]]) -> RunTables:
    """A run whose logs hold version events: (package, version, evidence)."""
    run = RunTables()
    rows = [
        {
            "source": "logs.log",
            "line": i + 1,
            "kind": "version",
            "timestamp": None,
            "logger": None,
            "level": None,
            "message": f"{package}: {version}",
            "fields": orjson.dumps({"package": package, "version": version, "evidence": evidence}).decode(),
        }
        for i, (package, version, evidence) in enumerate(lines)
    ]
    run.log_events = pl.DataFrame(rows, schema=LOG_EVENTS_SCHEMA)
    return run


# --- one run's environment --------------------------------------------------------------------


def test_a_run_records_its_packages_python_machine_and_cookbook():
    env = run_environment(load_run(TRAINING / "env_rl_baseline"))
    assert env["packages"]["tinker"] == "0.40.1" and len(env["packages"]) == 33
    assert env["complete"] is True  # a pip freeze: a package it lacks was not installed
    assert env["python"] == "3.12.11"
    assert env["machine"]["cpu_count"] == 16 and env["machine"]["host_kind"] == "Linux (aws)"
    assert env["cookbook"].startswith("9b2f4c6")


def test_an_environment_check_line_wins_over_the_freeze():
    run = versions_run(
        [("tinker", "0.40.1", "pip freeze"), ("tinker", "0.41.0", "version line"), ("Python", "3.13.1 (main)", "")]
    )
    env = run_environment(run)
    assert env["packages"] == {"tinker": "0.41.0"} and env["python"] == "3.13.1"


# --- two environments compared ----------------------------------------------------------------


def test_known_bad_then_sdk_then_python_then_the_rest():
    base = environment(packages={"numpy": "2.3.3", "pydantic": "2.11.9", "tinker": "0.40.1"}, python="3.12.11")
    cand = environment(packages={"numpy": "2.3.4", "pydantic": "2.13.0b2", "tinker": "0.41.0"}, python="3.13.1")
    diff = compare_environments(base, cand)
    assert [d["name"] for d in diff.differences] == ["pydantic", "tinker", "python", "numpy"]
    assert "pydantic-2.13-beta" in diff.differences[0]["known_bad"]


def test_a_package_missing_from_a_complete_freeze_was_not_installed():
    base = environment(packages={"tinker": "0.40.1", "torchvision": "0.25.0"}, complete=True)
    cand = environment(packages={"tinker": "0.40.1"}, complete=True)
    (only,) = compare_environments(base, cand).differences
    assert (only["name"], only["baseline"], only["candidate"]) == ("torchvision", "0.25.0", None)
    # Version lines only (not a freeze): a package the other side does not name is not compared.
    assert not compare_environments(environment(packages={"torch": "2.10.0"}), environment(packages={})).differ


def test_a_side_without_a_record_is_named_with_what_to_capture():
    base = environment(packages={"tinker": "0.40.1"})
    cand = environment(packages={"tinker": "0.40.1"}, python="3.12.11")
    diff = compare_environments(base, cand)
    assert diff.compared == ["packages"] and not diff.differ
    assert diff.missing == [{"side": "baseline", "aspect": "python", "capture": diff.missing[0]["capture"]}]
    assert "python -V" in diff.missing[0]["capture"]


# --- the rule, with a baseline ----------------------------------------------------------------


def test_fires_when_the_environment_and_the_outcome_differ_naming_tinker_first():
    result = compared("env_rl_sdk_regressed", "env_rl_baseline")
    (finding,) = findings(result)
    assert finding.severity == "warning"
    assert finding.message.startswith("The environment differs from the baseline's: tinker 0.40.1 -> 0.41.0; numpy")
    assert [d["name"] for d in finding.evidence["differences"]] == ["tinker", "numpy"]
    changes = " ".join(finding.evidence["outcome_changes"])
    assert "training quality regressed" in changes and "run-stopped" in changes


def test_info_when_the_environment_differs_and_the_outcome_does_not():
    result = compared("env_rl_sdk_same_outcome", "env_rl_baseline")
    (finding,) = findings(result)
    assert finding.severity == "info"
    assert "differs, no effect seen" in finding.message and "tinker 0.40.1 -> 0.41.0" in finding.message
    assert finding.evidence["outcome_changes"] == []
    assert result.baseline.verdict == "no regression"


def test_passes_on_identical_environments():
    found = outcome(compared("env_rl_baseline", "env_rl_baseline"))
    assert found.status == "passed" and "same environment" in found.reason and "33 package" in found.reason


def test_not_applicable_when_neither_run_records_its_environment():
    found = outcome(compared("quality_rl_noisy_same", "quality_rl_baseline"))
    assert found.status == "not_applicable"
    assert "neither run records" in found.reason and "pip freeze" in found.reason and "python -V" in found.reason


def test_not_applicable_when_one_side_only_says_what_that_side_should_capture():
    found = outcome(compared("env_rl_baseline", "quality_rl_baseline"))
    assert found.status == "not_applicable"
    assert "only the candidate records" in found.reason and "for the baseline capture" in found.reason


def test_not_run_without_a_baseline():
    result = analyze(load_run(TRAINING / "env_rl_sdk_regressed"))
    assert "environment-diff" not in {o.rule for o in result.outcomes}


# --- across the runs of a folder --------------------------------------------------------------


def fleet_of(tmp_path, monkeypatch, names: list[str]):
    isolated_cache(tmp_path, monkeypatch)
    folder = tmp_path / "runs"
    for name in names:
        shutil.copytree(TRAINING / name, folder / name)
    return analyze_sources(split_runs([folder]).runs, Settings(), jobs=1)


def test_the_fleet_lists_what_the_failing_run_has_and_no_healthy_run_has(tmp_path, monkeypatch):
    fleet = fleet_of(tmp_path, monkeypatch, ["env_rl_baseline", "env_rl_sdk_regressed", "quality_rl_baseline"])
    env = fleet.summary()["environment"]
    assert (env["healthy_runs"], env["failing_runs"]) == (1, 1)
    assert [d["name"] for d in env["differences"]] == ["tinker", "numpy"]
    tinker = env["differences"][0]
    assert tinker["failing"] == [{"value": "0.41.0", "runs": ["env_rl_sdk_regressed"]}]
    assert tinker["healthy"] == [{"value": "0.40.1", "runs": ["env_rl_baseline"]}]
    assert env["unrecorded_runs"] == ["quality_rl_baseline"]
    text = render_fleet_text(fleet)
    assert "Environment of failing vs healthy runs: tinker 0.41.0 (1) in failing runs, 0.40.1 (1)" in text
    html = render_fleet_html(fleet)
    assert '<section id="environment">' in html and "tinker 0.41.0 (1) in failing runs" in html


def test_a_version_a_healthy_run_also_has_does_not_tell_the_runs_apart():
    healthy = {
        "a": environment(packages={"tinker": "0.40.1"}),
        "b": environment(packages={"tinker": "0.41.0"}),
    }
    assert compare_groups(healthy, {"c": environment(packages={"tinker": "0.41.0"})}) == []
    (entry,) = compare_groups(healthy, {"c": environment(packages={"tinker": "0.42.0"})})
    assert [v["value"] for v in entry["failing"]] == ["0.42.0"]


@pytest.mark.parametrize("status", ["clear", "limited"])
def test_no_difference_without_both_healthy_and_failing_runs(tmp_path, monkeypatch, status):
    fleet = fleet_of(tmp_path, monkeypatch, ["env_rl_baseline", "env_rl_sdk_same_outcome"])
    for report in fleet.reports:
        report.status = status
    env = fleet.summary()["environment"]
    assert env["differences"] == [] and env["failing_runs"] == 0
