"""The terminal report follows terminal conventions: it fits the width it is given, never splits a path
or a file:line, honours NO_COLOR and FORCE_COLOR, and keeps rules without input to one line."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner
from conftest import fixture_run

from trace_doctor.cli import main


def text_of(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(main, ["analyze", "--no-html", *args], env=env or {}, catch_exceptions=False)
    return result.stdout


@pytest.mark.parametrize("columns", [70, 100, 160])
def test_fits_the_width_and_never_splits_a_path(columns, tmp_path):
    # A deep run folder: its paths are longer than the narrowest terminal.
    deep = tmp_path / "experiments" / "sweep-learning-rate-3e-4" / "qwen3-8b-lora-rank-32-renderer-qwen3"
    shutil.copytree(fixture_run("sl_gil_stall"), deep)
    text = text_of(str(deep), env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    paths = [str(deep / name) for name in ("metrics.jsonl", "trace_events.jsonl", "logs.log")]
    for path in paths:
        assert path in text  # whole, on one line
    for line in text.splitlines():
        # Only a line holding an unbreakable token (a path, a file:line) may be longer than the terminal.
        assert len(line) <= columns or any(token in line for token in (str(tmp_path), ".py:", ".log:")), line


def test_colour_follows_no_color_and_force_color():
    run = str(fixture_run("sl_sequential_await"))
    assert "\x1b[" in text_of(run, env={"FORCE_COLOR": "1"})
    assert "\x1b[" not in text_of(run, env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert "\x1b[" not in text_of(run)  # a pipe gets no colour


def test_rules_without_input_are_one_line_unless_asked():
    run = str(fixture_run("sl_sequential_await"))
    short = text_of(run, env={"NO_COLOR": "1"})
    assert "Not applicable (" in short and "--show-skipped" in short and "Rules that could not run" not in short
    full = text_of(run, "--show-skipped", env={"NO_COLOR": "1"})
    assert "Rules that could not run" in full and "not applicable" in full
