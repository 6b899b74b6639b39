"""The never-crash / nothing-lost promise, end to end.

Fixture runs are copied into tmp_path, one or more of their files are damaged (truncated,
spliced with garbage, lines dropped, duplicated or reordered, values replaced with the wrong
type, NaN, huge numbers, deep nesting, invalid UTF-8, BOM, CRLF, empty), and the whole pipeline
runs: load_run, analyze, the JSON document, the terminal text and the CLI. Nothing may raise;
every untouched metrics line is still a row; each line-oriented input accounts for every line
(records + line-level warnings == non-blank lines); the JSON document is strict and
deterministic.
"""

from __future__ import annotations

import json
import os
import shutil
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trace_doctor.api import NothingToAnalyze, analyze, load_run
from trace_doctor.cli import main
from trace_doctor.ingest.parsers.dumps import dump_block_lines
from trace_doctor.report.console import render_text
from trace_doctor.report.json_doc import render_json

FIXTURES = ("demo", "sl_gil_stall", "rl_kl_step0")
pytestmark = pytest.mark.skipif(
    not all((FIXTURE_RUNS / name).is_dir() for name in FIXTURES),
    reason="fixture runs have not been generated (make fixtures)",
)

JSONL_INPUTS = ("metrics.jsonl", "checkpoints.jsonl", "timing_spans.jsonl", "trace_events.jsonl")
TEXT_INPUTS = ("logs.log", "task_dump.txt", "stacks.txt", "stdout.txt", "code.diff", "asyncio_ps.txt")
DOCUMENT_INPUTS = ("config.json", "profile.json", "profile.pyisession", "profile_async.json")
# Inputs of the shapes the fixture runs lack (raw pyinstrument session, async profile, asyncio ps
# table), added to every copied run.
EXTRAS = {
    "profile.pyisession": FIXTURE_RUNS.parent / "profiles" / "profile.pyisession",
    "profile_async.json": FIXTURE_RUNS.parent / "profiles" / "profile_async.json",
    "asyncio_ps.txt": FIXTURE_RUNS.parent / "dumps" / "asyncio_ps.txt",
}
# Files whose every line the log parser reads (dump blocks inside them aside).
LOG_ONLY = ("logs.log", "stdout.txt", "code.diff")
BOM = b"\xef\xbb\xbf"
HYPOTHESIS = settings(
    max_examples=70,
    deadline=None,
    # The same examples on every run: CI must not go red on a draw nobody can reproduce.
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Raw JSON texts that replace a value: wrong types, non-finite and huge numbers, negative
# durations, a lone surrogate, nesting deeper than orjson (1024) and Python's json (~1000) accept.
WEIRD_VALUES = (
    b'"not a number"',
    b'{"nested": {"x": 1}}',
    b'[1, "two", null]',
    b"null",
    b"true",
    b"false",
    b'""',
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"-1e400",
    b"1" + b"0" * 30,
    b"-" + b"1" + b"0" * 30,
    b"1" + b"0" * 400,
    b"-5.5",
    b"-1",
    b"0",
    b"1.5",
    b'"\\ud800"',
    b'"caf\\u00e9 \\u0000 <script>"',
    b"[" * 300 + b"]" * 300,
    b"[" * 3000 + b"]" * 3000,
    b'{"a": ' * 1200 + b"1" + b"}" * 1200,
)

# Lines that look like the start of something: dump headers with impossible dates and numbers,
# log lines with numbers that do not parse, tracebacks. Inserted as blocks, so a header is
# followed by body lines.
TRICKY_LINES = (
    b"===== 2026-13-45 99:99:99 asyncio task dump [main] 3 task(s) @ interval=0.25s =====",
    b"===== 2026-11-22 04:49:40 asyncio task dump [main] 99999999999999999999999 task(s) @ interval=1..2s =====",
    b"===== 2026-11-22 04:49:40 asyncio task dump [main] 1 task(s) @ interval=.s =====",
    b"  'Task-\\x': pending  <coroutine object f at 0x1>",
    b"  'Task-\\N{nope}': done exc=ValueError('x')  <coroutine object g at 0x2>",
    b"  'Task-1': pending  <coroutine object main at 0x7f>",
    b"===== 2026-11-22 04:49:40 end [other] =====",
    b"===== 2026-02-30 04:49:40 end [main] =====",
    b"#" * 72,
    b"# 2026-02-30 25:61:61 stacks: main only",
    b"# 2026-11-22 04:49:41 stacks: main only",
    b"--- [main] ident=99999999999999999999999 ---",
    b"--- [main] ident=140000 (no frame) ---",
    b'  File "/x/loop.py", line 99999999999999999999999, in run',
    b'  File "/x/loop.py", line 12, in run',
    b"    await asyncio.sleep(1)",
    b"    ^^^^^^^^^^",
    b"[99:99:99] main:",
    b"[04:49:41] main:",
    b"tid        task id              task name            coroutine stack                                    "
    b"awaiter chain                                      awaiter name         awaiter id",
    b"-" * 40,
    b"99999999999999999999999 0x7f00000000000000  Task-1  main -> run  x -> y  Task-0  0x1",
    b"12 0x1",
    b"[GIL monitor] slept 1..2s instead of 0.5s (jitter: 1.2.3s) - likely GIL contention",
    b"[GIL monitor] slept .s instead of .s (jitter: -.s)",
    b"[GIL monitor] slept 1" + b"0" * 400 + b".0s instead of 0.5s (jitter: 1.0s)",
    b"model_dump() took 1" + b"0" * 400 + b"s",
    b"Payload: batch_size=99999999999999999999999, seq_len=2, total_tokens=,,,",
    b"WARNING: model_dump is slow",
    b"Batch 99999999999999999999999: all groups failed or filtered, skipping batch",
    b"x.py:99999999999999999999999: UserWarning: something",
    b"root:99999999999999999999999 [WARNING] x.py:1: DeprecationWarning: old",
    b"tinker_cookbook.rl.train:12 [ERROR] Request failed: prompt is too long",
    b"forward_backward took 1" + b"0" * 400 + b" seconds",
    b"Traceback (most recent call last):",
    b'  File "/site-packages/tinker/lib.py", line 1, in f',
    b"ValueError: boom",
    b"tinker://abc-def:train:99999999999999999999999/weights/final",
    b"Python 3.11.7",
    b"\x1b[31mred\x1b[0m \x1b]8;;http://x\x07link",
    b"\x00\x00\xff\xfe binary",
    b"\xed\xa0\x80 surrogate bytes",
    b"",
)


@dataclass
class Damaged:
    """A damaged file: its lines, and for each the original line it still equals (or None)."""

    original: list[bytes]
    lines: list[bytes]
    origin: list[int | None]
    terminated: bool = True
    crlf: bool = False
    bom: bool = False
    cut: float | None = None  # truncate the assembled bytes at this fraction of their length
    ops: list[str] = field(default_factory=list)

    def to_bytes(self) -> bytes:
        sep = b"\r\n" if self.crlf else b"\n"
        data = sep.join(self.lines) + (sep if self.terminated and self.lines else b"")
        if self.bom:
            data = BOM + data
        if self.cut is not None:
            data = data[: int(len(data) * self.cut)]
        return data

    def untouched(self, data: bytes) -> dict[int, int]:
        """{1-based line number in `data`: original index} for lines still equal to an original line."""
        kept: dict[int, int] = {}
        for number, raw in enumerate(data.split(b"\n"), start=1):
            if number > len(self.origin):
                break
            source = self.origin[number - 1]
            if source is None:
                continue
            if number == 1 and raw.startswith(BOM):
                raw = raw[len(BOM) :]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            if raw == self.original[source] and raw.strip():
                kept[number] = source
        return kept


def _replace_at_path(value, draw, raw_replacement: bytes) -> bytes | None:
    """JSON text of `value` with one randomly chosen nested value replaced by raw JSON text."""
    marker = "\u2063weird\u2063"
    holder = value
    for _ in range(draw(st.integers(0, 4))):
        children = (
            list(holder.items())
            if isinstance(holder, dict)
            else list(enumerate(holder))
            if isinstance(holder, list)
            else []
        )
        children = [(k, v) for k, v in children if isinstance(v, (dict, list)) and v]
        if not children:
            break
        holder = draw(st.sampled_from(children))[1]
    if isinstance(holder, dict) and holder:
        holder[draw(st.sampled_from(sorted(holder)))] = marker
    elif isinstance(holder, list) and holder:
        holder[draw(st.integers(0, len(holder) - 1))] = marker
    else:
        return None
    text = json.dumps(value).encode()
    return text.replace(json.dumps(marker).encode(), raw_replacement, 1)


def damage(data: bytes, draw, *, document: bool = False) -> Damaged:
    """Apply a random list of mutations to a file's bytes."""
    original = data.split(b"\n")
    terminated = data.endswith(b"\n")
    if terminated:
        original.pop()
    result = Damaged(original, list(original), list(range(len(original))), terminated)
    kinds = [
        "drop",
        "duplicate",
        "swap",
        "garbage",
        "tricky",
        "splice",
        "truncate_line",
        "retype",
        "huge",
        "empty",
        "truncate_file",
        "crlf",
        "bom",
        "unterminated",
    ]
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(kinds))
        result.ops.append(op)
        n = len(result.lines)
        at = draw(st.integers(0, max(0, n - 1)))
        if op == "drop" and n:
            del result.lines[at], result.origin[at]
        elif op == "duplicate" and n:
            result.lines.insert(at, result.lines[at])
            result.origin.insert(at, result.origin[at])
        elif op == "swap" and n:
            other = draw(st.integers(0, n - 1))
            result.lines[at], result.lines[other] = result.lines[other], result.lines[at]
            result.origin[at], result.origin[other] = result.origin[other], result.origin[at]
        elif op == "garbage":
            junk = draw(st.lists(st.binary(max_size=60), min_size=1, max_size=3))
            for piece in junk:
                result.lines.insert(at, piece.replace(b"\n", b" "))
                result.origin.insert(at, None)
        elif op == "tricky":
            block = draw(st.lists(st.sampled_from(TRICKY_LINES), min_size=1, max_size=8))
            result.lines[at:at] = block
            result.origin[at:at] = [None] * len(block)
        elif op == "splice" and n:
            line = result.lines[at]
            pos = draw(st.integers(0, len(line)))
            result.lines[at] = line[:pos] + draw(st.binary(min_size=1, max_size=20)).replace(b"\n", b" ") + line[pos:]
            result.origin[at] = None
        elif op == "truncate_line" and n and result.lines[at]:
            result.lines[at] = result.lines[at][: draw(st.integers(0, len(result.lines[at]) - 1))]
            result.origin[at] = None
        elif op == "retype" and n:
            _retype(result, at, draw, document)
        elif op == "huge":
            step = draw(st.integers(0, 40))
            line = (
                json.dumps({"step": step, "note": "x" * 2_000_000}).encode()
                if draw(st.booleans())
                else b"y" * 2_000_000
            )
            result.lines.insert(at, line)
            result.origin.insert(at, None)
        elif op == "empty":
            result.lines, result.origin = [], []
        elif op == "truncate_file":
            result.cut = draw(st.floats(0.0, 1.0))
        elif op == "crlf":
            result.crlf = True
        elif op == "bom":
            result.bom = True
        elif op == "unterminated":
            result.terminated = False
    return result


