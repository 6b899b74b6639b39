"""The command line end to end: exit codes, ingest to Parquet, deterministic JSON."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS, corpus_path, fixture_run

from trace_doctor import sample_run_path
from trace_doctor.cli import main


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_missing_path_exits_2_with_a_clear_message(tmp_path):
    result = invoke("analyze", str(tmp_path / "does-not-exist"), "--no-html")
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_directory_with_nothing_readable_exits_2(tmp_path):
    (tmp_path / "notes.md").write_text("# nothing here\n")
    (tmp_path / "metrics.jsonl").write_bytes(b"\x00\xff garbage\n")
    result = invoke("analyze", str(tmp_path), "--no-html")
    assert result.exit_code == 2
    assert "no readable record" in result.output


def test_unknown_rule_is_a_usage_error(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "time/total": 1.0}\n')
    result = invoke("analyze", str(tmp_path), "--no-html", "--select", "no-such-rule")
    assert result.exit_code == 2
    assert "unknown rule" in result.output


def test_ingest_writes_parquet_with_exact_row_counts(tmp_path):
    run = corpus_path("bzz-tinker-cookbook/data/context_distillation/logs/exp4_reward_only")
    out = tmp_path / "tables"
    result = invoke("ingest", str(run), "--out", str(out))
    assert result.exit_code == 0, result.output
    part = out / "{}" / "run=exp4_reward_only" / "part-0.parquet"
    steps = pl.read_parquet(str(part).format("steps"))
    lines = sum(1 for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip())
    assert steps.height == lines
    checkpoints = pl.read_parquet(str(part).format("checkpoints"))
    assert checkpoints.height == sum(1 for line in (run / "checkpoints.jsonl").read_text().splitlines() if line.strip())
    assert pl.read_parquet(str(part).format("ingest_warnings")).height == 0


def test_json_output_is_deterministic_and_follows_the_contract(tmp_path):
    run = corpus_path("tinker-rl-lab/experiments/results/distillation_off_metrics.jsonl")
    first = invoke("analyze", str(run), "--no-html", "--format", "json")
    second = invoke("analyze", str(run), "--no-html", "--format", "json")
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout
    doc = json.loads(first.stdout)
    assert set(doc) >= {"schema_version", "tool", "run", "summary", "findings", "rules", "baseline", "ingest_warnings"}
    assert doc["run"]["inputs"][0] == {"kind": "metrics", "path": str(run), "records": 683, "skipped": 0}
    assert {r["status"] for r in doc["rules"]} <= {"fired", "passed", "not_applicable", "error"}
    assert not [r for r in doc["rules"] if r["status"] == "error"]


@pytest.mark.parametrize(
    "name", sorted(p.name for p in FIXTURE_RUNS.glob("*") if p.is_dir()) if FIXTURE_RUNS.exists() else []
)
def test_every_fixture_run_analyses_without_rule_errors(name, tmp_path):
    run = fixture_run(name)
    result = invoke("analyze", str(run), "--format", "json", "--html", str(tmp_path / "r.html"))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    errors = [r for r in doc["rules"] if r["status"] == "error"]
    assert errors == []


def test_demo_runs_on_the_packaged_sample(tmp_path):
    if not (sample_run_path() / "metrics.jsonl").exists():
        pytest.skip("sample run not generated yet")
    result = invoke("demo", "--html", str(tmp_path / "demo.html"))
    assert result.exit_code == 0, result.output
    assert "Verdict" in result.output
    assert (tmp_path / "demo.html").stat().st_size > 0


def _console_script():
    import shutil
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("trace-doctor")
    return str(script) if script.exists() else shutil.which("trace-doctor")


@pytest.mark.skipif(
    _console_script() is None, reason="the trace-doctor console script is not installed in this environment"
)
def test_console_script_flushes_everything_before_its_fast_exit(tmp_path):
    """The installed command exits with os._exit: output piped to a file must still be complete, codes kept."""
    import subprocess

    script = _console_script()
    done = subprocess.run(
        [script, "analyze", str(fixture_run("demo")), "--no-html", "--format", "json", "--fail-on", "warning"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1  # the demo run has warnings: the gate trips
    document = json.loads(done.stdout)  # complete: parses to the end
    assert document["findings"]
    missing = subprocess.run([script, "analyze", str(tmp_path / "nope")], capture_output=True, text=True)
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr
    assert subprocess.run([script, "--version"], capture_output=True, text=True).stdout.startswith(
        "trace-doctor, version"
    )


def test_json_report_loads_no_renderer_or_statistics_library():
    """`analyze --format json` is what CI runs on every run: it never imports what only other outputs
    (rich, plotly, jinja2) or a baseline comparison (scipy) need; each costs startup time."""
    import subprocess
    import sys

    heavy = ("rich", "plotly", "jinja2", "scipy")
    code = (
        "import sys\n"
        "from trace_doctor.cli import main\n"
        "try:\n"
        f"    main(['analyze', {str(fixture_run('demo'))!r}, '--no-html', '--format', 'json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert json.loads(done.stdout)["findings"]
    assert done.stderr.strip().splitlines()[-1] == "[]"
    # The text report does use rich: the check above would see it.
    text = subprocess.run(
        [sys.executable, "-c", code.replace("'json'", "'text'")], capture_output=True, text=True, timeout=120
    )
    assert text.stderr.strip().splitlines()[-1] == "['rich']"


@pytest.mark.skipif(
    _console_script() is None, reason="the trace-doctor console script is not installed in this environment"
)
def test_ingest_progress_goes_to_a_terminal_and_never_to_pipes_or_ci(tmp_path):
    """Progress lines are for people watching a terminal; a pipe or a CI log gets none of them."""
    import os
    import pty
    import subprocess

    script = _console_script()
    run = fixture_run("rl_healthy")
    argv = [script, "analyze", str(run), "--no-html", "--format", "json"]
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"TRACE_DOCTOR_CACHE": "off"}

    def stderr_on_a_terminal(extra_env: dict[str, str]) -> str:
        leader, follower = pty.openpty()
        try:
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=follower, env=env | extra_env, timeout=120)
            os.close(follower)
            follower = -1
            chunks = []
            while True:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # the terminal is closed once the child has gone
                    break
                if not data:
                    break
                chunks.append(data)
        finally:
            os.close(leader)
            if follower >= 0:
                os.close(follower)
        assert done.returncode == 0 and json.loads(done.stdout)["findings"] == []
        return b"".join(chunks).decode()

    on_terminal = stderr_on_a_terminal({})
    assert "reading trace_events.jsonl" in on_terminal and "(100%)" in on_terminal
    assert "reading" not in stderr_on_a_terminal({"CI": "true"})
    piped = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert piped.returncode == 0 and "reading" not in piped.stderr
