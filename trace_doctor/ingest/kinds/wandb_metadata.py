"""W&B `wandb-metadata.json`: the training machine's record of itself (python, host, args, git) ->
`meta.wandb`. Run metadata, not timing."""

from __future__ import annotations

from pathlib import Path

from trace_doctor.ingest.kinds.registry import InputKind, Parsed, Reading, register
from trace_doctor.ingest.parsers.wandb_metadata import parse_wandb_metadata_files
from trace_doctor.model import IngestWarning


def parse(paths: list[Path], warnings: list[IngestWarning], reading: Reading) -> Parsed:
    runs, inputs = parse_wandb_metadata_files(paths, warnings)
    return Parsed({"meta.wandb": runs}, inputs)


KIND = register(
    InputKind(
        name="wandb_metadata",
        order=100,
        fills=("meta.wandb",),
        parse=parse,
        file_names=frozenset({"wandb-metadata.json"}),
    )
)
