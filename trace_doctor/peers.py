"""What a folder's runs know about each other: each run's first-step KL, handed to the runs of the
same model and renderer.

The fleet gathers these facts before the runs are analysed (each in its own process), so a rule
judges a run with its peers in view (renderer-kl-step0: an outlier among peers is stronger evidence
of a mismatch, peers that all start high are the model's normal level) and every output of the run
agrees with that judgement. Only facts travel here; the judgement and its thresholds stay with the rule.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson

from trace_doctor.ingest.parsers.config import find_setting
from trace_doctor.knowledge.tinker import EVAL_KEY_PREFIXES, KL_SAMPLE_TRAIN_V1, KL_SAMPLE_TRAIN_V2
from trace_doctor.runs import RunSource

# The first training row is near the top of metrics.jsonl; a run whose first KL is further down
# (evaluation rows first, a long warm-up of non-RL rows) is left out rather than read in full.
MAX_LINES = 200
MAX_CONFIG_BYTES = 4 * 1024 * 1024


def _named(source: RunSource, name: str) -> Path | None:
    for path in source.files:
        if path.name == name:
            return path
    candidate = source.root / name if source.whole_folder else None
    return candidate if candidate is not None and candidate.is_file() else None


def _identity(source: RunSource) -> tuple[str, str] | None:
    """(model_name, renderer_name) from the run's config.json, or None."""
    path = _named(source, "config.json")
    if path is None:
        return None
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return None
        config = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    model = find_setting(config, "model_name") or find_setting(config, "base_model")
    renderer = find_setting(config, "renderer_name")
    return (model, renderer) if isinstance(model, str) and isinstance(renderer, str) else None


def _first_kl(row: dict[str, Any]) -> float | None:
    """The row's sampler-vs-trainer KL (v2 preferred, as the rule), matched by suffix."""
    for suffix in (KL_SAMPLE_TRAIN_V2, KL_SAMPLE_TRAIN_V1):
        for key, value in row.items():
            if key.startswith(EVAL_KEY_PREFIXES) or not (key == suffix or key.endswith("/" + suffix)):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                return float(value)
    return None


def first_step_kl(source: RunSource) -> float | None:
    """The first finite sampler-vs-trainer KL in the run's metrics.jsonl, or None."""
    path = _named(source, "metrics.jsonl")
    if path is None:
        return None
    try:
        with path.open("rb") as lines:
            for number, line in enumerate(lines):
                if number >= MAX_LINES:
                    return None
                try:
                    row = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(row, dict) and (value := _first_kl(row)) is not None:
                    return value
    except OSError:
        return None
    return None


def fleet_peers(sources: list[RunSource]) -> dict[str, dict[str, Any]]:
    """run id -> {"step0_kl": [the first-step KL of every *other* run of the same model and renderer]},
    for the runs that have at least one such peer."""
    groups: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for source in sources:
        identity = _identity(source)
        value = first_step_kl(source) if identity is not None else None
        if identity is not None and value is not None:
            groups.setdefault(identity, []).append((source.run_id, value))
    out: dict[str, dict[str, Any]] = {}
    for members in groups.values():
        for run_id, _ in members:
            others = [value for other, value in members if other != run_id]
            if others:
                out[run_id] = {"step0_kl": others}
    return out
