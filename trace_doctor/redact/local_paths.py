"""The analysing machine's paths out of what leaves it: where the run's files are, shown relative to the run folder.

`/home/alice/escalations/run-7/logs.log:57` says who analysed the run, and where, and helps no one at
the service: `logs.log:57` is what support needs. Only the places trace-doctor itself wrote the
analysing machine's paths into are rewritten (input paths, table `source` columns, the texts of
findings and reasons, the summary's `source`/`path` fields); what the run's own files say about the
training machine is kept as they say it (config.json's `log_path`, W&B's program and arguments,
profiled code's file paths), even when it names the same folder (a run analysed where it trained).
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.model import Analysis, IngestWarning, PassedOver, RunTables

# Table columns that hold the path of the input file a row came from (or a profile's file).
PATH_COLUMNS = ("source", "profile")
# Keys of the training machine's record whose values are where trace-doctor found a fact, not the fact.
LOCATION_KEYS = frozenset({"source", "path"})


def run_folder(path: str) -> str:
    """The folder a run's paths are shown relative to: the path analysed, or the folder of a file analysed."""
    return str(Path(path).parent) if path and Path(path).is_file() else path


class Localizer:
    """Rewrites the run folder's absolute path, in any of its spellings, to a path relative to it."""

    def __init__(self, folder: str) -> None:
        spellings = {folder, os.path.abspath(folder), os.path.realpath(folder)} if folder else set()
        spellings = {s.rstrip("/\\") for s in spellings if s and os.path.isabs(s)}
        spellings.discard("")
        # Longest first, so `/a/b/run` wins over `/a/b`; the folder followed by a separator goes with
        # it (`logs.log`), alone it is `.`; a longer name that starts the same (`run2`) is left.
        alternation = "|".join(re.escape(s) for s in sorted(spellings, key=len, reverse=True))
        self.pattern = re.compile(rf"(?:{alternation})(?P<sep>[/\\]|(?![A-Za-z0-9._\-]))") if spellings else None

    def text(self, value: str | None) -> str | None:
        if not isinstance(value, str) or self.pattern is None:
            return value
        return self.pattern.sub(lambda m: "" if m["sep"] else ".", value)

    def value(self, value: Any, keys: frozenset[str] | None = None) -> Any:
        """A JSON-like value with every string rewritten (with `keys`: only the strings under those keys)."""
        if isinstance(value, str):
            return self.text(value) if keys is None else value
        if isinstance(value, dict):
            return {
                k: (self.value(v) if keys is not None and k in keys else self.value(v, keys)) for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.value(v, keys) for v in value]
        return value

    def frame(self, frame: pl.DataFrame) -> pl.DataFrame:
        if self.pattern is None:
            return frame
        columns = [c for c in PATH_COLUMNS if c in frame.columns and frame.schema[c] == pl.String]
        if not columns or frame.is_empty():
            return frame
        changes = []
        for name in columns:
            values = frame[name].drop_nulls().unique().to_list()
            mapping = {v: clean for v in values if (clean := self.text(v)) != v}
            if mapping:
                changes.append(pl.col(name).replace(list(mapping), list(mapping.values())))
        return frame.with_columns(changes) if changes else frame


def _run(run: RunTables, local: Localizer) -> RunTables:
    clean = copy.copy(run)
    # The run's name (its folder's), as the summary shows it, not where it sits.
    clean.meta = replace(
        run.meta,
        path=Path(run_folder(run.meta.path)).name or ".",
        wandb=[replace(w, path=local.text(w.path)) for w in run.meta.wandb],
    )
    for name in run.TABLE_NAMES:
        if name not in run.STORED_TABLES:  # spans carry no input path; a stored table is not read for this
            setattr(clean, name, local.frame(getattr(run, name)))
    clean.inputs = [replace(i, path=local.text(i.path), note=local.text(i.note)) for i in run.inputs]
    clean.passed_over = [PassedOver(local.text(p.path), local.text(p.reason)) for p in run.passed_over]
    clean.warnings = [IngestWarning(local.text(w.path), w.line, local.text(w.problem)) for w in run.warnings]
    clean.launches = [
        replace(launch, source=local.text(launch.source))
        if isinstance(getattr(launch, "source", None), str)
        else launch
        for launch in run.launches
    ]
    return clean


def _summary(summary: Any, local: Localizer) -> Any:
    """The summary's texts; in its training machine record only where things were found."""
    if not isinstance(summary, dict):
        return summary
    out = {k: local.value(v) for k, v in summary.items() if k != "training_machine"}
    if "training_machine" in summary:
        out["training_machine"] = local.value(summary["training_machine"], LOCATION_KEYS)
    return {k: out[k] for k in summary}


def relative_to_run(result: Analysis) -> Analysis:
    """The analysis (its summary and baseline in their JSON form, as the bundle holds them) with the
    run folder's absolute path made relative wherever trace-doctor wrote it."""
    local = Localizer(run_folder(result.run.meta.path))
    findings = []
    for finding in result.findings:
        clean = copy.copy(finding)
        clean.title, clean.message, clean.fix = (
            local.text(finding.title),
            local.text(finding.message),
            local.text(finding.fix),
        )
        clean.evidence = local.value(finding.evidence)
        clean.fingerprint = local.text(finding.fingerprint)
        findings.append(clean)
    derived = {k: local.frame(v) if isinstance(v, pl.DataFrame) else v for k, v in (result.derived or {}).items()}
    clean = replace(
        result,
        run=_run(result.run, local),
        findings=findings,
        outcomes=[replace(o, reason=local.text(o.reason)) for o in result.outcomes],
        summary=_summary(result.summary, local),
        baseline=local.value(result.baseline) if result.baseline is not None else None,
        derived=derived,
    )
    # The same decisions over the rewritten findings (their titles make the verdict's headline).
    from trace_doctor.decision import decide

    gate = result.gate
    if gate is None:
        return decide(clean)
    return decide(clean, fail_on=gate.fail_on, fail_on_inconclusive=gate.fail_on_inconclusive)
