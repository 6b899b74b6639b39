"""Input kinds register themselves: a kind declared in one module is discovered, ingested in its place
and counted, with no other module touched; the built-in kinds' declarations hold together."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from trace_doctor import load_run
from trace_doctor.discover import classify, discover
from trace_doctor.ingest.kinds.registry import (
    ContentTest,
    InputKind,
    Parsed,
    Reading,
    Sniffed,
    register,
    registered,
    unregister,
)
from trace_doctor.ingest.read_run import read_run
from trace_doctor.model import LOG_EVENTS_SCHEMA, InputFile, RunTables


def parse_toy(paths: list[Path], warnings, reading: Reading) -> Parsed:
    """A toy format: every line `TOY <message>` is a log event of kind "toy"."""
    rows, inputs = [], []
    for path in paths:
        info = InputFile(kind="toy", path=str(path))
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.startswith("TOY "):
                rows.append({"source": str(path), "line": number, "kind": "toy", "message": line[4:]})
                info.records += 1
            else:
                info.skipped += 1
        inputs.append(info)
    return Parsed({"log_events": pl.DataFrame(rows, schema=LOG_EVENTS_SCHEMA)}, inputs)


def toy_text(sniffed: Sniffed) -> bool:
    return sniffed.head.startswith(b"TOY ")


@pytest.fixture
def toy_kind():
    kind = register(
        InputKind(
            name="toy",
            order=85,  # between dumps (80) and logs (90)
            fills=("log_events",),
            parse=parse_toy,
            name_test=lambda name: name.endswith(".toy"),
            # Before the dump's and the log's tests: a `.txt` starting with TOY is a toy file.
            content=(ContentTest("text", toy_text, rank=5),),
        )
    )
    yield kind
    unregister(kind.name)


def _toy_run(folder: Path) -> Path:
    folder.mkdir()
    (folder / "metrics.jsonl").write_text('{"step": 0, "time/total": 1.0}\n{"step": 1, "time/total": 1.0}\n')
    (folder / "logs.log").write_text("root:1 [WARNING] a warning from the log\n")
    (folder / "notes.toy").write_text("TOY first\nnot toy\nTOY second\n")
    (folder / "renamed.txt").write_text("TOY by content\n")
    return folder


def test_a_kind_declared_in_a_test_is_discovered_ingested_and_counted(toy_kind, tmp_path):
    run_dir = _toy_run(tmp_path / "run")
    assert classify(run_dir / "notes.toy") == ("toy", "")
    assert classify(run_dir / "renamed.txt") == ("toy", "")  # by content, ahead of the log's test
    found = discover([run_dir])
    assert sorted(p.name for p in found.files["toy"]) == ["notes.toy", "renamed.txt"]

    run = load_run(run_dir)
    kinds = [(info.kind, Path(info.path).name, info.records, info.skipped) for info in run.inputs]
    # In the kinds' order: metrics (20), toy (85), then log (90).
    assert kinds == [
        ("metrics", "metrics.jsonl", 2, 0),
        ("toy", "notes.toy", 2, 1),
        ("toy", "renamed.txt", 1, 0),
        ("log", "logs.log", 1, 0),
    ]
    assert run.has_input("toy")
    assert run.records_read == 6
    # Both kinds fill log_events: the rows of each, in the kinds' order.
    events = run.log_events.select("kind", "message").rows()
    assert events[:3] == [("toy", "first"), ("toy", "second"), ("toy", "by content")]
    assert events[3][1] == "a warning from the log"


def test_without_the_kind_its_files_are_passed_over(tmp_path):
    run_dir = _toy_run(tmp_path / "run")
    assert "toy" not in {kind.name for kind in registered()}
    assert classify(run_dir / "notes.toy") == (None, "not a recognised input")
    assert classify(run_dir / "renamed.txt") == ("log", "")


def test_the_json_document_counts_a_registered_kind(toy_kind, tmp_path):
    from click.testing import CliRunner

    from trace_doctor.cli import main

    run_dir = _toy_run(tmp_path / "run")
    result = CliRunner().invoke(main, ["analyze", str(run_dir), "--format", "json", "--no-html"])
    inputs = json.loads(result.stdout)["run"]["inputs"]
    assert [item["kind"] for item in inputs] == ["metrics", "toy", "toy", "log"]


def test_a_declaration_that_cannot_work_is_refused_when_registered():
    with pytest.raises(ValueError, match="not a RunTables field"):
        register(InputKind(name="bad", order=1, fills=("no_such_table",), parse=parse_toy))
    with pytest.raises(ValueError, match="has no parser"):
        register(InputKind(name="bad", order=1, fills=("log_events",)))
    # A stored table (or the run's metadata) is one kind's: rows cannot be appended to it.
    with pytest.raises(ValueError, match="spans already filled by trace"):
        register(InputKind(name="bad", order=1, fills=("spans",), parse=parse_toy))
    assert "bad" not in {kind.name for kind in registered()}


def test_a_parser_filling_a_field_it_did_not_declare_fails_the_ingest(tmp_path):
    def sneaky(paths, warnings, reading):
        return Parsed({"checkpoints": pl.DataFrame(), "rollouts": pl.DataFrame()}, [])

    register(InputKind(name="sneaky", order=1, fills=("log_events",), parse=sneaky))
    try:
        with pytest.raises(ValueError, match="sneaky filled checkpoints, rollouts, which it does not declare"):
            read_run({})
    finally:
        unregister("sneaky")


def test_every_table_is_filled_by_a_built_in_kind_and_every_kind_read():
    kinds = registered()
    names = [kind.name for kind in kinds]
    assert len(names) == len(set(names))
    filled = {name for kind in kinds for name in kind.fills}
    assert set(RunTables.TABLE_NAMES) <= filled
    # Every kind's files are read by some parser (code.diff by the log's).
    read = {name for kind in kinds for name in kind.files_read}
    assert read == set(names)
    # The account's order: the JSON document lists inputs and warnings so.
    assert names[:4] == ["config", "metrics", "trace", "spans"]


def test_the_trace_waits_for_no_one_and_timing_spans_wait_for_the_trace_read(tmp_path, monkeypatch):
    """The trace is parsed on a worker thread; timing spans only once the trace's bytes are read."""
    import threading

    from trace_doctor.ingest.kinds import spans as spans_kind
    from trace_doctor.ingest.kinds import trace as trace_kind

    seen: list[str] = []
    trace_parse, spans_parse = trace_kind.KIND.parse, spans_kind.KIND.parse

    def trace(paths, warnings, reading):
        seen.append(f"trace on {threading.current_thread().name.split('_')[0]}")
        return trace_parse(
            paths, warnings, Reading(reading.progress, lambda: (seen.append("trace read"), reading.on_read()))
        )

    def spans(paths, warnings, reading):
        seen.append("spans")
        return spans_parse(paths, warnings, reading)

    from dataclasses import replace

    register(replace(trace_kind.KIND, parse=trace))
    register(replace(spans_kind.KIND, parse=spans))
    try:
        run = read_run({"trace": [], "spans": []})
    finally:
        register(trace_kind.KIND)
        register(spans_kind.KIND)
    assert seen == ["trace on ingest", "trace read", "spans"]
    assert run.height("spans") == 0


