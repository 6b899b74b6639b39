"""Legacy pipelined SFT `time/total` windows overlap: the wall, the step times and the account.

The metrics are written by a replay of the cookbook's loop (tests/legacy_sft_replay.py), which
knows the true wall clock; summing the pipelined loop's windows roughly doubles it.
"""

from __future__ import annotations

import json

import pytest
from conftest import corpus_path
from legacy_sft_replay import replay_text

from trace_doctor.api import analyze, load_run
from trace_doctor.report.json_doc import build_document


def _analysed(tmp_path, text):
    path = tmp_path / "metrics.jsonl"
    path.write_text(text)
    return analyze(load_run(path))


def test_pipelined_windows_are_not_summed_twice(tmp_path):
    text, true_wall = replay_text(200, pipelined=True)
    raw_sum = sum(json.loads(line)["time/total"] for line in text.splitlines())
    assert raw_sum > 1.5 * true_wall  # what the old wall (sum of windows) reported
    doc = build_document(_analysed(tmp_path, text))
    summary = doc["summary"]
    assert summary["wall_time_s"] == pytest.approx(true_wall, rel=0.02)
    assert "de-overlapped" in summary["account"]["wall_basis"]
    assert summary["overlapping_step_timers"]["summed_windows_s"] == pytest.approx(raw_sum)
    # A steady step is one service turn (2.5-4.5 s), not two iterations' worth.
    assert 2.5 < summary["steady_step_time_s"] < 4.5
    # Batches loaded while the previous step was on the service cost nothing; the waits and those
    # loads are the service's time, so little of the wall is left unexplained.
    account = summary["account"]
    assert account["unexplained_s"] < 0.1 * account["wall_time_s"]
    status = {r["rule"]: r["status"] for r in doc["rules"]}
    assert status["get-batch-bottleneck"] == "passed"


def test_sequential_totals_are_kept_as_written(tmp_path):
    text, true_wall = replay_text(200, pipelined=False)
    doc = build_document(_analysed(tmp_path, text))
    raw_sum = sum(json.loads(line)["time/total"] for line in text.splitlines())
    assert doc["summary"]["wall_time_s"] == pytest.approx(raw_sum, rel=1e-6)
    assert doc["summary"]["wall_time_s"] == pytest.approx(true_wall, rel=0.02)
    assert "de-overlapped" not in doc["summary"]["account"]["wall_basis"]
    assert "overlapping_step_timers" not in doc["summary"]


def test_sequential_loop_with_a_large_untimed_part_is_not_read_as_overlapped(tmp_path):
    # 3 s of untimed client work per step: the overlap residual is positive, but it swings with the
    # neighbours' timers while total - own stays steady.
    text, _ = replay_text(200, pipelined=False, untimed_s=(2.9, 3.1))
    doc = build_document(_analysed(tmp_path, text))
    raw_sum = sum(json.loads(line)["time/total"] for line in text.splitlines())
    assert doc["summary"]["wall_time_s"] == pytest.approx(raw_sum, rel=1e-6)


def test_real_distillation_run_wall_is_its_timers_not_twice_them():
    # tinker-rl-lab distillation_off (supervised.train, 683 steps): the windows sum to 5,930 s while
    # the timers (get_batch 1,295 s, step 1,589 s, saves 168 s) and their untimed residual
    # (0.16 s median a step) add up to about 3,110 s.
    path = corpus_path("tinker-rl-lab/experiments/results/distillation_off_metrics.jsonl")
    doc = build_document(analyze(load_run(path)))
    summary = doc["summary"]
    assert 3050 < summary["wall_time_s"] < 3200
    assert 3.5 < summary["steady_step_time_s"] < 4.2
    assert summary["account"]["unexplained_s"] < 0.15 * summary["wall_time_s"]
