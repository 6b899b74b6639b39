"""A trace that grew since it was analysed is read from where the last read stopped, and the result is
exactly a cold read's of the grown file: spans, warnings and input counts, cut anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import xxhash
from conftest import isolated_cache

from trace_doctor.ingest.storage import cache, digest_memo, resume_entry
from trace_doctor.ingest.storage.stored_table import FileRows
from trace_doctor.ingest.trace import span_extend, trace_events, trace_resume
from trace_doctor.ingest.trace.trace_events import parse_trace_files

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "runs"
# Open spans at the end, resumed segments, two writers (pids), a stopped run, a streamed RL trace.
TRACES = ["sl_stopped_user_hang", "sl_resumed", "rl_two_writers", "demo", "rl_async_stream_healthy"]
CUTS = 7


@pytest.fixture
def resumes(tmp_path, monkeypatch):
    """A cache that takes any file; returns the list of resumed reads (True: resumed, False: read whole)."""
    isolated_cache(tmp_path, monkeypatch)
    monkeypatch.setattr(cache, "MIN_CACHED_BYTES", 0)
    seen: list[bool] = []
    original = trace_resume.resume_trace_file

    def spy(*args, **kwargs):
        result = original(*args, **kwargs)
        seen.append(result is not None)
        return result

    monkeypatch.setattr(trace_events, "resume_trace_file", spy)
    return seen


def parse(path: Path):
    warnings: list = []
    spans, inputs = parse_trace_files([path], warnings)
    return spans.read(), inputs, warnings


def cold(path: Path, monkeypatch) -> tuple:
    with monkeypatch.context() as m:
        m.setenv("TRACE_DOCTOR_CACHE", "off")
        return parse(path)


def same(got: tuple, want: tuple) -> None:
    spans, inputs, warnings = got
    want_spans, want_inputs, want_warnings = want
    assert spans.schema == want_spans.schema
    assert spans.equals(want_spans, null_equal=True)
    assert inputs == want_inputs
    assert warnings == want_warnings


def line_ends(data: bytes) -> list[int]:
    return [i + 1 for i, byte in enumerate(data) if byte == 0x0A]


def cut_points(data: bytes, count: int) -> list[int]:
    ends = line_ends(data)[:-1]
    step = max(1, len(ends) // (count + 1))
    return ends[step::step][:count]


@pytest.mark.parametrize("run", TRACES)
def test_resumed_read_equals_cold_read_at_every_cut(run, tmp_path, monkeypatch, resumes):
    data = (FIXTURES / run / "trace_events.jsonl").read_bytes()
    for number, cut in enumerate(cut_points(data, CUTS)):
        path = tmp_path / f"cut{number}" / "trace_events.jsonl"
        path.parent.mkdir()
        path.write_bytes(data[:cut])
        same(parse(path), cold(path, monkeypatch))  # the cold read that leaves its state
        # Grown by part of the rest (ending mid-line: the half-written last line of a live writer), then whole.
        middle = cut + (len(data) - cut) // 2
        for end in (middle, len(data)):
            with open(path, "ab") as out:
                out.write(data[path.stat().st_size : end])
            resumes.clear()
            got = parse(path)
            assert resumes == [True], (run, cut, end)
            same(got, cold(path, monkeypatch))


def test_chained_resumes_equal_cold_reads(tmp_path, monkeypatch, resumes):
    """Each resumed read leaves the state the next one goes on from."""
    data = (FIXTURES / "sl_stopped_user_hang" / "trace_events.jsonl").read_bytes()
    path = tmp_path / "trace_events.jsonl"
    cuts = cut_points(data, 6)
    path.write_bytes(data[: cuts[0]])
    parse(path)
    for end in [*cuts[1:], len(data)]:
        with open(path, "ab") as out:
            out.write(data[path.stat().st_size : end])
        resumes.clear()
        got = parse(path)
        assert resumes == [True]
        same(got, cold(path, monkeypatch))


def damaged() -> bytes:
    """A cookbook trace with garbage lines, an unmatched E, ignored phases, blank lines and an oversized
    number, spread through the file."""
    lines = (FIXTURES / "sl_stopped_user_hang" / "trace_events.jsonl").read_bytes().splitlines()
    bad = [
        b"not json at all",
        json.dumps(
            {"name": "lonely", "ph": "E", "pid": 0, "tid": 1, "ts": 5.0, "args": {"track": "x", "thread": "t"}}
        ).encode(),
        json.dumps({"name": "mark", "ph": "i", "pid": 0, "tid": 1, "ts": 6.0}).encode(),
        b"",
        b'{"name": "big", "ph": "B", "pid": 0, "tid": 1, "ts": 1e999, "args": {"track": "t", "thread": "t"}}',
        b'{"truncated": ',
    ]
    out = []
    for index, line in enumerate(lines):
        out.append(line)
        if index % 37 == 5:
            out.append(bad[index % len(bad)])
    return b"\n".join(out) + b"\n"


def test_damaged_trace_resumes_with_the_cold_reads_warnings(tmp_path, monkeypatch, resumes):
    data = damaged()
    for number, cut in enumerate(cut_points(data, 5)):
        path = tmp_path / f"cut{number}" / "trace_events.jsonl"
        path.parent.mkdir()
        path.write_bytes(data[:cut])
        parse(path)
        path.write_bytes(data)
        resumes.clear()
        got = parse(path)
        assert resumes == [True]
        want = cold(path, monkeypatch)
        same(got, want)
        assert want[2], "the damaged trace has warnings"


def grown(tmp_path: Path) -> tuple[Path, bytes, int]:
    data = (FIXTURES / "sl_stopped_user_hang" / "trace_events.jsonl").read_bytes()
    path = tmp_path / "trace_events.jsonl"
    cut = cut_points(data, 3)[1]
    path.write_bytes(data[:cut])
    parse(path)
    return path, data, cut


def test_a_file_replaced_by_a_longer_one_is_read_whole(tmp_path, monkeypatch, resumes):
    path, data, cut = grown(tmp_path)
    other = data[:cut].replace(b'"ts": 62', b'"ts": 72', 1) + data[cut:]
    assert len(other) > cut and other[:cut] != data[:cut]
    path.write_bytes(other)
    resumes.clear()
    got = parse(path)
    assert resumes == [False]
    same(got, cold(path, monkeypatch))


def test_a_truncated_file_is_read_whole(tmp_path, monkeypatch, resumes):
    path, data, cut = grown(tmp_path)
    path.write_bytes(data[: cut // 2])
    resumes.clear()
    got = parse(path)
    assert resumes == [False]
    same(got, cold(path, monkeypatch))


@pytest.mark.parametrize(
    "damage",
    ["garbage_header", "wrong_types", "garbage_frame", "missing_frame", "foreign_frame", "wrong_frame_schema"],
)
def test_a_tampered_state_is_a_miss(tmp_path, monkeypatch, resumes, damage):
    path, data, _ = grown(tmp_path)
    entry = resume_entry.entry_path(path, "spans")
    header = json.loads((entry / "entry.json").read_text())
    if damage == "garbage_header":
        (entry / "entry.json").write_bytes(b"\x00garbage{")
    elif damage == "wrong_types":
        header["state"]["boundaries"] = "many"
        header["state"]["bad"]["listed"] = [[None, 5]]
        (entry / "entry.json").write_text(json.dumps(header))
    elif damage == "garbage_frame":
        (entry / "open.arrow").write_bytes(b"ARROW1 not really")
    elif damage == "missing_frame":
        (entry / "held.arrow").unlink()
    elif damage == "foreign_frame":
        header["frames"].append("../../elsewhere")
        (entry / "entry.json").write_text(json.dumps(header))
    else:
        pl.DataFrame({"line": ["a"], "ph": [1]}).write_ipc(entry / "held.arrow")
    path.write_bytes(data)
    resumes.clear()
    got = parse(path)
    assert resumes == [False]
    same(got, cold(path, monkeypatch))


def test_no_state_without_the_cache(tmp_path, monkeypatch, resumes):
    monkeypatch.setenv("TRACE_DOCTOR_CACHE", "off")
    path, data, _ = grown(tmp_path)
    assert not resume_entry.entry_path(path, "spans").exists()
    path.write_bytes(data)
    resumes.clear()
    got = parse(path)
    assert resumes == [False]
    monkeypatch.delenv("TRACE_DOCTOR_CACHE")
    same(got, cold(path, monkeypatch))


def test_state_is_data_only(tmp_path, monkeypatch, resumes):
    path, _, _ = grown(tmp_path)
    entry = resume_entry.entry_path(path, "spans")
    names = sorted(p.name for p in entry.iterdir())
    assert names == ["covers.arrow", "entry.json", "held.arrow", "open.arrow"]
    json.loads((entry / "entry.json").read_text())
    for name in names:
        if name.endswith(".arrow"):
            pl.read_ipc((entry / name).read_bytes())


def parts_after(path: Path) -> tuple[tuple, int]:
    """A parse of `path` (the spans read back) and the count of its stored table's parts."""
    warnings: list = []
    spans, inputs = parse_trace_files([path], warnings)
    return (spans.read(), inputs, warnings), len(spans.parts)


