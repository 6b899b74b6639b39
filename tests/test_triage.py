"""Triage: the root cause first, symptoms under their causes, every lost second counted once."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache

import polars as pl
import pytest
from conftest import CORPUS, CORPUS_MISSING, FIXTURE_RUNS, fixture_run

from trace_doctor import analyze, load_run
from trace_doctor.derive.wall import TOTALS_BASIS
from trace_doctor.knowledge.triage import COMPARISON_RULES
from trace_doctor.model import Finding
from trace_doctor.triage.account import attribute, time_account
from trace_doctor.triage.locate import finding_key
from trace_doctor.triage.tree import diagnosis_order

SCENARIOS = sorted(
    p.name
    for p in FIXTURE_RUNS.iterdir()
    if (p / "EXPECTED.json").exists() and "root_cause" in json.loads((p / "EXPECTED.json").read_text())
)


@cache
def _analysed(scenario: str):
    """A scenario's analysis, made once for the three checks below (which only read it)."""
    return analyze(load_run(fixture_run(scenario)))


def _expected(name: str) -> dict:
    return json.loads((fixture_run(name) / "EXPECTED.json").read_text())


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_verdict_names_the_root_cause_the_scenario_was_built_with(scenario):
    result = _analysed(scenario)
    root = _expected(scenario)["root_cause"]
    named = result.verdict.costliest.rule if result.verdict.costliest else None
    assert named == root, result.verdict.headline
    if root:
        assert "Root cause:" in result.verdict.headline


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_symptoms_are_explained_by_their_causes(scenario):
    result = _analysed(scenario)
    rule_of = {finding_key(f): f.rule for f in result.findings}
    for symptom, cause in _expected(scenario)["explained_by"].items():
        found = [f for f in result.findings if f.rule == symptom]
        assert found, f"{symptom} did not fire"
        for f in found:
            assert cause in {rule_of.get(k) for k in f.explained_by}, (symptom, f.explained_by)
            assert f.seconds_lost is None  # its seconds are its causes'


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_seconds_lost_add_up_to_at_most_the_wall_time(scenario):
    result = _analysed(scenario)
    _assert_account_closes(result.run_summary.to_dict(), [f.to_dict() for f in result.findings])


def _assert_account_closes(summary: dict, findings: list[dict]) -> None:
    wall = summary["wall_time_s"]
    lost = sum(f["impact"]["seconds_lost"] or 0.0 for f in findings if f["rule"] not in COMPARISON_RULES)
    if wall is None:
        return
    assert lost <= wall * (1 + 1e-6) + 1e-6
    account = summary["account"]
    if account is None:
        return
    parts = sum(r["seconds"] for r in account["causes"]) + account["unexplained_s"]
    parts += account["useful_service_s"] or 0.0
    # Time the loop's structure explains (its phases, a named untimed remainder) is a part of the wall too.
    parts += sum(p["seconds"] for p in account.get("structure", []))
    assert parts == pytest.approx(wall, rel=1e-3, abs=1e-3)
    low, high = account["counterfactual"]["range_s"]
    assert 0 <= low <= high <= wall + 1e-6


def test_every_corpus_run_loses_at_most_its_wall_time():
    if not CORPUS.exists():
        pytest.skip(CORPUS_MISSING)
    out = subprocess.run(
        [sys.executable, "-m", "trace_doctor.cli", "analyze", str(CORPUS), "--no-html", "--format", "json"],
        capture_output=True,
        text=True,
        env={"TRACE_DOCTOR_CACHE": "off", "PATH": "/usr/bin:/bin"},
        timeout=600,
    )
    doc = json.loads(out.stdout)
    assert len(doc["runs"]) >= 10
    for run in doc["runs"]:
        if "summary" in run:
            _assert_account_closes(run["summary"], run["findings"])


def _finding(rule: str, seconds: float | None, *, ranges=(), steps=(), explained_by=(), confidence="high") -> Finding:
    return Finding(
        rule=rule,
        code="TD000",
        severity="warning",
        title=rule,
        message="",
        fix="",
        steps=list(steps),
        time_ranges_us=[list(r) for r in ranges],
        seconds_lost=seconds,
        confidence=confidence,
        fingerprint=rule,
        explained_by=list(explained_by),
    )


EMPTY = pl.DataFrame()


def _attribute(findings, wall):
    return attribute(findings, wall_s=wall, spans=EMPTY, step_times=EMPTY, trainer="sl", clock_cycle=None)


def test_overlapping_time_ranges_are_counted_once_in_triage_order():
    # Both claim the same 4 s window; pipelining comes first in the guide's order.
    gap = _finding("pipelining-gap", 4.0, ranges=[(0, 4e6)])
    stall = _finding("gil-stall", 4.0, ranges=[(0, 4e6)])
    out, _ = _attribute([stall, gap], wall=10.0)
    seconds = {f.rule: f.seconds_lost for f in out}
    assert seconds == {"pipelining-gap": 4.0, "gil-stall": 0.0}
    assert out[0].evidence["own_estimate_s"] == 4.0


def test_claims_never_exceed_the_wall_time():
    out, _ = _attribute([_finding("cpu-bound-main-thread", 8.0), _finding("get-batch-bottleneck", 7.0)], wall=10.0)
    assert sum(f.seconds_lost for f in out) == pytest.approx(10.0)
    assert {f.rule: f.seconds_lost for f in out}["get-batch-bottleneck"] == 7.0  # earlier stage first


def test_an_explained_symptom_claims_nothing_and_keeps_its_own_estimate():
    cause = _finding("pipelining-gap", 3.0)
    symptom = _finding("steady-slowness", 5.0, explained_by=["pipelining-gap"])
    out, _ = _attribute([cause, symptom], wall=10.0)
    assert out[1].seconds_lost is None
    assert out[1].evidence["own_estimate_s"] == 5.0
    assert out[1].evidence["not_covered_by_causes_s"] == 2.0


def test_counterfactual_range_reflects_confidence():
    findings, _ = _attribute(
        [_finding("pipelining-gap", 4.0), _finding("cpu-bound-main-thread", 2.0, confidence="low")], wall=10.0
    )
    account = time_account(
        findings, wall_s=10.0, wall_basis=TOTALS_BASIS, spans=EMPTY, step_times=EMPTY, clock_cycle=None, floor_s=0.0
    )
    assert account.counterfactual.range_s == (4.0, 6.0)
    assert account.lost_s == 6.0


def test_symptoms_are_shown_under_their_cause():
    cause = _finding("cpu-bound-main-thread", 3.0)
    gil = _finding("gil-stall", None, explained_by=["cpu-bound-main-thread"])
    beat = _finding("heartbeat-stall", None, explained_by=["gil-stall"])
    other = _finding("decoded-error", None)
    order = [(f.rule, depth) for f, depth in diagnosis_order([cause, other, beat, gil])]
    assert order == [
        ("cpu-bound-main-thread", 0),
        ("gil-stall", 1),
        ("heartbeat-stall", 2),
        ("decoded-error", 0),
    ]
