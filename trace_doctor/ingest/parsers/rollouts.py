"""RL rollout summaries -> the `rollouts` table (one row per trajectory; FORMATS.md 3.6).

`iteration_NNNNNN/{train|eval_<label>}_rollout_summaries.jsonl` (and the flat
`train_iteration_NNNNNN_rollout_summaries.jsonl` of 2026-03-02..03-25) hold one JSON line per
trajectory: its group, its rewards and each turn's observation/action lengths. In sync RL they are
written before constant-reward groups are dropped, so per-group reward spread and truncation at
`max_tokens` are exact here while metrics.jsonl only has batch averages computed after the drop.

A run writes one file per iteration: a hundred files of 512 lines is ordinary, so each line is
decoded once and reduced to scalars in one pass (no per-row dicts, no second pass over steps).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.reading.input_stream import InputStream
from trace_doctor.ingest.reading.jsonl import as_int64, iter_json_records, shown
from trace_doctor.model import ROLLOUTS_SCHEMA, IngestWarning, InputFile

# `iteration_000012/train_rollout_summaries.jsonl`, `eval_gsm8k_rollout_summaries.jsonl`, and the
# flat legacy `train_iteration_000012_rollout_summaries.jsonl` / `eval_x_iteration_000012_...`.
FILE_NAME = re.compile(r"^(?P<base>.+?)(?:_iteration_(?P<iteration>\d+))?_rollout_summaries\.jsonl(?:\.gz)?$")
ITERATION_DIR = re.compile(r"^iteration_(?P<iteration>\d+)$")
# Stop reasons that mean "cut at the token cap" (tinker's SampledSequence: "length"; env-level names).
LENGTH_STOPS = frozenset({"length", "max_tokens", "max_sampled_tokens"})


def is_rollout_summaries_name(name: str) -> bool:
    """Whether a file name is the cookbook's rollout-summary export."""
    return FILE_NAME.match(name) is not None


def _defaults_from_path(path: Path) -> tuple[int | None, str | None]:
    """(iteration, split) the file's name and folder imply, for records that do not carry them."""
    match = FILE_NAME.match(path.name)
    iteration: int | None = None
    split: str | None = None
    if match:
        if match["iteration"]:
            iteration = int(match["iteration"])
        base = match["base"]
        split = "train" if base == "train" else (f"eval/{base[5:]}" if base.startswith("eval_") else base)
    folder = ITERATION_DIR.match(path.parent.name)
    if iteration is None and folder:
        iteration = int(folder["iteration"])
    return iteration, split


def _number(value: Any) -> float | None:
    # NaN / Infinity are real rewards (a broken reward function writes them); bools are not numbers.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _length(value: Any) -> int | None:
    number = as_int64(value)
    return number if number is not None and number >= 0 else None


class _Columns:
    """The table's columns as lists, appended one record at a time."""

    def __init__(self) -> None:
        self.data: dict[str, list[Any]] = {name: [] for name in ROLLOUTS_SCHEMA}

    def add(self, row: tuple[Any, ...]) -> None:
        for column, value in zip(self.data.values(), row, strict=True):
            column.append(value)

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.data, schema=ROLLOUTS_SCHEMA)


def _stop_from_metrics(metrics: Any) -> str | None:
    """The env's `stop/<reason>` metric set on a turn (FORMATS 1.3 stop reasons), when the export has
    no `stop_reason` field of its own."""
    if not isinstance(metrics, dict):
        return None
    for key, value in metrics.items():
        if isinstance(key, str) and key.startswith("stop/") and value == 1:
            return key[5:]
    return None