@pytest.mark.parametrize("linked_rows", [span_extend.LINKED_ROWS, 8])
def test_many_chained_resumes_keep_the_parts_few(tmp_path, monkeypatch, resumes, linked_rows):
    """A run analysed again at every small growth (watch-like): each resume cuts the last part and adds
    one, and a trailing run of small parts is written again as one, so the count stays bounded; with
    few rows to a linked slice, the parts cut around reopened rows are slices of their files."""
    monkeypatch.setattr(span_extend, "LINKED_ROWS", linked_rows)
    data = (FIXTURES / "rl_async_stream_healthy" / "trace_events.jsonl").read_bytes()
    path = tmp_path / "trace_events.jsonl"
    cuts = cut_points(data, 60)
    path.write_bytes(data[: cuts[0]])
    parse(path)
    counts = []
    for number, end in enumerate([*cuts[1:], len(data)]):
        with open(path, "ab") as out:
            out.write(data[path.stat().st_size : end])
        resumes.clear()
        got, count = parts_after(path)
        assert resumes == [True]
        counts.append(count)
        if number % 12 == 0 or end == len(data):
            same(got, cold(path, monkeypatch))
    assert max(counts) <= span_extend.MAX_SMALL_PARTS + 4, counts
    assert any(later < earlier for earlier, later in zip(counts, counts[1:], strict=False)), "never compacted"


