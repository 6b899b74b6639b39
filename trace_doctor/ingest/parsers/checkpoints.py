"""`checkpoints.jsonl` -> the `checkpoints` table (one row per saved checkpoint record)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.reading.input_stream import InputStream
from trace_doctor.ingest.reading.jsonl import as_int64, iter_json_records, json_text, shown
from trace_doctor.model import CHECKPOINTS_SCHEMA, IngestWarning, InputFile


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def parse_checkpoint_files(paths: list[Path], warnings: list[IngestWarning]) -> tuple[pl.DataFrame, list[InputFile]]:
    rows: list[dict[str, Any]] = []
    inputs: list[InputFile] = []
    known = {"name", "batch", "epoch", "final", "state_path", "sampler_path", "rolling"}
    for path in paths:
        info = InputFile(kind="checkpoints", path=str(path))
        inputs.append(info)
        try:
            stream = InputStream(path)
        except OSError as exc:
            warnings.append(IngestWarning(str(path), None, f"cannot read file: {exc.strerror or exc}"))
            info.skipped = 1
            continue
        log = FileWarnings(str(path))
        with stream:
            for parsed in iter_json_records(stream, str(path), log):
                record = parsed.value
                rows.append(
                    {
                        # shown(), not str(): str() of a name nested 1,000 deep raises RecursionError.
                        "name": None if record.get("name") is None else shown(record.get("name")),
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
            for problem in stream.problems():
                log.add(None, problem)
        info.skipped = log.lined + (stream.error is not None)
        warnings.extend(log.close())
    schema = {**CHECKPOINTS_SCHEMA, "source": pl.String, "extra": pl.String}
    return pl.DataFrame(rows, schema=schema), inputs
