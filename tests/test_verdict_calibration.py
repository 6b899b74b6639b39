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
    p
    for folder in ("runs", "training")
    for p in (ROOT / "fixtures" / folder).iterdir()
    if (p / "EXPECTED.json").exists()
)


def _healthy(path: Path) -> bool:
    """Built healthy: a timing scenario with no root cause that ran to its end, a training one that
    must fire nothing."""
    expected = json.loads((path / "EXPECTED.json").read_text())
    if path.parent.name == "training":
        return expected["must_fire"] == []
    # No root cause and no stop: a run that stopped before its end is not healthy, whatever it cost.
    # A scenario built with a training problem (`quality_problem`: one of two writers loses its reward) is not
    # healthy either, whatever its speed.
    return (
        "root_cause" in expected
        and expected["root_cause"] is None
        and "run-stopped" not in expected["must_fire"]
        and not expected.get("quality_problem")
    )


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
    if verdict.worst is not None and verdict.worst.rule == "run-stopped":
        # Built without a slowness, but killed before its planned end (sl_resumed): a problem, named.
        assert verdict.status in ("warning", "error") and verdict.main is verdict.worst
        return
    assert verdict.status in ("clear", "limited"), verdict.headline
    assert verdict.headline.startswith("No problems found"), verdict.headline
    assert verdict.main is None and "fix it first" not in verdict.headline
    for note in verdict.notes:
        assert note.title in verdict.headline  # the hints are shown, as notes


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_verdict_leads_with_a_hint(path: Path) -> None:
    verdict = _verdict(path)
    for chosen in (verdict.costliest, verdict.quality, verdict.worst, verdict.main):
        assert chosen is None or can_lead(chosen), (chosen.rule, chosen.severity, chosen.confidence)
    if "fix it first" in verdict.headline:
        assert verdict.main is not None and not is_hint(verdict.main)


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


# --- renderer-kl-step0 and the step-0 NLL, calibrated ---------------------------------------------


def _sft(nll: float, renderer: str = "qwen3"):
    from rule_helpers import run_from_rows

    rows = [{"step": i, "train_mean_nll": nll - 0.03 * i, "num_loss_tokens": 1000.0} for i in range(30)]
    return run_from_rows(rows, trainer="sl", model_name="Qwen/Qwen3-8B", renderer_name=renderer)


def _rl(kl: float, **meta):
    from rule_helpers import run_from_rows

    rows = [
        {"step": i, "progress/batch": i, "env/all/reward/total": 0.5, "optim/kl_sample_train_v2": kl} for i in range(10)
    ]
    return run_from_rows(rows, **({"model_name": "Qwen/Qwen3-8B", "temperature": 1.0} | meta))


def _judged(run, rule: str):
    from rule_helpers import findings

    found, _, _ = findings(run, [rule])
    return [f for f in found if f.rule == rule]


def test_a_step0_nll_worse_than_uniform_is_a_data_problem_not_the_template() -> None:
    (finding,) = _judged(_sft(24.6), "renderer-model-mismatch")
    assert finding.fingerprint == "renderer-model-mismatch:sft-nll-data"
    assert (finding.severity, finding.confidence) == ("warning", "high")
    assert "not the template" in finding.title and "loss weights" in finding.fix
    verdict = decide_verdict([finding], OUTCOMES)
    assert verdict.quality is finding and "fix it first" in verdict.headline


def test_a_high_step0_nll_with_the_recommended_renderer_says_so_and_stays_a_note() -> None:
    (finding,) = _judged(_sft(2.6), "renderer-model-mismatch")
    assert (finding.severity, finding.confidence) == ("info", "low")
    assert "argues against a template mismatch" in finding.message
    assert decide_verdict([finding], OUTCOMES).status == "clear"


def test_step0_kl_with_the_recommended_renderer_lowers_confidence_and_says_why() -> None:
    (recommended,) = _judged(_rl(0.06, renderer_name="qwen3"), "renderer-kl-step0")
    (other,) = _judged(_rl(0.06, renderer_name="llama3"), "renderer-kl-step0")
    assert other.confidence == "high" and "renderer mismatch" in other.title
    assert recommended.confidence == "medium" and "argues against a renderer mismatch" in recommended.message


