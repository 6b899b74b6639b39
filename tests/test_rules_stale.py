"""TD204 stale-sampler and TD206 training-instability: the fixture runs, synthetic edge cases, the real corpus."""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

import pytest
from conftest import CORPUS, CORPUS_MISSING, ROOT, corpus_metrics_files
from rule_helpers import by_rule, findings, run_from_rows

from fixtures.training_gen.stale import SCENARIOS
from trace_doctor.api import analyze, load_run
from trace_doctor.ingest.parsers.log_kinds import classify_message

TRAINING = ROOT / "fixtures" / "training"
MINE = ["stale-sampler", "training-instability", "kl-drift"]


@cache
def analysed(name: str):
    return analyze(load_run(TRAINING / name))


@pytest.mark.parametrize("name", sorted([*SCENARIOS, "rl_sync_healthy", "sft_healthy"]))
def test_fixture_fires_and_stays_silent_as_expected(name: str) -> None:
    expected = json.loads((TRAINING / name / "EXPECTED.json").read_text())
    fired = {f.rule for f in analysed(name).findings}
    for rule in MINE:
        if rule in expected["must_fire"]:
            assert rule in fired, f"{name}: {rule} should fire ({expected['shows']})"
        if rule in expected["must_not_fire"]:
            assert rule not in fired, f"{name}: {rule} should stay silent ({expected['shows']})"


def _one(name: str, rule: str):
    found = [f for f in analysed(name).findings if f.rule == rule]
    assert len(found) == 1, found
    return found[0]


def test_sawtooth_explains_kl_drift_and_the_message_blames_the_sampler_not_the_lr() -> None:
    stale = _one("rl_sync_stale_sawtooth", "stale-sampler")
    assert stale.severity == "error" and stale.confidence == "high"
    assert stale.evidence["teeth"] == stale.evidence["resets"] == 9
    assert stale.evidence["saves"] == [5, 10, 15, 20, 25, 30, 35, 40, 45]
    assert stale.evidence["stale_median"] > 10 * stale.evidence["fresh_median"]
    drift = _one("rl_sync_stale_sawtooth", "kl-drift")
    assert drift.explained_by == ["stale-sampler:sync-sawtooth"]
    assert drift.message.startswith("The KL follows the save cadence")
    assert not drift.fix.lower().startswith("lower the learning rate")
    assert "learning rate" not in drift.message.split(".")[0]


def test_genuine_lr_drift_keeps_the_learning_rate_reading() -> None:
    drift = _one("rl_sync_lr_kl_drift", "kl-drift")
    assert drift.explained_by == []
    assert drift.fix.startswith("Lower the learning rate")
    outcome = {o.rule: o for o in analysed("rl_sync_lr_kl_drift").outcomes}["stale-sampler"]
    assert outcome.status == "passed" and "does not follow the save cadence" in outcome.reason


def test_async_requeue_churn_is_counted_from_the_log_lines() -> None:
    finding = _one("rl_async_stale", "stale-sampler")
    lines = (TRAINING / "rl_async_stale" / "logs.log").read_text().count("Samples are too stale")
    assert finding.evidence["stale_groups"] == lines
    assert finding.evidence["trained_groups"] == 32 * 50
    assert finding.evidence["discarded"] > 0 and finding.evidence["requeued"] > finding.evidence["discarded"]
    assert finding.evidence["bound"] == 2


def test_stale_log_line_is_classified() -> None:
    found = classify_message("[training_loop] Step 12: Samples are too stale, requeuing", "INFO", "x.rl.train")
    assert found is not None and found.kind == "stale-samples" and found.fields == {"step": 12, "action": "requeuing"}
    done = classify_message("[training_loop] Step 9: Samples are too stale, discarding (dataloader done)", "INFO", "x")
    assert done is not None and done.fields["action"] == "discarding"


