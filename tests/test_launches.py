"""A run relaunched into its log directory is one run with several launches; two processes writing
one metrics file at the same time are flagged, never silently merged."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import CORPUS, CORPUS_MISSING, fixture_run

from trace_doctor.api import analyze, load_run
from trace_doctor.cli import main
from trace_doctor.derive.step_times import step_times
from trace_doctor.ingest.parsers.launches import writer_chains


def write(path, steps, total=lambda step: 2.0):
    path.write_text("".join(json.dumps({"step": s, "time/total": total(s)}) + "\n" for s in steps))


def test_a_relaunch_supersedes_only_the_steps_it_ran_again(tmp_path):
    write(tmp_path / "metrics.jsonl", [*range(0, 10), *range(5, 8)])
    run = load_run(tmp_path)
    superseded = run.steps.filter("superseded")["step"].to_list()
    assert superseded == [5, 6, 7]  # 8 and 9 were not run again: still the only record of those steps
    assert run.steps.height == 13  # every row kept
    (first, second) = [launch.to_dict() for launch in run.launches]
    assert (first["first_step"], first["last_step"], first["resumed_at_step"]) == (0, 9, None)
    assert (second["first_step"], second["resumed_at_step"], second["rewrote_steps"]) == (5, 5, 3)
    times = step_times(run)
    assert sorted(times["step"].to_list()) == list(range(10))  # one row per step for charts and statistics


def test_every_output_states_the_launches(tmp_path):
    run = str(fixture_run("sl_resumed"))
    document = json.loads(CliRunner().invoke(main, ["analyze", run, "--no-html", "--format", "json"]).stdout)
    assert [launch["resumed_at_step"] for launch in document["run"]["launches"]] == [None, 20]
    text = CliRunner().invoke(main, ["analyze", run, "--no-html"]).stdout
    assert "2 launches: relaunched at step 20 (rewrote 4 steps)" in text
    markdown = CliRunner().invoke(main, ["analyze", run, "--no-html", "--format", "markdown"]).stdout
    assert "| launches | 2 launches: relaunched at step 20" in markdown


def test_two_writers_at_once_are_flagged_and_kept_apart(tmp_path):
    # Two processes appending to one file: their steps go back and forth.
    steps = [s for pair in zip(range(12), range(12), strict=True) for s in pair]
    write(tmp_path / "metrics.jsonl", steps, total=lambda step: 2.0)
    run = load_run(tmp_path)
    assert run.steps.height == 24 and run.steps.filter("superseded").height == 0
    warnings = [w.problem for w in run.warnings if "at the same time" in w.problem]
    assert len(warnings) == 1 and "2 processes" in warnings[0]
    assert sorted(run.steps["segment"].unique().to_list()) == [0, 1]
    assert all(launch.interleaved for launch in run.launches)
    text = CliRunner().invoke(main, ["analyze", str(tmp_path), "--no-html"]).stdout
    assert "2 processes wrote the metrics at the same time" in text


@pytest.mark.parametrize(
    ("steps", "returns"),
    [
        ([0, 1, 2, 3, 1, 2, 3, 4], 0),  # relaunch
        ([0, 1, 2, 0, 1, 0, 1, 2, 3], 0),  # relaunched twice
        ([0, 0, 1, 1, 2, 2], 2),  # concurrent
    ],
)
def test_writer_chains_count_returns_not_relaunches(steps, returns):
    _, counted = writer_chains(steps, [True] * len(steps))
    assert counted == returns


@pytest.mark.skipif(not CORPUS.exists(), reason=CORPUS_MISSING)
def test_relaunched_corpus_run_lists_each_step_once():
    folder = next(CORPUS.glob("act-prm-tinker/logs/act_prm_taubench_retail_100_fs1/*/*re=1r1e03_bs4_gs4"))
    result = analyze(load_run(folder))
    assert len(result.run.launches) == 2 and result.run.launches[1].resumed_at_step == 0
    for finding in result.findings:
        assert len(finding.steps) == len(set(finding.steps)), finding.title
    periodic = [f for f in result.findings if f.rule == "scheduled-work"]
    assert periodic and periodic[0].evidence["outside_timer_steps"] == [9, 19, 29]
    assert not [f for f in result.findings if f.rule == "inconsistent-step-times"]


def test_two_writers_are_judged_apart_and_the_reward_drop_is_the_one_writers():
    # Two `python -m ... log_path=same` started at once; the second one's reward falls to 0 at step 8.
    result = analyze(load_run(fixture_run("rl_two_writers")))
    steps = result.run.steps
    segment_of_drop = steps.filter(pl.col("step") >= 8).filter(pl.col("env/all/reward/total") == 0.0)["segment"]
    assert segment_of_drop.n_unique() == 1  # ingest kept the writers apart
    dropped = segment_of_drop[0]
    reward = [f for f in result.findings if f.rule == "constant-reward-groups"]
    assert len(reward) == 1
    (finding,) = reward
    assert finding.evidence["writer"]["segment"] == dropped
    assert "writer" in finding.title and finding.message.startswith("Writer ")
    assert len(finding.steps) == len(set(finding.steps))  # one writer's steps, not "6, 6, 7, 7"
    # The healthy writer's rows alone do not fire it.
    assert not [f for f in result.findings if f.evidence.get("writer", {}).get("segment") not in (None, dropped)]
    assert result.verdict.headline.startswith("2 processes wrote this run's metrics at the same time")


def test_two_writers_wall_is_the_longest_writers_not_the_sum(tmp_path):
    (tmp_path / "metrics.jsonl").write_bytes((fixture_run("rl_two_writers") / "metrics.jsonl").read_bytes())
    run = load_run(tmp_path)
    result = analyze(run)
    writers = result.run_summary.writers
    assert [w["segment"] for w in writers] == [0, 1]
    totals = run.steps.group_by("segment").agg(pl.col("time/total").sum()).sort("segment")["time/total"].to_list()
    assert [w["wall_time_s"] for w in writers] == pytest.approx(totals, rel=1e-6)
    assert result.run_summary.wall_time_s == pytest.approx(max(totals), rel=1e-6)  # not their sum
