"""serialization-stall (TD107), cpu-bound-main-thread (TD108), profile-without-async-mode (TD109)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from trace_doctor.api import load_run
from trace_doctor.derive.profile_stats import breakdown, stack_states
from trace_doctor.model import FRAMES_SCHEMA, LOG_EVENTS_SCHEMA, PROFILES_SCHEMA, STACK_SNAPSHOTS_SCHEMA, RunTables
from trace_doctor.policy import Policy
from trace_doctor.rules.engine import run_rules

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "fixtures" / "profiles"
RUNS = ROOT / "fixtures" / "runs"
DEMO_DATA = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "pyinstrument" / "html_renderer" / "demo-data"
needs_corpus = pytest.mark.skipif(
    not DEMO_DATA.exists(), reason="../shared/corpus is absent (real pyinstrument sessions)"
)
needs_profiles = pytest.mark.skipif(
    not (PROFILES / "profile_cli.json").exists(), reason="fixtures/profiles not generated"
)
SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"


def outcome(run: RunTables, slug: str):
    findings, outcomes, _ = run_rules(run, select=[slug])
    return findings, outcomes[0]


def profile_run(tree: list[tuple], *, wall: float, cpu: float | None = None, async_mode: str = "disabled") -> RunTables:
    """A run holding one profile from (frame_id, parent_id, function, file, line, time_s, app) rows."""
    depth: dict[int, int] = {}
    rows = []
    for fid, parent, function, file_path, line, time_s, app in tree:
        depth[fid] = 0 if parent is None else depth[parent] + 1
        synthetic = function.startswith("[")
        rows.append(
            {
                "profile": "p.json",
                "frame_id": fid,
                "parent_id": parent,
                "depth": depth[fid],
                "function": function,
                "file_path": file_path,
                "line_no": line,
                "class_name": None,
                "time_s": time_s,
                "self_time_s": None,
                "await_time_s": time_s if function == "[await]" else 0.0,
                "is_application_code": app,
                "synthetic": synthetic,
            }
        )
    run = RunTables()
    run.frames = pl.DataFrame(rows, schema=FRAMES_SCHEMA)
    run.profiles = pl.DataFrame(
        [
            {
                "profile": "p.json",
                "format": "json",
                "async_mode": async_mode,
                "target_description": "Program: train.py",
                "start_time": 0.0,
                "duration_s": wall,
                "cpu_time_s": cpu,
                "sample_count": 1000,
            }
        ],
        schema=PROFILES_SCHEMA,
    )
    return run


# A sync-mode profile of an asyncio training loop: mostly idle in epoll, some pydantic dumping.
IDLE_LOOP = [
    (1, None, "run", f"{STDLIB}/asyncio/runners.py", 118, 10.0, False),
    (2, 1, "_run_once", f"{STDLIB}/asyncio/base_events.py", 1898, 10.0, False),
    (3, 2, "select", f"{STDLIB}/selectors.py", 451, 6.0, False),
    (4, 3, "epoll.poll", "<built-in>", 0, 6.0, False),
    (5, 2, "_run", f"{STDLIB}/asyncio/events.py", 80, 4.0, False),
    (6, 5, "train_step", "train.py", 40, 4.0, True),
    (7, 6, "model_dump", f"{SITE}/tinker/_compat.py", 150, 2.5, False),
    (8, 7, "model_dump", f"{SITE}/pydantic/main.py", 420, 2.5, False),
    (9, 8, "serialize_sequence_via_list", f"{SITE}/pydantic/_internal/_serializers.py", 31, 2.5, False),
    (10, 9, "[self]", "", 0, 2.5, False),
    (11, 6, "tokenize", "train.py", 12, 1.5, True),
    (12, 11, "encode", f"{SITE}/tokenizers/implementations/base_tokenizer.py", 90, 1.4, False),
    (13, 12, "[self]", "", 0, 1.4, False),
    (14, 11, "[self]", "", 0, 0.1, False),
]


def test_breakdown_attributes_time_to_poll_serialization_and_cpu_libraries():
    run = profile_run(IDLE_LOOP, wall=10.0)
    (item,) = breakdown(run.profiles, run.frames)
    assert item.idle_poll_s == pytest.approx(6.0)
    assert item.serialization_s == pytest.approx(2.5)
    assert item.cpu_by_category["tokenizers"] == pytest.approx(1.4)
    assert item.cpu_by_category["application code"] == pytest.approx(0.1)
    # Serialization time is not counted twice as CPU.
    assert "pydantic" not in item.cpu_by_category
    assert item.serialization_frames[0].function == "model_dump" and item.serialization_frames[0].line_no == 150


def test_serialization_stall_fires_with_share_and_hottest_frame():
    (finding,), result = outcome(profile_run(IDLE_LOOP, wall=10.0), "serialization-stall")
    assert result.status == "fired"
    assert finding.fraction_of_wall == pytest.approx(0.25)
    assert finding.seconds_lost == pytest.approx(2.5)
    assert "tinker/_compat.py:150" in finding.message


def test_profile_without_async_mode_fires_on_idle_epoll_and_names_the_python_api():
    (finding,), _ = outcome(profile_run(IDLE_LOOP, wall=10.0), "profile-without-async-mode")
    assert finding.severity == "info" and finding.fraction_of_wall == pytest.approx(0.6)
    assert 'async_mode="enabled"' in finding.fix and "--async-mode" in finding.fix


def test_async_mode_profile_passes_profile_without_async_mode():
    tree = IDLE_LOOP[:2] + [(3, 2, "train_step", "train.py", 40, 6.0, True), (4, 3, "[await]", "", 0, 6.0, False)]
    _, result = outcome(profile_run(tree, wall=6.0, async_mode="enabled"), "profile-without-async-mode")
    assert result.status == "passed"


def test_cpu_bound_counts_tokenizers_but_not_waiting():
    run = profile_run(IDLE_LOOP, wall=10.0)
    # 1.5 s of CPU in 10 s (the rest is epoll and serialization) is below the 25% default.
    _, result = outcome(run, "cpu-bound-main-thread")
    assert result.status == "passed" and "15% CPU" in result.reason
    findings, _, _ = run_rules(
        run,
        select=["cpu-bound-main-thread"],
        policy=Policy.from_config(rules={"cpu-bound-main-thread": {"min_share": 0.1}}),
    )
    (finding,) = findings
    assert finding.evidence["by_library"] == {"tokenizers": pytest.approx(1.4), "application code": pytest.approx(0.1)}
    assert finding.evidence["waiting_s"]["event_loop_poll"] == pytest.approx(6.0)
    assert "event loop is stalled" in finding.message


def test_cpu_bound_is_capped_by_measured_process_cpu_time():
    tree = [
        (1, None, "main", "train.py", 1, 4.0, True),
        (2, 1, "_SSLSocket.read", "<built-in>", 0, 0.5, False),
        (3, 1, "[self]", "", 0, 3.5, False),
    ]
    (finding,), _ = outcome(profile_run(tree, wall=4.0, cpu=3.0), "cpu-bound-main-thread")
    assert finding.evidence["cpu_s"] == pytest.approx(3.0)
    _, result = outcome(profile_run(tree, wall=4.0, cpu=0.2), "cpu-bound-main-thread")
    assert result.status == "passed"


def stacks(blocks: list[dict[str, list[tuple[str, str, int, str]]]]) -> pl.DataFrame:
    rows = []
    for snapshot, threads in enumerate(blocks):
        for label, frames in threads.items():
            for index, (file_path, function, line_no, code) in enumerate(frames):
                rows.append(
                    {
                        "source": "stacks.txt",
                        "line": 100 * snapshot + 10 * index,
                        "timestamp": datetime(2026, 3, 5, 12, 0, snapshot),
                        "snapshot": snapshot,
                        "label": label,
                        "thread_ident": 1 if label == "main" else 2,
                        "frame_index": index,
                        "file_path": file_path,
                        "line_no": line_no,
                        "function": function,
                        "code": code,
                    }
                )
    return pl.DataFrame(rows, schema=STACK_SNAPSHOTS_SCHEMA)


HOLDER_SERIALIZING = [
    (f"{STDLIB}/threading.py", "_bootstrap", 1002, "self._bootstrap_inner()"),
    (f"{SITE}/tinker/_compat.py", "model_dump", 150, "return model.model_dump(**kw)"),
    (f"{SITE}/pydantic/main.py", "model_dump", 420, "return self.__pydantic_serializer__.to_python("),
]
HOLDER_IDLE = [(f"{STDLIB}/selectors.py", "select", 468, "fd_event_list = self._selector.poll(timeout, max_ev)")]
MAIN_NUMPY = [
    ("train.py", "reward", 30, "scores = np.linalg.svd(big)"),
    (f"{SITE}/numpy/linalg/linalg.py", "svd", 1650, "u, s, vh = gufunc(a)"),
]


def test_stack_states_read_innermost_frames():
    table = stacks(
        [{"holder": HOLDER_SERIALIZING, "main": MAIN_NUMPY}, {"holder": HOLDER_IDLE, "main": MAIN_NUMPY[:1]}]
    )
    states = {(s.snapshot, s.label): (s.state, s.detail) for s in stack_states(table)}
    assert states[(0, "holder")] == ("serialization", "model_dump")
    assert states[(0, "main")] == ("cpu", "numpy")
    assert states[(1, "holder")] == ("idle-poll", "selectors")
    assert states[(1, "main")] == ("cpu", "np.linalg.svd")


def test_stack_serialization_on_holder_and_cpu_on_main():
    run = RunTables()
    run.stack_snapshots = stacks(
        [{"holder": HOLDER_SERIALIZING, "main": MAIN_NUMPY}] * 2 + [{"holder": HOLDER_IDLE, "main": MAIN_NUMPY}]
    )
    (ser,), _ = outcome(run, "serialization-stall")
    assert "holder" in ser.message and ser.evidence["count"] == 2
    (cpu,), _ = outcome(run, "cpu-bound-main-thread")
    assert cpu.evidence["cpu_samples"] == 3 and "numpy" in cpu.message


def test_serialization_test_fail_line_is_an_error():
    run = RunTables()
    run.log_events = pl.DataFrame(
        [
            {
                "source": "out.txt",
                "line": 4,
                "timestamp": None,
                "logger": None,
                "level": None,
                "kind": "serialization-test",
                "message": "model_dump() took 147.231s",
                "fields": json.dumps({"model_dump_s": 147.231}),
            },
            {
                "source": "out.txt",
                "line": 5,
                "timestamp": None,
                "logger": None,
                "level": None,
                "kind": "serialization-test",
                "message": "FAIL: model_dump() is very slow",
                "fields": json.dumps({"verdict": "FAIL"}),
            },
        ],
        schema=LOG_EVENTS_SCHEMA,
    )
    (finding,), _ = outcome(run, "serialization-stall")
    assert finding.severity == "error" and finding.seconds_lost == pytest.approx(147.231)
    assert [line["line"] for line in finding.evidence["lines"]] == [5, 4]


def test_profile_rules_abstain_without_profiles():
    for slug in ("serialization-stall", "cpu-bound-main-thread", "profile-without-async-mode"):
        _, result = outcome(RunTables(), slug)
        assert result.status == "not_applicable" and "profile" in result.reason


# --- real profiles -------------------------------------------------------------------------


@needs_profiles
def test_cli_profile_lacks_async_mode_and_the_async_one_does_not():
    (finding,), _ = outcome(load_run(PROFILES / "profile_cli.json"), "profile-without-async-mode")
    assert "selectors.py" in finding.message and finding.fraction_of_wall > 0.3
    _, result = outcome(load_run(PROFILES / "profile_async.json"), "profile-without-async-mode")
    assert result.status == "passed"


@needs_profiles
def test_fixture_profiles_have_small_serialization_with_stable_pydantic():
    for name in ("profile_cli.json", "profile_async.json", "profile.pyisession"):
        _, result = outcome(load_run(PROFILES / name), "serialization-stall")
        assert result.status == "passed", name


@needs_corpus
def test_wikipedia_profile_is_io_wait_not_cpu_and_not_an_event_loop():
    run = load_run(DEMO_DATA / "wikipedia_article_word_count.json")
    (item,) = breakdown(run.profiles, run.frames)
    assert item.blocking_io_s > 0.3  # SSL reads and connects dominate the 0.41 s
    for slug in ("cpu-bound-main-thread", "profile-without-async-mode", "serialization-stall"):
        _, result = outcome(run, slug)
        assert result.status == "passed", (slug, result.reason)


@needs_corpus
def test_sympy_profile_is_cpu_bound_in_sympy():
    (finding,), _ = outcome(load_run(DEMO_DATA / "sympy_calculation.json"), "cpu-bound-main-thread")
    assert finding.fraction_of_wall > 0.9
    assert next(iter(finding.evidence["by_library"])) == "sympy"
    assert "No event loop" in finding.message
    _, result = outcome(load_run(DEMO_DATA / "sympy_calculation.json"), "profile-without-async-mode")
    assert result.status == "passed"


@pytest.mark.skipif(not (RUNS / "sl_gil_stall").exists(), reason="fixtures/runs not generated")
def test_gil_stall_fixture_profile_points_at_the_regex():
    findings, _ = outcome(load_run(RUNS / "sl_gil_stall"), "cpu-bound-main-thread")
    profile = next(f for f in findings if f.fingerprint.startswith("cpu-bound-main-thread:profile:"))
    assert next(iter(profile.evidence["by_library"])) == "regex (re)"
    assert profile.evidence["hot_frames"][0]["function"] == "Pattern.match"
