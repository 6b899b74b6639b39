"""`trace-doctor ingest PATH --out DIR`: one hive-partitioned Parquet dataset per table, read back as
users query it — polars and DuckDB — one row per run in `runs`, findings included."""

from __future__ import annotations

import json
import shutil

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import CORPUS, CORPUS_MISSING, fixture_run

from trace_doctor.cli import main


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    for name, lr in (("sl_sequential_await", 1e-4), ("sl_healthy_pipelined", 3e-4), ("sl_slow_get_batch", 1e-3)):
        shutil.copytree(fixture_run(name), root / name)
        config = json.loads((root / name / "config.json").read_text())
        config["learning_rate"] = lr
        (root / name / "config.json").write_text(json.dumps(config))
    out = tmp_path_factory.mktemp("dataset")
    result = CliRunner().invoke(main, ["ingest", str(root), "--out", str(out), "--jobs", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


def test_every_table_is_a_dataset_partitioned_by_run(dataset):
    for table in ("steps", "spans", "step_spans", "log_events", "checkpoints", "findings", "runs", "inputs"):
        partitions = sorted(p.name for p in (dataset / table).iterdir())
        assert partitions == ["run=sl_healthy_pipelined", "run=sl_sequential_await", "run=sl_slow_get_batch"]


def test_polars_reads_runs_and_findings_as_one_table(dataset):
    runs = pl.read_parquet(dataset / "runs" / "**" / "*.parquet", hive_partitioning=True).sort("learning_rate")
    assert runs["run"].to_list() == ["sl_sequential_await", "sl_healthy_pipelined", "sl_slow_get_batch"]
    assert runs["learning_rate"].to_list() == [1e-4, 3e-4, 1e-3]
    assert runs["steady_step_time_s"].null_count() == 0
    findings = pl.read_parquet(dataset / "findings" / "**" / "*.parquet", hive_partitioning=True)
    per_run = dict(findings.group_by("run").agg(pl.col("rule")).iter_rows())
    assert "pipelining-gap" in per_run["sl_sequential_await"]
    assert "get-batch-bottleneck" in per_run["sl_slow_get_batch"]


def test_duckdb_answers_the_readme_question(dataset):
    # "steady step time and main finding per learning rate"
    rows = duckdb.sql(
        f"""
        SELECT learning_rate, steady_step_time_s, main_rule
        FROM read_parquet('{dataset}/runs/**/*.parquet', hive_partitioning = true)
        ORDER BY learning_rate
        """
    ).fetchall()
    assert [r[0] for r in rows] == [1e-4, 3e-4, 1e-3]
    assert all(r[1] > 0 for r in rows) and rows[0][2] is not None  # the 1e-4 run has a main finding
    steps = duckdb.sql(
        f"""
        SELECT run, count(*) AS steps FROM read_parquet('{dataset}/steps/**/*.parquet', hive_partitioning = true,
        union_by_name = true) GROUP BY run ORDER BY run
        """
    ).fetchall()
    lines = {
        f"{name}": sum(1 for line in (fixture_run(name) / "metrics.jsonl").read_text().splitlines() if line.strip())
        for name in ("sl_healthy_pipelined", "sl_sequential_await", "sl_slow_get_batch")
    }
    assert dict(steps) == lines  # every metrics row, in its run's partition


@pytest.mark.skipif(not CORPUS.exists(), reason=CORPUS_MISSING)
def test_the_corpus_is_one_queryable_dataset(tmp_path):
    out = tmp_path / "corpus"
    result = CliRunner().invoke(main, ["ingest", str(CORPUS), "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    ((count,),) = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{out}/runs/**/*.parquet', hive_partitioning=true)"
    ).fetchall()
    assert count == len(list((out / "steps").iterdir())) >= 30
    ((steps,),) = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{out}/steps/**/*.parquet', hive_partitioning=true, union_by_name=true)"
    ).fetchall()
    assert steps > 1000


def test_metrics_named_run_and_run_value_are_both_kept(tmp_path):
    # `run` is the partition column, so a metric `run` is renamed; a run that also logs `run_value` crashed
    # the ingest (DuplicateError, exit 3) instead of keeping both.
    run = tmp_path / "sweep_member"
    run.mkdir()
    rows = [{"step": i, "time/total": 1.0 + 0.01 * i, "run": 7.0, "run_value": float(i)} for i in range(12)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "dataset"
    result = CliRunner().invoke(main, ["ingest", str(run), "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    steps = pl.read_parquet(out / "steps" / "**" / "*.parquet", hive_partitioning=True).sort("step")
    assert steps["run"].unique().to_list() == ["sweep_member"]
    assert steps["run_value"].to_list() == [float(i) for i in range(12)]
    assert steps["run_value_2"].to_list() == [7.0] * 12
