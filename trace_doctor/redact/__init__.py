"""Credentials never leave the machine: redaction of everything trace-doctor read from a run.

Where it lives, and why there. Redaction is a pass over the model, between ingest and the rules:

    load_run -> RunTables -> redact_run -> rules -> findings -> renderers (every format, the bundle)

so data still flows one way, and neither the rules nor the renderers know about it: they only
ever see clean tables. It cannot be a pass over the rendered output or the findings alone, because
by then input text has been normalised: error grouping blanks the digits of a quoted line (a Slack
token no longer has its shape), renderers JSON-escape and truncate (an escape glued to a key hides
its start, a cut token loses its prefix). Before the rules, every string is still as the run wrote
it. `redact_analysis` is the after-the-fact pass for an analysis of a run that was not redacted.

    >>> from trace_doctor.redact import redact_text
    >>> redact_text("export OPENAI_API_KEY=sk-proj-abc123def456ghi789jkl012 # session 1259b3ad-7e")
    'export OPENAI_API_KEY=[REDACTED] # session 1259b3ad-7e'
"""

from trace_doctor.redact.frames import redact_frame
from trace_doctor.redact.model import redact_analysis, redact_passed_over, redact_run, redact_split
from trace_doctor.redact.shapes import REDACTED
from trace_doctor.redact.text import credential_like, is_secret_key, redact_argv, redact_text, redact_value

__all__ = [
    "REDACTED",
    "credential_like",
    "is_secret_key",
    "redact_analysis",
    "redact_argv",
    "redact_frame",
    "redact_passed_over",
    "redact_run",
    "redact_split",
    "redact_text",
    "redact_value",
]
