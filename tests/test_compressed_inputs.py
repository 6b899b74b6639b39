"""A log folder gzipped file by file (how big traces are shared) is the same run, read the same way;
an archive is named as one and the user told to unpack it, never called an unknown binary."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS

from trace_doctor.cli import main
from trace_doctor.discover import classify
from trace_doctor.runs import split_runs

RUN = FIXTURE_RUNS / "sl_slow_get_batch"
GZIPPED = ("metrics.jsonl", "trace_events.jsonl", "timing_spans.jsonl", "checkpoints.jsonl")


def analysis(path: Path) -> dict:
    """The JSON document, with the run's folder written as RUN (two copies differ only there)."""
    result = CliRunner().invoke(main, ["analyze", str(path), "--no-html", "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.output.replace(str(path), "RUN"))


def gzipped_copy(tmp_path: Path, name: str = "run") -> Path:
    run = shutil.copytree(RUN, tmp_path / name)
    for file in GZIPPED:
        (run / file).with_name(file + ".gz").write_bytes(gzip.compress((run / file).read_bytes()))
        (run / file).unlink()
    return run


def test_a_run_gzipped_file_by_file_gives_the_same_analysis(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACE_DOCTOR_CACHE", "off")
    plain = analysis(shutil.copytree(RUN, tmp_path / "plain"))
    packed = analysis(gzipped_copy(tmp_path))
    assert packed["findings"] == plain["findings"]
    assert packed["summary"] == plain["summary"]
    inputs = packed["run"]["inputs"]
    assert [(i["kind"], i["records"], i["skipped"]) for i in inputs] == [
        (i["kind"], i["records"], i["skipped"]) for i in plain["run"]["inputs"]
    ]
    assert {Path(i["path"]).name for i in inputs} >= {f + ".gz" for f in GZIPPED}


def test_gzipped_and_plain_files_of_one_folder_are_one_run(tmp_path):
    run = shutil.copytree(RUN, tmp_path / "run")
    (run / "trace_events.jsonl.gz").write_bytes(gzip.compress((run / "trace_events.jsonl").read_bytes()))
    (run / "trace_events.jsonl").unlink()
    (run_split,) = split_runs([run]).runs
    assert run / "trace_events.jsonl.gz" in run_split.files and run / "metrics.jsonl" in run_split.files


def test_a_gzipped_line_file_of_any_name_is_classified_by_its_content(tmp_path):
    path = tmp_path / "gptoss_train_metrics_copy.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"step": 0, "time/total": 1.5}\n'))
    assert classify(path) == ("metrics", "")


def _zip(run: Path) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.write(run / "metrics.jsonl", "run/metrics.jsonl")
    return out.getvalue()


def _tar(run: Path) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        t.add(run / "metrics.jsonl", "run/metrics.jsonl")
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "pack", "said"),
    [
        ("run.zip", _zip, "a zip archive: unpack it"),
        ("run.tar", _tar, "a tar archive: unpack it"),
        ("run.tar.gz", lambda run: gzip.compress(_tar(run)), "a tar archive: unpack it"),
        ("run.tgz", lambda run: gzip.compress(_tar(run)), "a gzip-compressed file: decompress it"),
        ("run.7z", lambda run: b"7z\xbc\xaf\x27\x1c\x00\x04" + b"\x00" * 64, "a 7-Zip archive: unpack it"),
    ],
)
def test_an_archive_is_named_and_the_user_told_to_unpack_it(tmp_path, name, pack, said):
    path = tmp_path / name
    path.write_bytes(pack(RUN))
    kind, reason = classify(path)
    assert kind is None and reason.startswith(said)
    result = CliRunner().invoke(main, ["analyze", str(path), "--no-html"])
    assert result.exit_code == 2 and said in result.output


def test_text_starting_like_a_compressor_signature_is_not_called_one(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("BZh is how bzip2 starts; this is a note\n")
    assert "compressed" not in classify(path)[1]


def test_a_gzipped_copy_beside_its_original_is_not_read_twice(tmp_path, monkeypatch):
    # `gzip -k metrics.jsonl` keeps both: reading both would double every step and span.
    monkeypatch.setenv("TRACE_DOCTOR_CACHE", "off")
    plain = analysis(shutil.copytree(RUN, tmp_path / "plain" / "run"))
    run = shutil.copytree(RUN, tmp_path / "kept" / "run")
    for file in GZIPPED:
        (run / file).with_name(file + ".gz").write_bytes(gzip.compress((run / file).read_bytes()))
    both = analysis(run)
    assert both["findings"] == plain["findings"] and both["run"]["inputs"] == plain["run"]["inputs"]
    (run_split,) = split_runs([run]).runs
    reasons = {Path(p.path).name: p.reason for p in run_split.passed_over}
    assert reasons["metrics.jsonl.gz"] == "a gzipped copy of metrics.jsonl beside it (that one is read)"
