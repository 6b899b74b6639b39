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
    "NothingToAnalyze": "trace_doctor.errors",
    "NothingToExport": "trace_doctor.errors",
    "prepare_process": "trace_doctor.process_setup",
    "stop_cleanly_on_signals": "trace_doctor.process_setup",
    "end_process": "trace_doctor.process_setup",
    "RequestError": "trace_doctor.errors",
    "OutputRefused": "trace_doctor.errors",
    "OutputNotWritten": "trace_doctor.errors",
    "find_runs": "trace_doctor.named_runs",
    "analyze_paths": "trace_doctor.named_runs",
    "take_machine_notes": "trace_doctor.named_runs",
    "NamedRuns": "trace_doctor.named_runs",
    "PathsAnalysis": "trace_doctor.named_runs",
    "REPORT_FORMATS": "trace_doctor.outputs",
    "check_outputs": "trace_doctor.outputs",
    "render_report": "trace_doctor.outputs",
    "write_report": "trace_doctor.outputs",
    "write_html_report": "trace_doctor.outputs",
    "fleet_pages_dir": "trace_doctor.outputs",
    "write_perfetto_trace": "trace_doctor.outputs",
    "write_chrome_trace": "trace_doctor.outputs",
    "write_escalation_bundle": "trace_doctor.outputs",
    "ingest_dataset": "trace_doctor.dataset",
    "Dataset": "trace_doctor.dataset",
    "IngestedRun": "trace_doctor.dataset",
    "list_rules": "trace_doctor.rule_docs",
    "explain_rule": "trace_doctor.rule_docs",
    "unknown_rule": "trace_doctor.rule_docs",
    "terminal_safe": "trace_doctor.terminal",
    "report_color": "trace_doctor.terminal",
    "terminal_progress": "trace_doctor.terminal",
    "internal_error_line": "trace_doctor.terminal",
    "fleet_internal_error_line": "trace_doctor.terminal",
    "EXIT_INTERNAL_ERROR": "trace_doctor.crash_report",
    "Fleet": "trace_doctor.fleet",
    "RunReport": "trace_doctor.fleet",
    "redact_run": "trace_doctor.redact",
    "load_settings": "trace_doctor.settings",
    "Settings": "trace_doctor.settings",
    "FAIL_ON_LEVELS": "trace_doctor.settings",
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
    "run_console_script": "trace_doctor.console_script",
    "Watch": "trace_doctor.watch",
    "WatchEvent": "trace_doctor.watch",
    "WatchPolicy": "trace_doctor.policy.live",
    "follow_run": "trace_doctor.watch",
    "WATCH_FORMATS": "trace_doctor.outputs",
    "EXIT_STALLED": "trace_doctor.watch",
    "EXIT_STOPPED": "trace_doctor.watch",
}

__all__ = [
    "__version__",
    "load_run",
    "analyze",
    "compare",
    "sample_run_path",
    "NothingToAnalyze",
    "NothingToExport",
    "prepare_process",
    "stop_cleanly_on_signals",
    "end_process",
    "RequestError",
    "OutputRefused",
    "OutputNotWritten",
    "find_runs",
    "analyze_paths",
    "take_machine_notes",
    "NamedRuns",
    "PathsAnalysis",
    "REPORT_FORMATS",
    "check_outputs",
    "render_report",
    "write_report",
    "write_html_report",
    "fleet_pages_dir",
    "write_perfetto_trace",
    "write_chrome_trace",
    "write_escalation_bundle",
    "ingest_dataset",
    "Dataset",
    "IngestedRun",
    "list_rules",
    "explain_rule",
    "unknown_rule",
    "terminal_safe",
    "report_color",
    "terminal_progress",
    "internal_error_line",
    "fleet_internal_error_line",
    "EXIT_INTERNAL_ERROR",
    "Fleet",
    "RunReport",
    "redact_run",
    "load_settings",
    "Settings",
    "FAIL_ON_LEVELS",
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
    "run_console_script",
    "Watch",
    "WatchEvent",
    "WatchPolicy",
    "follow_run",
    "WATCH_FORMATS",
    "EXIT_STALLED",
    "EXIT_STOPPED",
]

if TYPE_CHECKING:
    from trace_doctor.api import analyze, compare, load_run, sample_run_path
    from trace_doctor.console_script import run_console_script
    from trace_doctor.crash_report import EXIT_INTERNAL_ERROR
    from trace_doctor.dataset import Dataset, IngestedRun, ingest_dataset
    from trace_doctor.decision import Gate, Verdict
    from trace_doctor.errors import NothingToAnalyze, NothingToExport, OutputNotWritten, OutputRefused, RequestError
    from trace_doctor.fleet import Fleet, RunReport
    from trace_doctor.model import Analysis, Finding, IngestWarning, InputFile, RuleOutcome, RunMeta, RunTables
    from trace_doctor.named_runs import NamedRuns, PathsAnalysis, analyze_paths, find_runs, take_machine_notes
    from trace_doctor.outputs import (
        REPORT_FORMATS,
        WATCH_FORMATS,
        check_outputs,
        fleet_pages_dir,
        render_report,
        write_chrome_trace,
        write_escalation_bundle,
        write_html_report,
        write_perfetto_trace,
        write_report,
    )
    from trace_doctor.policy import Policy, PolicyError
    from trace_doctor.policy.live import WatchPolicy
    from trace_doctor.process_setup import end_process, prepare_process, stop_cleanly_on_signals
    from trace_doctor.redact import redact_run
    from trace_doctor.rule_docs import explain_rule, list_rules, unknown_rule
    from trace_doctor.settings import FAIL_ON_LEVELS, Settings, load_settings
    from trace_doctor.terminal import (
        fleet_internal_error_line,
        internal_error_line,
        report_color,
        terminal_progress,
        terminal_safe,
    )
    from trace_doctor.watch import EXIT_STALLED, EXIT_STOPPED, Watch, WatchEvent, follow_run


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
