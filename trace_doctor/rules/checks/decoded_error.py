"""TD302 decoded-error: every known error message in the logs, with its root cause and fix."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from trace_doctor.derive.log_signals import fields_of
from trace_doctor.knowledge.errors import KnownError, decode_error, error_by_id
from trace_doctor.model import SEVERITY_RANK, Finding
from trace_doctor.policy.environment import DecodedErrorPolicy
from trace_doctor.rules.base import Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import found, requires, table

MAX_CITED = 10
# Kinds and levels whose lines can carry an error worth decoding. Heartbeat and pause warnings
# quote the last exception (`APITimeoutError`) but are heartbeat-stall's, not an error of their own.
# A failed step of the guide's smoke test is decoded too: which step failed is the reading (FORMATS.md 5.5).
ERROR_KINDS = frozenset({"error", "warning", "sdk-warning", "smoke-test"})
ERROR_LEVELS = frozenset({"ERROR", "CRITICAL"})
# What Python's own generic error records mean, for errors no table entry decodes.
GENERIC_MEANINGS = {
    "Task exception was never retrieved": (
        "an asyncio task raised and nothing awaited it: its work was silently dropped"
    ),
    "unhandled exception during asyncio.run() shutdown": (
        "a task was still failing when asyncio.run() cancelled the remaining tasks at exit "
        "(often after Ctrl-C or a crash elsewhere)"
    ),
}
_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\b\d+(?:\.\d+)?\b|'[^']*'|\"[^\"]*\"")


@dataclass
class Occurrences:
    """Where one error was seen: every cited line, per file."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)

    def add(self, row: dict[str, Any], detail: str) -> None:
        self.lines.append({"file": row["source"], "line": row["line"], "text": _first_line(row["message"])[:240]})
        if detail and detail not in self.samples:
            self.samples.append(detail)

    def by_file(self) -> list[dict[str, Any]]:
        files: dict[str, list[int]] = {}
        for line in self.lines:
            files.setdefault(line["file"], []).append(line["line"])
        return [
            {"file": path, "count": len(numbers), "first_line": min(numbers), "last_line": max(numbers)}
            for path, numbers in sorted(files.items())
        ]


def _first_line(text: str | None) -> str:
    stripped = (text or "").strip()
    return stripped.splitlines()[0] if stripped else ""


def _candidate_rows(log_events: pl.DataFrame) -> list[dict[str, Any]]:
    if log_events.is_empty():
        return []
    rows = log_events.filter(pl.col("kind").is_in(list(ERROR_KINDS)) | pl.col("level").is_in(list(ERROR_LEVELS)))
    return rows.sort("source", "line", nulls_last=True).to_dicts()


def _known_ids(row: dict[str, Any], fields: dict[str, Any]) -> list[str]:
    """The known errors one event carries: the record's own and its traceback's final line."""
    ids = [fields[key] for key in ("error_id", "exception_error_id") if fields.get(key)]
    if not ids:
        text = " ".join(str(part) for part in (row.get("message"), fields.get("exception_message")) if part)
        known = decode_error(text)
        if known is not None:
            ids.append(known.id)
    return list(dict.fromkeys(ids))


def _detail(row: dict[str, Any], fields: dict[str, Any]) -> str:
    exc = fields.get("exception_type")
    if exc:
        message = fields.get("exception_message")
        return f"{exc}: {message}"[:160] if message else str(exc)
    return _first_line(row.get("message"))[:300]


def _signature(row: dict[str, Any], fields: dict[str, Any]) -> str:
    """Groups repeats of one unknown error: the first line with numbers, ids and quotes blanked.

    A bare traceback (no log record) is grouped by its exception type instead.
    """
    head = _VOLATILE.sub("…", _first_line(row.get("message")))[:160]
    exc = fields.get("exception_type")
    if exc and head.startswith(str(exc)):
        return str(exc)
    return head


