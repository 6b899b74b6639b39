"""TD403 quality-regression and the verdict's training-quality line.

The pairs in fixtures/training/quality_* (fixtures/training_gen/baseline.py) change one thing each
against one baseline run of the same recipe; EXPECTED.json names the baseline and the verdict the
comparison must reach. The gate is read through the command line, as CI reads it.
"""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import CORPUS, CORPUS_MISSING, ROOT, fixture_run
from rule_helpers import run_from_rows

from trace_doctor.api import analyze, load_run
from trace_doctor.cli import main
from trace_doctor.decision import decide_gate, decide_verdict
from trace_doctor.derive.quality_series import batch_shape, final_window
from trace_doctor.derive.shift import compare_samples
from trace_doctor.knowledge.triage import TRAINING_QUALITY, stage_rules
from trace_doctor.model import Analysis, Finding, RuleOutcome, RunTables

TRAINING = ROOT / "fixtures" / "training"
PAIRS = sorted(
    p.name for p in TRAINING.glob("quality_*") if "baseline" in json.loads((p / "EXPECTED.json").read_text())
)


def expected(name: str) -> dict:
    return json.loads((TRAINING / name / "EXPECTED.json").read_text())


@cache
def compared(candidate: str, baseline: str | None = None):
    """The analysis of a fixture run against its baseline (EXPECTED.json's unless given)."""
    base = baseline or expected(candidate)["baseline"]
    return analyze(load_run(TRAINING / candidate), baseline=load_run(TRAINING / base))


def quality_findings(result) -> list[Finding]:
    return [f for f in result.findings if f.rule == "quality-regression"]


# --- the fixture pairs ---------------------------------------------------------------------------


def test_every_candidate_has_its_pair():
    assert len(PAIRS) >= 6
    assert {expected(p)["baseline_verdict"] for p in PAIRS} == {"regression", "no regression", "inconclusive"}


@pytest.mark.parametrize("name", PAIRS)
def test_pair_reaches_its_expected_verdict(name):
    result = compared(name)
    quality = result.baseline["quality"]
    assert quality["verdict"] == expected(name)["baseline_verdict"], quality["message"]
    assert bool(quality_findings(result)) is (quality["verdict"] == "regression")
    # Speed did not change in any pair: the combined verdict is the quality one.
    assert result.baseline["step_time_verdict"] == "no regression"
    assert result.baseline["verdict"] == quality["verdict"]


def test_reward_drop_is_judged_on_the_eval_reward_over_the_steps_both_runs_have():
    result = compared("quality_rl_reward_drop")
    (finding,) = quality_findings(result)
    assert finding.fingerprint == "quality-regression:reward"
    assert finding.evidence["family"] == "eval reward"
    assert finding.evidence["key_candidate"] == "test/env/all/reward/total"
    window = finding.evidence["window"]
    # The candidate stopped at step 47 (last eval at 46); the baseline ran 60 steps.
    assert window["truncated"] == "baseline" and window["last_step"] == 46
    assert window["first_step"] >= 46 // 2  # the final part of the horizon, never its first half
    stats = finding.evidence["statistics"]
    assert stats["median_candidate"] < 0.9 * stats["median_baseline"]
    assert stats["p"] < 0.05
    assert "compared up to step 46" in result.baseline["quality"]["message"]


def test_kl_rise_is_one_finding_and_the_run_alone_shows_kl_drift():
    result = compared("quality_rl_kl_rise")
    (finding,) = quality_findings(result)
    assert finding.fingerprint == "quality-regression:kl"
    assert finding.evidence["statistics"]["median_candidate"] > 0.01  # above the stable band
    assert "kl-drift" in {f.rule for f in result.findings}


def test_entropy_collapse_is_named():
    (finding,) = quality_findings(compared("quality_rl_entropy_collapse"))
    assert finding.fingerprint == "quality-regression:entropy"
    assert "entropy collapsed" in finding.title
    assert finding.seconds_lost is None  # a quality finding loses no seconds


def test_unknown_models_are_said_and_cap_the_confidence(tmp_path):
    # Entropy is per model: without config.json nothing shows both runs trained the same model.
    runs = {}
    for name in ("quality_rl_entropy_collapse", "quality_rl_baseline"):
        runs[name] = tmp_path / name
        shutil.copytree(TRAINING / name, runs[name], ignore=shutil.ignore_patterns("config.json"))
    result = analyze(load_run(runs["quality_rl_entropy_collapse"]), baseline=load_run(runs["quality_rl_baseline"]))
    (finding,) = quality_findings(result)
    assert "models are unknown (no config.json)" in finding.message
    assert finding.confidence == "medium"
    assert quality_findings(compared("quality_rl_entropy_collapse"))[0].confidence == "high"


