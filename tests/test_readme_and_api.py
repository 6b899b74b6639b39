"""The README's Python examples run as written, the API's docstring examples hold, and the public
names are importable from the package itself."""

from __future__ import annotations

import ast
import doctest
import importlib
import re
import sys
from pathlib import Path

import pytest

import trace_doctor

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCTEST_MODULES = (
    "trace_doctor",
    "trace_doctor.api",
    "trace_doctor.named_runs",
    "trace_doctor.outputs",
    "trace_doctor.rule_docs",
    "trace_doctor.policy",
    "trace_doctor.rules.requires",
    "trace_doctor.redact",
    "trace_doctor.report.markdown_text",
    "trace_doctor.report.terminal_text",
)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_has_python_examples():
    assert len(python_blocks(README.read_text(encoding="utf-8"))) >= 3


@pytest.mark.parametrize("index", range(3))
def test_readme_python_example_runs_as_written(index, tmp_path, monkeypatch, capsys):
    # An empty working directory: no project configuration is found from it.
    monkeypatch.chdir(tmp_path)
    block = python_blocks(README.read_text(encoding="utf-8"))[index]
    exec(compile(block, f"README.md python block {index}", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    assert printed.strip(), "the example prints what it found"
    if index == 0:
        assert "TD101 pipelining-gap" in printed and printed.splitlines()[0].startswith("1 error")
        assert "gate: " in printed
    elif index == 2:
        # Paths to a rendered report and the HTML, as `trace-doctor analyze --fail-on warning` does.
        assert printed.splitlines() == ["# trace-doctor", "gate tripped: True"]
        assert (tmp_path / "report.html").stat().st_size > 100_000
    else:
        # The run against itself: the combined verdict, then the training-quality axis alone.
        assert printed.split() == ["no", "regression", "no", "regression"]


@pytest.mark.parametrize("module", DOCTEST_MODULES)
def test_docstring_examples(module, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    failures, tried = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failures == 0


def test_every_public_name_resolves_and_nothing_else_does():
    for name in trace_doctor.__all__:
        assert getattr(trace_doctor, name) is not None
    with pytest.raises(AttributeError):
        trace_doctor.run_rules  # noqa: B018 - internal, not exported


CLI = ROOT / "trace_doctor" / "cli.py"


def test_the_cli_imports_nothing_but_the_public_api():
    """cli.py parses arguments, prints and picks exit codes; the work is the public API, which a live
    follower or a notebook calls the same way. It imports the standard library, click, and names from
    `trace_doctor.__all__`: never a module of the package."""
    imported = []
    for node in ast.walk(ast.parse(CLI.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            imported += [(node.module or "", alias.name) for alias in node.names]
    assert ("trace_doctor", "analyze_paths") in imported  # the walk saw the package's imports
    for module, name in imported:
        if module == "__future__":
            continue
        if module == "trace_doctor":
            assert name in trace_doctor.__all__, f"cli.py imports {name}, which is not public"
        else:
            top = module.split(".")[0]
            assert top == "click" or top in sys.stdlib_module_names, f"cli.py imports {module}"


def test_the_cli_stays_a_thin_shell():
    assert len(CLI.read_text(encoding="utf-8").splitlines()) < 350
