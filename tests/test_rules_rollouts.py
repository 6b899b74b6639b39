"""Rollout-summary ingest and the learning-signal rules (TD203 constant-reward-groups, TD205
entropy-collapse, TD207 truncated-samples): fixtures (fire / stay silent) and the real corpus."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from conftest import ROOT

from trace_doctor.api import analyze, load_run
from trace_doctor.discover import classify
from trace_doctor.ingest.parsers.rollouts import parse_rollout_files
from trace_doctor.ingest.storage import cache

TRAINING = ROOT / "fixtures" / "training"
CORPUS = ROOT.parent / "shared" / "corpus"
RULES = ("constant-reward-groups", "entropy-collapse", "truncated-samples")
MINE = (
    sorted(
        p.name
        for p in TRAINING.iterdir()
        if (p / "EXPECTED.json").exists()
        and set(json.loads((p / "EXPECTED.json").read_text())["must_not_fire"]) & set(RULES)
    )
    if TRAINING.exists()
    else []
)


def _findings(path: Path) -> dict[str, list]:
    result = analyze(load_run(path))
    found: dict[str, list] = {}
    for f in result.findings:
        found.setdefault(f.rule, []).append(f)
    return found


@pytest.mark.parametrize("name", MINE)
def test_training_fixture_expectations(name):
    expected = json.loads((TRAINING / name / "EXPECTED.json").read_text())
    found = _findings(TRAINING / name)
    for rule in expected["must_fire"]:
        assert rule in found, f"{name}: {rule} should fire"
    for rule in expected["must_not_fire"]:
        assert rule not in found, f"{name}: {rule} should stay silent: {found.get(rule)}"


# --- ingest ------------------------------------------------------------------------------------


def test_rollout_table_is_exact_per_trajectory():
    run = load_run(TRAINING / "rl_sync_all_bad_dropped")
    table = run.rollouts
    assert table.height == 30 * 8 * 4
    assert table.schema["total_reward"] == pl.Float64 and table.schema["ac_tokens"] == pl.Int64
    assert sorted(table["iteration"].unique().to_list()) == list(range(30))
    first = table.filter((pl.col("iteration") == 0) & (pl.col("group_idx") == 0) & (pl.col("traj_idx") == 0)).row(
        0, named=True
    )
    assert first["split"] == "train" and first["n_turns"] == 1 and first["ob_len"] == 151
    assert first["ac_tokens"] == first["max_ac_len"] == first["last_ac_len"]
    assert sum(i.records for i in run.inputs if i.kind == "rollouts") == table.height


def _record(**over):
    record = {
        "schema_version": 1,
        "split": "train",
        "iteration": 3,
        "group_idx": 0,
        "traj_idx": 0,
        "tags": ["math"],
        "sampling_client_step": 3,
        "total_reward": 1.0,
        "final_reward": 0.0,
        "trajectory_metrics": {},
        "steps": [
            {"step_idx": 0, "ob_len": 100, "ac_len": 40, "reward": 0.0, "episode_done": False, "metrics": {}},
            {
                "step_idx": 1,
                "ob_len": 180,
                "ac_len": 512,
                "reward": 1.0,
                "episode_done": True,
                "stop_reason": "length",
                "metrics": {},
            },
        ],
        "final_ob_len": 700,
    }
    record.update(over)
    return json.dumps(record, allow_nan=True)


def test_bad_lines_are_warnings_and_valid_records_kept(tmp_path):
    path = tmp_path / "iteration_000003" / "train_rollout_summaries.jsonl"
    path.parent.mkdir()
    lines = [
        _record(),
        "{not json",
        _record(group_idx="x"),
        _record(traj_idx=1, total_reward=float("nan")),
        _record(traj_idx=2, iteration=None, split=None),
        '{"group_idx": 1, "total_reward": 0.5, "traj_idx": 0',
    ]
    path.write_text("\n".join(lines))
    warnings = []
    table, inputs = parse_rollout_files([path], warnings)
    assert table.height == 3
    assert inputs[0].records == 3 and inputs[0].skipped == 3
    assert [w.line for w in warnings] == [2, 3, 6]
    multi = table.row(0, named=True)
    assert (multi["n_turns"], multi["ac_tokens"], multi["max_ac_len"], multi["last_ac_len"]) == (2, 552, 512, 512)
    assert multi["last_stop_reason"] == "length" and multi["ob_len"] == 280
    # A record without iteration/split takes them from its folder and file name.
    filled = table.filter(pl.col("traj_idx") == 2).row(0, named=True)
    assert filled["iteration"] == 3 and filled["split"] == "train"


def test_discovered_by_name_and_by_content(tmp_path):
    legacy = tmp_path / "eval_gsm8k_iteration_000010_rollout_summaries.jsonl"
    legacy.write_text(_record(split="eval/gsm8k") + "\n")
    renamed = tmp_path / "rollouts_dump.jsonl"
    renamed.write_text(_record() + "\n")
    assert classify(legacy) == ("rollouts", "")
    assert classify(renamed) == ("rollouts", "")
    table, _ = parse_rollout_files([legacy], [])
    assert table["split"].to_list() == ["eval/gsm8k"] and table["iteration"].to_list() == [3]


def test_rollouts_table_goes_through_the_cache_and_parquet(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACE_DOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "MIN_CACHED_BYTES", 0)
    source = TRAINING / "rl_sync_truncated_rollouts"
    first = load_run(source).rollouts
    assert list((tmp_path / "cache").glob("rollouts-*.parquet"))
    assert load_run(source).rollouts.equals(first)
    from click.testing import CliRunner

    from trace_doctor.cli import main

    out = tmp_path / "dataset"
    result = CliRunner().invoke(main, ["ingest", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    written = pl.read_parquet(next((out / "rollouts").glob("run=*/part-0.parquet")))
    assert written.height == first.height and "total_reward" in written.columns


# --- what the rules say ------------------------------------------------------------------------


def test_dropped_groups_are_counted_from_rollouts_not_metrics():
    finding = _findings(TRAINING / "rl_sync_all_bad_dropped")["constant-reward-groups"][0]
    assert finding.evidence["kind"] == "all-bad" and "rollout summaries" in finding.evidence["source"]
    assert finding.evidence["constant_share_median"] >= 0.6
    assert "remove_constant_reward_groups=True" in finding.message


def test_saturation_mid_run_is_info_and_explains_the_entropy_fall():
    found = _findings(TRAINING / "rl_sync_saturated_midway")
    groups, entropy = found["constant-reward-groups"][0], found["entropy-collapse"][0]
    assert groups.severity == "info" and groups.evidence["saturated_after_learning"]
    assert entropy.severity == "info" and entropy.fingerprint == "entropy-collapse:saturated"
    assert entropy.explained_by == ["constant-reward-groups:all-good"]


def test_mode_collapse_explains_the_all_bad_groups():
    found = _findings(TRAINING / "rl_sync_entropy_collapse")
    entropy, groups = found["entropy-collapse"][0], found["constant-reward-groups"][0]
    assert entropy.severity == "warning" and entropy.confidence == "high"
    assert groups.explained_by == ["entropy-collapse"]


def test_group_size_one_is_an_error():
    finding = _findings(TRAINING / "rl_sync_group_size_one")["constant-reward-groups"][0]
    assert finding.severity == "error" and finding.evidence["kind"] == "group-size-1"


def test_thinking_renderer_with_short_budget_is_named():
    finding = _findings(TRAINING / "rl_stream_truncated_thinking")["truncated-samples"][0]
    assert finding.evidence["thinking_renderer_short_budget"] and "qwen3" in finding.message
    rollouts = _findings(TRAINING / "rl_sync_truncated_rollouts")["truncated-samples"][0]
    assert (
        "rollout summaries" in rollouts.evidence["source"] and not rollouts.evidence["thinking_renderer_short_budget"]
    )


# --- the real corpus ---------------------------------------------------------------------------

needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason="the shared corpus (../shared/corpus) is absent")


def _outcome(path: Path, rule: str) -> tuple[str, list]:
    result = analyze(load_run(path), select=[rule])
    status = next(o.status for o in result.outcomes if o.rule == rule)
    return status, [f for f in result.findings if f.rule == rule]


@needs_corpus
def test_corpus_arithmetic_saturates_at_once():
    path = CORPUS / "tinker-rl-lab/experiments/results/arithmetic_metrics.jsonl"
    found = _findings(path)
    groups = found["constant-reward-groups"][0]
    assert groups.severity == "warning" and groups.evidence["kind"] == "all-good"
    assert groups.evidence["onset_step"] <= 3 and groups.evidence["steps_above"] >= 95
    entropy = found["entropy-collapse"][0]
    assert entropy.severity == "info" and entropy.explained_by == ["constant-reward-groups:all-good"]


@needs_corpus
def test_corpus_on_policy_distillation():
    path = CORPUS / "tinker-rl-lab/experiments/results/distillation_on_metrics.jsonl"
    assert _outcome(path, "constant-reward-groups")[0] == "not_applicable"
    status, findings = _outcome(path, "entropy-collapse")
    assert status == "fired" and "4096" in findings[0].message


@needs_corpus
@pytest.mark.parametrize(
    "relative",
    [
        "joanvelja-tinker-cookbook/reports/data/gptoss-20b-v2-metrics.jsonl",
        "joanvelja-tinker-cookbook/reports/data/gptoss-20b-v3b-metrics.jsonl",
        "joanvelja-tinker-cookbook/reports/data/qwen3-30b-think-v3b-metrics.jsonl",
        "sushantmehta-tinker-cookbook/logs_v2p7",
        "astOwOlfo-reward-hacking/tmp/tinker-runs/bash_codeforces",
        "bzz-tinker-cookbook/data/context_distillation/logs/exp2_on_policy",
        "bzz-tinker-cookbook/data/context_distillation/logs/exp5_reward_and_kl",
    ],
)
def test_corpus_runs_without_the_shapes_stay_silent(relative):
    found = _findings(CORPUS / relative)
    assert not set(found) & set(RULES), {r: [f.message for f in found[r]] for r in set(found) & set(RULES)}


@needs_corpus
def test_corpus_custom_filter_counters():
    path = CORPUS / "bzz-tinker-cookbook/data/context_distillation/logs/exp4_reward_only"
    status, findings = _outcome(path, "constant-reward-groups")
    assert status == "fired" and findings[0].evidence["kind"] == "unknown"
    assert findings[0].evidence["constant_share_median"] > 0.9
