"""`--format` name -> renderer. Every renderer is a function over the same Analysis."""

from __future__ import annotations

from importlib import import_module

from trace_doctor.model import Analysis

# format -> (module, function); imported on use so `--format json` never loads rich or plotly.
RENDERERS = {
    "text": ("trace_doctor.report.console", "render_text"),
    "json": ("trace_doctor.report.json_doc", "render_json"),
    "markdown": ("trace_doctor.report.markdown", "render_markdown"),
    "junit": ("trace_doctor.report.junit", "render_junit"),
    "sarif": ("trace_doctor.report.sarif", "render_sarif"),
    "summary": ("trace_doctor.report.summary_text", "render_summary"),
}


def render(result: Analysis, fmt: str, *, show_skipped: bool = False) -> str:
    module, name = RENDERERS[fmt]
    renderer = getattr(import_module(module), name)
    return renderer(result, show_skipped=show_skipped) if fmt == "text" else renderer(result)
