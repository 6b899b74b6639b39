"""Part-local queries answered per stored part and kept across analyses (ingest/storage/part_memo.py).

What matters: the answer is the one a scan of the whole table gives, whatever the parts (files, slices
of files, frames) and however the table grew; a part seen before is not read again; a part whose file
changed is; and what is kept stays within its budget and goes with a frame that goes.
"""

from __future__ import annotations

import gc
import json
import os

import numpy as np
import polars as pl
import pytest

from trace_doctor.ingest.storage import part_memo
from trace_doctor.ingest.storage.stored_table import FileRows, StoredTable
from trace_doctor.redact.frames import redact_frame
from trace_doctor.redact.stored import RedactedTable

SCHEMA = {"name": pl.String, "segment": pl.Int32, "start_us": pl.Float64, "end_us": pl.Float64, "closed": pl.Boolean}
TOKEN = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"


@pytest.fixture(autouse=True)
def _empty_memo():
    part_memo.KEPT.clear()
    part_memo.SMALL_ROWS.clear()
    yield
    part_memo.KEPT.clear()
    part_memo.SMALL_ROWS.clear()


def _spans(n: int, seed: int, segment: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    start = np.cumsum(rng.uniform(0, 100, n))
    return pl.DataFrame(
        {
            "name": rng.choice(["sample_async", "forward_backward", "optim_step", "get_batch"], n),
            "segment": np.full(n, segment, dtype=np.int32),
            "start_us": start,
            "end_us": start + rng.uniform(0, 500, n),
            "closed": rng.uniform(size=n) > 0.1,
        },
        schema=SCHEMA,
    )


def _table(tmp_path, frames: list[pl.DataFrame], *, slice_first: bool = False) -> StoredTable:
    """Frames as a table of file parts (the first linked as a slice of a larger file when asked)
    followed by the last frame held in memory, as a grown trace's table is made."""
    parts = []
    for index, frame in enumerate(frames[:-1]):
        path = tmp_path / f"part-{index:05d}.parquet"
        if slice_first and index == 0:
            padded = pl.concat([_spans(7, 99), frame, _spans(5, 98)])
            padded.write_parquet(path)
            parts.append(FileRows(path, 7, frame.height))
        else:
            frame.write_parquet(path)
            parts.append(path)
    parts.append(frames[-1])
    return StoredTable(parts, sum(f.height for f in frames), SCHEMA)


WHERES = [
    pl.col("name").is_in(["sample_async", "optim_step"]) & pl.col("closed"),
    (pl.col("end_us") - pl.col("start_us") > 250) | (pl.col("name") == "get_batch"),
    pl.col("name") == "no such span",
]


@pytest.mark.parametrize("where", WHERES)
@pytest.mark.parametrize("slice_first", [False, True])
def test_where_is_the_filter_of_the_whole_table(tmp_path, where, slice_first):
    frames = [_spans(300, 1), _spans(200, 2), _spans(50, 3, segment=1)]
    table = _table(tmp_path, frames, slice_first=slice_first)
    whole = table.scan().filter(where).select("name", "start_us").collect()
    first = table.where(where, ["name", "start_us"])
    assert first.equals(whole)
    # Answered again from what was kept: the same rows.
    assert table.where(where, ["name", "start_us"]).equals(whole)
    assert table.where(where).equals(table.scan().filter(where).collect())


def test_a_grown_table_reads_only_its_new_parts_and_a_rewritten_file_again(tmp_path, monkeypatch):
    frames = [_spans(300, 1), _spans(200, 2), _spans(50, 3)]
    where = pl.col("name") == "sample_async"
    table = _table(tmp_path, frames)
    scanned: list[str] = []
    scan_parquet = pl.scan_parquet
    monkeypatch.setattr(
        pl, "scan_parquet", lambda source, **kw: scanned.append(str(source)) or scan_parquet(source, **kw)
    )
    table.where(where, ["start_us"])
    assert len(scanned) == 2
    # The run grew by a part: only that one is read (a frame here), the files' rows come from memory.
    grown = StoredTable([*table.parts, _spans(40, 4)], table.height + 40, SCHEMA)
    scanned.clear()
    found = grown.where(where, ["start_us"])
    assert scanned == []
    assert found.equals(grown.scan().filter(where).select("start_us").collect())
    # A file rewritten under the same name with other rows is another part: read afresh.
    first_file = table.parts[0]
    _spans(120, 5).write_parquet(first_file)
    stat = os.stat(first_file)
    os.utime(first_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    rewritten = StoredTable(table.parts, 120 + 200 + 50, SCHEMA)
    scanned.clear()
    found = rewritten.where(where, ["start_us"])
    assert scanned == [str(first_file)]
    assert found.equals(rewritten.scan().filter(where).select("start_us").collect())


def test_kept_results_follow_the_budget_and_go_with_their_frame(tmp_path, monkeypatch):
    frame = _spans(2000, 1)
    table = StoredTable([frame], frame.height, SCHEMA)
    table.where(pl.col("closed"))
    held = part_memo.KEPT.bytes
    assert held > 0
    del table, frame
    gc.collect()
    assert part_memo.KEPT.bytes == 0
    # A budget of a few results: the least recently used go first, the total stays within it.
    frames = [_spans(2000, seed) for seed in range(6)]
    monkeypatch.setattr(part_memo.KEPT, "budget", 3 * held)
    tables = [StoredTable([f], f.height, SCHEMA) for f in frames]
    for t in tables:
        t.where(pl.col("closed"))
    assert part_memo.KEPT.bytes <= 3 * held


def test_a_part_local_aggregate_combines_to_the_whole_tables(tmp_path):
    frames = [_spans(300, 1, segment=0), _spans(200, 2, segment=1), _spans(50, 3, segment=1)]
    table = _table(tmp_path, frames)

    def extent(spans: pl.LazyFrame) -> pl.LazyFrame:
        return spans.group_by("segment").agg(pl.col("start_us").min(), pl.col("end_us").max())

    combined = extent(pl.concat(table.per_part(("extent",), extent)).lazy()).sort("segment").collect()
    assert combined.equals(extent(table.scan()).sort("segment").collect())


def test_redacted_parts_filter_on_redacted_values_and_find_a_secret_a_later_part_adds(tmp_path):
    clean = [_spans(100, 1), _spans(80, 2)]
    secret = _spans(30, 3).with_columns(
        pl.when(pl.int_range(pl.len()) == 4).then(pl.lit(f"upload {TOKEN}")).otherwise("name").alias("name")
    )
    where = ~pl.col("name").is_in(["sample_async", "forward_backward", "optim_step", "get_batch"])
    (tmp_path / "a").mkdir()
    assert RedactedTable(_table(tmp_path / "a", clean)).where(where, ["name"]).height == 0
    (tmp_path / "b").mkdir()
    grown = _table(tmp_path / "b", [*clean, secret])
    found = RedactedTable(grown).where(where, ["name", "start_us"])
    expected = redact_frame(grown.scan().collect()).filter(where).select("name", "start_us")
    assert found.equals(expected)
    assert found.height == 1 and TOKEN not in found["name"][0]


def _entry_table(folder, frames: list[pl.DataFrame]) -> StoredTable:
    """Frames as the parts of a table cache entry (a `.parts` folder, as cache.adopt names it)."""
    folder.mkdir(parents=True)
    parts = []
    for index, frame in enumerate(frames):
        path = folder / f"part-{index:05d}.parquet"
        frame.write_parquet(path)
        parts.append(path)
    return StoredTable(parts, sum(f.height for f in frames), SCHEMA)


def test_a_cache_entrys_parts_keep_their_results_for_the_next_process(tmp_path, monkeypatch):
    frames = [_spans(300, 1), _spans(200, 2)]
    table = _entry_table(tmp_path / f"spans-{'0' * 32}.parts", frames)
    where = pl.col("name").is_in(["optim_step", "get_batch"])
    expected = table.scan().filter(where).select("name", "end_us").collect()
    assert table.where(where, ["name", "end_us"]).equals(expected)
    kept = sorted(p.name for p in table.parts[0].parent.glob("*.arrow"))
    assert len(kept) == 2 and all(
        name.startswith(("part-00000.parquet.all.", "part-00001.parquet.all.")) for name in kept
    )
    # Another process: nothing in memory, the results are read back, no part is scanned.
    part_memo.KEPT.clear()
    part_memo.SMALL_ROWS.clear()
    scanned: list[str] = []
    scan_parquet = pl.scan_parquet
    monkeypatch.setattr(
        pl, "scan_parquet", lambda source, **kw: scanned.append(str(source)) or scan_parquet(source, **kw)
    )
    assert table.where(where, ["name", "end_us"]).equals(expected)
    assert scanned == []
    # A damaged result, and one with other columns, are misses: that part is read again, the answer the same.
    results = sorted(table.parts[0].parent.glob("*.arrow"))
    results[0].write_bytes(results[0].read_bytes()[:40])
    pl.DataFrame({"name": ["x"]}).write_ipc(results[1])
    part_memo.KEPT.clear()
    part_memo.SMALL_ROWS.clear()
    assert table.where(where, ["name", "end_us"]).equals(expected)
    assert len(scanned) == 2


def test_a_resumed_entry_links_its_parts_with_their_results(tmp_path):
    from trace_doctor.ingest.storage.stored_table import PartWriter

    old = _entry_table(tmp_path / f"spans-{'1' * 32}.parts", [_spans(300, 1), _spans(200, 2)])
    where = pl.col("closed")
    old.where(where, ["start_us"])
    new_folder = tmp_path / f"spans-{'2' * 32}.parts"
    new_folder.mkdir()
    out = PartWriter(new_folder, SCHEMA)
    out.link(old.parts[0], 300)
    out.link(FileRows(old.parts[1], 50, 100), 100)
    assert [p.name for p in new_folder.glob("*.arrow")] == [
        p.name for p in old.parts[0].parent.glob("part-00000.parquet.all.*.arrow")
    ]  # the whole file's results come with it; a slice's rows are other rows, computed when asked
    grown = out.stored()
    part_memo.KEPT.clear()
    assert grown.where(where, ["start_us"]).equals(grown.scan().filter(where).select("start_us").collect())
    assert len(list(new_folder.glob("part-00001.parquet.50-100.*.arrow"))) == 1


def test_a_hard_link_of_a_part_is_the_same_part(tmp_path, monkeypatch):
    # The watch's next table generation links its unchanged parts into a new folder (span_live_table.py).
    table = _table(tmp_path, [_spans(300, 1), _spans(10, 2)])
    where = pl.col("name") == "optim_step"
    expected = table.where(where, ["start_us"])
    (tmp_path / "next").mkdir()
    linked = tmp_path / "next" / "part-00000.parquet"
    os.link(table.parts[0], linked)
    scanned: list[str] = []
    scan_parquet = pl.scan_parquet
    monkeypatch.setattr(
        pl, "scan_parquet", lambda source, **kw: scanned.append(str(source)) or scan_parquet(source, **kw)
    )
    assert StoredTable([linked, table.parts[1]], table.height, SCHEMA).where(where, ["start_us"]).equals(expected)
    assert scanned == []


KEYS_SCRIPT = """
import hashlib, sys
from trace_doctor.model import RunTables
from trace_doctor.api import analyze, load_run
seen = set()
where = RunTables.spans_where
def recording(self, expr, columns=None):
    seen.add(hashlib.sha1(repr((expr.meta.serialize(), columns)).encode()).hexdigest())
    return where(self, expr, columns)
RunTables.spans_where = recording
for run in sys.argv[1:]:
    analyze(load_run(run))
print(sorted(seen))
"""


def test_the_span_filters_are_the_same_in_every_process():
    # A part's result is kept on disk under its filter's serialized form: a filter whose names come from a
    # set would list them in another order in the next process (another hash seed), and never be found.
    import subprocess
    import sys
    from pathlib import Path

    runs = [
        str(Path(__file__).parents[1] / "fixtures" / "runs" / name) for name in ("sl_gil_stall", "rl_async_starved")
    ]
    found = []
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", KEYS_SCRIPT, *runs],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed, "TRACE_DOCTOR_CACHE": "off"},
            check=True,
        )
        found.append(done.stdout)
    assert found[0].count(",") >= 4  # the rules asked for several subsets
    assert found[0] == found[1]


@pytest.mark.parametrize(
    "name", ["sl_gil_stall", "rl_async_starved", "sl_stopped_service_hang", "rl_two_writers", "sl_blocking_result"]
)
def test_an_analysis_over_many_stored_parts_is_the_analysis_over_one_table(name, monkeypatch, tmp_path):
    # The rules read a large trace's spans part by part (spans_where, spans_per_part, each part's result
    # kept): the report must be the one of the table held whole, and again once the parts' results are kept.
    from pathlib import Path

    from click.testing import CliRunner

    from trace_doctor.cli import main
    from trace_doctor.ingest.trace import span_spill, trace_events

    run = Path(__file__).parents[1] / "fixtures" / "runs" / name
    monkeypatch.setenv("TRACE_DOCTOR_CACHE", "off")

    def report() -> dict:
        done = CliRunner().invoke(main, ["analyze", str(run), "--no-html", "--format", "json"])
        document = json.loads(done.stdout)
        document["tool"]["version"] = "-"
        return document

    from trace_doctor.api import load_run

    whole = report()
    spans = load_run(str(run)).height("spans")
    # About six parts, whatever the trace's length.
    monkeypatch.setattr(trace_events, "MEMORY_ROWS", 0)
    monkeypatch.setattr(span_spill, "MEMORY_ROWS", 0)
    monkeypatch.setattr(span_spill, "BUFFER_ROWS", max(3, spans // 6))
    monkeypatch.setattr(span_spill, "WINDOW_ROWS", max(3, spans // 6))
    monkeypatch.setattr(span_spill, "SAMPLE_EVERY", max(1, spans // 60))
    monkeypatch.setattr(span_spill, "SCRATCH_ROW_GROUP", max(2, spans // 30))
    stored = load_run(str(run))._raw("spans")
    assert isinstance(stored, StoredTable) and len(stored.parts) >= 3
    parted = report()
    assert parted == whole
    assert report() == whole  # the parts' results now kept in memory: the same report


def test_a_file_rewritten_with_the_same_size_and_time_is_another_part(tmp_path):
    # An inode freed and reused for a new part of the same size within one clock tick has the stat of the old
    # one: the file's footer tells them apart, or a small table's parts written and dropped in quick
    # succession would be answered with another table's rows.
    def frame(seed: int) -> pl.DataFrame:
        rng = np.random.default_rng(seed)
        return pl.DataFrame(
            {
                "name": ["sample_async"] * 100,
                "segment": np.zeros(100, dtype=np.int32),
                "start_us": rng.uniform(0, 1e6, 100),
                "end_us": rng.uniform(1e6, 2e6, 100),
                "closed": [True] * 100,
            },
            schema=SCHEMA,
        )

    path = tmp_path / "part-00000.parquet"
    frame(1).write_parquet(path, compression="uncompressed", statistics=False)
    before = os.stat(path)
    table = StoredTable([path], 100, SCHEMA)
    assert table.where(pl.col("closed"), ["start_us"]).equals(frame(1).select("start_us"))
    frame(2).write_parquet(path, compression="uncompressed", statistics=False)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert StoredTable([path], 100, SCHEMA).where(pl.col("closed"), ["start_us"]).equals(frame(2).select("start_us"))


def test_a_part_merged_from_kept_parts_is_answered_from_their_results(tmp_path, monkeypatch):
    # The watch's live table merges its small trailing parts into one (span_live_table._merged): the merged
    # part's results are its pieces', so a refresh does not read the merged rows again.
    frames = [_spans(300, 1), _spans(200, 2), _spans(100, 3)]
    table = _table(tmp_path, [*frames, _spans(5, 4)])
    where = pl.col("name") == "forward_backward"
    table.where(where, ["start_us"])
    table.per_part(("extent",), lambda s: s.group_by("segment").agg(pl.col("end_us").max()))
    files = table.parts[:3]
    pieces = part_memo.piece_identities(files)
    merged = tmp_path / "merged-0.parquet"
    pl.concat([pl.read_parquet(f) for f in files]).write_parquet(merged)
    for f in files:
        f.unlink()
    part_memo.note_merged(merged, pieces)
    scanned: list[str] = []
    scan_parquet = pl.scan_parquet
    monkeypatch.setattr(
        pl, "scan_parquet", lambda source, **kw: scanned.append(str(source)) or scan_parquet(source, **kw)
    )
    grown = StoredTable([merged, table.parts[3]], table.height, SCHEMA)
    assert grown.where(where, ["start_us"]).equals(grown.scan().filter(where).select("start_us").collect())
    extents = pl.concat(grown.per_part(("extent",), lambda s: s.group_by("segment").agg(pl.col("end_us").max())))
    assert extents.get_column("end_us").max() == grown.scan().select(pl.col("end_us").max()).collect().item()
    # The checks' own scans of the whole table read a list of files; no query read a part on its own.
    assert scanned and all(source.startswith("[") for source in scanned)
    # A query the pieces never answered reads the merged part itself.
    scanned.clear()
    grown.where(pl.col("closed"), ["end_us"])
    assert scanned == [str(merged)]


def test_a_small_new_part_is_read_once_for_every_query_that_misses_it(tmp_path, monkeypatch):
    # A refresh's new part is small: scanning it costs its setup more than its rows, once per query. Its
    # rows are read once and the queries that follow read them from memory; a large part is scanned.
    small = tmp_path / "part-00000.parquet"
    _spans(50, 1).write_parquet(small)
    large = tmp_path / "part-00001.parquet"
    monkeypatch.setattr(part_memo, "SMALL_PART_BYTES", small.stat().st_size)
    _spans(20_000, 2).write_parquet(large)
    assert large.stat().st_size > part_memo.SMALL_PART_BYTES
    table = StoredTable([small, large], 20_050, SCHEMA)
    scanned: list[str] = []
    scan_parquet = pl.scan_parquet
    monkeypatch.setattr(
        pl, "scan_parquet", lambda source, **kw: scanned.append(str(source)) or scan_parquet(source, **kw)
    )
    for where in WHERES:
        found = table.where(where, ["name", "end_us"])
        monkeypatch.setattr(pl, "scan_parquet", scan_parquet)
        assert found.equals(table.scan().filter(where).select("name", "end_us").collect())
        monkeypatch.setattr(
            pl, "scan_parquet", lambda source, **kw: scanned.append(str(source)) or scan_parquet(source, **kw)
        )
    assert scanned.count(str(small)) == 1
    assert scanned.count(str(large)) == len(WHERES)