def _steps_summary(steps: Any) -> tuple[int | None, int | None, int | None, int | None, str | None, int | None]:
    """(n_turns, ac_tokens, max_ac_len, last_ac_len, last_stop_reason, ob_len) of a record's steps."""
    if not isinstance(steps, list):
        return None, None, None, None, None, None
    ac_total = ob_total = 0
    longest: int | None = None
    last_ac: int | None = None
    last_stop: str | None = None
    ac_known = ob_known = False
    for step in steps:
        if not isinstance(step, dict):
            last_ac, last_stop = None, None
            continue
        ac = _length(step.get("ac_len"))
        ob = _length(step.get("ob_len"))
        if ac is not None:
            ac_total += ac
            ac_known = True
            longest = ac if longest is None or ac > longest else longest
        if ob is not None:
            ob_total += ob
            ob_known = True
        last_ac = ac
        stop = step.get("stop_reason")
        last_stop = stop if isinstance(stop, str) else _stop_from_metrics(step.get("metrics"))
    return (
        len(steps),
        ac_total if ac_known else None,
        longest,
        last_ac,
        last_stop,
        ob_total if ob_known else None,
    )


def _parse_file(path: Path, columns: _Columns, warnings: list[IngestWarning]) -> InputFile:
    info = InputFile(kind="rollouts", path=str(path))
    source = str(path)
    default_iteration, default_split = _defaults_from_path(path)
    try:
        stream = InputStream(path)
    except OSError as exc:
        warnings.append(IngestWarning(source, None, f"cannot read file: {exc.strerror or exc}"))
        info.skipped = 1
        return info
    log = FileWarnings(source)
    with stream:
        for parsed in iter_json_records(stream, source, log):
            record = parsed.value
            group = as_int64(record.get("group_idx"))
            reward = _number(record.get("total_reward"))
            if group is None or reward is None:
                missing = "an integer group_idx" if group is None else "a numeric total_reward"
                log.add(parsed.line, f"rollout summary without {missing}; skipped")
                continue
            iteration = as_int64(record.get("iteration"))
            split = record.get("split")
            tags = record.get("tags")
            n_turns, ac_tokens, max_ac, last_ac, last_stop, ob_len = _steps_summary(record.get("steps"))
            columns.add(
                (
                    source,
                    parsed.line,
                    split if isinstance(split, str) else default_split,
                    iteration if iteration is not None else default_iteration,
                    group,
                    as_int64(record.get("traj_idx")),
                    as_int64(record.get("sampling_client_step")),
                    reward,
                    _number(record.get("final_reward")),
                    n_turns,
                    ac_tokens,
                    max_ac,
                    last_ac,
                    last_stop,
                    ob_len,
                    _length(record.get("final_ob_len")),
                    ",".join(shown(t, 200) for t in tags) if isinstance(tags, list) else None,
                )
            )
            info.records += 1
        for problem in stream.problems():
            log.add(None, problem)
    info.skipped = log.lined + (stream.error is not None)
    warnings.extend(log.close())
    return info


def _parse_cached(path: Path, warnings: list[IngestWarning]) -> tuple[pl.DataFrame, InputFile]:
    """One file's rows, from the table cache when the file is unchanged (large exports only)."""
    from trace_doctor.ingest.storage import cache

    snapshot = cache.snapshot(path)
    cached = cache.load(path, "rollouts", snapshot)
    if cached is not None:
        frame, info, cached_warnings = cached
        warnings.extend(cached_warnings)
        return frame, info
    before = len(warnings)
    columns = _Columns()
    info = _parse_file(path, columns, warnings)
    frame = columns.frame()
    cache.store(path, "rollouts", frame, info, warnings[before:], snapshot)
    return frame, info


def parse_rollout_files(paths: list[Path], warnings: list[IngestWarning]) -> tuple[pl.DataFrame, list[InputFile]]:
    """Every rollout-summary file into one table, sorted by (split, iteration, group, trajectory)."""
    frames: list[pl.DataFrame] = []
    inputs: list[InputFile] = []
    for path in paths:
        frame, info = _parse_cached(path, warnings)
        inputs.append(info)
        if frame.height:
            frames.append(frame)
    if not frames:
        return pl.DataFrame(schema=ROLLOUTS_SCHEMA), inputs
    table = pl.concat(frames, how="vertical")
    return table.sort(["split", "iteration", "group_idx", "traj_idx", "source", "line"], nulls_last=True), inputs


def truncated_at_cap(stop_reason: str | None) -> bool:
    """Whether a turn's stop reason says it was cut at the token cap."""
    return stop_reason in LENGTH_STOPS
