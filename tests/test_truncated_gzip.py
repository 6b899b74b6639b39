"""A gzipped input cut short (`head -c`, an interrupted copy, a killed writer) or corrupt midway: every
complete record before the damage is kept, one warning names the file and where it broke, and the
analysis runs. What "before the damage" holds is computed here independently: zlib fed the damaged
file a byte at a time, up to where it refuses it or the bytes run out."""

from __future__ import annotations

import gzip
import json
import shutil
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import fixture_run

from trace_doctor.api import load_run
from trace_doctor.cli import main
from trace_doctor.ingest.reading import input_stream

# rl_healthy's trace (389 kB) is longer than discovery's 256 kB sniff, its other files shorter: a cut
# lands on both sides of it.
SOURCE_RUN = "rl_healthy"
JSONL_INPUTS = ("trace_events.jsonl", "metrics.jsonl", "timing_spans.jsonl")
TRUNCATED_PROBLEM = "the gzip stream ends early (truncated after "


def decompressed_prefix(packed: bytes) -> bytes:
    """What zlib gives of `packed` before it refuses a byte or the bytes end (no end marker needed)."""
    inflate = zlib.decompressobj(wbits=31)
    out = []
    for index in range(len(packed)):
        try:
            out.append(inflate.decompress(packed[index : index + 1]))
        except zlib.error:
            break
        if inflate.eof:
            break
    return b"".join(out)


def complete_lines(data: bytes) -> int:
    """Non-blank lines ended by a newline: the records a JSONL reader can keep."""
    return sum(1 for line in data.split(b"\n")[:-1] if line.strip())


def complete_event(piece: bytes) -> bool:
    try:
        json.loads(piece.rstrip(b","))
    except ValueError:
        return False
    return True


def cuts(size: int) -> dict[str, int]:
    """Where a copy stops: inside the header, just after it, midway, near the end, before the trailer."""
    return {
        "inside the header": 6,
        "just after the header": 10,
        "at 30%": size * 3 // 10,
        "at 60%": size * 6 // 10,
        "near the end": size - 40,
        "missing only the trailer": size - 8,
        "missing the trailer's last byte": size - 1,
    }


def run_with(tmp_path: Path, name: str, packed: bytes) -> tuple[Path, Path]:
    """A copy of the source run whose file `name` is replaced by `packed` as `name.gz`."""
    run = Path(
        shutil.copytree(fixture_run(SOURCE_RUN), tmp_path / "run", ignore=shutil.ignore_patterns("EXPECTED.json"))
    )
    (run / name).unlink()
    path = run / f"{name}.gz"
    path.write_bytes(packed)
    return run, path


def gzip_warnings(run, path: Path) -> list[str]:
    return [w.problem for w in run.warnings if w.path == str(path) and w.line is None]


@pytest.mark.parametrize("name", JSONL_INPUTS)
@pytest.mark.parametrize("cut", list(cuts(1000)))
def test_a_cut_gzip_keeps_every_complete_record_before_the_cut(tmp_path, name, cut):
    packed = gzip.compress((fixture_run(SOURCE_RUN) / name).read_bytes())
    damaged = packed[: cuts(len(packed))[cut]]
    prefix = decompressed_prefix(damaged)
    expected = complete_lines(prefix)
    run, path = run_with(tmp_path, name, damaged)
    loaded = load_run(run)
    read = [i for i in loaded.inputs if i.path == str(path)]
    if not prefix:
        # Nothing to read or classify: said as it is passed over, and the rest of the run is read.
        assert not read
        [reason] = [p.reason for p in loaded.passed_over if p.path == str(path)]
        assert reason.startswith("corrupt gzip: the gzip stream ends after ") and "before any data" in reason
        assert loaded.records_read > 0
        return
    [info] = read
    assert info.records == expected
    # A line cut in two is reported like any truncated last line; the cut itself, once, with where it came.
    partial = not prefix.endswith(b"\n")
    assert info.skipped == 1 + partial
    [problem] = gzip_warnings(loaded, path)
    assert problem.startswith(f"{TRUNCATED_PROBLEM}{len(prefix):,} decompressed bytes")
    assert problem.endswith("; the records before it are kept")
    if name == "metrics.jsonl":
        assert loaded.steps.height == expected