def _retype(result: Damaged, at: int, draw, document: bool) -> None:
    """Replace one value inside a JSON line (or the whole JSON document) with a weird one."""
    weird = draw(st.sampled_from(WEIRD_VALUES))
    if document:
        try:
            value = json.loads(b"\n".join(result.lines))
        except (ValueError, RecursionError):  # an earlier damage nested it deeper than json can read back
            return
        text = _replace_at_path(value, draw, weird)
        if text is not None:
            result.lines, result.origin = [text], [None]
        return
    try:
        value = json.loads(result.lines[at])
    except (ValueError, RecursionError):
        return
    text = _replace_at_path(value, draw, weird)
    if text is not None:
        result.lines[at] = text
        result.origin[at] = None


def copy_run(name: str, target: Path) -> Path:
    run = target / name
    if run.exists():
        shutil.rmtree(run)
    shutil.copytree(FIXTURE_RUNS / name, run)
    (run / "EXPECTED.json").unlink(missing_ok=True)
    for name, source in EXTRAS.items():
        if source.exists():
            shutil.copyfile(source, run / name)
    return run


def nonblank_lines(data: bytes) -> int:
    return sum(1 for raw in data.split(b"\n") if raw.strip())


def strict_json(text: str):
    def refuse(constant: str):
        raise AssertionError(f"non-strict JSON constant {constant} in the document")

    return json.loads(text, parse_constant=refuse)


