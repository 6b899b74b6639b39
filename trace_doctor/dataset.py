"""`ingest --out`: every run's tables written as one Parquet dataset partitioned by run
(`DIR/<table>/run=<run id>/part-0.parquet`), and an account of what was written."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trace_doctor.settings import Settings

if TYPE_CHECKING:
    from trace_doctor.fleet import Fleet
    from trace_doctor.named_runs import NamedRuns


@dataclass(frozen=True)
class IngestedRun:
    """One run's part of the dataset: its records, as its document counts them, or why it has none."""

    label: str
    run_id: str
    inputs: int = 0
    records: int = 0
    skipped: int = 0
    error: str | None = None  # not ingested: why


@dataclass(frozen=True)
class Dataset:
    """What `ingest_dataset` wrote: the folder, each run (by label), and the rows of every table."""

    root: Path
    fleet: Fleet
    runs: list[IngestedRun]
    tables: dict[str, int]  # table name -> rows written over every run, in the order first written


def ingest_dataset(
    named: NamedRuns,
    out: str | os.PathLike[str],
    settings: Settings | None = None,
    *,
    jobs: int | None = None,
    redact: bool = False,
) -> Dataset:
    """Analyse every run `find_runs` found (`jobs` at a time) and write its tables, findings and a
    one-row-per-run `runs` table under `out`. `redact` removes credentials from names and values."""
    from trace_doctor.fleet import analyze_sources

    split = named.split
    if redact:
        from trace_doctor.redact import redact_split

        split = redact_split(split)
    fleet = analyze_sources(split.runs, settings or Settings(), jobs=jobs, dataset_dir=str(out), redact=redact)
    runs: list[IngestedRun] = []
    tables: dict[str, int] = {}
    for report in sorted(fleet.reports, key=lambda r: r.source.label):
        source = report.source
        if report.error:
            runs.append(IngestedRun(source.label, source.run_id, error=report.error))
            continue
        inputs = (report.document or {}).get("run", {}).get("inputs", [])
        records = sum(i["records"] for i in inputs)
        skipped = sum(i["skipped"] for i in inputs)
        runs.append(IngestedRun(source.label, source.run_id, len(inputs), records, skipped))
        for name, rows in report.dataset_rows.items():
            tables[name] = tables.get(name, 0) + rows
    return Dataset(Path(out), fleet, runs, tables)