def test_sft_final_nll_rise_is_a_loss_regression():
    (finding,) = quality_findings(compared("quality_sft_nll_rise"))
    assert finding.fingerprint == "quality-regression:loss"
    assert finding.evidence["family"] == "training NLL"  # test/nll every 10 steps: too few in the window


def test_short_candidate_is_inconclusive_and_says_why():
    quality = compared("quality_rl_short").baseline["quality"]
    assert "too few values in the final window" in quality["message"]


def test_same_run_is_no_regression():
    quality = compared("quality_rl_baseline", "quality_rl_baseline").baseline["quality"]
    assert quality["verdict"] == "no regression"


def test_different_trainer_kinds_are_not_compared():
    quality = compared("quality_sft_nll_rise", "quality_rl_baseline").baseline["quality"]
    assert quality["verdict"] == "inconclusive"
    assert "trainer kinds differ" in quality["message"]


def test_speed_only_runs_have_no_quality_block():
    # The sample SFT fixtures log train_mean_nll; a run of time keys alone has nothing to compare.
    rows = [{"step": i, "time/total": 2.0 + 0.01 * (i % 3)} for i in range(20)]
    result = analyze(run_from_rows(rows), baseline=run_from_rows(rows))
    assert result.baseline["quality"] is None
    assert result.baseline["verdict"] == result.baseline["step_time_verdict"]


def _rl_rows(key: str, rewards: list[float]) -> list[dict]:
    return [{"step": i, "progress/batch": i, "optim/lr": 4e-5, key: r} for i, r in enumerate(rewards)]


def test_rl_loop_reward_key_is_compared_with_rl_train_spelling():
    base = run_from_rows(_rl_rows("env/all/reward/total", [0.5 + 0.01 * (i % 3) for i in range(30)]), trainer="rl")
    cand = run_from_rows(_rl_rows("reward/total", [0.3 + 0.01 * (i % 3) for i in range(30)]), trainer="rl")
    quality = analyze(cand, baseline=base).baseline["quality"]
    (entry,) = quality["metrics"]
    assert (entry["key_baseline"], entry["key_candidate"]) == ("env/all/reward/total", "reward/total")
    assert quality["verdict"] == "regression"


def test_no_common_metric_is_inconclusive():
    base = run_from_rows(_rl_rows("env/all/reward/total", [0.5] * 30), trainer="rl")
    cand = run_from_rows([{"step": i, "progress/batch": i, "optim/entropy": 0.4} for i in range(30)], trainer="rl")
    quality = analyze(cand, baseline=base).baseline["quality"]
    assert quality["verdict"] == "inconclusive"
    assert "only the baseline logs it" in quality["message"]


def test_different_batches_leave_the_training_reward_to_the_eval():
    rewards = [0.5 + 0.01 * (i % 3) for i in range(30)]
    base = run_from_rows(_rl_rows("env/all/reward/total", rewards), trainer="rl", config={"groups_per_batch": 32})
    cand = run_from_rows(
        _rl_rows("env/all/reward/total", [r - 0.2 for r in rewards]), trainer="rl", config={"groups_per_batch": 8}
    )
    quality = analyze(cand, baseline=base).baseline["quality"]
    assert quality["verdict"] == "inconclusive"
    assert "batches differ (groups_per_batch 32 vs 8)" in quality["message"]


# --- the shared statistics and the window ----------------------------------------------------------


def test_shift_is_direction_aware():
    low, high = [1.0, 1.1, 0.9, 1.05, 0.95, 1.02], [2.0, 2.1, 1.9, 2.05, 1.95, 2.02]
    assert compare_samples(low, high, worse="lower", min_n=5).regressed(0.05, 0.1)  # reward fell
    assert not compare_samples(low, high, worse="higher", min_n=5).regressed(0.05, 0.1)  # KL fell: fine
    assert compare_samples(low[:4], high, worse="lower", min_n=5).p is None  # too few: no test


