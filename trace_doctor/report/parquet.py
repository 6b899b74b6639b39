"""The Parquet dataset of the `ingest` command: one dataset per table, partitioned by run (hive layout).

`DIR/<table>/run=<run id>/part-0.parquet` for every table of RunTables, plus `inputs`,
`ingest_warnings`, `findings` and `runs` (one row per run: what it is, its sweep settings and its
outcome), so polars, DuckDB and Spark read a thousand runs as one table per kind:

    pl.scan_parquet("DIR/steps/**/*.parquet", hive_partitioning=True, missing_columns="insert")
    duckdb: SELECT * FROM read_parquet('DIR/steps/**/*.parquet', hive_partitioning=true, union_by_name=true)

A partition is written for every table of every run, empty or not, so a table's dataset always exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import polars as pl

from trace_doctor.ingest.parsers.config import find_setting
from trace_doctor.model import Analysis
from trace_doctor.whole_file import replacing

FINDINGS_SCHEMA = {
    "rule": pl.String,
    "code": pl.String,
    "severity": pl.String,
    "title": pl.String,
    "message": pl.String,
    "fix": pl.String,
    "confidence": pl.String,
    "fingerprint": pl.String,
    "seconds_lost": pl.Float64,
    "fraction_of_wall": pl.Float64,
    "steps": pl.List(pl.Int64),
    "evidence": pl.String,
}
# Sweep settings copied from config.json into the runs table (a sweep varies these).
RUN_SETTINGS = ("learning_rate", "lora_rank", "batch_size", "group_size", "groups_per_batch", "max_tokens")


def _findings(result: Analysis) -> pl.DataFrame:
    rows = [
        {
            "rule": f.rule,
            "code": f.code,
            "severity": f.severity,
            "title": f.title,
            "message": f.message,
            "fix": f.fix,
            "confidence": f.confidence,
            "fingerprint": f.fingerprint or f.rule,
            "seconds_lost": f.seconds_lost,
            "fraction_of_wall": f.fraction_of_wall,
            "steps": [int(s) for s in f.steps],
            "evidence": orjson.dumps(f.evidence, default=str, option=orjson.OPT_SORT_KEYS).decode(),
        }
        for f in result.findings
    ]
    return pl.DataFrame(rows, schema=FINDINGS_SCHEMA)


def _setting(config: dict[str, Any], key: str) -> float | None:
    value = find_setting(config, key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _runs_row(result: Analysis, path: str) -> pl.DataFrame:
    meta, summary, verdict = result.run.meta, result.run_summary, result.verdict
    lead = verdict.main if verdict is not None else None
    row: dict[str, Any] = {
        "path": path,
        "trainer": meta.trainer,
        "model_name": meta.model_name,
        "renderer_name": meta.renderer_name,
        "wall_time_s": summary.wall_time_s,
        "step_time_p50_s": summary.step_time_p50_s,
        "steady_step_time_s": summary.steady_step_time_s,
        "warmup_steps": summary.warmup_steps,
        "verdict": verdict.status if verdict is not None else None,
        "main_rule": lead.rule if lead is not None else None,
        "main_finding": lead.title if lead is not None else None,
        "seconds_lost": lead.seconds_lost if lead is not None else None,
        "findings": len(result.findings),
    }
    row.update({key: _setting(meta.config, key) for key in RUN_SETTINGS})
    schema = {
        "path": pl.String,
        "trainer": pl.String,
        "model_name": pl.String,
        "renderer_name": pl.String,
        "wall_time_s": pl.Float64,
        "step_time_p50_s": pl.Float64,
        "steady_step_time_s": pl.Float64,
        "warmup_steps": pl.Int64,
        "verdict": pl.String,
        "main_rule": pl.String,
        "main_finding": pl.String,
        "seconds_lost": pl.Float64,
        "findings": pl.Int64,
        **dict.fromkeys(RUN_SETTINGS, pl.Float64),
    }
    return pl.DataFrame([row], schema=schema)


def dataset_tables(result: Analysis, path: str) -> dict[str, pl.DataFrame]:
    """Every table of one analysed run, by dataset name."""
    run = result.run
    tables = dict(run.tables())
    tables["inputs"] = pl.DataFrame(
        [i.to_dict() for i in run.inputs],
        schema={"kind": pl.String, "path": pl.String, "records": pl.Int64, "skipped": pl.Int64},
    )
    tables["ingest_warnings"] = pl.DataFrame(
        [w.to_dict() for w in run.warnings], schema={"path": pl.String, "line": pl.Int64, "problem": pl.String}
    )
    tables["findings"] = _findings(result)
    tables["runs"] = _runs_row(result, path)
    return tables


def _partition_column_free(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with no column named `run`: the partition column comes from the folder name, so a metric of
    that name is kept, renamed `run_value` (or `run_value_2`, ... when the run logs that name too)."""
    if "run" not in frame.columns:
        return frame
    name, count = "run_value", 1
    while name in frame.columns:
        count += 1
        name = f"run_value_{count}"
    return frame.rename({"run": name})


def write_run_partition(result: Analysis, out: Path, run_id: str, path: str) -> dict[str, int]:
    """DIR/<table>/run=<run_id>/part-0.parquet for every table of one run; returns row counts."""
    written: dict[str, int] = {}
    for name, frame in dataset_tables(result, path).items():
        frame = _partition_column_free(frame)
        target = out / name / f"run={run_id}"
        target.mkdir(parents=True, exist_ok=True)
        # Renamed into place whole: a kill leaves the previous part or this one, never a 0-byte file.
        with replacing(target / "part-0.parquet") as temp:
            frame.write_parquet(temp)
        written[name] = frame.height
    return written