def _async_rows(lags: list[int], key: str = "sampling_client/step_min") -> list[dict]:
    rows = []
    for i, lag in enumerate(lags):
        row = {"step": i, "training_client/step": i, "optim/kl_sample_train_v2": 1e-3}
        row[key] = (i - lag) if key.startswith("sampling") else lag
        rows.append(row)
    return rows


def test_async_lag_beyond_the_bound_is_an_error() -> None:
    run = run_from_rows(
        _async_rows([0, 1] + [3] * 10 + [1] * 8),
        trainer="rl",
        trainer_mode="async",
        config={"async_config": {"max_steps_off_policy": 2, "groups_per_batch": 8}},
    )
    found = by_rule(findings(run, ["stale-sampler"])[0])["stale-sampler"]
    assert len(found) == 1 and found[0].severity == "error"
    assert found[0].evidence["steps_over_bound"] == 10 and found[0].steps[0] == 2


def test_0_6_1_async_staleness_keys_are_read() -> None:
    run = run_from_rows(
        _async_rows([0] + [5] * 19, key="async/staleness_max"),
        trainer="rl",
        trainer_mode="async",
        config={"async_config": {"max_steps_off_policy": 4}},
    )
    found = by_rule(findings(run, ["stale-sampler"])[0])["stale-sampler"]
    assert found[0].evidence["lag_source"] == "async/staleness_max" and found[0].evidence["steps_over_bound"] == 19


def test_async_without_a_bound_abstains_from_judging_the_lag() -> None:
    run = run_from_rows(_async_rows([1] * 20))  # no config: mode read from training_client/step
    _, outcomes, _ = findings(run, ["stale-sampler"])
    assert outcomes["stale-sampler"].status == "passed"
    assert "bound unknown" in outcomes["stale-sampler"].reason


def test_stream_loop_lagging_behind_fires() -> None:
    rows = [
        {"step": i, "progress/batch": i, "optim/kl_sample_train_v2": 1e-3, "sampling_client/step_min": max(0, i - 1)}
        for i in range(20)
    ]
    run = run_from_rows(rows, trainer="rl", trainer_mode="stream")
    found = by_rule(findings(run, ["stale-sampler"])[0])["stale-sampler"]
    assert found and found[0].evidence["bound"] == 0 and found[0].evidence["steps_over_bound"] == 19


def _sync_sawtooth_rows(n: int, period: int) -> list[dict]:
    return [{"step": i, "progress/batch": i, "optim/kl_sample_train_v2": 1e-3 + 4e-3 * (i % period)} for i in range(n)]


@pytest.mark.parametrize(
    ("n", "config", "why"),
    [
        (14, {"save_every": 10}, "fewer than 2 saves"),  # one save inside the run: one period at most
        (40, {}, "no save cadence"),
    ],
)
def test_sawtooth_abstains_without_two_periods_or_a_cadence(n: int, config: dict, why: str) -> None:
    run = run_from_rows(_sync_sawtooth_rows(n, 10), trainer="rl", trainer_mode="sync", config=config)
    _, outcomes, _ = findings(run, ["stale-sampler"])
    assert outcomes["stale-sampler"].status == "not_applicable" and why in outcomes["stale-sampler"].reason


def test_two_periods_fire_with_medium_confidence() -> None:
    run = run_from_rows(_sync_sawtooth_rows(30, 10), trainer="rl", trainer_mode="sync", config={"save_every": 10})
    found = by_rule(findings(run, ["stale-sampler"])[0])["stale-sampler"]
    assert found[0].confidence == "medium" and found[0].severity == "warning" and found[0].evidence["teeth"] == 2


# --- training-instability ---------------------------------------------------------------------------


def test_nan_loss_is_an_error_that_persists() -> None:
    finding = [f for f in analysed("sft_nan_loss").findings if f.rule == "training-instability"]
    train = next(f for f in finding if f.fingerprint == "training-instability:non-finite")
    assert train.severity == "error" and train.evidence["first_step"] == 37 and train.evidence["persists_to_end"]
    assert train.evidence["keys"] == {"train_mean_bpb": 23, "train_mean_nll": 23}
    evals = next(f for f in finding if f.fingerprint == "training-instability:eval-non-finite")
    assert evals.severity == "warning" and evals.steps == [40, 50]


