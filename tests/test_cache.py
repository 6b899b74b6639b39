"""The table cache cannot lie: live appends, same-size edits, garbage entries, concurrent writers,
eviction, and a cache folder that cannot be written."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import isolated_cache

from trace_doctor.cli import main
from trace_doctor.ingest.storage import cache
from trace_doctor.ingest.trace import trace_events as te
from trace_doctor.ingest.trace.trace_events import parse_trace_files


def event(name: str, ph: str, ts: float, step: int | None = None) -> str:
    """One event as the cookbook writer serialises it."""
    args = {"track": "main", "thread": "MainThread", **({"step": step} if step is not None else {})}
    return json.dumps({"name": name, "ph": ph, "pid": 0, "tid": 1, "ts": ts, "args": args, "cat": "async"})


def steps(first: int, count: int) -> list[str]:
    """`count` training steps as B/E pairs, 1 ms apart, each with a padded name (bulk, so the old
    head-and-tail fingerprint misses edits in the middle)."""
    lines = []
    for step in range(first, first + count):
        lines.append(event(f"train_step {'x' * 200}", "B", step * 1000.0))
        lines.append(event(f"train_step {'x' * 200}", "E", step * 1000.0 + 500.0, step=step))
    return lines


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def parse(path: Path):
    warnings: list = []
    spans, [info] = parse_trace_files([path], warnings)
    return spans.read(), info, warnings


@pytest.fixture
def cached(tmp_path, monkeypatch):
    """A cache in tmp_path that takes any file, and a fresh per-process state."""
    root = isolated_cache(tmp_path, monkeypatch)
    monkeypatch.setattr(cache, "MIN_CACHED_BYTES", 0)
    return root


def entries(root: Path) -> list[Path]:
    """The cache's entries: a trace's spans are a folder of Parquet parts and its header."""
    return sorted(p for p in root.iterdir() if cache.ENTRY.fullmatch(p.name) or cache.STORED_ENTRY.fullmatch(p.name))


def header(entry: Path) -> Path:
    return entry / "entry.json"


def size(entry: Path) -> int:
    return sum(p.stat().st_size for p in entry.iterdir())


def test_a_hit_returns_the_parse_and_skips_it(cached, tmp_path, monkeypatch):
    path = write(tmp_path / "trace_events.jsonl", [*steps(0, 20), "junk"])
    first = parse(path)
    assert len(entries(cached)) == 1
    monkeypatch.setattr(te, "_parse_trace_file", lambda *a: pytest.fail("parsed again despite a valid entry"))
    second = parse(path)
    assert first[0].equals(second[0]) and first[1:] == second[1:]
    assert second[1].skipped == 1 and second[2][0].problem.startswith("not valid JSON")


def test_lines_appended_while_the_trace_is_parsed_are_read_next_time(cached, tmp_path, monkeypatch):
    """The main use: a run still going. Lines the writer appends after the reader reached the end
    must be in the next answer; the old key (taken from the file after parsing) lost them forever."""
    path = write(tmp_path / "trace_events.jsonl", steps(0, 10))
    build = te.build_spans

    def append_then_build(*args):
        with open(path, "a") as out:
            out.write("".join(line + "\n" for line in steps(10, 5)))
        return build(*args)

    monkeypatch.setattr(te, "build_spans", append_then_build)
    assert parse(path)[0].height == 10
    monkeypatch.setattr(te, "build_spans", build)
    spans, info, _ = parse(path)
    assert spans.height == 15 and info.records == 30
    assert parse(path)[0].height == 15  # and that answer is cached in turn


def test_an_edit_keeping_size_and_mtime_is_seen(cached, tmp_path):
    path = write(tmp_path / "trace_events.jsonl", steps(0, 400))
    assert path.stat().st_size > 4 * 64 * 1024
    before = os.stat(path)
    assert parse(path)[0].filter(pl.col("step") == 200).height == 1
    data = path.read_bytes()
    edited = data.replace(b'"step": 200}', b'"step": 999}')
    assert len(edited) == len(data) and edited != data
    path.write_bytes(edited)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns
    spans = parse(path)[0]
    assert spans.filter(pl.col("step") == 999).height == 1 and spans.filter(pl.col("step") == 200).is_empty()


def test_a_gzipped_trace_is_cached_by_its_compressed_bytes(cached, tmp_path, monkeypatch):
    path = tmp_path / "trace_events.jsonl"
    path.write_bytes(gzip.compress("".join(line + "\n" for line in steps(0, 30)).encode()))
    first = parse(path)
    assert first[0].height == 30 and len(entries(cached)) == 1
    monkeypatch.setattr(te, "_parse_trace_file", lambda *a: pytest.fail("parsed again despite a valid entry"))
    assert parse(path)[0].equals(first[0])


GARBAGE_ENTRIES = {
    "meta null": b"null\n",
    "meta list": b"[]\n",
    "meta empty object": b"{}\n",
    "meta without warnings": None,  # built below from a real entry
    "input record of the wrong shape": None,
    "warning of the wrong shape": None,
    "truncated parquet": None,
    "no newline": b'{"parser": "x"',
    "binary": bytes(range(256)) * 10,
    "empty": b"",
}


@pytest.mark.parametrize("kind", list(GARBAGE_ENTRIES))
def test_any_garbage_in_an_entry_is_a_miss(cached, tmp_path, kind):
    path = write(tmp_path / "trace_events.jsonl", [*steps(0, 10), "junk"])
    expected = parse(path)
    [entry] = entries(cached)
    meta = json.loads(header(entry).read_bytes())
    if kind == "meta without warnings":
        del meta["warnings"]
    elif kind == "input record of the wrong shape":
        meta["input"] = {"kind": "trace", "records": "many"}
    elif kind == "warning of the wrong shape":
        meta["warnings"] = [{"path": 1, "line": "x"}]
    if GARBAGE_ENTRIES[kind] is not None:
        header(entry).write_bytes(GARBAGE_ENTRIES[kind])
    elif kind == "truncated parquet":
        [part] = entry.glob("part-*.parquet")
        part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    else:
        header(entry).write_bytes(json.dumps(meta).encode())
    assert cache.load_stored(path, "spans") is None
    again = parse(path)
    assert again[0].equals(expected[0]) and again[1:] == expected[1:]


def test_a_directory_where_an_entry_belongs_and_foreign_files_are_harmless(cached, tmp_path):
    path = write(tmp_path / "trace_events.jsonl", steps(0, 10))
    parse(path)
    [entry] = entries(cached)
    shutil.rmtree(entry)
    entry.write_text("a file where the entry's folder belongs")
    (cached / "notes.txt").write_text("the user's own file")
    (cached / "spans-zz.parquet").write_text("not ours either")
    assert parse(path)[0].height == 10
    assert (cached / "notes.txt").exists() and (cached / "spans-zz.parquet").exists()


def test_concurrent_writers_never_mix_two_versions(cached, tmp_path):
    """Threads parse a trace that flips between two contents of the same size: every answer is the
    table of one of them, whichever the reader saw, however entries are written and replaced."""
    path = tmp_path / "trace_events.jsonl"
    versions = [steps(0, 50), steps(0, 50)]
    versions[1] = [line.replace('"step": 7}', '"step": 8}') for line in versions[1]]
    texts = ["".join(line + "\n" for line in v).encode() for v in versions]
    assert len(texts[0]) == len(texts[1])
    expected = []
    for number, text in enumerate(texts):
        (tmp_path / f"v{number}").write_bytes(text)
        expected.append(parse(tmp_path / f"v{number}")[0].drop("source"))
    path.write_bytes(texts[0])
    failures: list[str] = []
    stop = threading.Event()

    def flip():
        number = 0
        while not stop.is_set():
            number = 1 - number
            staged = tmp_path / f"staged{number}"
            staged.write_bytes(texts[number])
            os.replace(staged, path)

    def analyse():
        for _ in range(25):
            spans = parse(path)[0].drop("source")
            if not any(spans.equals(e) for e in expected):
                failures.append("a table that is neither version")

    flipper = threading.Thread(target=flip)
    flipper.start()
    readers = [threading.Thread(target=analyse) for _ in range(3)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    stop.set()
    flipper.join()
    assert failures == []
    # Once the file holds still, its parse is stored, and answers for the version it now holds.
    final = texts.index(path.read_bytes())
    assert parse(path)[0].drop("source").equals(expected[final]) and entry_of(cached, path).exists()
    assert parse(path)[0].drop("source").equals(expected[final])


def entry_of(root: Path, path: Path) -> Path:
    """The entry of `path`'s latest version (each version of a file has its own)."""
    found = [e for e in entries(root) if json.loads(header(e).read_bytes())["input"]["path"] == str(path)]
    return max(found, key=lambda e: header(e).stat().st_mtime_ns)


