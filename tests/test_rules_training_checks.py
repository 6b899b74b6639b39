"""The debug-guide checks: response-parse-errors (TD210), overfitting (TD211), checkpoint-risk (TD212),
config-risk on SFT, the loss named by training-instability's fix, entropy collapses at the tail and
behind all-correct groups, and the Kimi-K2.6 pairing.

Each rule fires on its `fixtures/training/` run (cookbook formats) and stays silent on its twin; the
edges are pinned with small synthetic runs.
"""

from __future__ import annotations

import json
import math
from functools import cache

import polars as pl
import pytest
from conftest import ROOT
from rule_helpers import findings as run_findings
from rule_helpers import run_from_rows

from trace_doctor.api import load_run
from trace_doctor.derive.progress import run_progress
from trace_doctor.model import Finding, InputFile, RunTables
from trace_doctor.rules.base import REGISTRY
from trace_doctor.rules.engine import run_rules

TRAINING = ROOT / "fixtures" / "training"
NEW_RULES = ["response-parse-errors", "overfitting", "checkpoint-risk"]
RULES = [*NEW_RULES, "config-risk", "entropy-collapse", "renderer-model-mismatch", "training-instability"]


@cache
def _analysed(name: str) -> tuple[tuple[Finding, ...], dict[str, str]]:
    found, outcomes, _ = run_rules(load_run(TRAINING / name), select=RULES)
    return tuple(found), {o.rule: o.status for o in outcomes}


def _of(name: str, rule: str) -> list[Finding]:
    return [f for f in _analysed(name)[0] if f.rule == rule]


@pytest.mark.parametrize(
    ("fires", "silent", "rule"),
    [
        ("rl_sync_parse_errors", "rl_sync_parse_errors_rare", "response-parse-errors"),
        ("sft_overfitting", "sft_test_nll_plateau", "overfitting"),
        ("rl_sync_no_final_checkpoint", "rl_sync_stopped_early_kept", "checkpoint-risk"),
        ("config_sft_lr_too_high", "sft_healthy", "config-risk"),
        ("config_sft_all_tokens", "sft_healthy", "config-risk"),
        ("rl_sync_entropy_tail_collapse", "rl_sync_entropy_dip", "entropy-collapse"),
    ],
)
def test_fires_on_its_run_and_passes_its_twin(fires: str, silent: str, rule: str) -> None:
    expected = json.loads((TRAINING / fires / "EXPECTED.json").read_text())
    assert rule in expected["must_fire"]
    assert _of(fires, rule), expected["shows"]
    assert not _of(silent, rule) and _analysed(silent)[1][rule] == "passed"


def test_new_rules_stay_silent_on_the_healthy_runs() -> None:
    for name in ("rl_sync_healthy", "sft_healthy", "rl_async_too_easy", "config_renderer_kimi_k26"):
        fired = {f.rule for f in _analysed(name)[0]}
        assert not fired & set(NEW_RULES), name


# --- response-parse-errors -------------------------------------------------------------------


def test_parse_errors_quote_both_keys_and_the_worst_step() -> None:
    (finding,) = _of("rl_sync_parse_errors", "response-parse-errors")
    assert finding.severity == "warning" and finding.confidence == "high"
    assert finding.evidence["metrics"] == ["env/all/stop/parse_error", "env/all/parse_error_masked"]
    assert finding.evidence["steps_above"] == finding.evidence["steps_measured"] == 40
    assert 0.18 <= finding.evidence["medians"]["env/all/stop/parse_error"] <= 0.3


def _rl_rows(n: int, **keys) -> list[dict]:
    return [
        {"step": i, "progress/batch": i, "env/all/reward/total": 0.5, **{k: v(i) for k, v in keys.items()}}
        for i in range(n)
    ]


def test_parse_error_is_not_read_from_the_stop_key_and_masked_alone_is_medium() -> None:
    run = run_from_rows(_rl_rows(12, **{"env/all/parse_error_masked": lambda i: 0.3}), trainer="rl")
    found, _, _ = run_findings(run, ["response-parse-errors"])
    assert [(f.evidence["metrics"], f.confidence) for f in found] == [(["env/all/parse_error_masked"], "medium")]
    quiet = run_from_rows(
        _rl_rows(12, **{"env/all/stop/parse_error": lambda i: 0.01, "test/env/all/stop/parse_error": lambda i: 0.9}),
        trainer="rl",
    )
    _, outcomes, _ = run_findings(quiet, ["response-parse-errors"])
    assert outcomes["response-parse-errors"].status == "passed"  # an eval key is never the training share


# --- overfitting -----------------------------------------------------------------------------


