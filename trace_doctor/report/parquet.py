"""Write every RunTables table as Parquet (the `ingest` command)."""

from __future__ import annotations

from pathlib import Path

from trace_doctor.model import RunTables


def write_tables(run: RunTables, out: Path) -> dict[str, int]:
    """DIR/<table>.parquet for each table, plus inputs and ingest warnings; returns row counts."""
    import polars as pl

    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, int] = {}
    for name, frame in run.tables().items():
        frame.write_parquet(out / f"{name}.parquet")
        written[name] = frame.height
    inputs = pl.DataFrame(
        [i.to_dict() for i in run.inputs],
        schema={"kind": pl.String, "path": pl.String, "records": pl.Int64, "skipped": pl.Int64},
    )
    inputs.write_parquet(out / "inputs.parquet")
    written["inputs"] = inputs.height
    warnings = pl.DataFrame(
        [w.to_dict() for w in run.warnings], schema={"path": pl.String, "line": pl.Int64, "problem": pl.String}
    )
    warnings.write_parquet(out / "ingest_warnings.parquet")
    written["ingest_warnings"] = warnings.height
    return written
