"""run-stopped on a run that was launched and logged no step yet: the planned length read from the config's bounds.

A launch's start-up lines (`Logging to:`, the SDK's session) in the log, no metrics row, and a config.json that
bounds the run: top-level `max_steps` (every cookbook trainer, FORMATS.md 3.3; an upper bound alone), or
on-policy distillation's per-dataset `dataset_configs[].dataset_builder.n_batches` (its loop runs as many
batches as the shortest dataset has; the corpus' opd_rl/iter16 run: n_batches 1000 under max_steps 30, and its
rows' `progress/done_frac` = (step + 1) / 30). Such a run stopped at step 0 of that plan, or was still starting
up when the files were copied: the finding says both, at low confidence for an upper bound.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
from conftest import corpus_path

from trace_doctor.derive.progress import run_plan

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stopped_shapes import SESSION, run_stopped  # noqa: E402

START_UP = "tinker_cookbook.utils.ml_log:218 [INFO] Logging to: /runs/x\n" + SESSION + "\n"


def _launched(folder: Path, config: dict) -> Path:
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "logs.log").write_text(START_UP)
    return folder


def _distillation(*batches: int | None, **extra) -> dict:
    entries = [
        {"dataset_builder": {"batch_size": 16, **({} if n is None else {"n_batches": n})}, "groups_per_batch": 16}
        for n in batches
    ]
    return {"model_name": "Qwen/Qwen3-4B-Instruct-2507", "dataset_configs": entries, **extra}


def test_a_launch_with_only_max_steps_in_its_config_stopped_at_step_0_of_at_most_that(tmp_path):
    finding, outcome, _ = run_stopped(_launched(tmp_path, {"model_name": "Qwen/Qwen3-8B", "max_steps": 40}))
    # Before: passed, 'nothing says the run stopped early: no planned length to fall short of'.
    assert outcome.status == "fired" and finding is not None, outcome.reason
    assert finding.evidence["kind"] == "stopped early" and finding.confidence == "low"
    assert "at step 0 of at most 40 planned" in finding.message and "config max_steps 40" in finding.message
    assert "no metrics row was written" in finding.message and "still running" in finding.message
    assert finding.steps == [] and "planned length unknown" not in finding.message


def test_distillations_per_dataset_n_batches_is_its_plan_the_shortest_dataset(tmp_path):
    finding, _, _ = run_stopped(_launched(tmp_path, _distillation(1000, 250)))
    # Before: 'no plan line in the log, no progress fraction in the metrics, no n_batches or max_steps'.
    assert finding is not None and finding.evidence["kind"] == "stopped early", finding
    assert "at step 0 of 250 planned" in finding.message and "dataset_configs[]" in finding.message
    assert finding.confidence == "medium"


def test_the_corpus_distillation_configs_plan_is_n_batches_under_max_steps_as_its_rows_say():
    folder = corpus_path("dphuang2-tinker-cookbook/experiments/opd_rl/data/iter16")
    config = json.loads((folder / "config.json").read_text())
    plan = run_plan(pl.DataFrame(), config)
    # Before: max_steps alone, an upper bound; its n_batches (1000) makes 30 the length, as done_frac says.
    assert (plan.steps, plan.upper_bound) == (30, False), plan
    rows = pl.read_ndjson(folder / "metrics.jsonl")
    assert run_plan(rows, config).steps == 30


def test_no_bound_in_the_config_is_still_no_planned_length(tmp_path):
    # A dataset entry without n_batches: the shortest dataset is unknown, so no length is read.
    finding, outcome, _ = run_stopped(_launched(tmp_path, _distillation(1000, None)))
    assert finding is None and outcome.status == "passed"
    assert "no planned length to fall short of" in outcome.reason


def test_a_config_with_no_launch_in_the_logs_is_no_stop(tmp_path):
    # The config alone says the run was set up, not launched.
    (tmp_path / "config.json").write_text(json.dumps({"max_steps": 40}))
    finding, outcome, _ = run_stopped(tmp_path)
    assert finding is None and outcome.status == "passed"
    assert "no launch in the logs to place a stop in the at most 40 planned" in outcome.reason


def test_a_log_named_alone_with_a_plan_line_is_no_stop_and_says_why(tmp_path):
    # No metrics file or config read: whether the launch logged a step, a log file alone cannot say.
    log = tmp_path / "logs.log"
    log.write_text(START_UP + "tinker_cookbook.rl.train:2620 [INFO] Will train on 57 batches\n")
    finding, outcome, _ = run_stopped(log)
    assert finding is None and outcome.status == "passed"
    assert "no metrics file or config read to place a stop in the 57 planned" in outcome.reason


def test_an_upper_bound_the_rows_fall_short_of_is_said_as_such(tmp_path):
    _launched(tmp_path, {"model_name": "Qwen/Qwen3-8B", "max_steps": 40})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(5)))
    finding, outcome, _ = run_stopped(tmp_path)
    assert finding is None and outcome.status == "passed"
    assert "only an upper bound on its length" in outcome.reason and "config max_steps 40" in outcome.reason