def run_pipeline(run_dir: Path):
    """load_run + analyze + both renderers; returns (run, analysis, json text)."""
    run = load_run(run_dir)
    result = analyze(run)
    document = render_json(result)
    render_text(result)
    return run, result, document


def check_accounting(run, run_dir: Path, damaged: dict[str, Damaged]) -> None:
    """Every file's records and warnings add up; untouched metrics lines are rows."""
    by_path = {}
    for info in run.inputs:
        # A dump file is also read as a log (its GIL-monitor and SDK lines): keep the log entry.
        if info.kind != "dump":
            by_path[Path(info.path).name] = [info]
    for warning in run.warnings:
        assert Path(warning.path).parent == run_dir, warning
        assert warning.problem.strip(), warning
        if warning.line is not None:
            data = (run_dir / Path(warning.path).name).read_bytes()
            assert 1 <= warning.line <= data.count(b"\n") + 1, warning
    for name in JSONL_INPUTS:
        path = run_dir / name
        if not path.exists() or name not in by_path:
            continue
        [info] = by_path[name]
        data = path.read_bytes()
        if name == "trace_events.jsonl" and data.lstrip().startswith(b"["):
            # read as one JSON document: see test_trace_events_jsonl_with_a_garbage_first_line_keeps_its_events
            continue
        assert info.records + info.skipped == nonblank_lines(data), (
            name,
            info,
            damaged.get(name) and damaged[name].ops,
        )
    for name in LOG_ONLY:
        path = run_dir / name
        if not path.exists() or name not in by_path:
            continue
        [info] = by_path[name]
        lines = path.read_bytes().decode("utf-8", errors="replace").removeprefix("\ufeff").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        owned = sum(end - start + 1 for start, end in dump_block_lines(lines))
        assert info.records + owned == len(lines), (name, info, owned, len(lines))
    metrics = run_dir / "metrics.jsonl"
    if "metrics.jsonl" in by_path:
        steps = run.steps.filter(run.steps["source"] == str(metrics))
        [info] = by_path["metrics.jsonl"]
        assert steps.height == info.records
        rows = dict(zip(steps["line"].to_list(), steps["step"].to_list(), strict=True))
        data = metrics.read_bytes()
        expected = (
            damaged["metrics.jsonl"].untouched(data)
            if "metrics.jsonl" in damaged
            else {i + 1: i for i, raw in enumerate(data.split(b"\n")) if raw.strip()}
        )
        original = damaged["metrics.jsonl"].original if "metrics.jsonl" in damaged else data.split(b"\n")
        for number, source in expected.items():
            assert number in rows, f"untouched metrics line {number} is not a row"
            assert rows[number] == json.loads(original[source])["step"]
    dump_rows = run.task_snapshots.height + run.stack_snapshots.filter(~run.stack_snapshots["no_frame"]).height
    assert dump_rows == sum(i.records for i in run.inputs if i.kind == "dump")
    assert run.frames.height == sum(i.records for i in run.inputs if i.kind == "profile")


