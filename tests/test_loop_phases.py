"""Where a metrics-only run's time went by the loop's structure (derive/loop_phases), and what the
account, steady-slowness and inconsistent-step-times make of it, on the corpus and synthetic runs."""

from __future__ import annotations

import pytest
from conftest import CORPUS_MISSING, ROOT, corpus_path
from rule_helpers import by_rule, findings, run_from_rows

from trace_doctor.api import analyze, load_run
from trace_doctor.derive.loop_phases import UNTIMED_SAMPLING_PART, loop_phases
from trace_doctor.derive.step_times import step_times
from trace_doctor.report.console import account_line

# The cookbook's synchronous RL runs (legacy keys: sampling untimed) in the corpus.
SYNC_RL_RUNS = [
    "sushantmehta-tinker-cookbook/logs",
    "sushantmehta-tinker-cookbook/logs_v2",
    "sushantmehta-tinker-cookbook/logs_v2p3",
    "sushantmehta-tinker-cookbook/logs_v2p7",
    "joanvelja-tinker-cookbook/reports/data/gptoss-20b-v2-metrics.jsonl",
    "tinker-rl-lab/experiments/results/arithmetic_metrics.jsonl",
]


def _corpus(relative: str):
    path = corpus_path(relative)
    if not path.exists():
        pytest.skip(CORPUS_MISSING)
    return path


def _legacy_rows(untimed: list[float], tokens: list[int], *, sampling_key: str | None = None) -> list[dict]:
    rows = []
    for i, (u, t) in enumerate(zip(untimed, tokens, strict=True)):
        row = {
            "step": i,
            "progress/batch": i,
            "env/all/total_episodes": 512,
            "env/all/total_ac_tokens": t,
            "time/train": 30.0,
            "time/save_checkpoint": 2.0,
            "time/total": u + 32.0,
        }
        if sampling_key:
            row[sampling_key] = u
        rows.append(row)
    return rows


def test_untimed_remainder_of_sync_rl_is_sampling_up_to_what_tokens_explain():
    untimed = [100.0] * 8 + [250.0, 3000.0]  # step 8: twice the tokens; step 9: an hour asleep
    tokens = [400_000] * 8 + [1_000_000, 400_000]
    run = run_from_rows(_legacy_rows(untimed, tokens))
    phases = loop_phases(step_times(run), run.steps, run.meta.trainer, excess_factor=3.0)
    sampling = phases.part(UNTIMED_SAMPLING_PART)
    assert sampling is not None and not sampling.timed and sampling.steps == 10
    named = dict(zip(phases.per_step["step"], phases.per_step["named_s"], strict=True))
    # Step 8's 250 s is what its tokens predict (2.5x); step 9 is sampling only up to 3x the typical step.
    assert named[8] == pytest.approx(250.0) and named[9] == pytest.approx(300.0)
    assert phases.unnamed_s == pytest.approx(2700.0)
    assert phases.part("training on the service").median_step_s == pytest.approx(30.0)
    assert phases.evidence["tokens_per_step"] == 400_000 and phases.evidence["episodes_per_step"] == 512


def test_timed_sampling_is_a_phase_and_leaves_no_remainder_to_name():
    run = run_from_rows(_legacy_rows([100.0] * 6, [400_000] * 6, sampling_key="time/sample"))
    phases = loop_phases(step_times(run), run.steps, run.meta.trainer, excess_factor=3.0)
    assert phases.untimed_named is None and phases.part(UNTIMED_SAMPLING_PART) is None
    assert phases.part("sampling").timed and phases.part("sampling").seconds == pytest.approx(600.0)


def test_a_loop_writing_only_time_total_is_not_named():
    run = run_from_rows([{"step": i, "progress/batch": i, "time/total": 50.0} for i in range(6)])
    phases = loop_phases(step_times(run), run.steps, run.meta.trainer, excess_factor=3.0)
    assert phases.untimed_named is None and phases.unnamed_s == pytest.approx(300.0)


