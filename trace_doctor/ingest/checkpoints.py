"""`checkpoints.jsonl` -> the `checkpoints` table (one row per saved checkpoint record)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.ingest.jsonl import as_int64, iter_json_lines, json_text, read_bytes
from trace_doctor.model import CHECKPOINTS_SCHEMA, IngestWarning, InputFile


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def parse_checkpoint_files(paths: list[Path], warnings: list[IngestWarning]) -> tuple[pl.DataFrame, list[InputFile]]:
    rows: list[dict[str, Any]] = []
    inputs: list[InputFile] = []
    for path in paths:
        info = InputFile(kind="checkpoints", path=str(path))
        before = len(warnings)
        data = read_bytes(path, warnings)
        if data is not None:
            for parsed in iter_json_lines(data, str(path), warnings):
                record = parsed.value
                known = {"name", "batch", "epoch", "final", "state_path", "sampler_path", "rolling"}
                rows.append(
                    {
                        "name": None if record.get("name") is None else str(record.get("name")),
                        "batch": as_int64(record.get("batch")),
                        "epoch": as_int64(record.get("epoch")),
                        "final": bool(record.get("final")) if "final" in record else None,
                        "state_path": _str(record.get("state_path")),
                        "sampler_path": _str(record.get("sampler_path")),
                        "rolling": bool(record.get("rolling")) if "rolling" in record else None,
                        "line": parsed.line,
                        "source": str(path),
                        "extra": json_text({k: v for k, v in record.items() if k not in known}, sort_keys=True),
                    }
                )
                info.records += 1
        info.skipped = len(warnings) - before
        inputs.append(info)
    schema = {**CHECKPOINTS_SCHEMA, "source": pl.String, "extra": pl.String}
    return pl.DataFrame(rows, schema=schema), inputs
