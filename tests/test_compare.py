"""Baseline comparison: step-time-regression verdicts, the additive phase breakdown, new-finding."""

from __future__ import annotations

import shutil

import polars as pl
import pytest
from ci_fixtures import step_times, write_sl_run
from conftest import fixture_run

from trace_doctor.api import analyze, load_run
from trace_doctor.rules.checks.new_finding import new_fingerprints
from trace_doctor.rules.checks.step_time_regression import OTHER, phase_breakdown


def slower(times: list[float], factor: float) -> list[float]:
    """The same run with every post-warm-up step `factor` times as long."""
    return [t if i == 0 else t * factor for i, t in enumerate(times)]


@pytest.fixture(scope="module")
def baseline_dir(tmp_path_factory):
    return write_sl_run(tmp_path_factory.mktemp("base") / "run", step_times(20, 2.0, seed=1))


def compare_dirs(candidate, baseline):
    return analyze(load_run(candidate), baseline=load_run(baseline))


def test_thirty_percent_slower_steady_steps_is_a_regression_explained_by_phase(tmp_path, baseline_dir):
    candidate = write_sl_run(tmp_path / "cand", slower(step_times(20, 2.0, seed=2), 1.3))
    result = compare_dirs(candidate, baseline_dir)
    block = result.baseline
    assert block["verdict"] == "regression"
    stats = block["statistics"]
    assert stats["p"] < 0.001 and 0.25 < stats["effect"] < 0.35
    assert stats["n_baseline"] == 19 and stats["n_candidate"] == 19
    regression = [f for f in result.findings if f.rule == "step-time-regression"]
    assert len(regression) == 1 and regression[0].code == "TD401"
    assert "waits" in regression[0].message  # the explanation names the phase that grew most
    parts = {p["phase"]: p["change_s"] for p in block["breakdown"]}
    total = stats["median_candidate_s"] - stats["median_baseline_s"]
    assert sum(parts.values()) == pytest.approx(total, abs=1e-9)
    assert max(parts, key=parts.get) == "waits"
    assert set(parts) >= {"get_batch", "waits", "untimed", OTHER}


def test_same_run_is_no_regression_and_has_no_new_findings(baseline_dir):
    result = compare_dirs(baseline_dir, baseline_dir)
    assert result.baseline["verdict"] == "no regression"
    assert result.baseline["new_fingerprints"] == []
    assert not [f for f in result.findings if f.rule in ("step-time-regression", "new-finding")]
    statuses = {o.rule: o.status for o in result.outcomes}
    assert statuses["step-time-regression"] == "passed" and statuses["new-finding"] == "passed"


def test_small_slowdown_below_the_minimum_effect_is_not_a_regression(tmp_path, baseline_dir):
    candidate = write_sl_run(tmp_path / "cand", slower(step_times(20, 2.0, seed=1), 1.05))
    block = compare_dirs(candidate, baseline_dir).baseline
    assert block["statistics"]["p"] < 0.05  # significant ...
    assert block["verdict"] == "no regression"  # ... but below the 10% minimum effect
    assert "effect below 10%" in block["message"]


def test_three_step_candidate_is_inconclusive(tmp_path, baseline_dir):
    candidate = write_sl_run(tmp_path / "cand", step_times(3, 2.0, seed=4))
    block = compare_dirs(candidate, baseline_dir).baseline
    assert block["verdict"] == "inconclusive"
    assert "too few steady steps" in block["message"]
    assert block["statistics"]["u"] is None


