"""`trace-doctor ingest` on every fixture run and every corpus run: Parquet row counts equal the
valid records of the inputs, and every skipped record is listed."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import CORPUS, CORPUS_MISSING, FIXTURE_RUNS

from trace_doctor.cli import main


def _runs() -> list:
    fixtures = sorted(p for p in FIXTURE_RUNS.glob("*") if p.is_dir()) if FIXTURE_RUNS.exists() else []
    if CORPUS.exists():
        metrics = sorted(p for p in CORPUS.rglob("*.jsonl") if "metrics" in p.name)
        # A cookbook log dir is analysed as a directory; renamed files stand alone.
        corpus = sorted({p.parent if p.name == "metrics.jsonl" else p for p in metrics})
    else:
        corpus = [pytest.param(None, marks=pytest.mark.skip(reason=CORPUS_MISSING))]
    return fixtures + corpus


KEPT_ROWS = r"row kept|every row is kept"


def _nonblank(path: Path) -> int:
    return sum(1 for line in path.read_bytes().split(b"\n") if line.strip())


@pytest.mark.parametrize("run", _runs(), ids=lambda p: "corpus-absent" if p is None else p.name[-50:])
def test_ingest_row_counts_match_valid_records(run, tmp_path):
    out = tmp_path / "tables"
    result = CliRunner().invoke(main, ["ingest", str(run), "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (partition,) = {p.name for p in (out / "inputs").iterdir()}  # one run: one partition per table

    def table(name: str) -> pl.DataFrame:
        return pl.read_parquet(out / name / partition / "part-0.parquet")

    inputs = table("inputs")
    warnings = table("ingest_warnings")

    metrics = inputs.filter(pl.col("kind") == "metrics")
    assert table("steps").height == metrics["records"].sum()
    checkpoints = inputs.filter(pl.col("kind") == "checkpoints")
    assert table("checkpoints").height == checkpoints["records"].sum()

    # Line-oriented inputs: every non-blank line is a record or a listed warning. Warnings about rows
    # that were kept (a step that is not an integer, rows two processes wrote at once) skip no line.
    for row in inputs.filter(pl.col("kind").is_in(["metrics", "checkpoints", "spans"])).iter_rows(named=True):
        listed = warnings.filter((pl.col("path") == row["path"]) & ~pl.col("problem").str.contains(KEPT_ROWS))
        assert row["records"] + listed.height == _nonblank(Path(row["path"])), row["path"]
        assert row["skipped"] == listed.height