def test_window_widens_for_sparse_evals_but_not_past_the_last_half():
    evals = [(s, 0.5) for s in range(0, 60, 5)]
    window = final_window(evals, evals, 0.25, min_points=5, max_share=0.5)
    assert (window.first, window.last) == (35, 55)  # 35, 40, ..., 55: five points each
    capped = final_window(evals, evals, 0.25, min_points=8, max_share=0.5)
    assert capped.first == 28  # half of 0..55, still fewer than 8 points: the caller says inconclusive


def test_batch_shape_is_found_anywhere_in_the_config():
    config = {"dataset_builder": {"groups_per_batch": 8, "group_size": 32}, "learning_rate": 4e-5}
    assert batch_shape(config) == {"groups_per_batch": 8, "group_size": 32}


# --- the gate --------------------------------------------------------------------------------------


def run_cli(*args: str):
    return CliRunner().invoke(main, ["analyze", "--no-html", *args], catch_exceptions=False)


@pytest.mark.parametrize(
    ("candidate", "code"),
    [("quality_rl_entropy_collapse", 1), ("quality_rl_noisy_same", 0), ("quality_rl_short", 0)],
)
def test_gate_exit_code_without_fail_on(candidate, code):
    result = run_cli(str(TRAINING / candidate), "--baseline", str(TRAINING / "quality_rl_baseline"))
    assert result.exit_code == code, result.stdout
    if code:
        assert "training-quality regression against the baseline (entropy optim/entropy" in result.stdout
        assert "training quality: regression" in result.stdout


def test_inconclusive_quality_fails_only_when_asked():
    args = [str(TRAINING / "quality_rl_short"), "--baseline", str(TRAINING / "quality_rl_baseline")]
    assert run_cli(*args).exit_code == 0
    asked = run_cli(*args, "--fail-on-inconclusive", "--format", "markdown")
    assert asked.exit_code == 1
    assert "training-quality comparison is inconclusive" in asked.stdout


def test_markdown_shows_the_quality_table_and_gate_reason():
    result = run_cli(
        str(TRAINING / "quality_rl_reward_drop"),
        "--baseline",
        str(TRAINING / "quality_rl_baseline"),
        "--format",
        "markdown",
    )
    assert result.exit_code == 1
    assert "**Gate: FAILED**" in result.stdout and "training-quality regression" in result.stdout
    assert "| eval reward (lower is worse) | `test/env/all/reward/total` |" in result.stdout
    assert "| training reward (lower is worse) |" in result.stdout  # shown beside it, as context


def test_gate_reads_documents_from_before_the_quality_axis():
    old = {"verdict": "regression", "message": "slower"}  # no step_time_verdict, no quality
    assert decide_gate([], old).tripped
    assert not decide_gate([], {"verdict": "inconclusive"}).tripped


# --- the verdict's training line -------------------------------------------------------------------


def _finding(rule: str, severity: str = "warning", *, seconds: float | None = None, **extra) -> Finding:
    return Finding(
        rule=rule,
        code=extra.pop("code", "TD2xx"),
        severity=severity,
        title=extra.pop("title", f"{rule} happened"),
        message="m",
        fix="f",
        seconds_lost=seconds,
        fingerprint=rule,
        **extra,
    )


OUTCOMES = [RuleOutcome("r", "passed", "")] * 4


def test_training_quality_stage_lists_all_eleven_slugs():
    stage = stage_rules("training quality")
    assert len(stage) == 11 and stage == TRAINING_QUALITY
    assert {"response-parse-errors", "overfitting"} <= TRAINING_QUALITY
    assert "checkpoint-risk" not in TRAINING_QUALITY  # what the run left behind, not what it learned
    assert {"renderer-kl-step0", "kl-drift", "entropy-collapse", "config-risk"} <= TRAINING_QUALITY


def test_quality_only_run_names_it_and_says_fix_it_first():
    result = analyze(load_run(fixture_run("rl_kl_step0")))
    headline = result.verdict.headline
    assert "Training: Sampler and trainer disagree at the first step" in headline
    assert headline.endswith("fix it first.")
    assert result.summary["quality_cause"]["rule"] == "renderer-kl-step0"


def test_healthy_run_has_no_quality_cause():
    result = analyze(load_run(fixture_run("rl_healthy")))
    assert result.summary["quality_cause"] is None
    assert "Training:" not in result.verdict.headline


