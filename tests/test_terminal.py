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


# What a terminal acts on: CSI (clear screen, colour, cursor up), an OSC whose terminator rich would
# drop (it would swallow the output after it), carriage return, C1 CSI, a bidi override.
HOSTILE = "Qwen\x1b[2J\x1b[31mX\x1b]0;title\x07\r\x9b1A\u202eevil"
ACTING = ("\x1b", "\x07", "\r", "\x9b", "\u202e")


def _hostile_run(root):
    import json

    run = root / "run\x1b[2Kname"
    shutil.copytree(fixture_run("sl_gil_stall"), run)
    config = json.loads((run / "config.json").read_text())
    config["model_name"] = HOSTILE
    config["renderer_name"] = HOSTILE
    (run / "config.json").write_text(json.dumps(config))
    return run


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_a_name_cannot_rewrite_the_terminal(fmt, tmp_path):
    run = _hostile_run(tmp_path)
    for env in ({"NO_COLOR": "1"}, {"FORCE_COLOR": "1"}):
        # Written to a file, as the bytes would reach a terminal (click strips nothing there).
        out = tmp_path / f"report.{fmt}"
        result = CliRunner().invoke(
            main, ["analyze", "--no-html", "--format", fmt, "--output", str(out), str(run)], env=env
        )
        assert result.exit_code == 0, result.output
        text = out.read_text()
        colour = "\x1b[" in text and fmt == "text" and "FORCE_COLOR" in env
        # Only the report's own colour codes, never one from the input.
        stray = text.replace("\x1b[", "") if colour else text
        assert not any(c in stray for c in ACTING), [c for c in ACTING if c in stray]
        assert "x1b" in text and "\\u202eevil" in text  # shown, as escapes (Markdown escapes the `[`)
    fleet = CliRunner().invoke(main, ["analyze", "--no-html", "--jobs", "1", str(tmp_path)], env={"NO_COLOR": "1"})
    assert "\x1b" not in fleet.stdout and "run\\x1b[2Kname" in fleet.stdout.replace("\n", "")


def test_an_error_message_naming_input_is_inert(tmp_path):
    missing = tmp_path / "gone\x1b]0;pwned\x07"
    result = CliRunner().invoke(main, ["analyze", "--no-html", str(missing)])
    assert result.exit_code == 2
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr and "gone\\x1b]0;pwned" in result.stderr


def test_junit_and_sarif_show_bidi_and_controls_from_the_run_as_escapes(tmp_path):
    # CI pages render JUnit messages and SARIF alerts: a U+202E in a quoted log line reversed what they
    # showed (the text, Markdown and HTML reports escape it already); JUnit turned ESC into U+FFFD, unsaid.
    import xml.etree.ElementTree as ET

    run = _hostile_run(tmp_path)
    with (run / "logs.log").open("a", encoding="utf-8") as log:
        log.write("root:1 [ERROR] RuntimeError: upload failed for model\u202eevil\u200b\n")
    junit, sarif = tmp_path / "r.xml", tmp_path / "r.sarif"
    for fmt, out in (("junit", junit), ("sarif", sarif)):
        result = CliRunner().invoke(main, ["analyze", "--no-html", "--format", fmt, "--output", str(out), str(run)])
        assert result.exit_code == 0, result.output
    shown = [v for e in ET.parse(junit).iter() for v in (e.text or "", *e.attrib.values())]
    assert any("upload failed for model\\u202eevil\\u200b" in v for v in shown)
    assert any("run\\x1b[2Kname" in v for v in shown)  # the run's path, a property
    assert not any(c in v for v in shown for c in (*ACTING, "\ufffd"))
    import json

    messages = [r["message"]["text"] for r in json.loads(sarif.read_text())["runs"][0]["results"]]
    assert any("\\u202eevil" in m for m in messages)
    assert not any(c in m for m in messages for c in ACTING)
