"""The verdict leads with a problem, never a hint: calibrated on every fixture run.

A hint is an info finding or a low-confidence guess. It is shown as a note; it is never the root
cause, the training cause or what a one-line summary (a fleet row) names, and a run with only hints
reads as clear.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from conftest import ROOT

from trace_doctor import analyze, load_run
from trace_doctor.decision import can_lead, decide_verdict, is_hint
from trace_doctor.model import Finding, RuleOutcome

FIXTURES = sorted(
    p for folder in ("runs", "training") for p in (ROOT / "fixtures" / folder).iterdir() if (p / "EXPECTED.json").exists()
)


def _healthy(path: Path) -> bool:
    """Built healthy: a timing scenario with no root cause and no problem rule, a training one that
    must fire nothing."""
    expected = json.loads((path / "EXPECTED.json").read_text())
    if path.parent.name == "training":
        return expected["must_fire"] == []
    return "root_cause" in expected and expected["root_cause"] is None


HEALTHY = [p for p in FIXTURES if _healthy(p)]


@cache
def _verdict(path: Path):
    return analyze(load_run(path)).verdict


def test_the_fixture_set_has_healthy_runs_with_hints() -> None:
    assert len(HEALTHY) >= 30
    assert sum(1 for p in HEALTHY if _verdict(p).notes) >= 3  # scheduled work, warm-up, stragglers


@pytest.mark.parametrize("path", HEALTHY, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_healthy_fixture_reads_clear_and_leads_with_no_hint(path: Path) -> None:
    verdict = _verdict(path)
    assert verdict.status in ("clear", "limited"), verdict.headline
    assert verdict.headline.startswith("No problems found"), verdict.headline
    assert verdict.lead is None and "fix it first" not in verdict.headline
    for note in verdict.notes:
        assert note.title in verdict.headline  # the hints are shown, as notes


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_verdict_leads_with_a_hint(path: Path) -> None:
    verdict = _verdict(path)
    for chosen in (verdict.costliest, verdict.quality, verdict.worst, verdict.lead):
        assert chosen is None or can_lead(chosen), (chosen.rule, chosen.severity, chosen.confidence)
    if "fix it first" in verdict.headline:
        assert verdict.lead is not None and not is_hint(verdict.lead)


def _finding(rule: str, severity: str, confidence: str | None, seconds: float | None = None) -> Finding:
    return Finding(
        rule=rule,
        code="TD000",
        severity=severity,
        title=f"{rule} {severity} {confidence}",
        message="",
        fix="",
        seconds_lost=seconds,
        confidence=confidence,
        fingerprint=rule,
    )


OUTCOMES = [RuleOutcome("r", "passed", "")] * 4


def test_a_low_confidence_warning_is_a_note_not_the_cause_to_fix() -> None:
    guess = _finding("renderer-model-mismatch", "warning", "low")
    verdict = decide_verdict([guess], OUTCOMES)
    assert verdict.status == "clear" and verdict.quality is None and verdict.notes == (guess,)
    assert "fix it first" not in verdict.headline and guess.title in verdict.headline


def test_a_costly_low_confidence_finding_is_never_the_root_cause() -> None:
    guess = _finding("pipelining-gap", "warning", "low", seconds=50.0)
    measured = _finding("get-batch-bottleneck", "warning", "high", seconds=5.0)
    verdict = decide_verdict([guess, measured], OUTCOMES)
    assert verdict.costliest is measured and "Root cause: get-batch-bottleneck warning high" in verdict.headline


def test_an_error_is_a_problem_whatever_its_confidence_but_not_the_cause_to_fix_first() -> None:
    error = _finding("training-instability", "error", "low")
    verdict = decide_verdict([error], OUTCOMES)
    assert verdict.status == "error" and verdict.worst is error and verdict.quality is None
    assert "Worst: training-instability error low (low confidence)." in verdict.headline


def test_the_service_side_stays_the_root_cause_to_escalate() -> None:
    wait = _finding("server-side-wait", "info", "high", seconds=3.5)
    verdict = decide_verdict([wait], OUTCOMES)
    assert verdict.costliest is wait and "escalate it" in verdict.headline
