"""A timing_spans.jsonl that grew since a clean check is checked from where that check ended, and the
answer is a cold check's of the grown file: its counts when the new lines are clean, the whole read
(with its warnings) when they are not, and a whole check whenever the first bytes are not the same."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
from conftest import isolated_cache

from trace_doctor.ingest.parsers import timing_spans_resume
from trace_doctor.ingest.parsers.timing_spans import parse_timing_spans_files
from trace_doctor.ingest.storage import cache, resume_entry


def cookbook_lines(first: int, steps: int, seed: int) -> str:
    """Lines as the cookbook writes them (json.dumps defaults), steps `first`...`first + steps - 1`."""
    rng = random.Random(seed)
    names = ["sample_async", "train_step", "forward_backward", "optim_step", "get_batch"]
    out = []
    for step in range(first, first + steps):
        spans = [
            {"name": rng.choice(names), "duration": d, "wall_start": s, "wall_end": s + d}
            for d, s in ((rng.random() * 3, rng.random()) for _ in range(rng.randint(1, 12)))
        ]
        out.append(json.dumps({"step": step, "spans": spans}) + "\n")
    return "".join(out)


@pytest.fixture
def checks(tmp_path, monkeypatch):
    """A cache that keeps any file's check; returns the list of checks (True: resumed, False: whole)."""
    isolated_cache(tmp_path, monkeypatch)
    monkeypatch.setattr(timing_spans_resume, "MIN_RESUMED_BYTES", 0)
    seen: list[bool] = []
    original = timing_spans_resume.resumed

    def spy(path):
        found = original(path)
        if cache.enabled():  # a cold read's (cache off) is not a check that could resume
            seen.append(found is not None)
        return found

    monkeypatch.setattr(timing_spans_resume, "resumed", spy)
    return seen


def parse(path: Path):
    warnings: list = []
    table, inputs = parse_timing_spans_files([path], warnings)
    return table.read(), inputs, warnings


def cold(path: Path, monkeypatch) -> tuple:
    with monkeypatch.context() as m:
        m.setenv("TRACE_DOCTOR_CACHE", "off")
        return parse(path)


def same(got: tuple, want: tuple) -> None:
    assert got[0].equals(want[0], null_equal=True)
    assert got[1] == want[1] and got[2] == want[2]


def test_a_grown_file_is_checked_from_where_it_was_and_reads_as_cold(tmp_path, monkeypatch, checks):
    path = tmp_path / "timing_spans.jsonl"
    path.write_text(cookbook_lines(0, 30, seed=1))
    same(parse(path), cold(path, monkeypatch))
    for growth in range(3):
        with open(path, "a") as f:
            f.write(cookbook_lines(30 + 10 * growth, 10, seed=2 + growth))
        same(parse(path), cold(path, monkeypatch))
    assert checks == [False, True, True, True]
    # The deferred table counts every line: 60 steps' records, read lazily as a cold read's.
    assert parse(path)[1][0].records == 60


def test_a_bad_line_appended_reads_the_file_whole_with_its_warning(tmp_path, monkeypatch, checks):
    path = tmp_path / "timing_spans.jsonl"
    path.write_text(cookbook_lines(0, 20, seed=1))
    parse(path)
    with open(path, "a") as f:
        f.write('{"step": 20, "spans": [{"name": "x", "duration": NaN}]}\n' + cookbook_lines(21, 5, seed=3))
    got = parse(path)
    same(got, cold(path, monkeypatch))
    assert checks == [False, True] and got[2], "the bad line is reported, as a cold read reports it"
    # The entry still answers for the clean lines before the bad one: checking from there finds the bad
    # line again sooner than a whole check would, and the file is read whole again, the same way.
    same(parse(path), cold(path, monkeypatch))
    assert checks == [False, True, True]


def test_a_changed_first_line_is_checked_whole(tmp_path, monkeypatch, checks):
    path = tmp_path / "timing_spans.jsonl"
    text = cookbook_lines(0, 20, seed=1)
    path.write_text(text)
    parse(path)
    path.write_text(text.replace('"step": 0', '"step": 7', 1) + cookbook_lines(20, 5, seed=2))
    same(parse(path), cold(path, monkeypatch))
    assert checks == [False, False]


def test_a_shorter_file_is_checked_whole(tmp_path, monkeypatch, checks):
    path = tmp_path / "timing_spans.jsonl"
    text = cookbook_lines(0, 20, seed=1)
    path.write_text(text)
    parse(path)
    path.write_text(text[: text.index('{"step": 10')])
    same(parse(path), cold(path, monkeypatch))
    assert checks == [False, False]


def test_a_tampered_entry_is_a_miss(tmp_path, monkeypatch, checks):
    path = tmp_path / "timing_spans.jsonl"
    path.write_text(cookbook_lines(0, 20, seed=1))
    parse(path)
    entry = resume_entry.entry_path(path, timing_spans_resume.TABLE) / resume_entry.HEADER
    header = json.loads(entry.read_text())
    header["state"]["lines"] = "20"
    entry.write_text(json.dumps(header))
    with open(path, "a") as f:
        f.write(cookbook_lines(20, 5, seed=2))
    same(parse(path), cold(path, monkeypatch))
    assert checks == [False, False]


def test_a_gzip_file_is_never_resumed(tmp_path, monkeypatch, checks):
    path = tmp_path / "timing_spans.jsonl.gz"
    path.write_bytes(gzip.compress(cookbook_lines(0, 20, seed=1).encode()))
    parse(path)
    assert not resume_entry.entry_path(path, timing_spans_resume.TABLE).exists()
    path.write_bytes(gzip.compress(cookbook_lines(0, 25, seed=1).encode()))
    same(parse(path), cold(path, monkeypatch))
    assert checks == [False, False]


def test_no_entry_without_the_cache(tmp_path, monkeypatch, checks):
    path = tmp_path / "timing_spans.jsonl"
    path.write_text(cookbook_lines(0, 20, seed=1))
    monkeypatch.setenv("TRACE_DOCTOR_CACHE", "off")
    parse(path)
    assert not resume_entry.entry_path(path, timing_spans_resume.TABLE).exists()
