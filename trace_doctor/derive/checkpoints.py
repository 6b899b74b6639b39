"""The checkpoints a run recorded (FORMATS.md 3.4), read as the cookbook's CheckpointManager writes them.

Periodic checkpoints (name `000020` = the step) hold state and sampler weights and live for config
`ttl_seconds` (default 604800 s, 7 days); rolling ones (`"rolling": true`) hold state only and live
for `rolling_ttl_seconds` (default 7200 s); the `final` one holds both and has no TTL.

    >>> step_of({"name": "000040", "batch": 0}), step_of({"name": "final", "batch": 120}), is_final({"name": "final"})
    (40, 120, True)
"""

from __future__ import annotations

from typing import Any

import polars as pl

# The cookbook's defaults (supervised/train.py, rl/train.py Config): what a config.json without the key means.
DEFAULT_TTL_S = 604800
DEFAULT_ROLLING_TTL_S = 7200
FINAL_NAME = "final"


def checkpoint_records(checkpoints: pl.DataFrame) -> list[dict[str, Any]]:
    """The records in file order (empty when the run has none)."""
    return checkpoints.sort("line").to_dicts() if not checkpoints.is_empty() else []


def step_of(record: dict[str, Any]) -> int | None:
    """The step a record was saved at: its numeric name (`000020`; SFT's `batch` counts within an epoch), else
    its `batch`."""
    name = record.get("name")
    if isinstance(name, str) and name.isdigit():
        return int(name)
    batch = record.get("batch")
    return int(batch) if isinstance(batch, int) else None


def is_final(record: dict[str, Any]) -> bool:
    return record.get("name") == FINAL_NAME or record.get("final") is True


def ttl_setting(config: dict[str, Any], key: str, default: int) -> float | None:
    """The TTL a config sets, in seconds (None: kept without expiry); the cookbook default when the key is absent
    (callers that must not guess check `ttl_known` first: a config without the key may predate TTLs)."""
    if key not in config:
        return float(default)
    value = config[key]
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value)


def record_ttl(record: dict[str, Any], config: dict[str, Any]) -> float | None:
    """How long the service keeps this record's checkpoint (None: no expiry)."""
    if is_final(record):
        return None
    if record.get("rolling"):
        return ttl_setting(config, "rolling_ttl_seconds", DEFAULT_ROLLING_TTL_S)
    return ttl_setting(config, "ttl_seconds", DEFAULT_TTL_S)


def ttl_known(record: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether config.json says how long this record's checkpoint lives (the final one: never expires)."""
    return is_final(record) or ("rolling_ttl_seconds" if record.get("rolling") else "ttl_seconds") in config


def cite(record: dict[str, Any]) -> dict[str, Any]:
    """The fields of a record a finding quotes."""
    return {k: record.get(k) for k in ("name", "line", "state_path", "sampler_path", "rolling") if record.get(k)}
