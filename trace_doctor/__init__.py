"""trace-doctor: offline diagnosis of Tinker fine-tuning runs from their log directory.

    >>> from trace_doctor import analyze, load_run, sample_run_path
    >>> result = analyze(load_run(sample_run_path()))
    >>> print(result.verdict.headline)  # doctest: +ELLIPSIS
    1 error, 8 warnings. Root cause: Calls awaited one by one instead of pipelined (...); fix it first. ...

The names below are the public API; everything else is internal and may change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> module; imported on first use, so `import trace_doctor` (and `trace-doctor --version`) stays
# cheap and a CLI command loads only the parts it uses.
_EXPORTS = {
    "load_run": "trace_doctor.api",
    "analyze": "trace_doctor.api",
    "compare": "trace_doctor.api",
    "sample_run_path": "trace_doctor.api",
    "NothingToAnalyze": "trace_doctor.api",
    "redact_run": "trace_doctor.redact",
    "load_settings": "trace_doctor.settings",
    "Settings": "trace_doctor.settings",
    "Policy": "trace_doctor.policy",
    "PolicyError": "trace_doctor.policy",
    "Analysis": "trace_doctor.model",
    "Finding": "trace_doctor.model",
    "RuleOutcome": "trace_doctor.model",
    "RunTables": "trace_doctor.model",
    "RunMeta": "trace_doctor.model",
    "InputFile": "trace_doctor.model",
    "IngestWarning": "trace_doctor.model",
    "Verdict": "trace_doctor.decision",
    "Gate": "trace_doctor.decision",
}

__all__ = [
    "__version__",
    "load_run",
    "analyze",
    "compare",
    "sample_run_path",
    "NothingToAnalyze",
    "redact_run",
    "load_settings",
    "Settings",
    "Policy",
    "PolicyError",
    "Analysis",
    "Finding",
    "RuleOutcome",
    "RunTables",
    "RunMeta",
    "InputFile",
    "IngestWarning",
    "Verdict",
    "Gate",
]

if TYPE_CHECKING:
    from trace_doctor.api import NothingToAnalyze, analyze, compare, load_run, sample_run_path
    from trace_doctor.decision import Gate, Verdict
    from trace_doctor.model import Analysis, Finding, IngestWarning, InputFile, RuleOutcome, RunMeta, RunTables
    from trace_doctor.policy import Policy, PolicyError
    from trace_doctor.redact import redact_run
    from trace_doctor.settings import Settings, load_settings


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trace_doctor' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
