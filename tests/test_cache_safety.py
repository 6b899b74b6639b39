"""The cache folder is untrusted and may be full: a planted entry runs nothing and is a miss; a disk that
refuses writes, as an OSError or as polars' ComputeError, turns the cache off with one note and the
analysis goes on; a command leaves no temporary file behind."""

from __future__ import annotations

import errno
import gc
import os
import pickle
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import ROOT, isolated_cache
from test_cache import entries, header, parse, steps, write

from trace_doctor.cli import main
from trace_doctor.ingest.storage import cache, stored_table
from trace_doctor.ingest.trace import trace_events as te

NO_SPACE = "parquet: File out of specification: underlying IO error: No space left on device (os error 28)"


class Poison:
    """Pickled, names a function that writes `marker`: unpickled, it would leave the file behind."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "owned"))


@pytest.fixture
def cached(tmp_path, monkeypatch):
    root = isolated_cache(tmp_path, monkeypatch)
    monkeypatch.setattr(cache, "MIN_CACHED_BYTES", 0)
    monkeypatch.setattr(stored_table, "_disk_ok", True)  # whatever an earlier test's disk did
    return root


@pytest.mark.parametrize("planted", ["the header", "a part"])
def test_a_pickle_planted_in_a_table_entry_runs_nothing_and_is_a_miss(planted, cached, tmp_path, monkeypatch):
    trace = write(tmp_path / "trace_events.jsonl", steps(0, 50))
    fresh = parse(trace)
    (entry,) = entries(cached)
    marker = tmp_path / "marker"
    target = header(entry) if planted == "the header" else sorted(entry.glob("part-*.parquet"))[0]
    target.write_bytes(pickle.dumps(Poison(marker)))
    parses = []
    monkeypatch.setattr(cache, "adopt", lambda *args, **kwargs: parses.append(1) or original_adopt(*args, **kwargs))
    again = parse(trace)
    assert not marker.exists()
    assert parses == [1]  # parsed afresh: the entry was a miss
    assert again[0].equals(fresh[0])


original_adopt = cache.adopt


def raising(error: BaseException):
    def write(*args, **kwargs):
        raise error

    return write


@pytest.mark.parametrize(
    "error",
    [OSError(errno.ENOSPC, "No space left on device"), pl.exceptions.ComputeError(NO_SPACE), RuntimeError("disk")],
    ids=["ENOSPC", "ComputeError", "any error"],
)
def test_an_entry_the_disk_refuses_turns_the_cache_off_with_one_note(error, cached):
    assert cache.write_entry(cached / f"metrics-{'0' * 32}.parquet", raising(error)) is False
    assert cache.write_entry(cached / f"metrics-{'1' * 32}.parquet", lambda out: out.write(b"x")) is False
    notes = cache.take_notes()
    assert len(notes) == 1 and notes[0].startswith("table cache disabled")
    assert [p.name for p in cached.iterdir()] == []  # the refused entry's temporary file is gone


def test_a_stored_table_whose_cache_disk_fills_goes_on_in_the_scratch_folder(cached, tmp_path, monkeypatch):
    trace = write(tmp_path / "trace_events.jsonl", steps(0, 300))
    expected = parse(trace)[0]
    cache.take_notes()
    for entry in entries(cached):
        stored_table.shutil.rmtree(entry)
    monkeypatch.setattr(stored_table, "MEMORY_ROWS", 0)
    write_parquet = pl.DataFrame.write_parquet

    def full_cache(self, file, *args, **kwargs):
        if Path(file).parent.parent == cached:  # a part of an entry being built: the cache's disk is full
            raise pl.exceptions.ComputeError(NO_SPACE)
        return write_parquet(self, file, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", full_cache)
    spans, info, warnings = parse(trace)
    assert spans.equals(expected)
    assert [n for n in cache.take_notes() if n.startswith("table cache disabled")] != []
    assert entries(cached) == []


def test_a_full_cache_disk_is_no_internal_error(cached, tmp_path, monkeypatch):
    """Every write refused (the cache's disk and the scratch folder's): the cache is turned off, the
    writer falls back once to the scratch folder, then keeps the rows in memory; same answer."""
    run = tmp_path / "run"
    run.mkdir()
    write(run / "trace_events.jsonl", steps(0, 200))
    (run / "metrics.jsonl").write_text('{"step": 0, "loss": 1.0}\n')
    fresh = CliRunner().invoke(
        main, ["analyze", str(run), "--no-html", "--format", "json"], env={"TRACE_DOCTOR_CACHE": "off"}
    )
    monkeypatch.setattr(pl.DataFrame, "write_parquet", raising(pl.exceptions.ComputeError(NO_SPACE)))
    full = CliRunner().invoke(main, ["analyze", str(run), "--no-html", "--format", "json"])
    assert full.exit_code == fresh.exit_code != 3, full.stderr
    assert full.stdout == fresh.stdout
    assert full.stderr.count("table cache disabled") == 1


def test_a_command_leaves_no_temporary_file_even_when_it_loses_a_race(tmp_path):
    """Two analyses of one large trace at once: both build the entry, one loses the rename; neither
    leaves a folder in TMPDIR or a `.tmp-` in the cache (the CLI ends with os._exit: its exit work
    runs first)."""
    run = tmp_path / "run"
    run.mkdir()
    write(run / "trace_events.jsonl", steps(0, 12_000))  # > MIN_CACHED_BYTES: the spans are cached
    assert (run / "trace_events.jsonl").stat().st_size > cache.MIN_CACHED_BYTES
    (tmp_path / "tmp").mkdir()
    env = dict(
        os.environ, PYTHONPATH=str(ROOT), TRACE_DOCTOR_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp_path / "tmp")
    )
    env.pop("TRACE_DOCTOR_CACHE", None)
    command = [sys.executable, "-m", "trace_doctor.cli", "analyze", str(run), "--no-html", "--format", "json"]
    both = [subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(2)]
    for process in both:
        assert process.wait(timeout=300) in (0, 1), process.stderr.read()
    assert list((tmp_path / "tmp").iterdir()) == []
    left = [p.name for p in (tmp_path / "cache").iterdir()]
    assert not [name for name in left if name.startswith(".tmp-")], left
    assert any(cache.STORED_ENTRY.fullmatch(name) for name in left)


def test_a_table_that_lost_the_race_to_its_entry_goes_when_dropped(cached, tmp_path, monkeypatch):
    """Another process renamed the same entry into place first: this one reads its own copy from its
    `.tmp-` folder while it needs it, and the folder goes as soon as the table is dropped (it used to
    wait for the process to exit: a whole span table per lost race, outside the cache's cap)."""
    trace = write(tmp_path / "trace_events.jsonl", steps(0, 300))
    monkeypatch.setattr(te, "MEMORY_ROWS", 0)  # the spans on disk however few

    def taken(source, target):
        raise FileExistsError(errno.EEXIST, "File exists", target)

    monkeypatch.setattr(cache.os, "rename", taken)
    warnings: list = []
    spans, _ = te.parse_trace_files([trace], warnings)
    (temporary,) = [p for p in cached.iterdir() if p.name.startswith(".tmp-")]
    assert spans.read().height == 300  # read from the loser's own copy
    del spans
    gc.collect()
    assert not temporary.exists()
    assert [p.name for p in cached.iterdir() if p.name.startswith(".tmp-")] == []


def test_writes_in_progress_count_against_the_cap(cached, tmp_path, monkeypatch):
    """A `.tmp-` file or folder being written is not evicted, but older entries make room for it; a
    stale one (its writer killed) is removed."""
    for step in range(3):
        (tmp_path / f"t{step}").mkdir()
        parse(write(tmp_path / f"t{step}" / "trace_events.jsonl", steps(0, 100 + step)))
    old = sorted(entries(cached), key=lambda e: header(e).stat().st_mtime)
    assert len(old) == 3
    monkeypatch.setattr(cache, "RECENT_USE_SECONDS", -1)
    in_progress = cached / ".tmp-writing"
    in_progress.mkdir()
    entry_bytes = max(sum(p.stat().st_size for p in e.iterdir()) for e in old)
    (in_progress / "part-00000.parquet").write_bytes(b"x" * (2 * entry_bytes))
    stale = cached / ".tmp-killed.parquet"
    stale.write_bytes(b"y" * 10)
    os.utime(stale, (1, 1))
    everything = sum(p.stat().st_size for p in cached.rglob("*") if p.is_file())
    # The traces' resume states (evicted first, ingest/storage/resume_entry.py) go before any entry.
    states = sum(p.stat().st_size for p in cached.glob("*.resume/**/*") if p.is_file())
    cache.evict(cached, everything - states - entry_bytes - 10)
    assert in_progress.exists() and not stale.exists()
    assert len(entries(cached)) < 3  # entries made room for the write in progress