def test_overfitting_names_the_step_and_the_checkpoint_near_it() -> None:
    (finding,) = _of("sft_overfitting", "overfitting")
    assert finding.evidence["best_step"] == 40 and finding.evidence["last_step"] == 110
    assert finding.evidence["train_at_end"] < finding.evidence["train_at_best"]
    assert finding.evidence["checkpoint"]["name"] == "000040"
    assert "Stop at step 40" in finding.message and "7 days" in finding.message
    assert finding.evidence["metric"] == "test/nll"  # shaded on the loss panel, where test/nll is drawn


def _sft_rows(test, train) -> list[dict]:
    rows = []
    for i in range(60):
        row = {"step": i, "progress": (i + 1) / 60, "train_mean_nll": train(i)}
        if i % 10 == 0:
            row["test/nll"] = test(i)
        rows.append(row)
    return rows


def test_both_losses_rising_is_not_overfitting() -> None:
    rising = lambda i: 0.6 + (0.01 * (i - 20) if i > 20 else 0.0)  # noqa: E731
    run = run_from_rows(_sft_rows(rising, rising), trainer="sl")
    _, outcomes, _ = run_findings(run, ["overfitting"])
    assert outcomes["overfitting"].status == "passed" and "training-instability" in outcomes["overfitting"].reason


def test_overfitting_needs_enough_evaluations() -> None:
    rows = [
        {"step": i, "train_mean_nll": 1.0 - 0.01 * i, **({"test/nll": 0.5} if i in (0, 30) else {})} for i in range(40)
    ]
    _, outcomes, _ = run_findings(run_from_rows(rows, trainer="sl"), ["overfitting"])
    assert outcomes["overfitting"].status == "not_applicable"


# --- checkpoint-risk -------------------------------------------------------------------------


def test_completed_without_final_is_a_warning_and_cut_short_is_not() -> None:
    (finding,) = _of("rl_sync_no_final_checkpoint", "checkpoint-risk")
    assert finding.fingerprint == "checkpoint-risk:no-final" and finding.severity == "warning"
    assert finding.evidence["completed"] is True and "expires 7 days" in finding.message
    stopped = {f.fingerprint: f for f in _of("rl_sync_rolling_only_stopped", "checkpoint-risk")}
    assert set(stopped) == {"checkpoint-risk:no-sampler", "checkpoint-risk:expiring"}
    assert stopped["checkpoint-risk:expiring"].severity == "warning"  # a 2 h rolling TTL is under a day
    assert stopped["checkpoint-risk:expiring"].evidence["completed"] is False


def test_a_cut_short_run_on_the_default_ttl_is_an_info_reminder_and_an_unknown_ttl_is_not_guessed() -> None:
    run = load_run(TRAINING / "rl_sync_stopped_early_kept")
    run.meta.config = {**run.meta.config, "ttl_seconds": 604800}  # the cookbook default, 7 days
    found, _, _ = run_findings(run, ["checkpoint-risk"])
    assert [(f.fingerprint, f.severity) for f in found] == [("checkpoint-risk:expiring", "info")]
    assert "expires 7 days" in found[0].message
    run.meta.config = {k: v for k, v in run.meta.config.items() if k != "ttl_seconds"}  # an older cookbook's config
    _, outcomes, _ = run_findings(run, ["checkpoint-risk"])
    assert outcomes["checkpoint-risk"].status == "passed"


@pytest.mark.parametrize(
    ("trainer", "rows", "config", "expected"),
    [
        ("rl", [{"step": i, "progress/done_frac": (i + 1) / 10} for i in range(10)], {}, (9, 10, True)),
        ("rl", [{"step": i, "progress/done_frac": (i + 1) / 50} for i in range(10)], {}, (9, 50, False)),
        ("rl", [{"step": i, "progress/done_frac": (i + 1) / 50} for i in range(10)], {"max_steps": 10}, (9, 10, True)),
        ("sl", [{"step": i, "progress": min((i + 1) / 8, 1.0)} for i in range(8)], {}, (7, 8, True)),
        ("dpo", [{"step": i, "progress": i / 8} for i in range(8)], {}, (7, 8, True)),
        ("dpo", [{"step": i, "progress": i / 8} for i in range(5)], {}, (4, 8, False)),
        ("rl", [{"step": i} for i in range(5)], {}, (4, None, None)),
    ],
)
def test_planned_steps_from_the_progress_keys(trainer, rows, config, expected) -> None:
    plan = run_progress(pl.DataFrame(rows), config=config, trainer=trainer)
    assert (plan.last_step, plan.planned_steps, plan.completed) == expected


# --- config-risk on SFT ------------------------------------------------------------------------


