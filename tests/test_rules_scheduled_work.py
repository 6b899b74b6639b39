"""TD114 scheduled-work: periodic evals and checkpoints, their cadence and share of wall time; never inconsistency."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CORPUS, CORPUS_MISSING, corpus_path, fixture_run
from rule_helpers import findings, load_dir, run_from_rows

from trace_doctor.api import load_run

RULES = ["scheduled-work", "inconsistent-step-times"]


def _pipelined_sft(checkpoint_s: float, *, every: int = 10, n: int = 50, seed: int = 7):
    """Legacy pipelined SFT rows: the checkpoint timed on step N (every `every`) lands in step N+1's time/total."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        total = float(10.0 + rng.normal(0, 0.3))
        row = {"step": i, "train_mean_nll": 1.0, "time/get_batch": 0.5, "time/step": 8.0, "time/total": total}
        if i > 0 and i % every == 0:
            row["time/save_checkpoint"] = checkpoint_s
        if i > 1 and (i - 1) % every == 0:
            row["time/total"] = total + checkpoint_s
        rows.append(row)
    return run_from_rows(rows)


def _outcomes(run):
    found, outcomes, _ = findings(run, RULES)
    return {f.rule: f for f in found if f.rule == "scheduled-work"}, found, outcomes


def test_pipelined_sft_checkpoint_landing_in_the_next_step_is_scheduled_work():
    by_rule, found, outcomes = _outcomes(_pipelined_sft(40.0))
    finding = by_rule["scheduled-work"]
    assert finding.severity == "info" and finding.evidence["kind"] == "checkpoint"
    assert finding.evidence["period"] == 10 and finding.evidence["steps"] == [10, 20, 30, 40]
    assert finding.evidence["outside_timer_offset"] == 1
    assert finding.evidence["outside_timer_steps"] == [11, 21, 31, 41]
    # The cost is the checkpoints' time, counted once (on the step whose window holds it).
    assert finding.seconds_lost == pytest.approx(160.0, rel=0.05)
    assert "save less often" in finding.fix
    assert not [f for f in found if f.rule == "inconsistent-step-times"]
    assert "scheduled work" in outcomes["inconsistent-step-times"].reason


def test_small_carried_over_checkpoint_matches_its_own_time():
    """A checkpoint of 8 s in 10 s steps makes the next step 1.8x: not a spike, but about the checkpoint's time."""
    by_rule, _, _ = _outcomes(_pipelined_sft(8.0))
    finding = by_rule["scheduled-work"]
    assert finding.evidence["outside_timer_steps"] == [11, 21, 31, 41]
    assert finding.seconds_lost == pytest.approx(32.0, rel=0.1)


def test_immaterial_scheduled_work_passes():
    """Checkpoints of 1 s in 10 s steps, every 10 steps: 0.8% of wall time."""
    by_rule, _, outcomes = _outcomes(_pipelined_sft(1.0))
    assert "scheduled-work" not in by_rule
    assert outcomes["scheduled-work"].status == "passed" and "checkpoint" in outcomes["scheduled-work"].reason


def test_timed_eval_spikes_are_scheduled_work_and_an_untimed_spike_stays_inconsistent():
    rng = np.random.default_rng(4)
    rows = []
    for i in range(40):
        total = float(100 + rng.normal(0, 3))
        row = {"step": i, "progress/batch": i, "time/train": 20.0, "time/total": total}
        if i % 10 == 5:
            row["time/run_evals"], row["time/total"] = 1500.0, total + 1500.0
        if i == 23:
            row["time/total"] = 20000.0  # host asleep: outside every timed phase
        rows.append(row)
    found, _, _ = findings(run_from_rows(rows), RULES)
    prints = {f.fingerprint: f for f in found}
    scheduled = prints["scheduled-work:eval"]
    assert scheduled.steps == [5, 15, 25, 35] and scheduled.evidence["period"] == 10
    assert scheduled.evidence["phases"] == ["run_evals"]
    assert scheduled.seconds_lost == pytest.approx(6000.0, rel=0.01)
    assert not [f for f in found if f.fingerprint.startswith("inconsistent-step-times:periodic")]
    unexplained = prints["inconsistent-step-times:unexplained"]
    assert unexplained.steps == [23] and "sleep" in unexplained.message


def test_every_step_timer_is_not_periodic():
    """RL's sampler-weight sync logs `save_checkpoint` on every step: part of the step, not scheduled work."""
    rows = [
        {"step": i, "progress/batch": i, "time/train": 5.0, "time/save_checkpoint": 2.5, "time/total": 10.0}
        for i in range(30)
    ]
    _, outcomes = findings(run_from_rows(rows), RULES)[:2]
    assert outcomes["scheduled-work"].status == "not_applicable"


def test_run_without_periodic_phases_is_not_applicable():
    rows = [{"step": i, "progress/batch": i, "time/train": 5.0, "time/total": 10.0 + (i % 3)} for i in range(30)]
    found, outcomes, _ = findings(run_from_rows(rows), RULES)
    assert not found and outcomes["scheduled-work"].status == "not_applicable"


def test_healthy_pipelined_fixture_does_not_fire():
    """One checkpoint (step 20) is no cadence."""
    found, outcomes, _ = findings(load_run(fixture_run("sl_healthy_pipelined")), RULES)
    assert "scheduled-work" not in {f.rule for f in found}
    assert outcomes["scheduled-work"].status in {"passed", "not_applicable"}


@pytest.mark.skipif(not CORPUS.exists(), reason=CORPUS_MISSING)
def test_relaunched_act_prm_run_evals_and_the_spikes_before_them():
    folder = next(CORPUS.glob("act-prm-tinker/logs/act_prm_taubench_retail_100_fs1/*/*re=1r1e03_bs4_gs4"))
    found, outcomes, _ = findings(load_run(folder), RULES)
    finding = next(f for f in found if f.rule == "scheduled-work")
    assert finding.evidence["kind"] == "eval" and finding.evidence["period"] == 10
    assert finding.evidence["outside_timer_steps"] == [9, 19, 29] and finding.evidence["outside_timer_offset"] == -1
    assert {9, 19, 29} <= set(finding.steps)
    assert 0.4 < finding.fraction_of_wall < 0.7
    assert not [f for f in found if f.rule == "inconsistent-step-times"]
    assert outcomes["inconsistent-step-times"].status == "passed"


def test_joanvelja_gptoss_evals_every_10_steps():
    run = load_dir(corpus_path("joanvelja-tinker-cookbook/reports/data/gptoss-20b-v2-metrics.jsonl"))
    found, _, _ = findings(run, RULES)
    finding = next(f for f in found if f.rule == "scheduled-work")
    assert finding.evidence["steps"] == [10, 20, 30, 40] and finding.evidence["phases"] == ["run_evals"]
    assert 0.1 < finding.fraction_of_wall < 0.25
    # save_checkpoint on every step (the sampler-weight sync) is not reported as periodic.
    assert [f.evidence["kind"] for f in found if f.rule == "scheduled-work"] == ["eval"]
    assert not {10, 20, 30, 40} & {s for f in found if f.rule == "inconsistent-step-times" for s in f.steps}
