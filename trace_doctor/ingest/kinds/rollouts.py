"""RL rollout summaries (`iteration_NNNNNN/train_rollout_summaries.jsonl`, FORMATS.md 3.6) -> `rollouts`."""

from __future__ import annotations

from pathlib import Path

from trace_doctor.ingest.kinds.registry import ContentTest, InputKind, Parsed, Reading, Sniffed, register
from trace_doctor.ingest.parsers.rollouts import is_rollout_summaries_name, parse_rollout_files
from trace_doctor.model import IngestWarning


def parse(paths: list[Path], warnings: list[IngestWarning], reading: Reading) -> Parsed:
    rollouts, inputs = parse_rollout_files(paths, warnings)
    return Parsed({"rollouts": rollouts}, inputs)


def trajectory_line(sniffed: Sniffed) -> bool:
    # Rollout summaries under another name.
    return b'"traj_idx"' in sniffed.first_line and b'"group_idx"' in sniffed.first_line


KIND = register(
    InputKind(
        name="rollouts",
        order=60,
        fills=("rollouts",),
        parse=parse,
        name_test=is_rollout_summaries_name,
        content=(ContentTest("jsonl", trajectory_line, rank=40, noun="rollout summaries"),),
    )
)
