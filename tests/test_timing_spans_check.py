"""timing_spans.jsonl is checked at ingest and read only when a reader asks, with the same result.

The check may only defer a file the read would keep whole with nothing to report; every other file
is read at once. Either way, the table, its records and warnings are those of the read itself.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trace_doctor.ingest.parsers import timing_spans
from trace_doctor.ingest.parsers.timing_spans import parse_timing_spans_files
from trace_doctor.ingest.storage.stored_table import DeferredPart

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_FILES = sorted((ROOT / "fixtures" / "runs").glob("*/timing_spans.jsonl"))


def cookbook_line(step: int, spans: list[tuple[str, float, float]]) -> str:
    """A line as the cookbook writes it (json.dumps defaults)."""
    return json.dumps(
        {"step": step, "spans": [{"name": n, "duration": d, "wall_start": s, "wall_end": s + d} for n, d, s in spans]}
    )


def cookbook_file(path: Path, steps: int = 40, seed: int = 0) -> Path:
    rng = random.Random(seed)
    names = ["sample_async", "policy_sample", "train_step", "forward_backward", "optim_step", "get_batch"]
    lines = [
        cookbook_line(step, [(rng.choice(names), rng.random() * 3, rng.random()) for _ in range(rng.randint(0, 12))])
        for step in range(steps)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def read_now(path: Path):
    """The read itself, without the check: the reference."""
    warnings = []
    table, info = timing_spans._parse(path, warnings)
    return table.read(), info, warnings


def ingest(path: Path):
    warnings = []
    table, inputs = parse_timing_spans_files([path], warnings)
    return table, inputs[0], warnings


def deferred(table) -> bool:
    return any(isinstance(part, DeferredPart) for part in table.parts)


def same_as_read(path: Path) -> bool:
    """Ingest gives exactly what the read gives: rows, counts and warnings; returns whether it was deferred."""
    expected, expected_info, expected_warnings = read_now(path)
    table, info, warnings = ingest(path)
    was_deferred = deferred(table)
    assert table.height == expected.height
    assert (info.records, info.skipped) == (expected_info.records, expected_info.skipped)
    assert warnings == expected_warnings
    assert table.read().equals(expected)
    assert table.height == expected.height and not deferred(table)
    return was_deferred


def test_a_cookbook_file_is_counted_not_read(tmp_path, monkeypatch):
    path = cookbook_file(tmp_path / "timing_spans.jsonl")
    reads = []
    original = timing_spans._parse
    monkeypatch.setattr(timing_spans, "_parse", lambda *a, **k: reads.append(a) or original(*a, **k))
    table, info, warnings = ingest(path)
    assert reads == [] and deferred(table)
    expected, expected_info, _ = read_now(path)  # the reference read: one call
    assert (info.records, info.skipped, warnings) == (40, 0, [])
    assert table.height == expected.height > 0
    assert table.scan().select(pl.len()).collect().item() == expected.height
    assert len(reads) == 2
    assert table.read().equals(expected)
    assert len(reads) == 2  # produced once


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[p.parent.name for p in FIXTURE_FILES])
def test_fixture_files_read_the_same(path):
    same_as_read(path)


def value(key: str, text: str):
    """A change of the first `key`'s value to `text` (the line stays JSON unless `text` is not)."""
    return lambda line: re.sub(f'"{key}": [^,}}]+', lambda _: f'"{key}": {text}', line, count=1)