def _known_finding(ctx: RuleContext[DecodedErrorPolicy], known: KnownError, seen: Occurrences) -> Finding:
    files = seen.by_file()
    where = ", ".join(
        f"{f['file']}:{f['first_line']}" + (f"–{f['last_line']}" if f["count"] > 1 else "") for f in files
    )
    count = len(seen.lines)
    return ctx.finding(
        severity=known.severity,
        title=f"Known error: {known.id.replace('-', ' ')}",
        message=(
            f"{count} occurrence(s) of a known error ({where}): {known.root_cause}. "
            f"First: {seen.samples[0] if seen.samples else seen.lines[0]['text']}"
        ),
        fix=known.fix,
        evidence={
            "error_id": known.id,
            "occurrences": count,
            "files": files,
            "lines": seen.lines[:MAX_CITED],
            "distinct_messages": seen.samples[:MAX_CITED],
            "root_cause": known.root_cause,
        },
        fingerprint=f"decoded-error:{known.id}",
    )


def _unknown_finding(ctx: RuleContext[DecodedErrorPolicy], groups: dict[str, Occurrences]) -> Finding:
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1].lines), kv[0]))
    total = sum(len(seen.lines) for _, seen in ordered)
    meanings = sorted({m for sig, _ in ordered for head, m in GENERIC_MEANINGS.items() if sig.startswith(head)})
    first = ordered[0][1].lines[0]
    return ctx.finding(
        severity="info",
        title="Errors the decoder does not know",
        message=(
            f"{total} error record(s) in {len(ordered)} distinct form(s) match no known Tinker error, "
            f"most often `{ordered[0][0]}` ×{len(ordered[0][1].lines)} (first at {first['file']}:{first['line']})"
            + (f"; {'; '.join(meanings)}" if meanings else "")
            + "."
        ),
        fix=(
            "Read the cited tracebacks: these come from your own code or its libraries, not from the "
            "Tinker service. Await or add done-callbacks to background tasks so their exceptions surface."
        ),
        evidence={
            "errors": [
                {
                    "signature": sig,
                    "count": len(seen.lines),
                    "files": seen.by_file(),
                    "exceptions": seen.samples[:MAX_CITED],
                    "lines": seen.lines[:3],
                }
                for sig, seen in ordered[:MAX_CITED]
            ],
            "distinct": len(ordered),
            "occurrences": total,
        },
        fingerprint="decoded-error:unrecognised",
    )


def check(ctx: RuleContext[DecodedErrorPolicy]) -> list[Finding]:
    known: dict[str, Occurrences] = {}
    unknown: dict[str, Occurrences] = {}
    for row in _candidate_rows(ctx.run.log_events):
        fields = fields_of(row.get("fields"))
        ids = _known_ids(row, fields)
        for error_id in ids:
            known.setdefault(error_id, Occurrences()).add(row, _detail(row, fields))
        if not ids and (row.get("kind") == "error" or row.get("level") in ("ERROR", "CRITICAL")):
            unknown.setdefault(_signature(row, fields), Occurrences()).add(row, _detail(row, fields))
    findings = []
    for error_id in sorted(known):
        entry = error_by_id(error_id)
        if entry is not None:
            findings.append(_known_finding(ctx, entry, known[error_id]))
    findings.sort(key=lambda f: (-SEVERITY_RANK[f.severity], -f.evidence["occurrences"], f.fingerprint or ""))
    if unknown:
        findings.append(_unknown_finding(ctx, unknown))
    if findings:
        return findings
    return ctx.passed(f"no error or warning record in {len(ctx.run.log_events)} log event(s) matches a known error")


RULE = register(
    Rule(
        slug="decoded-error",
        code="TD302",
        title="Known error messages, decoded",
        severity="error",
        needs="text logs (logs.log, W&B output.log, captured stdout)",
        docs=RuleDocs(
            what=(
                "Every error message of the debug skill's error reference and the SDK's messages found "
                "in the logs (records and traceback final lines), one finding per distinct error; "
                "error records that match nothing are listed together as unrecognised."
            ),
            why=(
                "The log says what failed but not why: a `BadRequestError 400` or `Unknown client "
                "error` has a specific root cause (prompt too long, wrong checkpoint type) and fix."
            ),
            evidence=(
                "Occurrence count, first/last line numbers per file, the distinct messages, and the "
                "table entry's root cause; severity is the entry's (error for fatal ones)."
            ),
            fix="The fix of the matching table entry (FORMATS.md §6).",
        ),
        check=check,
        policy=DecodedErrorPolicy,
        stage="environment",
        requires=(
            requires(
                "no text log (logs.log, W&B output.log or captured stdout) to decode errors from",
                table("log_events"),
                found("log"),
                found("dump"),
            ),
        ),
        tags=("logs",),
    )
)
