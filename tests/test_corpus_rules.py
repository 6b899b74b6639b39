"""Timing and KL rules on the real corpus: the known pathologies, and no rule errors."""

from __future__ import annotations

import pytest
from conftest import CORPUS_MISSING, corpus_metrics_files, corpus_path
from rule_helpers import by_rule, findings, load_dir

from trace_doctor.rules.engine import run_rules


def _analyze(relative: str):
    return findings(load_dir(corpus_path(relative)))


@pytest.mark.parametrize(
    "path", corpus_metrics_files() or [pytest.param(None, marks=pytest.mark.skip(reason=CORPUS_MISSING))]
)
def test_no_rule_errors_on_any_corpus_metrics_file(path):
    try:
        from trace_doctor.api import analyze, load_run

        result = analyze(load_run(path))
        outcomes = result.outcomes
    except ImportError:  # the full API needs every ingest module; the rules alone still run
        _, outcomes, _ = run_rules(load_dir(path))
    assert [o for o in outcomes if o.status == "error"] == []


def test_corpus_has_32_metrics_files():
    if not corpus_metrics_files():
        pytest.skip(CORPUS_MISSING)
    assert len(corpus_metrics_files()) == 32


def test_distillation_off_step0_is_get_batch_warmup_not_bottleneck():
    found, outcomes, _ = _analyze("tinker-rl-lab/experiments/results/distillation_off_metrics.jsonl")
    rules = by_rule(found)
    assert "get-batch-bottleneck" not in rules
    warm = rules["warmup-slowness"][0]
    assert 0 in warm.steps and warm.evidence["dominant_phase"] == "get_batch"
    assert warm.evidence["dominant_phase_excess_s"] > 280
    reason = outcomes["get-batch-bottleneck"].reason
    # Step 1's raw window (23 s) held step 0's 18.7 s result wait; de-overlapped it is a steady step.
    assert outcomes["get-batch-bottleneck"].status == "passed" and "warm-up steps [0]" in reason


def test_bzz_exp4_kl_far_above_band():
    found, _, _ = _analyze("bzz-tinker-cookbook/data/context_distillation/logs/exp4_reward_only")
    drift = by_rule(found)["kl-drift"][0]
    assert drift.evidence["median"] == pytest.approx(0.036, abs=0.003)


@pytest.mark.parametrize(
    "relative",
    [
        "bzz-tinker-cookbook/data/context_distillation/logs/exp2_on_policy",
        "tinker-rl-lab/experiments/results/arithmetic_metrics.jsonl",
        "joanvelja-tinker-cookbook/reports/data/gptoss-20b-v2-metrics.jsonl",
    ],
)
def test_healthy_kl_runs_do_not_raise_kl_findings(relative):
    found, _, _ = _analyze(relative)
    assert not {"kl-drift", "renderer-kl-step0"} & {f.rule for f in found}


@pytest.mark.parametrize(
    "relative",
    [
        "tinker-rl-lab/experiments/results/arithmetic_metrics.jsonl",
        "joanvelja-tinker-cookbook/reports/data/gptoss-20b-v2-metrics.jsonl",
        "sushantmehta-tinker-cookbook/logs",
        "sushantmehta-tinker-cookbook/logs_v2",
    ],
)
def test_untimed_sampling_is_not_a_pipelining_gap(relative):
    found, outcomes, _ = _analyze(relative)
    assert "pipelining-gap" not in {f.rule for f in found}
    assert outcomes["pipelining-gap"].status == "not_applicable"


def test_act_prm_periodic_spikes_are_attributed_to_evals():
    rel = next((p for p in corpus_metrics_files() if "re=1r1e03_bs4_gs4" in str(p)), None)
    if rel is None:
        pytest.skip(CORPUS_MISSING)
    found, _, _ = findings(load_dir(rel), ["inconsistent-step-times", "scheduled-work"])
    periodic = [f for f in found if f.fingerprint == "scheduled-work:eval"]
    assert periodic and {9, 19, 29} <= set(periodic[0].steps)
    assert not [f for f in found if f.rule == "inconsistent-step-times"]


def test_sushantmehta_step13_reported_as_untimed_spike():
    found, _, _ = _analyze("sushantmehta-tinker-cookbook/logs_v2")
    spike = next(f for f in found if f.fingerprint == "inconsistent-step-times:unexplained")
    assert 13 in spike.steps and "sleep" in spike.message
