"""What an output says when the credentials in it were not redacted (`--no-redact`).

Redaction is the default of every command, so an output says nothing about it then; one written from
a run that was not redacted says so in its header, in words a reader cannot miss before sharing it.
The JSON document carries it as `tool.redacted: false` (absent when redacted, so a redacted document
is byte-identical to what it was before redaction became the default).
"""

from __future__ import annotations

from trace_doctor.model import Analysis

UNREDACTED = "Not redacted (--no-redact): credentials in the run's files appear here as they are. Do not share."


def unredacted(result: Analysis) -> bool:
    """Whether `result` was analysed from a run whose credentials were kept."""
    return not result.run.redacted


def tool_block(result: Analysis, version: str) -> dict:
    """The JSON document's `tool` object: `redacted: false` only for an unredacted run."""
    block: dict = {"name": "trace-doctor", "version": version}
    if unredacted(result):
        block["redacted"] = False
    return block


def fleet_unredacted(fleet) -> bool:
    """Whether any run of a fleet was analysed with its credentials kept (the runs are analysed alike)."""
    return any(r.document is not None and r.document.get("tool", {}).get("redacted") is False for r in fleet.reports)