# Each turns one line of a clean file into one the check must leave to the read.
NEEDS_THE_READ = {
    "a duration that overflows to infinity": value("duration", "1e999"),
    "a 400-digit number": value("wall_start", "9" * 400 + ".5"),
    "a three-digit exponent": value("wall_end", "1e-300"),
    "a step beyond 64 bits": value("step", "99999999999999999999"),
    "a float step": value("step", "5.0"),
    "NaN": value("duration", "NaN"),
    "a string duration": value("duration", '"1.5"'),
    "a nested value": value("wall_end", '{"a": 1}'),
    "an escaped name": lambda line: line.replace('"name": "', '"name": "caf\\u00e9 ', 1),
    "a CRLF ending": lambda line: line + "\r",
    "an extra key": lambda line: line.replace('{"step": ', '{"run": 1, "step": ', 1),
    "other spacing": lambda line: line.replace(", ", ",", 1),
    "garbage": lambda line: "not json at all",
    "a blank line": lambda line: "",
    "a BOM": lambda line: "\ufeff" + line,
    "truncated": lambda line: line[: len(line) // 2],
}


@pytest.mark.parametrize("change", sorted(NEEDS_THE_READ))
def test_a_line_that_needs_care_gets_the_read_and_its_warnings(tmp_path, change):
    path = cookbook_file(tmp_path / "timing_spans.jsonl", steps=12)
    lines = path.read_text().split("\n")
    lines[5] = NEEDS_THE_READ[change](cookbook_line(5, [("a", 1.5, 0.25), ("b", 2.5, 0.5)]))
    path.write_text("\n".join(lines))
    assert not same_as_read(path)


def test_exact_layout_values_at_the_bounds_are_deferred_and_read_the_same(tmp_path):
    path = tmp_path / "timing_spans.jsonl"
    big = "9" * 200
    rows = [
        '{"step": 999999999999999999, "spans": [{"name": "x", "duration": '
        + big
        + '.5e99, "wall_start": -0.0, "wall_end": 1E-99}]}',
        '{"step": -3, "spans": []}',
        '{"step": 0, "spans": [{"name": "", "duration": 0, "wall_start": 0, "wall_end": 0}]}',
    ]
    path.write_text("\n".join(rows) + "\n")
    assert same_as_read(path)


def test_the_table_is_the_bytes_checked_when_the_file_grows(tmp_path):
    path = cookbook_file(tmp_path / "timing_spans.jsonl", steps=10)
    table, info, _ = ingest(path)
    before = read_now(path)[0]
    with path.open("a") as handle:
        handle.write(cookbook_line(10, [("late", 1.0, 0.0)]) + "\n")
    assert table.read().equals(before) and info.records == 10


def test_gzip_files_are_checked_and_a_corrupt_one_is_read(tmp_path):
    plain = cookbook_file(tmp_path / "plain.jsonl", steps=30)
    packed = tmp_path / "timing_spans.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert same_as_read(packed)
    packed.write_bytes(packed.read_bytes()[:-40])
    assert not same_as_read(packed)


def test_a_missing_file_is_reported_by_the_read(tmp_path):
    path = tmp_path / "timing_spans.jsonl"
    table, info, warnings = ingest(path)
    assert table.height == 0 and info.skipped == 1 and "cannot read file" in warnings[0].problem


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_damage_gives_what_the_read_gives(tmp_path_factory, data):
    path = cookbook_file(
        tmp_path_factory.mktemp("ts") / "timing_spans.jsonl", steps=8, seed=data.draw(st.integers(0, 9))
    )
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw)))
        kind = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        byte = data.draw(st.sampled_from(list(b'0123456789"{}[],:.eE-+\\ \n\r\x00\xff') + [0xC3, 0x7F]))
        if kind == "insert":
            raw[at:at] = bytes([byte])
        elif at < len(raw):
            raw[at : at + 1] = b"" if kind == "delete" else bytes([byte])
    path.write_bytes(bytes(raw))
    same_as_read(path)


def deferred_run(root: Path) -> Path:
    """A run whose timing_spans.jsonl the check defers (the cookbook's layout, nothing to report)."""
    root.mkdir()
    (root / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "time/total": 1.0}) + "\n" for s in range(40)))
    cookbook_file(root / "timing_spans.jsonl", steps=40)
    return root


@pytest.mark.parametrize("change", ["removed", "cut"])
def test_a_file_changed_between_the_check_and_the_read_says_so_in_the_run(tmp_path, change):
    """Exports read the step spans after the analysis: a file removed or cut meanwhile gives fewer
    rows than the analysis counted, and the run's account (every output's ingest warnings) says it."""
    from trace_doctor.api import analyze, load_run
    from trace_doctor.report.parquet import dataset_tables

    root = deferred_run(tmp_path / "run")
    path = root / "timing_spans.jsonl"
    run = load_run(root)
    assert isinstance(run._raw("step_spans").parts[0], DeferredPart)
    counted = run.height("step_spans")
    result = analyze(run)
    before = len(run.warnings)
    if change == "removed":
        path.unlink()
    else:
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:10]))
    tables = dataset_tables(result, str(root))
    assert tables["step_spans"].height < counted
    late = [w.problem for w in run.warnings[before:]]
    expected = "cannot read file" if change == "removed" else f"{counted:,} when the run was analysed"
    assert len(late) == 1 and expected in late[0], late
    assert tables["ingest_warnings"]["problem"].str.contains(re.escape(late[0])).any()


def test_a_file_unchanged_since_the_check_adds_no_warning(tmp_path):
    from trace_doctor.api import load_run

    run = load_run(deferred_run(tmp_path / "run"))
    before = list(run.warnings)
    assert run.step_spans.height == run.height("step_spans") > 0
    assert run.warnings == before
