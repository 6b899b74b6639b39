"""`trace-doctor analyze` stopped by SIGTERM or SIGINT in the middle of reading a trace leaves no scratch
folder in TMPDIR and no temporary file in the cache folder, and neither does one that finishes, nor an
analysis run in-process once its results are dropped.

The signal lands mid-read every time: the subprocess wraps the span spill so that, once a scratch file
is written (the cache's entry folder for the spans is open too), the process signals itself.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from test_cache import steps, write

from trace_doctor.api import analyze, load_run
from trace_doctor.ingest.storage import cache, stored_table
from trace_doctor.ingest.trace import trace_events

# Runs in the subprocess: spill the spans however few, signal once the first scratch file is written.
KILLER = """
import os, signal, sys, time
from trace_doctor.ingest.trace import span_spill
sig = getattr(signal, sys.argv[1])
span_spill.MEMORY_ROWS = 0
span_spill.BUFFER_ROWS = 500
flush = span_spill.SpanSpill._flush
def flush_then_die(self):
    flush(self)
    if len(self.files) == 1:
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the handler raises before this ends
        raise SystemExit("the signal was not delivered")
span_spill.SpanSpill._flush = flush_then_die
sys.argv = ["trace-doctor", *sys.argv[2:]]
from trace_doctor.cli import run
run()
"""


@pytest.fixture
def big_run(tmp_path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    write(run / "trace_events.jsonl", steps(0, 12_000))  # over MIN_CACHED_BYTES: the spans go to the cache
    assert (run / "trace_events.jsonl").stat().st_size > cache.MIN_CACHED_BYTES
    return run


def environment(tmp_path: Path, *, cache_on: bool) -> dict[str, str]:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path / "tmp"))
    env.pop("TRACE_DOCTOR_CACHE_MAX_MB", None)
    if cache_on:
        env.pop("TRACE_DOCTOR_CACHE", None)
        env["TRACE_DOCTOR_CACHE_DIR"] = str(tmp_path / "cache")
    else:
        env["TRACE_DOCTOR_CACHE"] = "off"
    return env


def left_behind(tmp_path: Path) -> list[str]:
    """What the command left in TMPDIR, and the temporary files in the cache folder."""
    left = [f"TMPDIR/{p.name}" for p in (tmp_path / "tmp").iterdir()]
    cache_dir = tmp_path / "cache"
    if cache_dir.exists():
        left += [f"cache/{p.name}" for p in cache_dir.iterdir() if p.name.startswith(".tmp-")]
    return left


@pytest.mark.parametrize("cache_on", [True, False], ids=["cache", "no-cache"])
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_kill_mid_read_leaves_no_temporary_file(big_run, tmp_path, signame, cache_on):
    env = environment(tmp_path, cache_on=cache_on)
    command = [sys.executable, "-c", KILLER, signame, "analyze", str(big_run), "--no-html", "--format", "json"]
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode in (130, 143), (killed.returncode, killed.stderr)
    assert "signal was not delivered" not in killed.stderr
    assert left_behind(tmp_path) == []


def test_a_finished_analysis_leaves_no_temporary_file(big_run, tmp_path):
    env = environment(tmp_path, cache_on=False)
    command = [sys.executable, "-m", "trace_doctor.cli", "analyze", str(big_run), "--no-html", "--format", "json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    assert left_behind(tmp_path) == []


def test_an_analysis_in_process_leaves_nothing_once_its_results_are_dropped(big_run, tmp_path, monkeypatch):
    """The API's tables live in the scratch folder while a result reads them; dropped, they go, and the
    folder with them (an interpreter that goes on, a notebook, a test session: no exit to wait for)."""
    monkeypatch.setenv("TRACE_DOCTOR_CACHE", "off")
    monkeypatch.setattr(trace_events, "MEMORY_ROWS", 0)  # the spans on disk however small
    monkeypatch.setattr(stored_table, "_disk_ok", True)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    result = analyze(load_run(big_run))
    (folder,) = scratch.iterdir()
    assert list(folder.rglob("*.parquet")), "the spans table was expected on disk"
    assert result.run.spans.height == 12_000  # still readable while the result is held
    del result
    gc.collect()
    assert list(scratch.iterdir()) == []