def test_speed_and_training_are_both_named():
    slow = _finding("pipelining-gap", seconds=40.0, code="TD101", title="Steps awaited one by one")
    drift = _finding("kl-drift", code="TD202", title="KL drifted", confidence="high")
    verdict = decide_verdict([slow, drift], OUTCOMES)
    assert verdict.costliest is slow and verdict.quality is drift
    assert "Speed: Steps awaited one by one (≈40" in verdict.headline
    assert "fix it first; Training: KL drifted (TD202 kl-drift, warning, high confidence)." in verdict.headline


def test_quality_cause_by_severity_then_confidence_and_tolerates_unregistered_slugs():
    medium = _finding("kl-drift", confidence="medium", code="TD202")
    high = _finding("entropy-collapse", confidence="high", code="TD205")  # registered by another branch
    error = _finding("training-instability", "error", confidence="medium", code="TD206")
    assert decide_verdict([medium, high], OUTCOMES).quality is high
    assert decide_verdict([medium, high, error], OUTCOMES).quality is error
    guess = _finding("training-instability", "error", confidence="low", code="TD206")
    verdict = decide_verdict([medium, high, guess], OUTCOMES)
    assert verdict.quality is high and verdict.status == "error"  # a guess is never the cause to fix first
    explained = _finding("kl-drift", explained_by=["stale-sampler"])
    assert decide_verdict([explained], OUTCOMES).quality is None


# --- real runs of the same recipe ------------------------------------------------------------------

corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=CORPUS_MISSING)
SUSHANT = CORPUS / "sushantmehta-tinker-cookbook"
BZZ = CORPUS / "bzz-tinker-cookbook" / "data" / "context_distillation" / "logs"


def quality_of(candidate: Path, baseline: Path) -> dict:
    return analyze(load_run(candidate), baseline=load_run(baseline)).baseline["quality"]


@corpus
def test_sushantmehta_v2p7_against_v2p3_holds_its_eval_reward():
    quality = quality_of(SUSHANT / "logs_v2p7", SUSHANT / "logs_v2p3")
    assert quality["verdict"] == "no regression"
    reward = next(e for e in quality["metrics"] if e["axis"] == "reward" and e["decisive"])
    assert reward["family"] == "eval reward"  # 0.636 -> 0.634 over steps 35-55
    assert abs(reward["statistics"]["effect"]) < 0.02


@corpus
def test_sushantmehta_runs_with_other_batches_do_not_compare_training_reward():
    # logs_v2: 32 groups x 16; logs_v2p7: 8 x 32. Step 21-28 training rewards (0.61 vs 0.69) are on
    # different prompts; the eval (3 vs 2 points by step 20) cannot judge either.
    quality = quality_of(SUSHANT / "logs_v2", SUSHANT / "logs_v2p7")
    assert quality["verdict"] == "inconclusive"
    assert "batches differ" in quality["message"]


@corpus
def test_bzz_kl_anomaly_is_a_kl_regression_against_its_sibling():
    quality = quality_of(BZZ / "exp4_reward_only", BZZ / "exp5_reward_and_kl")
    assert quality["verdict"] == "regression"
    (kl,) = [e for e in quality["metrics"] if e["verdict"] == "regression"]
    assert kl["key_candidate"] == "optim/kl_sample_train_v1"
    assert kl["statistics"]["median_candidate"] > 0.01


def test_one_main_finding_for_the_fleet_and_the_runs_dataset():
    from trace_doctor.report.parquet import _runs_row

    # No time cause: the training-quality cause leads unless another finding is more severe.
    notice = _finding("decoded-error", code="TD302", title="A known error, once")
    drift = _finding("kl-drift", code="TD202", title="KL drifted", confidence="high")
    verdict = decide_verdict([notice, drift], OUTCOMES)
    assert verdict.costliest is None and verdict.worst is notice and verdict.main is drift
    assert decide_verdict([_finding("decoded-error", "error", code="TD302"), drift], OUTCOMES).main.rule == (
        "decoded-error"
    )
    slow = _finding("pipelining-gap", seconds=40.0, code="TD101")
    assert decide_verdict([slow, drift], OUTCOMES).main is slow
    # The `runs` table of `ingest --out` names the same finding the fleet table does.
    result = Analysis(run=RunTables(), findings=[notice, drift], outcomes=OUTCOMES, summary={}, verdict=verdict)
    row = _runs_row(result, "run").row(0, named=True)
    assert (row["main_rule"], row["main_finding"]) == ("kl-drift", "KL drifted")
