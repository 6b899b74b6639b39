"""A command killed while it writes a named output leaves the previous complete file, never a part of
the new one, and no temporary file beside it.

Each case runs the real CLI in a subprocess whose low-level writer is wrapped: at the chosen write it
puts part of the bytes in the file it was given, then the process sends itself SIGTERM or SIGINT, so
the signal lands mid-write every time (what a kill at a random instant does only sometimes). A
written-in-place output fails these tests: the file would hold the part.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, fixture_run

# Runs in the subprocess: wrap one writer, then run the CLI as its console script does.
KILLER = """
import os, signal, sys, time
import pathlib
target, signame = sys.argv[1], sys.argv[2]
sig = getattr(signal, signame)

def die():
    os.kill(os.getpid(), sig)
    time.sleep(5)  # the handler raises before this ends
    raise SystemExit("the signal was not delivered")

def partial_text(self, data, *args, **kwargs):
    with open(self, "w", encoding="utf-8") as out:
        out.write(data[: len(data) // 2])
    die()

def partial_bytes(self, data):
    with open(self, "wb") as out:
        out.write(data[: len(data) // 2])
    die()

if target == "text":
    pathlib.Path.write_text = partial_text
elif target == "bytes":
    pathlib.Path.write_bytes = partial_bytes
elif target == "zip":
    import zipfile
    original = zipfile.ZipFile.writestr
    count = [0]
    def writestr(self, *args, **kwargs):
        count[0] += 1
        original(self, *args, **kwargs)
        if count[0] == 2:
            die()
    zipfile.ZipFile.writestr = writestr
elif target == "parquet":
    import polars as pl
    def write_parquet(self, file, *args, **kwargs):
        with open(file, "wb") as out:
            out.write(b"PAR1")
        die()
    pl.DataFrame.write_parquet = write_parquet
sys.argv = ["trace-doctor", *sys.argv[3:]]
from trace_doctor.cli import run
run()
"""

# Output -> (the writer killed, the command with {out} for the output's path, the file checked).
CASES = {
    "bundle": ("zip", ["bundle", "{run}", "-o", "{out}/b.zip"], "b.zip"),
    "html": (
        "text",
        ["analyze", "{run}", "--html", "{out}/r.html", "--format", "json", "-o", "{out}/r.json"],
        "r.html",
    ),
    "report": ("text", ["analyze", "{run}", "--no-html", "--format", "markdown", "-o", "{out}/r.md"], "r.md"),
    "export": ("bytes", ["export", "{run}", "--perfetto", "{out}/t.pftrace"], "t.pftrace"),
    "ingest": ("parquet", ["ingest", "{run}", "--out", "{out}/ds"], None),
}


def cli(args: list[str], env: dict[str, str], *, kill: tuple[str, str] | None = None) -> subprocess.CompletedProcess:
    if kill is None:
        command = [sys.executable, "-m", "trace_doctor.cli", *args]
    else:
        command = [sys.executable, "-c", KILLER, *kill, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def environment(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRACE_DOCTOR_CACHE="off", TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return env


def outputs(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("case", "signame"),
    [
        ("bundle", "SIGTERM"),
        ("bundle", "SIGINT"),
        ("html", "SIGINT"),
        ("report", "SIGTERM"),
        ("export", "SIGINT"),
        ("ingest", "SIGTERM"),
    ],
)
def test_a_kill_while_an_output_is_written_leaves_the_previous_file(case, signame, tmp_path):
    writer, template, _ = CASES[case]
    out = tmp_path / "out"
    out.mkdir()
    args = [a.format(run=fixture_run("demo"), out=out) for a in template]
    env = environment(tmp_path)
    first = cli(args, env)
    assert first.returncode in (0, 1), first.stderr
    before = outputs(out)
    assert before

    killed = cli(args, env, kill=(writer, signame))

    assert killed.returncode in (130, 143), (killed.returncode, killed.stderr)
    assert outputs(out) == before  # every output whole, as the previous run left it; no temporary file
    assert list((tmp_path / "tmp").iterdir()) == []  # and nothing left in TMPDIR


def test_a_kill_at_random_instants_leaves_a_complete_bundle(tmp_path):
    """SIGTERM or SIGINT at a random instant of the command: the bundle is always a complete zip."""
    env = environment(tmp_path)
    bundle = tmp_path / "b.zip"
    args = ["bundle", str(fixture_run("demo")), "-o", str(bundle)]
    started = time.monotonic()
    assert cli(args, env).returncode == 0
    duration = time.monotonic() - started
    previous = bundle.read_bytes()
    chance = random.Random(30)
    for _ in range(3):
        process = subprocess.Popen(
            [sys.executable, "-m", "trace_doctor.cli", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(chance.uniform(0.3, duration))
        process.send_signal(chance.choice([signal.SIGTERM, signal.SIGINT]))
        process.wait(timeout=300)
        with zipfile.ZipFile(bundle) as archive:
            assert archive.testzip() is None
            manifest = json.loads(archive.read("MANIFEST.json"))
        assert bundle.read_bytes() == previous, manifest  # the same run bundles to the same bytes
        assert sorted(p.name for p in tmp_path.iterdir()) == ["b.zip", "tmp"]