def test_resumed_tables_link_slices_of_the_parts_they_cut(tmp_path, monkeypatch, resumes):
    """A part cut where the new rows go is linked as a slice of its file (no rewrite), and a later
    analysis of the same bytes reads the entry's slices back as the resumed read wrote them."""
    monkeypatch.setattr(span_extend, "LINKED_ROWS", 8)
    path, data, _ = grown(tmp_path)
    path.write_bytes(data)
    resumes.clear()
    warnings: list = []
    spans, _ = parse_trace_files([path], warnings)
    assert resumes == [True]
    assert any(isinstance(part, FileRows) for part in spans.parts)
    again, _ = parse_trace_files([path], [])
    assert resumes == [True]  # the second answered from the entry, not resumed
    assert again.parts == spans.parts and again.height == spans.height  # the slices, as listed
    assert again.read().equals(cold(path, monkeypatch)[0], null_equal=True)


@pytest.mark.parametrize("damage", ["no_listing", "missing_part", "foreign_part", "negative_rows"])
def test_a_stored_entry_whose_part_listing_is_wrong_is_a_miss(tmp_path, monkeypatch, resumes, damage):
    path, data, _ = grown(tmp_path)
    [entry] = (tmp_path / "cache").glob("spans-*.parts")
    header = json.loads((entry / "entry.json").read_text())
    listed = header["parts"]
    if damage == "no_listing":
        del header["parts"]
    elif damage == "missing_part":
        (entry / listed[0]["file"]).unlink()
    elif damage == "foreign_part":
        listed[0]["file"] = "../elsewhere.parquet"
    else:
        listed[0]["facts"]["rows"] = -1
    (entry / "entry.json").write_text(json.dumps(header))
    assert cache.load_stored(path, "spans") is None
    same(parse(path), cold(path, monkeypatch))