def test_nan_nll_on_an_empty_batch_is_a_data_warning() -> None:
    rows = [{"step": i, "train_mean_nll": 0.7, "num_loss_tokens": 4000.0} for i in range(30)]
    rows[12] = {"step": 12, "train_mean_nll": math.nan, "num_loss_tokens": 0.0}
    found = by_rule(findings(run_from_rows(rows), ["training-instability"])[0])["training-instability"]
    assert [f.fingerprint for f in found] == ["training-instability:empty-batch"]
    assert found[0].severity == "warning" and found[0].steps == [12]


@pytest.mark.parametrize(
    "key", ["dpo_loss", "loss:sum", "train/loss:sum", "optim/entropy", "teacher_kl", "unclipped_grad_l2:mean"]
)
def test_non_finite_values_of_every_family_are_errors(key: str) -> None:
    rows = [{"step": i, "progress/batch": i, key: 0.5} for i in range(30)]
    rows[20][key] = math.inf
    found = by_rule(findings(run_from_rows(rows), ["training-instability"])[0])["training-instability"]
    assert found[0].severity == "error" and found[0].evidence["keys"] == {key: 1}


def test_spike_findings_grade_by_recurrence_and_divergence() -> None:
    spikes = _one("sft_loss_spikes", "training-instability")
    assert spikes.severity == "warning" and [s["step"] for s in spikes.evidence["spikes"]] == [38, 57]
    assert all(s["recovered"] for s in spikes.evidence["spikes"])
    diverged = _one("rl_grad_spike_divergence", "training-instability")
    assert diverged.severity == "warning" and diverged.evidence["spikes"][0]["step"] == 30
    assert diverged.evidence["spikes"][0]["recovered"] is False and "diverged" in diverged.message


def test_loss_nan_log_text_is_not_a_nan_metric() -> None:
    outcome = {o.rule: o for o in analysed("distill_off_policy_nan_log").outcomes}["training-instability"]
    assert outcome.status == "passed" and "train/loss:sum" in outcome.reason


# --- the real corpus --------------------------------------------------------------------------------

# Spikes the corpus really has (checked by eye: one-step jumps of 1.5-2.8x the local level that come back).
CORPUS_SPIKES = {
    "joanvelja-tinker-cookbook/reports/data/qwen3-30b-instruct-v3b-metrics.jsonl": ("unclipped_grad_l2:mean", [47]),
    "act_lm_tw_treasure": ("train/loss", [1977, 2947]),
}


def _corpus_target(path: Path) -> Path:
    return path.parent if path.name == "metrics.jsonl" else path


@pytest.mark.skipif(not CORPUS.exists(), reason=CORPUS_MISSING)
@pytest.mark.parametrize("path", corpus_metrics_files(), ids=lambda p: str(p.relative_to(CORPUS))[-60:])
def test_corpus_runs(path: Path) -> None:
    result = analyze(load_run(_corpus_target(path)))
    mine = [f for f in result.findings if f.rule in ("stale-sampler", "training-instability")]
    # No corpus run has a non-finite value or a stale sampler.
    assert not [f for f in mine if f.rule == "stale-sampler"]
    assert not [f for f in mine if "non-finite" in (f.fingerprint or "") or "empty-batch" in (f.fingerprint or "")]
    relative = str(path.relative_to(CORPUS))
    expected = next((v for k, v in CORPUS_SPIKES.items() if k in relative), None)
    spikes = [f for f in mine if f.rule == "training-instability"]
    if expected is None:
        assert spikes == []
    else:
        assert len(spikes) == 1 and spikes[0].severity == "info"
        assert spikes[0].evidence["metric"] == expected[0]
        assert [s["step"] for s in spikes[0].evidence["spikes"]] == expected[1]
