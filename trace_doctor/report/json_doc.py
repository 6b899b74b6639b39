"""The JSON document of the contract (ARCHITECTURE.md): deterministic, byte for byte."""

from __future__ import annotations

import math
from typing import Any

import orjson

from trace_doctor import __version__
from trace_doctor.humanize import json_dumps
from trace_doctor.model import Analysis

SCHEMA_VERSION = 1


def _clean(value: Any) -> Any:
    """JSON has no NaN/Infinity: non-finite floats become null; floats are rounded for stable diffs."""
    # Exact types first: a large run's document holds tens of thousands of values (time ranges).
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return round(value, 6) if math.isfinite(value) else None
    if kind is list:
        # Leaves inline: a time range is a list of two floats, and a finding can hold thousands
        # (round() costs ~0.5 us; a whole number, half of all span ends, needs none).
        return [
            (v if v.is_integer() else round(v, 6) if math.isfinite(v) else None)
            if type(v) is float
            else v
            if type(v) is int or type(v) is str
            else _clean(v)
            for v in value
        ]
    if kind is dict:
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def build_document(result: Analysis) -> dict[str, Any]:
    run = result.run
    steps = run.steps
    live = steps.filter(~steps["superseded"]) if "superseded" in steps.columns and len(steps) else steps
    step_count = int(live["step"].drop_nulls().n_unique()) if "step" in live.columns and len(live) else 0
    document = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "trace-doctor", "version": __version__},
        "run": {
            "path": run.meta.path,
            "trainer": run.meta.trainer,
            "model_name": run.meta.model_name,
            "renderer_name": run.meta.renderer_name,
            "steps": step_count,
            "inputs": [i.to_dict() for i in run.inputs],
            "launches": [launch.to_dict() for launch in run.launches],
            "passed_over": [{"path": p.path, "reason": p.reason} for p in run.passed_over],
            "meta": run.meta.to_dict(),
        },
        "summary": result.run_summary.to_dict(),
        "findings": [f.to_dict() for f in result.findings],
        "rules": [o.to_dict() for o in result.outcomes],
        "baseline": result.baseline.to_dict() if result.baseline is not None else None,
        "ingest_warnings": [w.to_dict() for w in run.warnings],
    }
    return _clean(document)


def render_json(result: Analysis) -> str:
    # orjson escapes nothing HTML-relevant; the HTML report re-escapes `<`, `>`, `&` when embedding.
    return json_dumps(build_document(result), orjson.OPT_INDENT_2).decode() + "\n"