def test_the_folder_is_kept_under_its_cap_least_recently_used_first(cached, tmp_path, monkeypatch):
    paths = [write(tmp_path / f"run{i}.jsonl", steps(0, 30)) for i in range(3)]
    parse(paths[0])
    parse(paths[1])
    largest = max(size(e) for e in entries(cached))
    # Entries written within one second: the order of use is made explicit (and long ago: an entry
    # used in the last minutes may be being read by another process, and is never evicted).
    os.utime(header(entry_of(cached, paths[0])), (1, 1))
    os.utime(header(entry_of(cached, paths[1])), (2, 2))
    (cached / "notes.txt").write_bytes(b"x" * largest * 10)  # not an entry: never counted, never deleted
    monkeypatch.setenv("TRACE_DOCTOR_CACHE_MAX_MB", str(2.5 * largest / 1024 / 1024))
    parse(paths[0])  # a hit: run0 is now the most recently used
    parse(paths[2])  # three entries are over the cap: the least recently used, run1, goes
    assert {e.name for e in entries(cached)} == {entry_of(cached, p).name for p in (paths[0], paths[2])}
    assert sum(size(e) for e in entries(cached)) <= 2.5 * largest
    assert (cached / "notes.txt").exists()


def test_entries_of_the_previous_format_are_cleared(cached, tmp_path):
    legacy = cached / "0123456789abcdef01234567"
    legacy.mkdir(parents=True)
    (legacy / "meta.json").write_text("{}")
    (legacy / "spans.parquet").write_bytes(b"old")
    parse(write(tmp_path / "trace_events.jsonl", steps(0, 5)))
    assert not legacy.exists() and len(entries(cached)) == 1