def test_breakdown_puts_non_additive_remainder_in_other():
    base = pl.DataFrame(
        {
            "total_s": [1.0, 2.0, 3.0],
            "phase:get_batch": [0.1, 1.5, 0.2],
            "phase:step": [0.8, 0.4, 2.5],
            "untimed_s": [0.1, 0.1, 0.3],
        }
    )
    cand = pl.DataFrame(
        {
            "total_s": [2.0, 2.5, 4.0],
            "phase:get_batch": [1.0, 0.1, 0.2],
            "phase:step": [0.9, 2.3, 3.7],
            "untimed_s": [0.1, 0.1, 0.1],
        }
    )
    parts = phase_breakdown(base, cand)
    names = [p["phase"] for p in parts]
    assert names == ["get_batch", "waits", "untimed", OTHER]
    assert sum(p["change_s"] for p in parts) == pytest.approx(0.5)
    assert parts[-1]["change_s"] != pytest.approx(0.0)  # medians of parts do not add up by themselves


def test_new_fingerprints_ignore_step_numbers_and_seconds():
    from trace_doctor.model import Finding

    def finding(fp, seconds):
        return Finding(
            rule=fp.split(":")[0],
            code="TD101",
            severity="warning",
            title="t",
            message="m",
            fix="f",
            steps=[int(seconds)],
            seconds_lost=seconds,
            fingerprint=fp,
        )

    baseline = [finding("pipelining-gap:sequential-fb-optim", 3.0)]
    candidate = [finding("pipelining-gap:sequential-fb-optim", 9.0), finding("gil-stall:main", 1.0)]
    assert new_fingerprints(candidate, baseline) == ["gil-stall:main"]


def test_sequential_await_fixture_against_healthy_baseline():
    healthy, sequential = fixture_run("sl_healthy_pipelined"), fixture_run("sl_sequential_await")
    result = compare_dirs(sequential, healthy)
    assert result.baseline["verdict"] == "regression"
    fresh = result.baseline["new_fingerprints"]
    assert any(f.startswith("pipelining-gap") for f in fresh)
    new = [f for f in result.findings if f.rule == "new-finding"]
    assert {f.evidence["new_fingerprint"] for f in new} == set(fresh)
    # The structural signals show the lost pipelining, not only the wall time.
    counts = result.baseline["structural"]["findings_by_rule"]["pipelining-gap"]
    assert counts["baseline"] == 0 and counts["candidate"] >= 1


def test_a_copy_of_the_run_elsewhere_has_no_new_finding(tmp_path):
    # A baseline is always another folder: a profile's finding must not be "new" because its path differs
    # (the fingerprint named the profile by its full path, so every profile finding was new and --fail-on tripped).
    run = fixture_run("sl_gil_stall")
    copy = tmp_path / "baseline_copy"
    shutil.copytree(run, copy)
    result = compare_dirs(run, copy)
    profile_prints = [f.fingerprint for f in result.findings if f.fingerprint and ":profile:" in f.fingerprint]
    assert profile_prints == ["cpu-bound-main-thread:profile:profile.json"]
    assert result.baseline["new_fingerprints"] == []
    assert not [f for f in result.findings if f.rule == "new-finding"]


def test_a_rule_that_could_not_run_on_the_baseline_reports_nothing_new(tmp_path):
    # The same run recorded without a trace or dumps: gil-stall cannot judge it, so its finding on the
    # candidate is "not compared", never "new since the baseline" (a tripped gate on no evidence).
    run = fixture_run("sl_gil_stall")
    untraced = tmp_path / "untraced"
    shutil.copytree(run, untraced, ignore=shutil.ignore_patterns("trace_events.jsonl", "*.txt"))
    result = compare_dirs(run, untraced)
    base_status = {r["rule"]: r["status"] for r in result.baseline["rules"]}
    assert base_status["gil-stall"] == "not_applicable"
    assert any(f.rule == "gil-stall" for f in result.findings)
    assert "gil-stall" not in result.baseline["new_fingerprints"]
    assert {"rule": "gil-stall", "fingerprint": "gil-stall", "baseline_status": "not_applicable"} in (
        result.baseline["not_compared"]
    )
    new = {f.evidence["rule"] for f in result.findings if f.rule == "new-finding"}
    assert "gil-stall" not in new
    from trace_doctor.report.formats import render

    assert "Not compared (the rule could not run on the baseline): `gil-stall`" in render(result, "markdown")