def assert_sound(run, result, document: str, run_dir: Path, damaged: dict[str, Damaged]) -> None:
    doc = strict_json(document)
    assert doc["run"]["inputs"] == [i.to_dict() for i in run.inputs]
    assert len(doc["ingest_warnings"]) == len(run.warnings)
    errors = [(o.rule, o.reason) for o in result.outcomes if o.status == "error"]
    assert errors == [], errors
    check_accounting(run, run_dir, damaged)


def damage_files(run_dir: Path, names: list[str], draw) -> dict[str, Damaged]:
    damaged = {}
    for name in names:
        path = run_dir / name
        if not path.exists():
            continue
        damaged[name] = damage(path.read_bytes(), draw, document=name in DOCUMENT_INPUTS)
        path.write_bytes(damaged[name].to_bytes())
    return damaged


# -- property tests over the whole pipeline ----------------------------------------------------


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TRACE_DOCTOR_CACHE", "off")


@HYPOTHESIS
@given(data=st.data())
def test_damaged_jsonl_input_keeps_every_valid_line(tmp_path, data):
    run_dir = copy_run(data.draw(st.sampled_from(FIXTURES)), tmp_path)
    name = data.draw(st.sampled_from(JSONL_INPUTS))
    damaged = damage_files(run_dir, [name], data.draw)
    run, result, document = run_pipeline(run_dir)
    assert_sound(run, result, document, run_dir, damaged)


@HYPOTHESIS
@given(data=st.data())
def test_damaged_text_input_never_crashes(tmp_path, data):
    run_dir = copy_run(data.draw(st.sampled_from(FIXTURES[:2])), tmp_path)
    name = data.draw(st.sampled_from(TEXT_INPUTS))
    damaged = damage_files(run_dir, [name], data.draw)
    run, result, document = run_pipeline(run_dir)
    assert_sound(run, result, document, run_dir, damaged)


@settings(HYPOTHESIS, max_examples=50)
@given(data=st.data())
def test_damaged_config_and_profile_never_crash(tmp_path, data):
    run_dir = copy_run(data.draw(st.sampled_from(FIXTURES[:2])), tmp_path)
    name = data.draw(st.sampled_from(DOCUMENT_INPUTS))
    damaged = damage_files(run_dir, [name], data.draw)
    run, result, document = run_pipeline(run_dir)
    assert_sound(run, result, document, run_dir, damaged)
    [info] = [i for i in run.inputs if Path(i.path).name == name] or [None]
    if info is not None and info.records == 0:
        assert any(Path(w.path).name == name for w in run.warnings), f"{name} yielded nothing and no warning says why"


@settings(HYPOTHESIS, max_examples=40)
@given(data=st.data())
def test_cli_on_several_damaged_files_exits_cleanly_and_deterministically(tmp_path, data):
    run_dir = copy_run(data.draw(st.sampled_from(FIXTURES)), tmp_path)
    names = data.draw(
        st.lists(st.sampled_from(JSONL_INPUTS + TEXT_INPUTS + DOCUMENT_INPUTS), min_size=1, max_size=4, unique=True)
    )
    damage_files(run_dir, names, data.draw)
    runner = CliRunner()
    args = ["analyze", str(run_dir), "--no-html", "--format", "json", "--config", str(_empty_config(tmp_path))]
    first = runner.invoke(main, args, catch_exceptions=False)
    second = runner.invoke(main, args, catch_exceptions=False)
    assert first.exit_code in (0, 1, 2), first.output
    if first.exit_code == 2:
        assert first.stderr.startswith("trace-doctor: ") and "no readable record" in first.stderr
        return
    assert "Traceback" not in first.stderr
    strict_json(first.stdout)
    assert first.stdout == second.stdout


def _empty_config(tmp_path: Path) -> Path:
    path = tmp_path / "trace-doctor.toml"
    path.write_text("")
    return path


# -- targeted cases ----------------------------------------------------------------------------


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