def test_a_refused_json_file_is_told_what_the_kinds_would_take(tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_text('{"schema_version": 2}\n')
    document = tmp_path / "other.json"
    document.write_text('{"a": 1}')
    jsonl_reason = "JSONL that is not metrics, trace, timing spans, checkpoints or rollout summaries"
    assert classify(other) == (None, jsonl_reason)
    assert classify(document) == (None, "JSON that is neither a pyinstrument profile nor a trace")
    register(
        InputKind(
            name="toy_json",
            order=99,
            fills=("log_events",),
            parse=parse_toy,
            content=(ContentTest("json", lambda sniffed: b'"toy"' in sniffed.document, rank=30, noun="a toy"),),
        )
    )
    try:
        assert classify(document) == (None, "JSON that is not a pyinstrument profile, a trace or a toy")
        document.write_text('{"toy": 1}')
        assert classify(document) == ("toy_json", "")
    finally:
        unregister("toy_json")


def test_a_long_run_of_quote_markers_is_sniffed_in_linear_time():
    # `(?:> ?)*` before a class that also takes `>` split a run of `>` every possible way: 256 KB of them took
    # ~100 s to sniff. In a child with a bound far above the linear time (milliseconds) and far below that.
    import subprocess
    import sys

    probe = (
        "from trace_doctor.ingest.kinds.log import LOG_RECORD\n"
        "assert LOG_RECORD.search(b'>' * (256 << 10)) is None\n"
        "assert LOG_RECORD.search(b'> > tinker_cookbook.rl.train:30 [INFO] Starting train') is not None\n"
        "assert LOG_RECORD.search(b'>INFO:tinker_cookbook.rl.train:Starting train') is not None\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
