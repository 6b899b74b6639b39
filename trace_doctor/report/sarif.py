"""SARIF 2.1.0: one result per finding, located at the log file and line that is its evidence.

Rule metadata (short and full description, help with the fix) comes from the registry; the
location is the first `{"path", "line"}` reference in the finding's evidence, else the
metrics.jsonl line of its first affected step, else the run path. Fingerprints are hashes of
the finding's fingerprint (rule + what it is about), so they are stable across runs.
"""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

import orjson
import polars as pl

from trace_doctor import __version__
from trace_doctor.humanize import json_dumps
from trace_doctor.model import Analysis, Finding
from trace_doctor.report.terminal_text import inert

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {"error": "error", "warning": "warning", "info": "note"}
# Evidence keys the rules use for where they saw something, most specific first.
LOCATION_KEYS = ("log_lines", "lines", "steps", "records", "files", "location", "locations", "sources")


def _uri(path: str) -> str:
    """A relative POSIX path stays relative (GitHub resolves it in the repo); an absolute one is a file URI."""
    if PureWindowsPath(path).drive or path.startswith("/"):
        try:
            return (
                PurePosixPath(path.replace("\\", "/")).as_uri()
                if path.startswith("/")
                else PureWindowsPath(path).as_uri()
            )
        except ValueError:
            return path
    return path.replace("\\", "/").removeprefix("./")


def _reference(value: Any) -> tuple[str, int | None] | None:
    """The first {"path"/"source"/"file", "line"} mapping inside an evidence value."""
    if isinstance(value, dict):
        path = value.get("path") or value.get("source") or value.get("file")
        line = value.get("line") or value.get("line_no") or value.get("lineno")
        if isinstance(path, str) and path:
            return path, int(line) if isinstance(line, (int, float)) and line >= 1 else None
        for item in value.values():
            found = _reference(item)
            if found:
                return found
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _reference(item)
            if found:
                return found
    return None


def _step_line(steps: pl.DataFrame, step: int) -> tuple[str, int | None] | None:
    if steps.is_empty() or not {"step", "line", "source"} <= set(steps.columns):
        return None
    rows = steps.filter(pl.col("step") == step)
    if "superseded" in rows.columns:
        live = rows.filter(~pl.col("superseded").fill_null(False))
        rows = live if len(live) else rows
    if rows.is_empty() or rows["source"][0] is None:
        return None
    line = rows["line"][0]
    return rows["source"][0], int(line) if line is not None and line >= 1 else None


def locate(finding: Finding, result: Analysis) -> tuple[str, int | None]:
    """Where the finding's evidence is: a log line, a metrics row, or at least the run."""
    for key in LOCATION_KEYS:
        if key in finding.evidence:
            found = _reference(finding.evidence[key])
            if found:
                return found
    found = _reference(finding.evidence)
    if found:
        return found
    profile = finding.evidence.get("profile")
    if isinstance(profile, str) and any(i.path == profile for i in result.run.inputs):
        return profile, None
    for step in finding.steps[:1]:
        found = _step_line(result.run.steps, step)
        if found:
            return found
    first_metrics = next((i.path for i in result.run.inputs if i.kind == "metrics"), None)
    return first_metrics or result.run.meta.path or ".", None


def _rules_metadata() -> list[dict[str, Any]]:
    from trace_doctor.rules import catalogue  # noqa: F401 - registers every rule
    from trace_doctor.rules.base import REGISTRY

    rules = []
    for rule in sorted(REGISTRY.values(), key=lambda r: r.code):
        rules.append(
            {
                "id": rule.slug,
                "name": rule.code,
                "shortDescription": {"text": rule.title},
                "fullDescription": {"text": f"{rule.docs.what} {rule.docs.why}"},
                "help": {
                    "text": f"{rule.docs.fix}\n\nEvidence: {rule.docs.evidence}",
                    "markdown": (
                        f"**Fix:** {rule.docs.fix}\n\n**Evidence:** {rule.docs.evidence}\n\n"
                        f"Run `trace-doctor rules {rule.slug}` for thresholds."
                    ),
                },
                "defaultConfiguration": {"level": LEVEL.get(rule.severity, "warning")},
                "properties": {"tags": ["trace-doctor", *rule.tags], "code": rule.code},
            }
        )
    return rules


def fingerprint_hash(finding: Finding) -> str:
    return hashlib.sha256((finding.fingerprint or finding.rule).encode("utf-8")).hexdigest()


def build_sarif(result: Analysis) -> dict[str, Any]:
    rules = _rules_metadata()
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    results = []
    for finding in result.findings:
        path, line = locate(finding, result)
        location: dict[str, Any] = {"artifactLocation": {"uri": _uri(path)}}
        if line:
            location["region"] = {"startLine": line}
        item: dict[str, Any] = {
            "ruleId": finding.rule,
            "level": LEVEL[finding.severity],
            # Code-scanning pages show the message: bidi and zero-width characters from the run as escapes.
            "message": {"text": inert(f"{finding.title}. {finding.message} Fix: {finding.fix}")},
            "locations": [{"physicalLocation": location}],
            "partialFingerprints": {"traceDoctorFingerprint/v1": fingerprint_hash(finding)},
            "properties": {
                "code": finding.code,
                "severity": finding.severity,
                "fingerprint": finding.fingerprint or finding.rule,
                "seconds_lost": finding.seconds_lost,
                "fraction_of_wall": finding.fraction_of_wall,
                "steps": finding.steps[:100],
            },
        }
        if finding.rule in index:
            item["ruleIndex"] = index[finding.rule]
        results.append(item)
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "trace-doctor",
                        "version": __version__,
                        "informationUri": "https://pypi.org/project/trace-doctor/",
                        "rules": rules,
                    }
                },
                "invocations": [{"executionSuccessful": not any(o.status == "error" for o in result.outcomes)}],
                "results": results,
                "properties": {
                    "run": result.run.meta.path,
                    "baseline": result.baseline.verdict if result.baseline is not None else None,
                },
            }
        ],
    }


def render_sarif(result: Analysis) -> str:
    return json_dumps(build_sarif(result), orjson.OPT_INDENT_2).decode() + "\n"