METRIC_LINE = '{"step": %d, "time/total": 1.5, "train_mean_nll": 0.5, "learning_rate": 0.0002}'


def write_metrics(path: Path, steps: int) -> None:
    path.write_text("".join(METRIC_LINE % i + "\n" for i in range(steps)))


def test_missing_file_given_explicitly_exits_2_naming_it(tmp_path):
    missing = tmp_path / "metrics.jsonl"
    with pytest.raises(NothingToAnalyze, match="does not exist"):
        load_run(missing)
    result = invoke("analyze", str(missing), "--no-html")
    assert result.exit_code == 2
    assert result.stderr.startswith("trace-doctor: path does not exist") and str(missing) in result.stderr


def test_broken_symlink_given_explicitly_says_so(tmp_path):
    link = tmp_path / "trace_events.jsonl"
    link.symlink_to(tmp_path / "gone.jsonl")
    result = invoke("analyze", str(link), "--no-html")
    assert result.exit_code == 2
    assert "broken symbolic link" in result.stderr


def test_directory_of_only_unreadable_entries_exits_2_and_lists_them(tmp_path):
    (tmp_path / "trace_events.jsonl").symlink_to(tmp_path / "deleted-trace.jsonl")
    (tmp_path / "config.json").symlink_to(tmp_path / "deleted-config.json")
    (tmp_path / "notes.md").write_text("# notes\n")
    with pytest.raises(NothingToAnalyze) as caught:
        load_run(tmp_path)
    message = str(caught.value)
    assert "trace_events.jsonl" in message and "broken symbolic link" in message
    result = invoke("analyze", str(tmp_path), "--no-html")
    assert result.exit_code == 2
    assert "broken symbolic link" in result.stderr and "Traceback" not in result.output


def test_directory_of_only_garbage_exits_2_with_the_first_problems(tmp_path):
    (tmp_path / "metrics.jsonl").write_bytes(b"\x00\xff\xfe garbage\n{not json\n")
    (tmp_path / "checkpoints.jsonl").write_bytes(b"[1, 2]\n")
    (tmp_path / "config.json").write_text("[]")
    result = invoke("analyze", str(tmp_path), "--no-html")
    assert result.exit_code == 2
    assert "no readable record" in result.stderr
    assert "metrics.jsonl:1 not valid JSON" in result.stderr


@pytest.mark.parametrize("kind", ["metrics", "checkpoints", "config", "profile", "dump", "log", "spans", "trace"])
def test_a_file_that_turned_into_a_directory_is_one_warning(tmp_path, kind):
    """A file that vanished or became unreadable between discovery and parsing (tests run as root, so no chmod)."""
    from trace_doctor.ingest.parsers import checkpoints, config, dumps, logs, metrics, profiles, timing_spans
    from trace_doctor.ingest.trace import trace_events

    unreadable = tmp_path / "input"
    unreadable.mkdir()
    warnings = []
    parse = {
        "metrics": lambda: metrics.parse_metrics_files([unreadable], warnings),
        "checkpoints": lambda: checkpoints.parse_checkpoint_files([unreadable], warnings),
        "config": lambda: config.parse_config(unreadable, warnings),
        "profile": lambda: profiles.parse_profile_files([unreadable], warnings),
        "dump": lambda: dumps.parse_dump_files([unreadable], warnings),
        "log": lambda: logs.parse_log_files([unreadable], warnings),
        "spans": lambda: timing_spans.parse_timing_spans_files([unreadable], warnings),
        "trace": lambda: trace_events.parse_trace_files([unreadable], warnings),
    }[kind]
    outcome = parse()
    infos = outcome[-1] if isinstance(outcome[-1], list) else [outcome[-1]]
    assert [w.path for w in warnings] == [str(unreadable)]
    assert "cannot read file" in warnings[0].problem
    assert [(i.records, i.skipped) for i in infos] == [(0, 1)]


def test_a_file_deleted_after_discovery_costs_only_that_file(tmp_path, monkeypatch):
    import trace_doctor.api as api

    run_dir = copy_run("demo", tmp_path)
    real_discover = api.discover

    def discover_then_delete(paths):
        found = real_discover(paths)
        (run_dir / "logs.log").unlink()
        return found

    monkeypatch.setattr(api, "discover", discover_then_delete)
    run = load_run(run_dir)
    [warning] = [w for w in run.warnings if w.path.endswith("logs.log")]
    assert warning.line is None and "cannot read file" in warning.problem
    assert run.steps.height == 30 and run.spans.height > 0


@pytest.mark.parametrize(
    "config",
    [
        b"[1, 2, 3]",
        b'{"model_name": "Qwen/Qwen3-8B", "lora_rank": ',
        b"",
        b'"just a string"',
        b'\xef\xbb\xbf{"lora_rank": 32}',
    ],
)
def test_config_that_is_not_an_object_is_a_warning_and_the_run_is_analysed(tmp_path, config):
    run_dir = copy_run("sl_gil_stall", tmp_path)
    (run_dir / "config.json").write_bytes(config)
    run, result, document = run_pipeline(run_dir)
    [info] = [i for i in run.inputs if i.kind == "config"]
    if config.startswith(b"\xef\xbb\xbf"):
        assert info.records == 1 and run.meta.lora_rank == 32
    else:
        assert (info.records, info.skipped) == (0, 1)
        assert [w for w in run.warnings if w.path.endswith("config.json")]
    assert run.steps.height == 30
    strict_json(document)


