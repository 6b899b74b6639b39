"""W&B `wandb-metadata.json` -> WandbMetadata: what the training machine recorded about itself.

With W&B on, the cookbook's `log_path/wandb/run-<date>_<time>-<id>/files/` holds this file
(FORMATS.md 3.7). Two shapes exist: the Python SDK's (`python: "3.10.12"`, `heartbeatAt`, `cuda`,
`gpu`, `gpu_count`) and wandb-core's protojson (`python: "CPython 3.11.9"`, `cpu: {count,
countLogical}`, `gpu_nvidia: [{name, memoryTotal, ...}]`, `cudaVersion`, `memory: {total}`). Both
carry `os`, `host`, `program`, `codePath`, `args`, `startedAt`, `executable` and `git: {remote,
commit}`. A field of the wrong type is left out; a file that is not a JSON object is a warning.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from trace_doctor.ingest.reading.jsonl import decode_json, read_bytes
from trace_doctor.model import IngestWarning, InputFile, WandbMetadata

WANDB_RUN_FOLDER = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-(?P<run_id>[A-Za-z0-9]+)$")
PYTHON_VERSION = re.compile(r"(?P<version>\d+\.\d+(?:\.\d+)?\S*)")
# Longest text kept from one field: a program path or an OS string is far shorter; a pasted blob is not.
MAX_FIELD_CHARS = 500
MAX_ARGS = 200


def wandb_run_id(path: Path) -> str | None:
    """The W&B run id from `.../run-20251205_141758-bei73r95/files/wandb-metadata.json`."""
    for folder in (path.parent, path.parent.parent):
        found = WANDB_RUN_FOLDER.match(folder.name)
        if found:
            return found["run_id"]
    return None


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()[:MAX_FIELD_CHARS]
    return None


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 0 <= value < 1 << 31:
        return value
    if isinstance(value, str) and value.isdigit() and len(value) < 20:
        return int(value)
    return None


def _python(value: Any) -> str | None:
    text = _text(value)
    if text is None:
        return None
    found = PYTHON_VERSION.search(text)
    return found["version"] if found else text


def _gpu(doc: dict[str, Any]) -> tuple[str | None, int | None]:
    nvidia = doc.get("gpu_nvidia")
    if isinstance(nvidia, list) and nvidia:
        names = [_text(g.get("name")) for g in nvidia if isinstance(g, dict)]
        names = [n for n in names if n]
        return (names[0] if names else None), _count(doc.get("gpu_count")) or len(nvidia)
    return _text(doc.get("gpu")), _count(doc.get("gpu_count"))


def metadata_from_document(doc: dict[str, Any], path: Path) -> WandbMetadata:
    """The fields trace-doctor keeps from one decoded metadata document."""
    git = doc.get("git") if isinstance(doc.get("git"), dict) else {}
    cpu = doc.get("cpu") if isinstance(doc.get("cpu"), dict) else {}
    memory = doc.get("memory") if isinstance(doc.get("memory"), dict) else {}
    raw_args = doc.get("args")
    args = (
        tuple(a[:MAX_FIELD_CHARS] for a in raw_args[:MAX_ARGS] if isinstance(a, str))
        if isinstance(raw_args, list)
        else ()
    )
    gpu, gpu_count = _gpu(doc)
    return WandbMetadata(
        path=str(path),
        wandb_run_id=wandb_run_id(path),
        python=_python(doc.get("python")),
        os=_text(doc.get("os")),
        host=_text(doc.get("host")),
        program=_text(doc.get("program")),
        code_path=_text(doc.get("codePath")) or _text(doc.get("codePathLocal")),
        args=args,
        started_at=_text(doc.get("startedAt")),
        executable=_text(doc.get("executable")),
        git_remote=_text(git.get("remote")),
        git_commit=_text(git.get("commit")),
        cpu_count=_count(doc.get("cpu_count")) or _count(cpu.get("count")),
        cpu_count_logical=_count(doc.get("cpu_count_logical")) or _count(cpu.get("countLogical")),
        gpu=gpu,
        gpu_count=gpu_count,
        cuda_version=_text(doc.get("cudaVersion")) or _text(doc.get("cuda")),
        memory_total_bytes=_count(memory.get("total")),
    )


def parse_wandb_metadata_files(
    paths: list[Path], warnings: list[IngestWarning]
) -> tuple[list[WandbMetadata], list[InputFile]]:
    """Each readable metadata file as a WandbMetadata (in path order), with its input account."""
    found: list[WandbMetadata] = []
    infos: list[InputFile] = []
    for path in sorted(paths):
        info = InputFile(kind="wandb_metadata", path=str(path))
        infos.append(info)
        data = read_bytes(path, warnings)
        if data is None:
            info.skipped = 1
            continue
        try:
            doc = decode_json(data)
        except Exception as exc:  # noqa: BLE001 - a broken metadata file is reported; the run is still analysed
            warnings.append(IngestWarning(str(path), None, f"W&B metadata is not valid JSON: {str(exc)[:200]}"))
            info.skipped = 1
            continue
        if not isinstance(doc, dict):
            warnings.append(
                IngestWarning(str(path), None, f"W&B metadata is a JSON {type(doc).__name__}, expected an object")
            )
            info.skipped = 1
            continue
        info.records = 1
        found.append(metadata_from_document(doc, path))
    return found, infos