def test_the_cli_analyzes_a_cut_trace_and_names_the_file_in_its_warnings(tmp_path):
    packed = gzip.compress((fixture_run(SOURCE_RUN) / "trace_events.jsonl").read_bytes())
    damaged = packed[: len(packed) * 6 // 10]  # decompresses to less than discovery's sniff
    prefix = decompressed_prefix(damaged)
    run, path = run_with(tmp_path, "trace_events.jsonl", damaged)
    result = CliRunner().invoke(main, ["analyze", str(run), "--no-html", "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    [read] = [i for i in document["run"]["inputs"] if i["path"] == str(path)]
    assert read["kind"] == "trace" and read["records"] == complete_lines(prefix) > 0
    problems = [w["problem"] for w in document["ingest_warnings"] if w["path"] == str(path) and w["line"] is None]
    assert len(problems) == 1 and problems[0].startswith(TRUNCATED_PROBLEM)


def test_a_cut_gzipped_log_keeps_its_lines_before_the_cut(tmp_path):
    text = (fixture_run(SOURCE_RUN) / "logs.log").read_bytes()
    packed = gzip.compress(text)
    damaged = packed[: len(packed) * 6 // 10]
    prefix = decompressed_prefix(damaged)
    assert 0 < len(prefix) < len(text)
    run, path = run_with(tmp_path, "logs.log", damaged)
    loaded = load_run(run)
    # The log reader keeps lines of interest: as many as it keeps of the same prefix read plain.
    plain = tmp_path / "plain" / "logs.log"
    plain.parent.mkdir()
    plain.write_bytes(prefix)
    [from_gzip] = [i for i in loaded.inputs if i.path == str(path)]
    [from_plain] = [i for i in load_run(plain).inputs if i.kind == "log"]
    assert from_gzip.kind == "log" and from_gzip.records == from_plain.records > 0
    [problem] = gzip_warnings(loaded, path)
    assert problem.startswith(f"{TRUNCATED_PROBLEM}{len(prefix):,} decompressed bytes")
    # No warning about undecodable bytes: the log was read decompressed, not as raw gzip.
    assert [w.problem for w in loaded.warnings if w.path == str(path)] == [problem]


def test_a_cut_json_trace_document_keeps_the_events_before_the_cut(tmp_path):
    lines = (fixture_run(SOURCE_RUN) / "trace_events.jsonl").read_text().splitlines()
    text = '{"traceEvents": [\n' + ",\n".join(lines) + "\n]}\n"
    packed = gzip.compress(text.encode())
    damaged = packed[: len(packed) // 2]
    prefix = decompressed_prefix(damaged)
    # The events whose closing brace is in the prefix: one per line after the first, the last maybe cut.
    *whole, last = prefix.split(b"\n")[1:]
    expected = len(whole) + complete_event(last)
    run = tmp_path / "run"
    run.mkdir()
    path = run / "kineto.json.gz"
    path.write_bytes(damaged)
    loaded = load_run(run)
    [info] = [i for i in loaded.inputs if i.path == str(path)]
    assert info.kind == "trace" and info.records == expected > 0
    assert any(p.startswith(TRUNCATED_PROBLEM) for p in gzip_warnings(loaded, path))


def test_a_cut_file_of_profiles_keeps_the_profiles_before_the_cut(tmp_path):
    profile = json.dumps(json.loads((fixture_run("demo") / "profile.json").read_text()))
    packed = gzip.compress(("\n".join([profile] * 3) + "\n").encode())
    damaged = packed[: len(packed) - 40]  # inside the third profile
    prefix = decompressed_prefix(damaged)
    assert complete_lines(prefix) == 2
    run = tmp_path / "run"
    run.mkdir()
    path = run / "profiles.json.gz"
    path.write_bytes(damaged)
    loaded = load_run(run)
    [info] = [i for i in loaded.inputs if i.path == str(path)]
    assert info.kind == "profile" and loaded.profiles.height == 2
    assert any(p.startswith(TRUNCATED_PROBLEM) for p in gzip_warnings(loaded, path))


def test_garbage_in_the_middle_of_a_gzip_keeps_what_decompressed_before_it(tmp_path):
    packed = bytearray(gzip.compress((fixture_run(SOURCE_RUN) / "metrics.jsonl").read_bytes()))
    middle = len(packed) // 2
    packed[middle : middle + 200] = bytes(range(200))  # a corrupt block after valid ones
    prefix = decompressed_prefix(bytes(packed))
    assert b"\n" in prefix
    run, path = run_with(tmp_path, "metrics.jsonl", bytes(packed))
    loaded = load_run(run)
    [info] = [i for i in loaded.inputs if i.path == str(path)]
    # The bytes before zlib's refusal are kept: the lines they complete are read, or warned about
    # when the damage reached into them before zlib noticed.
    assert info.records + info.skipped - 1 == complete_lines(prefix) + (not prefix.endswith(b"\n"))
    assert info.records > 0 and loaded.steps.height == info.records
    [problem] = gzip_warnings(loaded, path)
    assert problem.startswith(f"the gzip stream is corrupt after {len(prefix):,} decompressed bytes (Error -3")
    assert problem.endswith("; the records before it are kept")


@pytest.mark.parametrize(
    "content",
    [b"this is not gzip at all, nor JSON\n" * 10, bytes(range(256)) * 4, b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4],
    ids=["text", "binary", "gzip header then garbage"],
)
def test_a_gz_that_is_not_gzip_is_said_and_the_run_is_read(tmp_path, content):
    run, path = run_with(tmp_path, "trace_events.jsonl", content)
    result = CliRunner().invoke(main, ["analyze", str(run), "--no-html", "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    passed = [p["reason"] for p in document["run"]["passed_over"] if p["path"] == str(path)]
    read = [i for i in document["run"]["inputs"] if i["path"] == str(path)]
    warned = [w for w in document["ingest_warnings"] if w["path"] == str(path)]
    if content.startswith(b"\x1f\x8b"):
        # Nothing decompresses: refused by discovery with zlib's reason.
        assert not read and passed[0].startswith("corrupt gzip: Error -3 while decompressing data")
    else:
        # Named .gz but plain: read as it is (a plain JSONL misnamed .gz is read whole), its lines refused.
        assert read[0]["records"] == 0 and read[0]["skipped"] == len(warned) > 0
    assert document["run"]["steps"] == 20  # the rest of the run is read


def test_the_decompression_cap_still_stops_a_cut_gzip(tmp_path, monkeypatch):
    monkeypatch.setattr(input_stream, "MIN_CAP_BYTES", 64 * 1024)
    line = (fixture_run(SOURCE_RUN) / "trace_events.jsonl").read_bytes().split(b"\n")[5] + b"\n"
    packed = gzip.compress(line * 20_000)
    damaged = packed[: len(packed) - 100]  # cut near the end, far past the cap
    run = tmp_path / "run"
    run.mkdir()
    path = run / "trace_events.jsonl.gz"
    path.write_bytes(damaged)
    loaded = load_run(run)
    cap = max(64 * 1024, input_stream.MAX_EXPANSION * len(damaged))
    [info] = [i for i in loaded.inputs if i.path == str(path)]
    assert info.records == cap // len(line)
    problems = gzip_warnings(loaded, path)
    assert len(problems) == 1 and problems[0].startswith("decompression stopped after ")


def test_a_trace_copy_cut_short_is_not_read_as_where_the_run_stopped(tmp_path):
    """A completed RL run whose gzipped trace was copied cut short: the spans the cut leaves open are where the
    copy broke, not what the run was inside. run-stopped read them as "the files end inside the wrap-up"."""
    from trace_doctor.api import analyze
    from trace_doctor.derive.run_end import run_end

    run = tmp_path / "rl"
    shutil.copytree(fixture_run("rl_healthy"), run)
    trace = run / "trace_events.jsonl"
    packed = gzip.compress(trace.read_bytes())
    (run / "trace_events.jsonl.gz").write_bytes(packed[: len(packed) // 10])
    trace.unlink()
    tables = load_run(str(run))
    end = run_end(tables)
    assert end.broken_traces == (str(run / "trace_events.jsonl.gz"),)
    assert end.open_spans == () and end.last_step == 19
    assert not [f for f in analyze(tables).findings if f.rule == "run-stopped"]