@pytest.mark.parametrize("relative", SYNC_RL_RUNS)
def test_sync_rl_corpus_account_explains_all_but_15_percent(relative):
    result = analyze(load_run(_corpus(relative)))
    account = result.run_summary.account
    assert account.unexplained_s < 0.15 * account.wall_time_s
    sampling = next(p for p in account.structure.parts if p.part == UNTIMED_SAMPLING_PART)
    assert not sampling.timed and sampling.median_step_s > 0.5 * account.structure.median_step_s
    assert "sampling and reward computation" in account_line(account)
    # The JSON form reads back to the same account.
    assert type(account).from_dict(account.to_dict()) == account


def test_sushantmehta_short_run_names_sampling_and_reports_its_hour_long_step():
    result = analyze(load_run(_corpus("sushantmehta-tinker-cookbook/logs")))
    structure = result.run_summary.account.structure
    sampling = next(p for p in structure.parts if p.part == UNTIMED_SAMPLING_PART)
    assert sampling.median_step_s == pytest.approx(332.5, abs=1)
    assert structure.median_step_s == pytest.approx(387.7, abs=1)
    rules = by_rule(result.findings)
    dominant = rules["steady-slowness"][0]
    # 85% of the step: a note (sync RL's rollouts are its work), a warning only past nine tenths
    assert dominant.fingerprint == "steady-slowness:sampling" and dominant.severity == "info"
    assert "max_steps_off_policy" in dominant.fix and "group_size" in dominant.fix
    # 7 steps: too few to judge variance, yet step 1 (3,816 s, 59% of the wall) is reported with its cause.
    (gap,) = rules["inconsistent-step-times"]
    assert gap.steps == [1] and gap.evidence["cause"] == "host-sleep"
    assert gap.fraction_of_wall > 0.5


def test_v2p7_slow_steps_split_by_cause_with_matching_counts():
    found, _, _ = findings(load_run(_corpus("sushantmehta-tinker-cookbook/logs_v2p7")), ["inconsistent-step-times"])
    causes = {f.evidence["cause"] + ":" + str(f.evidence["spikes"][0]["phase"]): f for f in found}
    assert "phase:train" in causes and "host-sleep:None" in causes
    assert 76 in causes["host-sleep:None"].steps and 7 in causes["phase:train"].steps
    for f in found:
        assert len(f.evidence["spikes"]) == len(f.steps)
        assert f"{len(f.steps)} step(s)" in f.message
    assert len({f.fix for f in found}) == len(found)


def test_timed_sampling_fixture_reports_sampling_share_with_high_confidence():
    run = load_run(ROOT / "fixtures" / "training" / "rl_sync_healthy")
    found, _, ctx = findings(run, ["steady-slowness"])
    (dominant,) = [f for f in found if f.fingerprint == "steady-slowness:sampling"]
    assert dominant.confidence == "high" and dominant.evidence["measured"] == "sampling"
    assert dominant.evidence["sampling_share"] > 0.5
    assert ctx.loop_phases.untimed_named is None


def test_async_rl_step_timer_remainder_is_not_its_sampling():
    """Async RL samples in workers beside the training loop: its `time/total` remainder is no rollout."""
    run = load_run(ROOT / "fixtures" / "training" / "rl_async_within_bound")
    _, _, ctx = findings(run, ["steady-slowness"])
    assert ctx.loop_phases.untimed_named is None and ctx.loop_phases.part(UNTIMED_SAMPLING_PART) is None
    rows = _legacy_rows([100.0] * 6, [400_000] * 6)
    for row in rows:
        row["sampling_client/step_min"] = row["step"]  # the async/stream keys, with no config to say so
    bare = run_from_rows(rows)
    phases = loop_phases(step_times(bare), bare.steps, bare.meta.trainer, excess_factor=3.0)
    assert phases.untimed_named is None
