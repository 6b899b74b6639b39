"""`config.json`: the run's configuration -> RunMeta (trainer, model, renderer, LoRA rank, ...)."""

from __future__ import annotations

from pathlib import Path

from trace_doctor.ingest.kinds.registry import InputKind, Parsed, Reading, register
from trace_doctor.ingest.parsers.config import parse_config, trainer_from_metric_keys
from trace_doctor.model import IngestWarning, RunMeta, RunTables


def parse(paths: list[Path], warnings: list[IngestWarning], reading: Reading) -> Parsed:
    # One config per run: when several are found, the last one read describes it.
    meta, inputs = RunMeta(), []
    for path in paths:
        meta, info = parse_config(path, warnings)
        inputs.append(info)
    return Parsed({"meta": meta}, inputs)


def complete(run: RunTables) -> None:
    """A config that does not say which trainer wrote the run: the metric keys tell."""
    if run.meta.trainer == "unknown":
        run.meta.trainer = trainer_from_metric_keys(run.steps.columns)


KIND = register(
    InputKind(
        name="config", order=10, fills=("meta",), parse=parse, file_names=frozenset({"config.json"}), complete=complete
    )
)