def test_config_with_numbers_beyond_64_bits_renders(tmp_path):
    run_dir = copy_run("sl_gil_stall", tmp_path)
    (run_dir / "config.json").write_text(
        '{"lora_rank": 1e30, "submit_ahead": 18446744073709551615, "temperature": NaN, "model_name": "m"}'
    )
    run, result, document = run_pipeline(run_dir)
    assert run.meta.lora_rank is None and run.meta.submit_ahead is None and run.meta.model_name == "m"
    assert strict_json(document)["run"]["meta"]["temperature"] is None


def _pyisession(tmp_path: Path) -> bytes:
    session = {
        "start_time": 1.0,
        "duration": 2.0,
        "sample_count": 3,
        "target_description": "Profile at x.py:1",
        "cpu_time": 1.5,
        "sys_path": [],
        "sys_prefixes": ["/usr/lib/python3.11"],
        "frame_records": [
            [["<module>\x00/app/main.py\x001", "work\x00/app/main.py\x0010"], 1.5],
            [["<module>\x00/app/main.py\x001"], 0.5],
        ],
    }
    return json.dumps(session).encode()


def test_truncated_pyisession_is_a_warning_and_the_run_is_analysed(tmp_path):
    run_dir = copy_run("sl_gil_stall", tmp_path)
    data = _pyisession(tmp_path)
    (run_dir / "whole.pyisession").write_bytes(data)
    (run_dir / "cut.pyisession").write_bytes(data[: len(data) // 2])
    run, result, document = run_pipeline(run_dir)
    cut = [i for i in run.inputs if i.path.endswith("cut.pyisession")]
    whole = [i for i in run.inputs if i.path.endswith("whole.pyisession")]
    assert [(i.records, i.skipped) for i in cut] == [(0, 1)]
    assert whole[0].records == 2
    [warning] = [w for w in run.warnings if w.path.endswith("cut.pyisession")]
    assert "truncated or not JSON" in warning.problem
    strict_json(document)


def test_appended_profiles_keep_the_readable_ones(tmp_path):
    data = _pyisession(tmp_path)
    path = tmp_path / "profiles.pyisession"
    path.write_bytes(data + b"\n" + data[:40] + b"\n" + data + b"\n")
    warnings = []
    from trace_doctor.ingest.parsers.profiles import parse_profile_files

    frames, profiles, [info] = parse_profile_files([path], warnings)
    assert profiles.height == 2 and info.records == 4 and info.skipped == 1
    assert [(w.line, w.problem.split(":")[0]) for w in warnings] == [(2, "line is not a readable profile document")]


def test_task_dump_header_without_tasks(tmp_path):
    dump = tmp_path / "task_dump.txt"
    dump.write_text(
        "===== 2026-11-22 04:49:40 asyncio task dump [main] 3 task(s) @ interval=0.25s =====\n"
        "===== 2026-11-22 04:49:40 end [main] =====\n"
        "===== 2026-11-22 04:49:41 asyncio task dump [main] 2 task(s) @ interval=0.25s =====\n"
    )
    write_metrics(tmp_path / "metrics.jsonl", 3)
    run, result, document = run_pipeline(tmp_path)
    assert run.task_snapshots.height == 0
    problems = sorted((w.line, w.problem) for w in run.warnings if w.path == str(dump))
    assert problems == [
        (1, "task dump [main] announced 3 task(s), 0 were read"),
        (3, "task dump [main] has no end line (cut off); its 0 task(s) are kept"),
    ]
    strict_json(document)


def test_dump_headers_with_impossible_values_keep_their_blocks(tmp_path):
    dump = tmp_path / "task_dump.txt"
    dump.write_text(
        "===== 2026-13-45 99:99:99 asyncio task dump [main] 1 task(s) @ interval=0.25s =====\n"
        "  'Task-\\x': pending  <coroutine object main at 0x7f>\n"
        "===== 2026-13-45 99:99:99 end [main] =====\n"
        + "#" * 72
        + "\n# 2026-11-22 04:49:41 stacks: main only\n"
        + "#" * 72
        + "\n\n"
        "--- [main] ident=99999999999999999999999 ---\n"
        '  File "/app/loop.py", line 99999999999999999999999, in run\n'
        "    await step()\n"
    )
    write_metrics(tmp_path / "metrics.jsonl", 3)
    run, result, document = run_pipeline(tmp_path)
    assert run.task_snapshots["task_name"].to_list() == ["Task-\\x"]
    assert run.task_snapshots["timestamp"].to_list() == [None]
    frames = run.stack_snapshots
    assert frames.select("thread_ident", "line_no", "function", "code").rows() == [(None, None, "run", "await step()")]
    problems = [w.problem for w in run.warnings if w.path == str(dump)]
    assert any("impossible timestamp '2026-13-45 99:99:99'" in p for p in problems)
    assert any(p.startswith("thread ident 99999999999999999999999 does not fit") for p in problems)
    strict_json(document)


def test_log_lines_with_numbers_that_do_not_parse_are_read_not_fatal(tmp_path):
    log = tmp_path / "logs.log"
    lines = [
        line.decode()
        for line in TRICKY_LINES
        if b"GIL" in line or b"Batch" in line or b"Payload" in line or b"UserWarning" in line
    ]
    lines.append("[GIL monitor] slept 1.81s instead of 0.5s (jitter: 1.31s) — likely GIL contention")
    log.write_text("\n".join(lines) + "\n")
    write_metrics(tmp_path / "metrics.jsonl", 3)
    run, result, document = run_pipeline(tmp_path)
    [info] = [i for i in run.inputs if i.kind == "log"]
    assert info.records == len(lines)
    gil = run.log_events.filter(run.log_events["kind"] == "gil-monitor")
    # `1..2s` is not a number the monitor prints; 10**400 s is, and reads as infinity.
    assert gil["line"].to_list() == [3, len(lines)]
    batch = run.log_events.filter(run.log_events["kind"] == "skipped-batch")
    assert json.loads(batch["fields"][0])["batch"] is None
    strict_json(document)


def test_log_of_100k_identical_warnings_collapses_to_one_event(tmp_path):
    log = tmp_path / "logs.log"
    line = (
        "tinker_cookbook.renderers:88 [WARNING] Renderer qwen3 is not recommended for model meta-llama/Llama-3.1-8B\n"
    )
    log.write_text(line * 100_000)
    write_metrics(tmp_path / "metrics.jsonl", 3)
    run = load_run(tmp_path)
    [info] = [i for i in run.inputs if i.kind == "log"]
    assert info.records == 100_000
    [event] = run.log_events.rows(named=True)
    fields = json.loads(event["fields"])
    assert (event["line"], fields["repeats"], fields["last_line"]) == (1, 100_000, 100_000)


def test_log_with_invalid_utf8_keeps_every_line(tmp_path):
    log = tmp_path / "logs.log"
    log.write_bytes(
        b"root:1 [INFO] start\n\xff\xfe\x00 binary\n[GIL monitor] slept 1.81s instead of 0.5s (jitter: 1.31s)\r\n"
    )
    write_metrics(tmp_path / "metrics.jsonl", 3)
    run, result, document = run_pipeline(tmp_path)
    [info] = [i for i in run.inputs if i.kind == "log"]
    assert info.records == 3
    assert [(w.line, w.problem.split(" (")[0]) for w in run.warnings if w.path == str(log)] == [
        (2, "bytes that are not UTF-8")
    ]
    assert run.log_events["kind"].to_list() == ["gil-monitor"]


@pytest.mark.parametrize("weird", WEIRD_VALUES, ids=lambda w: w[:24].decode(errors="replace"))
def test_a_metric_of_any_json_value_keeps_its_row(tmp_path, weird):
    metrics = tmp_path / "metrics.jsonl"
    lines = [(METRIC_LINE % i).encode() for i in range(4)]
    lines[1] = b'{"step": 1, "time/total": ' + weird + b', "note": ' + weird + b"}"
    lines[2] = b'{"step": ' + weird + b', "time/total": 2.0}'
    metrics.write_bytes(b"\n".join(lines) + b"\n")
    run, result, document = run_pipeline(tmp_path)
    steps = run.steps
    assert steps["line"].to_list() == [1, 2, 3, 4]
    assert steps["step"].to_list()[:2] == [0, 1] and steps["step"][3] == 3
    [info] = run.inputs
    assert (info.records, info.skipped) == (4, 0)
    strict_json(document)


def test_bom_and_crlf_metrics_keep_every_row(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(BOM + b"".join((METRIC_LINE % i).encode() + b"\r\n" for i in range(5)))
    run = load_run(tmp_path)
    assert run.steps["step"].to_list() == [0, 1, 2, 3, 4] and run.warnings == []


def test_empty_metrics_file(tmp_path):
    (tmp_path / "metrics.jsonl").write_bytes(b"")
    result = invoke("analyze", str(tmp_path), "--no-html")
    assert result.exit_code == 2
    assert "found 1 input file(s) but no readable record in them" in result.stderr
    (tmp_path / "checkpoints.jsonl").write_bytes(b'{"name": "final", "batch": 3}\n')
    run, result, document = run_pipeline(tmp_path)
    assert [(i.kind, i.records, i.skipped) for i in run.inputs] == [("metrics", 0, 0), ("checkpoints", 1, 0)]
    assert run.warnings == []
    strict_json(document)


def test_unmatched_and_negative_trace_events_do_not_crash(tmp_path):
    write_metrics(tmp_path / "metrics.jsonl", 3)
    (tmp_path / "trace_events.jsonl").write_text(
        '{"name": "a", "ph": "E", "pid": 0, "tid": 1, "ts": 5.0}\n'
        '{"name": "b", "ph": "B", "pid": 0, "tid": 1, "ts": 10.0}\n'
        '{"name": "c", "ph": "X", "pid": 0, "tid": 1, "ts": 11.0, "dur": -3}\n'
        '{"name": "d", "ph": "B", "pid": 0, "tid": 1, "ts": NaN}\n'
        '{"name": "e", "ph": "B", "pid": 1e400, "tid": 1, "ts": 12.0}\n'
    )
    run, result, document = run_pipeline(tmp_path)
    [info] = [i for i in run.inputs if i.kind == "trace"]
    assert info.records + info.skipped == 5
    assert sorted(w.line for w in run.warnings if w.line is not None)[:1] == [1]
    strict_json(document)


def test_trace_event_with_deeply_nested_args_is_kept(tmp_path):
    write_metrics(tmp_path / "metrics.jsonl", 3)
    deep = "[" * 300 + "]" * 300
    (tmp_path / "trace_events.jsonl").write_text(
        f'{{"name": "b", "ph": "B", "pid": 0, "tid": 1, "ts": 10.0, "args": {deep}}}\n'
        '{"name": "b", "ph": "E", "pid": 0, "tid": 1, "ts": 20.0}\n'
    )
    run = load_run(tmp_path)
    assert run.spans.height == 1


def test_twenty_megabyte_metrics_file_ingests_every_row(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    keys = [f"env/all/metric_{k}" for k in range(40)]
    line = "{" + '"step": %d, ' + ", ".join(f'"{k}": 0.123456789' for k in keys) + "}\n"
    rows = 20_000_000 // len(line % 0) + 1
    with metrics.open("w") as out:
        for i in range(rows):
            out.write(line % i)
    assert metrics.stat().st_size > 20_000_000
    tracemalloc.start()
    try:
        run = load_run(metrics)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert run.steps.height == rows and run.warnings == []
    assert run.steps["step"].to_list()[-1] == rows - 1
    # Python-side peak: the decoded rows are transient; far below 20x the file size.
    assert peak < 20 * metrics.stat().st_size, (
        f"peak {peak / 1e6:.0f} MB for a {metrics.stat().st_size / 1e6:.0f} MB file"
    )


def test_metrics_whose_timer_is_text_in_every_row_are_analysed(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(f'{{"step": {i}, "time/total": "1.5s"}}\n' for i in range(3)))
    run = load_run(tmp_path)
    assert run.steps["time/total"].to_list() == ["1.5s"] * 3
    analyze(run)


def test_a_subdirectory_that_cannot_be_listed_is_reported(tmp_path, monkeypatch):
    write_metrics(tmp_path / "metrics.jsonl", 3)
    locked = tmp_path / "profiles"
    locked.mkdir()
    (locked / "profile.json").write_text("{}")
    real_scandir = os.scandir

    def scandir(path="."):
        if Path(path) == locked:  # what chmod 000 does for anyone but root
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    run = load_run(tmp_path)
    assert [(p.path, p.reason) for p in run.passed_over] == [(str(locked), "cannot list directory: Permission denied")]
    assert run.steps.height == 3


def test_config_nested_thousands_deep_reaches_every_output(tmp_path):
    run_dir = copy_run("demo", tmp_path)
    config = json.loads((run_dir / "config.json").read_text())
    config["dataset_builder"]["extra"] = "DEEP"
    (run_dir / "config.json").write_text(json.dumps(config).replace('"DEEP"', "[" * 3000 + "]" * 3000))
    run, result, document = run_pipeline(run_dir)
    assert run.meta.model_name == "Qwen/Qwen3-8B"
    [warning] = [w for w in run.warnings if w.path.endswith("config.json")]
    assert warning.problem == "1 value(s) nested deeper than 32 levels are kept as JSON text"
    bundle = invoke("bundle", str(run_dir), "-o", str(tmp_path / "bundle.zip"))
    assert bundle.exit_code == 0, bundle.output
    report = invoke("analyze", str(run_dir), "--html", str(tmp_path / "r.html"), "--format", "sarif")
    assert report.exit_code == 0 and (tmp_path / "r.html").stat().st_size > 0


def test_trace_events_jsonl_with_a_garbage_first_line_keeps_its_events(tmp_path):
    run_dir = copy_run("sl_gil_stall", tmp_path)
    trace = run_dir / "trace_events.jsonl"
    events = nonblank_lines(trace.read_bytes())
    trace.write_bytes(b"[04:49:41] main:\n" + trace.read_bytes())
    run = load_run(run_dir)
    [info] = [i for i in run.inputs if i.kind == "trace"]
    assert (info.records, info.skipped) == (events, 1)
