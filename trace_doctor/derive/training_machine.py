"""What the run recorded about the machine that trained it, gathered once from the ingested tables.

Runs record versions nowhere explicit (FORMATS.md 7); the clues are spread over several files: W&B's
`wandb-metadata.json` (python, OS, host, program and arguments, git, CPU/GPU), its
`requirements.txt` (a pip freeze), the environment check a user pastes (`tinker SDK: 0.15.2`,
`Python: 3.14.0 (main, ...)`, `pydantic: 2.13.0b2`), `code.diff` (the cookbook's git commit, or a
site-packages path that names the Python minor version) and the ids the SDK logs (sessions,
training runs, tinker:// checkpoints). Each fact keeps where it was read, so support can tell the
training machine's record from a guess. The analysing machine is not described here.

    >>> from trace_doctor import load_run, sample_run_path
    >>> sorted(training_machine(load_run(sample_run_path())))[:3]
    ['cookbook', 'pip_freeze', 'recorded']
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson
import polars as pl

from trace_doctor.knowledge.tinker import SESSION_MENTION, TINKER_URI
from trace_doctor.model import RunTables

# Packages whose pip-freeze line is reported on its own (the ones FORMATS.md 7 and the debug skill
# name as causes of stalls or wrong tokens); every other freeze line is counted and kept in the
# bundle's full list. A version from any other source (an environment check line) is always reported.
REPORTED_PACKAGES = frozenset(
    {
        "python",
        "tinker",
        "tinker-cookbook",
        "pydantic",
        "pydantic-core",
        "transformers",
        "tokenizers",
        "torch",
        "numpy",
        "litellm",
        "wandb",
    }
)
FREEZE_EVIDENCE = "pip freeze"
FREEZE_FILE = re.compile(r"(^|[/\\])requirements[^/\\]*\.txt$")
COMMIT_PACKAGE_PREFIX = "git:"  # code.diff's `### repo: <root> @ <sha>` (ingest/parsers/log_kinds.py)


def _fields(text: Any) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _events(run: RunTables, kind: str) -> Iterator[dict[str, Any]]:
    events = run.log_events
    if events.is_empty() or "kind" not in events.columns:
        return
    yield from events.filter(pl.col("kind") == kind).sort("source", "line", nulls_last=True).iter_rows(named=True)


def _walk(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, f"{prefix}[{i}]")
    else:
        yield prefix, value


def session_ids(run: RunTables) -> list[str]:
    """Session ids from `session` log events (`ServiceClient initialized for session …`) and the config."""
    found: set[str] = set()
    for row in _events(run, "session"):
        fields = _fields(row.get("fields"))
        for key in ("session_id", "session"):
            if isinstance(fields.get(key), str):
                found.add(fields[key])
        found.update(SESSION_MENTION.findall(row.get("message") or ""))
    for key, value in _walk(run.meta.config):
        if "session" in key.lower() and isinstance(value, str) and value:
            found.add(value)
    return sorted(found)


def training_run_ids(run: RunTables) -> list[str]:
    """Training-run ids: tinker:// checkpoint paths, tinker:// URIs and model ids in the logs."""
    ids: set[str] = set()
    for column in ("state_path", "sampler_path"):
        if column in run.checkpoints.columns:
            for path in run.checkpoints[column].drop_nulls().to_list():
                ids.update(TINKER_URI.findall(path))
    for row in _events(run, "session"):
        fields = _fields(row.get("fields"))
        for key in ("run_id", "model_id"):
            if isinstance(fields.get(key), str):
                ids.add(fields[key])
    return sorted(ids)


def recorded_versions(run: RunTables) -> list[dict[str, Any]]:
    """Every (package, version) the logs name, with where: `source:line` and how it was read."""
    out = []
    seen: set[tuple[str, str, str]] = set()
    for row in _events(run, "version"):
        fields = _fields(row.get("fields"))
        package, version = fields.get("package") or fields.get("name"), fields.get("version")
        if not isinstance(package, str) or not isinstance(version, str):
            continue
        evidence = str(fields.get("evidence") or "version line")
        key = (package, version, str(row.get("source")))
        if key in seen:
            continue
        seen.add(key)
        out.append(
            {
                "package": package,
                "version": version,
                "evidence": evidence,
                "source": row.get("source"),
                "line": row.get("line"),
            }
        )
    return out


def training_machine(run: RunTables) -> dict[str, Any]:
    """The training machine's record (see the module docstring): a JSON-ready dict, same input same dict."""
    versions = recorded_versions(run)
    commits = [v for v in versions if v["package"].startswith(COMMIT_PACKAGE_PREFIX)]
    packages = [v for v in versions if not v["package"].startswith(COMMIT_PACKAGE_PREFIX)]
    # A freeze's key packages read as version lines (`pydantic==2.11.7`): the file is the freeze.
    frozen = {str(v["source"]) for v in packages if v["evidence"] == FREEZE_EVIDENCE}
    frozen |= {str(v["source"]) for v in packages if FREEZE_FILE.search(str(v["source"]))}
    for v in packages:
        if str(v["source"]) in frozen:
            v["evidence"] = FREEZE_EVIDENCE
    reported = [v for v in packages if str(v["source"]) not in frozen or v["package"] in REPORTED_PACKAGES]
    freezes: dict[str, int] = {}
    for v in packages:
        if str(v["source"]) in frozen:
            freezes[str(v["source"])] = freezes.get(str(v["source"]), 0) + 1
    wandb = [w.to_dict() for w in run.meta.wandb]
    sessions, runs = session_ids(run), training_run_ids(run)
    return {
        "recorded": bool(wandb or versions or sessions or runs),
        "wandb": wandb,
        "versions": reported,
        "pip_freeze": [{"source": source, "packages": count} for source, count in sorted(freezes.items())],
        "cookbook": [
            {"repo": v["package"].removeprefix(COMMIT_PACKAGE_PREFIX), "commit": v["version"], "source": v["source"]}
            for v in commits
        ],
        "session_ids": sessions,
        "training_run_ids": runs,
    }