def test_sft_learning_rate_is_judged_against_get_lr() -> None:
    (high,) = _of("config_sft_lr_too_high", "config-risk")
    assert high.fingerprint == "config-risk:sft-learning-rate-high"
    assert math.isclose(high.evidence["get_lr"], 5e-4 * (2000 / 4096) ** 0.0775)
    run = RunTables()
    run.meta.trainer, run.meta.model_name = "sl", "Qwen/Qwen3-8B"
    run.meta.config = {"learning_rate": 2e-5}  # a full fine-tuning rate with LoRA
    run.inputs.append(InputFile("config", "config.json", records=1))
    found, _, _ = run_findings(run, ["config-risk"])
    assert [(f.fingerprint, f.severity) for f in found] == [("config-risk:sft-learning-rate-low", "info")]


def test_train_on_all_tokens_is_a_warning_and_all_messages_info() -> None:
    (finding,) = _of("config_sft_all_tokens", "config-risk")
    assert (finding.fingerprint, finding.severity) == ("config-risk:sft-train-on-prompt", "warning")
    run = RunTables()
    run.meta.trainer, run.meta.model_name = "sl", "acme/Model"  # no get_lr formula: only train_on_what judged
    run.meta.config = {"learning_rate": 1e-4, "dataset_builder": {"common_config": {"train_on_what": "all_messages"}}}
    run.inputs.append(InputFile("config", "config.json", records=1))
    found, _, _ = run_findings(run, ["config-risk"])
    assert [(f.fingerprint, f.severity) for f in found] == [("config-risk:sft-train-on-prompt", "info")]


# --- training-instability's fix names the loss ----------------------------------------------------


@pytest.mark.parametrize(
    ("config", "named", "not_named"),
    [
        ({"loss_fn": "importance_sampling"}, ("`ppo`", "`cispo`"), ("stable_reinforce",)),
        (
            {"loss_fn": "importance_sampling", "async_config": {"max_steps_off_policy": 2, "loss_fn": "cispo"}},
            ("stable_reinforce", "`ppo`"),
            (),
        ),
        ({"loss_fn": "ppo"}, (), ("cispo", "stable_reinforce")),
    ],
)
def test_instability_fix_names_the_loss_function(config, named, not_named) -> None:
    rows = _rl_rows(30, **{"optim/kl_sample_train_v2": lambda i: math.nan if i >= 20 else 1e-3})
    run = run_from_rows(rows, trainer="rl", config=config)
    found, _, _ = run_findings(run, ["training-instability"])
    (finding,) = [f for f in found if f.fingerprint == "training-instability:non-finite"]
    assert all(word in finding.fix for word in named) and not any(word in finding.fix for word in not_named)


# --- entropy-collapse: tails and all-correct groups -----------------------------------------------


def _entropy_run(tail: list[float]) -> RunTables:
    values = [0.4] * (40 - len(tail)) + tail
    return run_from_rows(_rl_rows(40, **{"optim/entropy": lambda i: values[i]}), trainer="rl")


def test_tail_collapse_needs_three_of_the_last_four_steps() -> None:
    found, _, _ = run_findings(_entropy_run([0.01, 0.3, 0.02, 0.003]), ["entropy-collapse"])
    assert [f.evidence["short_tail"] for f in found] == [True]
    _, outcomes, _ = run_findings(_entropy_run([0.01, 0.3, 0.3, 0.003]), ["entropy-collapse"])
    assert outcomes["entropy-collapse"].status == "passed"


def test_collapse_behind_all_correct_groups_is_a_warning_and_a_learned_saturation_stays_info() -> None:
    (hidden,) = _of("rl_sync_entropy_collapse_all_good", "entropy-collapse")
    assert (hidden.severity, hidden.evidence["behind_all_good_groups"]) == ("warning", True)
    assert "constant-reward-groups" in hidden.message
    (saturated,) = _of("rl_sync_saturated_midway", "entropy-collapse")
    assert (saturated.severity, saturated.fingerprint) == ("info", "entropy-collapse:saturated")


# --- Kimi K2.6 and the rules' docs ---------------------------------------------------------------


def test_kimi_k26_with_its_recommended_renderer_passes() -> None:
    _, status = _analysed("config_renderer_kimi_k26")
    assert status["renderer-model-mismatch"] == "passed"


@pytest.mark.parametrize("slug", NEW_RULES)
def test_rule_docs_print_thresholds_with_unit_and_why(slug: str) -> None:
    text = REGISTRY[slug].describe()
    for section in ("What it detects", "Why it matters", "Evidence it uses", "How to fix", "Thresholds"):
        assert section in text, section
    assert "[" in text.split("Thresholds", 1)[1]  # `name = value  [unit...]`