def test_a_cache_folder_that_cannot_be_written_is_one_note(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TRACE_DOCTOR_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.delenv("TRACE_DOCTOR_CACHE", raising=False)
    monkeypatch.setattr(cache, "MIN_CACHED_BYTES", 0)
    monkeypatch.setattr(cache, "_unwritable", None)
    cache.take_notes()
    run = tmp_path / "run"
    run.mkdir()
    write(run / "trace_events.jsonl", steps(0, 10))
    (run / "metrics.jsonl").write_text("".join(f'{{"step": {i}, "time/total": 1.0}}\n' for i in range(10)))
    result = CliRunner().invoke(main, ["analyze", str(run), "--no-html", "--format", "json"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "cache" in line]
    assert len(notes) == 1 and notes[0].startswith("trace-doctor: note: table cache disabled: cannot write to")
    assert json.loads(result.stdout)["run"]["inputs"]
    assert parse(run / "trace_events.jsonl")[0].height == 10 and cache.take_notes() == []


def test_the_cap_setting_that_is_not_a_number_is_a_note(monkeypatch):
    monkeypatch.setenv("TRACE_DOCTOR_CACHE_MAX_MB", "lots")
    cache.take_notes()
    assert cache.max_bytes() == cache.DEFAULT_MAX_MB * 1024 * 1024
    assert cache.take_notes() == ["TRACE_DOCTOR_CACHE_MAX_MB='lots' is not a number of MB; using 1024"]


def test_a_read_only_cache_still_answers(cached, tmp_path, monkeypatch):
    path = write(tmp_path / "trace_events.jsonl", steps(0, 10))
    first = parse(path)

    def read_only(*args, **kwargs):
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(os, "utime", read_only)  # marking the entry as recently used fails
    monkeypatch.setattr(te, "_parse_trace_file", lambda *a: pytest.fail("parsed again despite a valid entry"))
    assert parse(path)[0].equals(first[0])


def test_the_code_fingerprint_covers_every_module_of_the_package(tmp_path):
    """No hand-kept list of parser files: a new parser anywhere in the package, or an edit to any
    module, is other code; templates and bytecode are not."""
    from trace_doctor.ingest.storage import package_digest

    assert (package_digest.PACKAGE_ROOT / "discover.py").is_file()
    package = Path(shutil.copytree(package_digest.PACKAGE_ROOT, tmp_path / "trace_doctor"))
    before = package_digest.tree_digest(package, ".py")
    (package / "templates" / "report.html.j2").write_text("changed")
    (package / "ingest" / "__pycache__").mkdir(exist_ok=True)
    (package / "ingest" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"compiled")
    assert package_digest.tree_digest(package, ".py") == before
    for edited in ("ingest/parsers/metrics.py", "ingest/kinds/trace.py", "discover.py", "knowledge/tinker.py"):
        path = package / edited
        original = path.read_bytes()
        path.write_bytes(original + b"\n# changed\n")
        assert package_digest.tree_digest(package, ".py") != before, edited
        path.write_bytes(original)
    (package / "ingest" / "parsers" / "new_parser.py").write_text("X = 1\n")
    assert package_digest.tree_digest(package, ".py") != before


def test_an_entry_made_by_other_code_is_a_miss(cached, tmp_path, monkeypatch):
    from trace_doctor.ingest.storage import package_digest

    path = write(tmp_path / "trace_events.jsonl", steps(0, 20))
    parses = []
    real = te._parse_trace_file
    monkeypatch.setattr(te, "_parse_trace_file", lambda *a: parses.append(1) or real(*a))
    parse(path)
    parse(path)
    assert parses == [1]  # the second answered by the entry
    monkeypatch.setattr(package_digest, "source_digest", lambda: "a module edited since")
    cache._parser_fingerprint.cache_clear()
    try:
        parse(path)
    finally:
        cache._parser_fingerprint.cache_clear()
    assert parses == [1, 1]
