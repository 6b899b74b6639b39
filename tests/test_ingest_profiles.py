"""pyinstrument profiles -> frames/profiles: every format, the corpus, deep and damaged input."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import CORPUS, CORPUS_MISSING, ROOT
from trace_doctor.ingest.parsers.profiles import parse_profile_files
from trace_doctor.model import FRAMES_SCHEMA, PROFILES_SCHEMA

DEMO_DATA = CORPUS / "pyinstrument" / "html_renderer" / "demo-data"


def _frame(function: str, time: float, children: list | None = None, **extra) -> dict:
    return {
        "function": function,
        "file_path_short": "x.py",
        "file_path": extra.pop("file_path", "/app/x.py"),
        "line_no": 1,
        "time": time,
        "await_time": extra.pop("await_time", 0.0),
        "is_application_code": extra.pop("app", True),
        "children": children or [],
        **extra,
    }


def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_json_renderer_5x_self_and_await_attribution(tmp_path: Path) -> None:
    root = _frame(
        "main",
        1.0,
        [
            _frame(
                "work",
                0.6,
                [_frame("[self]", 0.2, file_path=""), _frame("dumps", 0.3, app=False, class_name="Encoder")],
                await_time=0.0,
            ),
            _frame("sleep", 0.4, [_frame("[await]", 0.4, file_path="")], await_time=0.4, app=False),
        ],
        await_time=0.4,
    )
    path = _write(
        tmp_path / "p.json",
        {
            "start_time": 1.0,
            "duration": 1.0,
            "sample_count": 100,
            "target_description": "Profile at t.py:3",
            "cpu_time": 0.6,
            "root_frame": root,
        },
    )
    warnings: list = []
    frames, profiles, inputs = parse_profile_files([path], warnings)
    assert warnings == [] and inputs[0].records == 6
    assert dict(frames.schema) == FRAMES_SCHEMA and dict(profiles.schema) == PROFILES_SCHEMA
    by_name = {r["function"]: r for r in frames.iter_rows(named=True)}
    # work: 0.6 - (0.2 + 0.3) unattributed = 0.1, plus its [self] leaf 0.2
    assert by_name["work"]["self_time_s"] == pytest.approx(0.3)
    assert by_name["[self]"]["synthetic"] and by_name["[await]"]["synthetic"]
    assert by_name["[await]"]["await_time_s"] == pytest.approx(0.4) and by_name["[await]"]["self_time_s"] == 0.0
    assert by_name["dumps"]["class_name"] == "Encoder" and by_name["dumps"]["parent_id"] == by_name["work"]["frame_id"]
    real = frames.filter(~pl.col("synthetic"))
    assert real["self_time_s"].sum() + by_name["[await]"]["time_s"] == pytest.approx(1.0)
    assert profiles.row(0, named=True)["async_mode"] == "enabled"


def test_json_renderer_4x_program_key_null_cpu_and_await_file_path(tmp_path: Path) -> None:
    root = _frame("main", 0.5, [_frame("[await]", 0.5, file_path="<await>")])
    path = _write(
        tmp_path / "old.json",
        {
            "start_time": 1.0,
            "duration": 0.5,
            "sample_count": 5,
            "program": "train.py",
            "cpu_time": None,
            "root_frame": root,
        },
    )
    frames, profiles, _ = parse_profile_files([path], [])
    row = profiles.row(0, named=True)
    assert row["target_description"] == "train.py" and row["cpu_time_s"] is None
    assert frames.filter(pl.col("function") == "[await]")["synthetic"].to_list() == [True]
    assert row["async_mode"] == "enabled"


def test_cli_profile_is_not_async(tmp_path: Path) -> None:
    root = _frame(
        "<module>",
        1.0,
        [
            _frame(
                "select",
                0.9,
                [_frame("poll", 0.9, file_path="<built-in>", app=False)],
                app=False,
                class_name="EpollSelector",
            )
        ],
    )
    path = _write(
        tmp_path / "cli.json",
        {
            "start_time": 1.0,
            "duration": 1.0,
            "sample_count": 10,
            "target_description": "Program: train.py",
            "cpu_time": 0.1,
            "root_frame": root,
        },
    )
    _, profiles, _ = parse_profile_files([path], [])
    assert profiles["async_mode"].to_list() == ["disabled"]


def _real_session(tmp_path: Path):
    pyinstrument = pytest.importorskip("pyinstrument")
    profiler = pyinstrument.Profiler(async_mode="enabled", interval=0.001)

    async def work() -> None:
        for _ in range(3):
            await asyncio.sleep(0.03)
            sum(i * i for i in range(100_000))

    async def main() -> None:
        with profiler:
            await work()

    asyncio.run(main())
    return profiler.last_session


def test_real_pyinstrument_json_and_session_agree(tmp_path: Path) -> None:
    from pyinstrument.renderers import JSONRenderer

    session = _real_session(tmp_path)
    (tmp_path / "p.json").write_text(JSONRenderer().render(session))
    session.save(str(tmp_path / "p.pyisession"))
    warnings: list = []
    frames, profiles, inputs = parse_profile_files([tmp_path / "p.json", tmp_path / "p.pyisession"], warnings)
    assert warnings == []
    assert sorted(profiles["format"].to_list()) == ["json", "pyisession"]
    assert set(profiles["async_mode"]) == {"enabled"}
    for name in profiles["profile"]:
        one = frames.filter(pl.col("profile") == name)
        waited = one.filter(pl.col("function") == "[await]")["time_s"].sum()
        assert waited > 0.05  # three 30 ms sleeps were attributed to [await]
        assert one.filter(pl.col("function") == "work")["is_application_code"].all()
        assert not one.filter(pl.col("function") == "sleep")["is_application_code"].any()
    # The raw session and the processed JSON attribute the same await time.
    awaits = frames.filter(pl.col("function") == "[await]").group_by("profile").agg(pl.col("time_s").sum())["time_s"]
    assert awaits.min() == pytest.approx(awaits.max(), rel=1e-3)


def test_pyisession_merges_stacks_and_uses_sys_prefixes(tmp_path: Path) -> None:
    marker = "MainThread\x00<thread>\x00140000"
    main = "main\x00/app/train.py\x0010"
    lib = "model_dump\x00/venv/lib/python3.11/site-packages/pydantic/main.py\x00400\x01cBaseModel\x01l463"
    doc = {
        "start_time": 1.0,
        "duration": 3.0,
        "sample_count": 3,
        "target_description": "Program: train.py",
        "cpu_time": 3.0,
        "sys_prefixes": ["/venv"],
        "frame_records": [[[marker, main, lib], 1.0], [[marker, main, lib], 1.5], [[marker, main], 0.5], ["garbage"]],
    }
    warnings: list = []
    frames, _, inputs = parse_profile_files([_write(tmp_path / "s.pyisession", doc)], warnings)
    assert frames.select("depth", "function", "time_s", "self_time_s", "class_name", "is_application_code").rows() == [
        (0, "main", 3.0, 0.5, None, True),
        (1, "model_dump", 2.5, 2.5, "BaseModel", False),
    ]
    assert inputs[0].records == 2
    assert any("not [stack, seconds]" in w.problem for w in warnings)


def test_corpus_html_session_profiles() -> None:
    if not DEMO_DATA.exists():
        pytest.skip(CORPUS_MISSING)
    paths = sorted(DEMO_DATA.glob("*.json"))
    warnings: list = []
    frames, profiles, inputs = parse_profile_files(paths, warnings)
    assert warnings == []
    assert [i.records for i in inputs] == [1324, 6037, 264]  # every frame of the three trees
    assert profiles["format"].to_list() == ["html-session"] * 3
    assert profiles["async_mode"].to_list() == ["disabled"] * 3  # all three are CLI ("Program: ...") runs
    assert profiles["sample_count"].to_list() == [117, 1134, 29]
    for name, duration in profiles.select("profile", "duration_s").rows():
        one = frames.filter(pl.col("profile") == name)
        root_time = one.filter(pl.col("depth") == 0)["time_s"].sum()
        assert root_time == pytest.approx(duration, rel=0.01)
        # every sample ends in a [self] leaf in the raw tree: self time accounts for the root
        assert one.filter(~pl.col("synthetic"))["self_time_s"].sum() == pytest.approx(root_time, rel=1e-3)
    sympy = frames.filter(pl.col("profile").str.ends_with("sympy_calculation.json"))
    assert sympy.filter(pl.col("class_name").is_not_null()).height > 100
    assert sympy.filter(pl.col("file_path").str.contains("site-packages/sympy"))["is_application_code"].any() is False


def test_fixture_profiles() -> None:
    profiles_dir = ROOT / "fixtures" / "profiles"
    paths = sorted(profiles_dir.glob("*.json")) + sorted(profiles_dir.glob("*.pyisession"))
    if not paths:
        pytest.skip("fixtures/profiles has not been generated")
    warnings: list = []
    frames, profiles, _ = parse_profile_files(paths, warnings)
    assert warnings == []
    modes = dict(profiles.select(pl.col("profile").str.split("/").list.last(), "async_mode").rows())
    assert modes["profile_async.json"] == "enabled" and modes["profile_cli.json"] == "disabled"


def _deep_json(depth: int) -> str:
    head = (
        '{"function": "recurse", "file_path": "/app/r.py", "line_no": 1, "time": 1.0, "await_time": 0.0, '
        '"is_application_code": true, "children": ['
    )
    return (
        (
            '{"start_time": 1.0, "duration": 1.0, "sample_count": 1, "target_description": "Program: r.py", '
            '"cpu_time": 1.0, "root_frame": '
        )
        + head * depth
        + "]}" * depth
        + "}"
    )


def test_fifty_thousand_deep_tree_does_not_hit_the_recursion_limit(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(_deep_json(50_000))
    limit = sys.getrecursionlimit()
    frames, _, inputs = parse_profile_files([path], [])
    assert sys.getrecursionlimit() == limit
    assert inputs[0].records == 50_000
    assert frames["depth"].max() == 49_999
    assert frames.filter(pl.col("depth") == 49_999)["self_time_s"].to_list() == [1.0]


def test_deep_pyisession(tmp_path: Path) -> None:
    stack = [f"f{i}\x00/app/r.py\x00{i}" for i in range(50_000)]
    path = _write(
        tmp_path / "deep.pyisession",
        {"start_time": 1.0, "duration": 1.0, "sample_count": 1, "frame_records": [[stack, 1.0]]},
    )
    frames, _, inputs = parse_profile_files([path], [])
    assert inputs[0].records == 50_000 and frames["depth"].max() == 49_999


def test_damaged_profiles_warn_and_keep_the_rest(tmp_path: Path) -> None:
    good = _write(
        tmp_path / "good.json",
        {
            "start_time": 1.0,
            "duration": 1.0,
            "sample_count": 1,
            "target_description": "Program: a",
            "cpu_time": 1.0,
            "root_frame": _frame("main", 1.0, [_frame("ok", 0.5), {"function": 3}, "junk"]),
        },
    )
    truncated = tmp_path / "cut.json"
    truncated.write_text(good.read_text()[:60])
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\xff\xfe\x00binary")
    other = _write(tmp_path / "other.json", {"hello": "world"})
    warnings: list = []
    frames, profiles, inputs = parse_profile_files([good, truncated, garbage, other], warnings)
    assert frames["function"].to_list() == ["main", "ok"]
    by_path = {Path(i.path).name: i for i in inputs}
    assert (by_path["good.json"].records, by_path["good.json"].skipped) == (2, 2)
    assert (
        by_path["cut.json"].skipped == 1 and by_path["garbage.json"].skipped == 1 and by_path["other.json"].skipped == 1
    )
    assert {Path(w.path).name for w in warnings} == {"good.json", "cut.json", "garbage.json", "other.json"}


def test_several_profiles_in_one_file_get_indexed_names(tmp_path: Path) -> None:
    doc = {
        "start_time": 1.0,
        "duration": 1.0,
        "sample_count": 1,
        "target_description": "Program: a",
        "cpu_time": 1.0,
        "root_frame": _frame("main", 1.0),
    }
    path = tmp_path / "two.json"
    path.write_text(json.dumps(doc) + "\n" + json.dumps(doc) + "\n")
    frames, profiles, _ = parse_profile_files([path], [])
    assert profiles["profile"].to_list() == [f"{path}#0", f"{path}#1"]
    assert frames.height == 2
