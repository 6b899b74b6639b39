"""Remove secrets from everything that leaves the machine in an escalation bundle.

Two passes: values under secret-looking keys in structured data (config, evidence, parsed log
fields), and secret-looking tokens anywhere in free text (log lines, messages, span attributes).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import polars as pl

from trace_doctor.decision import decide
from trace_doctor.model import Analysis

REDACTED = "[REDACTED]"

# Key names are split into words ("TINKER_API_KEY" -> tinker, api, key); a key is secret when one
# of its words is one of these. Whole words, so `max_tokens`, `tokenizer` and `monkey` stay.
SECRET_WORDS = frozenset(
    {
        "key",
        "keys",
        "apikey",
        "token",
        "secret",
        "secrets",
        "password",
        "passwd",
        "pwd",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "cookie",
    }
)

NOT_SECRET_SUFFIXES = frozenset({"error", "exception", "warning", "count", "counts", "len", "length", "id"})

_TOKEN_PATTERNS = [
    # Tinker (tml-), OpenAI/Anthropic style (sk-, sk-proj-, sk-ant-), Hugging Face (hf_) tokens.
    re.compile(r"\b(?:tml|sk)-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{8,}"),
    # GitHub / Slack style tokens, JWTs.
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{16,}|xox[abpr]-[A-Za-z0-9\-]{10,})"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
]
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=\-]{8,}")
# NAME=value / NAME: value / "name": "value" where NAME has a secret word; value up to a delimiter.
_ASSIGNMENT = re.compile(
    r"""(?ix)
    (?P<key>["']?[A-Za-z_][A-Za-z0-9_.\-]*["']?)
    (?P<sep>\s*(?:=|:)\s*)
    (?P<quote>["']?)
    (?P<value>[^\s"',;}\])]+)
    """
)
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_WANDB_LOGIN = re.compile(r"(?i)(wandb\s+login\s+(?:--relogin\s+)?)([0-9a-f]{40})")


def is_secret_key(name: str) -> bool:
    """Whether a key or variable name says its value is a credential (word match, case-insensitive)."""
    words = [w.lower() for w in _WORD_SPLIT.split(str(name)) if w]
    if words and words[-1] in NOT_SECRET_SUFFIXES:
        return False  # "KeyError: 'step'" names an exception, not a credential
    return bool(set(words) & SECRET_WORDS)


def _assignment(match: re.Match) -> str:
    key = match.group("key").strip("\"'")
    value = match.group("value")
    if not is_secret_key(key) or value.startswith(REDACTED[:-1]) or _is_plain_number(value):
        return match.group(0)
    return f"{match.group('key')}{match.group('sep')}{match.group('quote')}{REDACTED}"


def _is_plain_number(value: str) -> bool:
    return bool(re.fullmatch(r"-?\d+(\.\d+)?|true|false|null|none", value, re.IGNORECASE))


def redact_text(text: str) -> str:
    """Replace credentials in free text: known token shapes, bearer tokens, KEY=value assignments."""
    if not text:
        return text
    for pattern in _TOKEN_PATTERNS:
        text = pattern.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _WANDB_LOGIN.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    return _ASSIGNMENT.sub(_assignment, text)


def redact_tokens(text: str) -> str:
    """Only the unmistakable token shapes: safe on generated code such as the HTML report's scripts."""
    for pattern in _TOKEN_PATTERNS:
        text = pattern.sub(REDACTED, text)
    return _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


def redact_value(value: Any) -> Any:
    """Redact a JSON-like value: secret keys lose their (non-numeric) values, strings are scrubbed."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            secret = is_secret_key(key) and not isinstance(item, (int, float, bool)) and item is not None
            out[key] = REDACTED if secret and not isinstance(item, (dict, list)) else redact_value(item)
            if secret and isinstance(item, (dict, list)):
                out[key] = _blank(item)
        return out
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_value(v) for v in value)
    if isinstance(value, str):
        return redact_text(value)
    return value


def _blank(value: Any) -> Any:
    """Everything under a secret key: keep the shape (support may need it), drop every leaf."""
    if isinstance(value, dict):
        return {k: _blank(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_blank(v) for v in value]
    return REDACTED


def redact_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """Scrub every string column of a table."""
    strings = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    if not strings or frame.is_empty():
        return frame
    return frame.with_columns(
        [pl.col(name).map_elements(redact_text, return_dtype=pl.String, skip_nulls=True) for name in strings]
    )


def redact_analysis(result: Analysis) -> Analysis:
    """A copy of the analysis with secrets removed from metadata, tables, findings and warnings."""
    run = copy.copy(result.run)
    run.meta = copy.deepcopy(result.run.meta)
    run.meta.config = redact_value(run.meta.config)
    run.meta.path = redact_text(run.meta.path)
    for name in run.TABLE_NAMES:
        setattr(run, name, redact_frame(getattr(result.run, name)))
    run.inputs = [_input(i) for i in result.run.inputs]
    run.passed_over = [type(p)(redact_text(p.path), redact_text(p.reason)) for p in result.run.passed_over]
    run.warnings = [type(w)(redact_text(w.path), w.line, redact_text(w.problem)) for w in result.run.warnings]
    findings = []
    for finding in result.findings:
        clean = copy.deepcopy(finding)
        clean.title, clean.message, clean.fix = (
            redact_text(clean.title),
            redact_text(clean.message),
            redact_text(clean.fix),
        )
        clean.evidence = redact_value(clean.evidence)
        findings.append(clean)
    outcomes = [type(o)(o.rule, o.status, redact_text(o.reason)) for o in result.outcomes]
    clean = Analysis(
        run=run,
        findings=findings,
        outcomes=outcomes,
        summary=redact_value(copy.deepcopy(result.summary)),
        baseline=redact_value(copy.deepcopy(result.baseline)) if result.baseline is not None else None,
        # Derived series are numbers per step (no free text): shared as they are.
        derived=dict(getattr(result, "derived", {}) or {}),
        policy=result.policy,
    )
    # The same decisions, pointing at the redacted findings (their titles feed the verdict's headline).
    gate = result.gate
    if gate is None:
        return decide(clean)
    return decide(clean, fail_on=gate.fail_on, fail_on_inconclusive=gate.fail_on_inconclusive)


def _input(info):
    clean = copy.copy(info)
    clean.path = redact_text(info.path)
    return clean