def test_the_snapshot_hashes_both_sides_of_a_mark_in_its_one_pass(tmp_path, monkeypatch):
    isolated_cache(tmp_path, monkeypatch)
    path = tmp_path / "trace_events.jsonl"
    data = (FIXTURES / "sl_stopped_user_hang" / "trace_events.jsonl").read_bytes() * 3
    path.write_bytes(data)
    monkeypatch.setattr(cache, "HASH_BLOCK", 4096)  # many blocks, the mark inside one
    for offset in (1, 4096, 5000, len(data) - 1):
        taken = cache.snapshot(path, min_bytes=0, mark=offset)
        assert taken is not None and taken.mark is not None
        assert taken.digest == cache.file_digest(path, len(data))
        assert taken.mark.before == resume_entry.prefix_digest(path, offset)
        assert taken.mark.after == xxhash.xxh3_128(data[offset:]).hexdigest()
        digest_memo.forget()
    assert cache.snapshot(path, min_bytes=0, mark=len(data)).mark is None  # nothing after it


def _unkept_rows(table, where: pl.Expr, columns: list[str]) -> int:
    """Rows of the parts that keep no result of `table.where(where, columns)` beside them."""
    from trace_doctor.ingest.storage import part_memo

    key = ("where", where.meta.serialize(), tuple(columns))
    unkept = 0
    for part in table.parts:
        file = part_memo._result_file(part, key)
        if file is None or not file.exists():
            unkept += table.facts[part]["rows"]
    return unkept


@pytest.mark.parametrize("settled", [True, False])
def test_a_cold_reads_parts_are_the_slices_its_first_resume_links(tmp_path, monkeypatch, resumes, settled):
    # The first resume writes again the rows left open and the rows from where the step in flight began, and
    # links the rest as slices: cut so at the cold read, the results the cold analysis kept are linked with
    # them, and the next analysis reads little more than what the run gained.
    from trace_doctor.ingest.storage import part_memo
    from trace_doctor.ingest.trace import span_settle, span_spill

    source = FIXTURES / "rl_stream_healthy" / "trace_events.jsonl"
    data = source.read_bytes()
    with monkeypatch.context() as m:
        m.setenv("TRACE_DOCTOR_CACHE", "off")
        whole = parse_trace_files([source], [])[0].height
    # About ten parts, a few hundred rows each, whatever the trace's length.
    for module, name, value in [
        (trace_events, "MEMORY_ROWS", 0),
        (span_spill, "MEMORY_ROWS", 0),
        (span_spill, "BUFFER_ROWS", whole // 10),
        (span_spill, "WINDOW_ROWS", whole // 10),
        (span_spill, "SAMPLE_EVERY", max(1, whole // 100)),
        (span_spill, "SCRATCH_ROW_GROUP", max(2, whole // 50)),
        (span_extend, "LINKED_ROWS", 8),
        (span_extend, "TAIL_ROWS", 16),
        (span_settle, "TAIL_ROWS", 16),
    ]:
        monkeypatch.setattr(module, name, value)
    if not settled:
        monkeypatch.setattr(trace_events, "cut_for_resume", lambda out, reopened: None)
    path = tmp_path / "trace_events.jsonl"
    ends = line_ends(data)
    path.write_bytes(data[: ends[len(ends) * 3 // 4]])
    table = parse_trace_files([path], [])[0]
    cold_height, left_open = table.height, table.read().filter(~pl.col("closed")).height
    assert left_open > 0
    assert any(isinstance(part, FileRows) for part in table.parts) == settled
    where, columns = pl.col("closed"), ["name", "dur_us"]
    table.where(where, columns)  # the cold analysis's query: its results kept beside each part
    part_memo.KEPT.clear()
    with path.open("ab") as fh:
        fh.write(data[ends[len(ends) * 3 // 4] :])
    grown = parse_trace_files([path], [])[0]
    assert resumes[-1] and resumes.count(True) == 1
    gained = grown.height - cold_height
    unkept = _unkept_rows(grown, where, columns)
    # At most: the new rows, the tail the resume cut, and the short runs around the rows left open.
    bound = gained + 16 + left_open * (2 * 8 + 1)
    assert (unkept <= bound) == settled, (unkept, bound)
    same(parse(path), cold(path, monkeypatch))