def test_different_sampling_and_training_prompts_are_a_cause_of_their_own() -> None:
    config = {"teacher_system_prompt": "You are an expert.", "student_system_prompt": None}
    run = _rl(0.06, renderer_name="qwen3", temperature=0.7)
    run.meta.config = config
    (finding,) = _judged(run, "renderer-kl-step0")
    assert finding.fingerprint == "renderer-kl-step0:prompts" and finding.severity == "info"
    assert "`teacher_system_prompt`" in finding.message and "Temperature 0.7" in finding.message
    same = _rl(0.06, renderer_name="qwen3", temperature=0.7)
    same.meta.config = {"teacher_system_prompt": "x", "student_system_prompt": "x"}
    assert _judged(same, "renderer-kl-step0")[0].fingerprint == "renderer-kl-step0:temperature"


def test_peers_of_the_same_model_and_renderer_weigh_the_step0_kl() -> None:
    outlier = _rl(0.06, renderer_name="qwen3")
    outlier.peers = {"step0_kl": [0.001, 0.0008, 0.0012]}
    (finding,) = _judged(outlier, "renderer-kl-step0")
    assert finding.evidence["peers"]["reading"] == "outlier" and finding.confidence == "high"
    assert "this run is the outlier" in finding.message
    alike = _rl(0.06, renderer_name="llama3")
    alike.peers = {"step0_kl": [0.05, 0.07, 0.055]}
    (finding,) = _judged(alike, "renderer-kl-step0")
    assert finding.evidence["peers"]["reading"] == "alike" and finding.confidence == "medium"
    assert "normal level" in finding.message


def test_the_fleet_hands_each_run_its_peers_first_kl(tmp_path: Path) -> None:
    from trace_doctor.peers import fleet_peers
    from trace_doctor.runs import split_runs

    for name, kl, renderer in (("a", 0.06, "qwen3"), ("b", 0.001, "qwen3"), ("c", 0.002, "qwen3"), ("d", 0.5, "x")):
        run = tmp_path / name
        run.mkdir()
        (run / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B", "renderer_name": renderer}))
        rows = [{"step": i, "env/all/reward/total": 0.5, "optim/kl_sample_train_v2": kl} for i in range(3)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    sources = split_runs([tmp_path]).runs
    peers = fleet_peers(sources)
    by_name = {s.root.name: peers.get(s.run_id) for s in sources}
    assert sorted(by_name["a"]["step0_kl"]) == [0.001, 0.002]
    assert by_name["d"] is None  # no other run of its model and renderer


# --- what a new user tripped on ------------------------------------------------------------------


def test_a_counterfactual_range_with_equal_ends_is_one_number() -> None:
    from trace_doctor.humanize import format_range

    assert format_range(4.3201, 4.3249, 100.0) == "4.32 s"  # the ends print alike
    assert format_range(4.70, 7.00, 8.39) == "4.70 s–7.00 s"


def test_a_gate_tripped_by_the_baseline_says_so_not_fail_on_never() -> None:
    from trace_doctor.decision import decide_gate

    gate = decide_gate([], {"verdict": "regression"})
    assert gate.tripped and gate.criteria == "a regression against the baseline"
    assert "never" not in gate.criteria
    assert decide_gate([], None, fail_on="warning").criteria == "--fail-on warning"


def test_a_mistyped_rule_or_path_gets_a_suggestion(tmp_path: Path) -> None:
    from trace_doctor.did_you_mean import missing_path
    from trace_doctor.policy import Policy, PolicyError
    from trace_doctor.rules.engine import selected_rules, suggest_rule

    assert suggest_rule("pipelinig-gap") == " (did you mean `pipelining-gap`?)"
    assert suggest_rule("nothing-like-it") == ""
    with pytest.raises(KeyError, match="did you mean `renderer-kl-step0`"):
        selected_rules(select=["renderer-kl-step"])
    with pytest.raises(PolicyError, match="did you mean `kl-drift`"):
        Policy.from_config(rules={"kl-drfit": {}})
    (tmp_path / "sl_resumed").mkdir()
    assert missing_path(tmp_path / "sl_resumd").endswith(f"(did you mean {tmp_path / 'sl_resumed'}?)")
    assert missing_path(tmp_path / "zzz") == str(tmp_path / "zzz")
