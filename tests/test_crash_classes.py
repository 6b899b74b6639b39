"""The crash classes of issue 14, each pinned: a clear ingest warning (or none needed), every valid
record kept, every command through, never a traceback."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import fixture_run

from trace_doctor.api import load_run
from trace_doctor.cli import main


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return Path(shutil.copytree(fixture_run("demo"), tmp_path / "run", ignore=shutil.ignore_patterns("EXPECTED.json")))


def every_command(run: Path, out: Path) -> dict[str, object]:
    return {
        "analyze": invoke("analyze", str(run), "--format", "json", "--html", str(out / "report.html")),
        "bundle": invoke("bundle", str(run), "-o", str(out / "bundle.zip")),
        "export": invoke(
            "export", str(run), "--perfetto", str(out / "t.pftrace"), "--chrome-json", str(out / "t.json")
        ),
        "ingest": invoke("ingest", str(run), "--out", str(out / "dataset")),
    }


@pytest.mark.parametrize("where", ["file", "folder of the run", "subfolder"])
def test_a_name_that_is_not_utf8_is_read_and_shown_with_a_replacement_character(run_dir, tmp_path, where):
    bad = os.fsdecode(b"\xff")
    if where == "file":
        os.rename(run_dir / "logs.log", run_dir / f"logs-{bad}.log")
        expected = "logs-\ufffd.log"
    elif where == "folder of the run":
        run_dir = Path(shutil.move(run_dir, tmp_path / f"run-{bad}"))
        expected = "run-\ufffd/logs.log"
    else:
        (run_dir / f"sub{bad}").mkdir()
        os.rename(run_dir / "profile.json", run_dir / f"sub{bad}" / "profile.json")
        expected = "sub\ufffd/profile.json"
    for command, result in every_command(run_dir, tmp_path).items():
        assert result.exit_code == 0, (command, result.output)
    document = json.loads(invoke("analyze", str(run_dir), "--format", "json", "--no-html").stdout)
    [read] = [i for i in document["run"]["inputs"] if i["path"].endswith(expected)]
    assert read["records"] > 0 and read["skipped"] == 0


def test_a_corrupt_gzip_trace_keeps_its_records_before_the_damage_and_the_rest_of_the_run_is_read(run_dir):
    events = (run_dir / "trace_events.jsonl").read_bytes().count(b"\n")
    packed = bytearray(gzip.compress((run_dir / "trace_events.jsonl").read_bytes()))
    from_start = bytearray(packed)
    for i in range(len(packed) // 2, len(packed) // 2 + 40):
        packed[i] ^= 0x5A  # a corrupt deflate stream: zlib.error, which is no OSError
    for i in range(10, 50):
        from_start[i] ^= 0x5A  # corrupt from its first block: nothing in it decompresses
    (run_dir / "trace_events.jsonl").write_bytes(bytes(packed))
    (run_dir / "old_metrics.jsonl.gz").write_bytes(bytes(from_start))  # and a corrupt .gz elsewhere in the tree
    run = load_run(run_dir)
    [trace] = [i for i in run.inputs if i.kind == "trace"]
    assert 0 < trace.records < events and trace.skipped >= 1
    [warning] = [w for w in run.warnings if w.path.endswith("trace_events.jsonl") and w.line is None]
    assert warning.problem.startswith("the gzip stream is corrupt after ")
    assert warning.problem.endswith("; the records before it are kept")
    assert run.steps.height == 30 and run.log_events.height > 0
    [passed] = [p.reason for p in run.passed_over if p.path.endswith(".gz")]
    assert passed.startswith("corrupt gzip: Error -3 while decompressing data")
    for command, result in every_command(run_dir, run_dir.parent).items():
        assert result.exit_code == 0, (command, result.output)


def deep_profile(depth: int) -> str:
    """A pyinstrument JSON profile of recursion `depth` calls deep (built as text: json.dumps recurses)."""
    opening = "".join(
        f'{{"function": "recurse_{level}", "file_path": "/app/r.py", "line_no": {level}, "time": 1.0, "children": ['
        for level in range(depth)
    )
    leaf = '{"function": "leaf", "file_path": "/app/leaf.py", "line_no": 1, "time": 0.5, "children": []}'
    frames = opening + leaf + "]}" * depth
    return f'{{"start_time": 1.7e9, "duration": 1.0, "sample_count": 100, "root_frame": {frames}}}'


@pytest.mark.parametrize("depth", [127, 200, 2000])
def test_a_deep_profile_goes_into_the_bundle_whole(run_dir, tmp_path, depth):
    (run_dir / "deep_profile.json").write_text(deep_profile(depth))
    result = invoke("bundle", str(run_dir), "-o", str(tmp_path / "bundle.zip"))
    assert result.exit_code == 0, result.output
    with zipfile.ZipFile(tmp_path / "bundle.zip") as bundle:
        text = bundle.read("profiles/deep_profile.json.json").decode()
    assert text.count('"function": "recurse_') == depth  # every frame, written without recursion
    assert text.count("[") == text.count("]") and text.strip().endswith("}")


def test_timestamps_beyond_64_bits_of_nanoseconds_export_to_perfetto(run_dir, tmp_path):
    lines = (run_dir / "trace_events.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    lines[0] = json.dumps({**first, "ts": 2**63})  # 2^63 µs: 9.2e21 ns, past Perfetto's uint64
    lines[1] = json.dumps({**json.loads(lines[1]), "ts": -(10**20)})
    (run_dir / "trace_events.jsonl").write_text("\n".join(lines) + "\n")
    result = invoke("export", str(run_dir), "--perfetto", str(tmp_path / "t.pftrace"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "t.pftrace").stat().st_size > 0


def test_a_cache_entry_of_null_metadata_is_a_miss(run_dir, tmp_path, monkeypatch):
    from trace_doctor.ingest.storage import cache

    monkeypatch.setenv("TRACE_DOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRACE_DOCTOR_CACHE", raising=False)
    monkeypatch.setattr(cache, "MIN_CACHED_BYTES", 0)
    first = invoke("analyze", str(run_dir), "--format", "json", "--no-html").stdout
    [entry] = (tmp_path / "cache").glob("spans-*.parts")
    for garbage in (b"null\n", b"[]\n", b"{}\n", b'{"parser": 1}\n'):
        (entry / "entry.json").write_bytes(garbage)
        again = invoke("analyze", str(run_dir), "--format", "json", "--no-html")
        assert again.exit_code == 0 and again.stdout == first
