"""Whole log directories mutated the ways real ones break, through every command: never a crash.

A property-based fuzzer (hypothesis, derandomized: the same examples on every run). Each example
copies one or two realistic runs (the fixture runs and the sample run shipped in the package),
applies one to four mutations of the classes seen in the wild or in issue 14 — truncated lines,
garbage bytes, NaN/Infinity, empty and missing files, duplicate and unmatched B/E events, integers
of 2^63 and more in args.step/ts/dur, lists nested 1,000 deep in pid/ts/dur/name, file and folder
names that are not UTF-8, corrupt gzip, odd file names, metrics rows of thousands of keys,
profiles 200 calls deep — and runs a command on it (analyze, bundle, export or ingest) in a worker
process, so a hang is stopped and a dying process is seen. It must exit 0, 1 or 2 (3 is an internal
error: a bug), print no traceback, print strict JSON for `analyze --format json`, and account for
every record: records read + skipped = the non-blank lines of each JSONL input (a gzipped file or a
JSON-document trace aside), one document for config.json.

`make test` runs FUZZ_EXAMPLES (default 60, ~15 s); `make fuzz` runs thousands
(TRACE_DOCTOR_FUZZ_EXAMPLES). A failure prints the mutations and the crash's traceback file.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import multiprocessing
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trace_doctor.api import sample_run_path
from trace_doctor.cli import main
from trace_doctor.humanize import printable

# Training-quality runs bring what the timing runs lack: rollout summaries, a W&B folder, NaN values,
# an environment check, async/stream key sets.
TRAINING_BASES = ("rl_sync_healthy", "rl_wandb_machine", "rl_async_stale", "sft_nan_loss", "config_env_check_old_sdk")
BASES = (
    sorted(p for p in FIXTURE_RUNS.glob("*") if (p / "metrics.jsonl").exists())
    + [FIXTURE_RUNS.parent / "training" / name for name in TRAINING_BASES]
    + [sample_run_path()]
)
pytestmark = pytest.mark.skipif(len(BASES) < 2, reason="fixture runs have not been generated (make fixtures)")

FUZZ_EXAMPLES = int(os.environ.get("TRACE_DOCTOR_FUZZ_EXAMPLES", "60"))
# One command on a mutated run takes well under a second; a minute is a hang.
HANG_SECONDS = int(os.environ.get("TRACE_DOCTOR_FUZZ_HANG_SECONDS", "60"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

LINE_INPUTS = {"metrics", "trace", "spans", "checkpoints"}
# Trace event fields the fuzzer once crashed the reader with (a list nested 1,100 deep: RecursionError),
# fixed by the ingest rewrite; drawn by the property like every other key, and pinned below.
DEEP_NESTED_KEYS = ("name", "pid", "tid", "ts")
KNOWN_INGEST_CRASHES: set[str] = set()
HUGE_INTS = (2**63, 2**63 + 1, 2**64, -(2**63) - 1, 10**30, -(10**40))
NON_FINITE = ("NaN", "Infinity", "-Infinity")
ODD_NAMES = (
    "metrics copy (1).jsonl",
    "-rf_metrics.jsonl",
    " leading space_trace_events.jsonl",
    "new\nline_metrics.jsonl",
    "ünï cødé 训练 metrics.jsonl",
    "x" * 200 + "_metrics.jsonl",
    ".hidden_metrics.jsonl",
    "metrics.jsonl.pre_resume_99999999999999999999999",
    "metrics.jsonl.pre_resume_0",
    "trace_events.jsonl.gz",
    "a:b*?<>|\"'$(echo hi)`.json",
    "\u202eevil\u202d.log",
    "logs.log ",
    "config.json.json",
)


@dataclass
class Mutated:
    """A mutated copy: its folder, what was done (for the failure message), and the files it breaks
    in ways the record account cannot follow (gzip cut short: its lines are unknowable)."""

    root: Path
    done: list[str] = field(default_factory=list)
    unaccountable: set[str] = field(default_factory=set)


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def pick(draw, paths: list[Path], *suffixes: str) -> Path | None:
    chosen = [p for p in paths if not suffixes or p.name.endswith(suffixes)]
    return draw(st.sampled_from(chosen)) if chosen else None


def json_lines(path: Path) -> list[tuple[int, dict]]:
    found = []
    for index, raw in enumerate(path.read_bytes().split(b"\n")):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            found.append((index, value))
    return found


def replace_line(path: Path, index: int, text: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[index] = text
    path.write_bytes(b"\n".join(lines))


def insert_lines(path: Path, index: int, new: list[bytes]) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[index:index] = new
    path.write_bytes(b"\n".join(lines))


def with_raw(value: dict, dotted: str, raw: bytes) -> bytes:
    """JSON text of `value` with the field at `dotted` (e.g. `args.step`) replaced by raw JSON text."""
    marker = "\u2063raw\u2063"
    holder = value
    *parents, last = dotted.split(".")
    for key in parents:
        if not isinstance(holder.get(key), dict):
            holder[key] = {}
        holder = holder[key]
    holder[last] = marker
    return json.dumps(value).encode().replace(json.dumps(marker).encode(), raw, 1)


# -- mutations: each takes the run folder and hypothesis' draw, and says what it did ----------------


def truncate_line(run: Mutated, draw) -> None:
    path = pick(draw, files(run.root))
    lines = path.read_bytes().split(b"\n")
    at = draw(st.integers(0, max(0, len(lines) - 1)))
    cut = draw(st.integers(0, max(0, len(lines[at]) - 1)))
    if draw(st.booleans()):
        lines[at] = lines[at][:cut]  # a line cut short, the next one follows
        path.write_bytes(b"\n".join(lines))
    else:
        path.write_bytes(b"\n".join(lines[:at] + [lines[at][:cut]]))  # the file ends mid-line
    run.done.append(f"truncate line {at} of {path.name} at {cut}")


def garbage(run: Mutated, draw) -> None:
    path = pick(draw, files(run.root))
    junk = draw(st.binary(min_size=1, max_size=80))
    lines = path.read_bytes().split(b"\n")
    at = draw(st.integers(0, len(lines)))
    if draw(st.booleans()) or at == len(lines):
        lines.insert(at, junk)
    else:
        pos = draw(st.integers(0, len(lines[at])))
        lines[at] = lines[at][:pos] + junk + lines[at][pos:]
    path.write_bytes(b"\n".join(lines))
    run.done.append(f"garbage {junk[:20]!r} at line {at} of {path.name}")


def non_finite(run: Mutated, draw) -> None:
    path = pick(draw, files(run.root), ".jsonl")
    rows = json_lines(path) if path else []
    if not rows:
        return
    index, value = draw(st.sampled_from(rows))
    numbers = [k for k, v in value.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    numbers += [f"args.{k}" for k, v in (value.get("args") or {}).items() if isinstance(v, (int, float))]
    key = draw(st.sampled_from(numbers or ["step"]))
    literal = draw(st.sampled_from(NON_FINITE))
    replace_line(path, index, with_raw(value, key, literal.encode()))
    run.done.append(f"{key}={literal} in line {index} of {path.name}")


def empty_file(run: Mutated, draw) -> None:
    path = pick(draw, files(run.root))
    path.write_bytes(b"")
    run.done.append(f"empty {path.name}")


def missing_file(run: Mutated, draw) -> None:
    path = pick(draw, files(run.root))
    path.unlink()
    run.done.append(f"delete {path.name}")


def unmatched_events(run: Mutated, draw) -> None:
    path = pick(draw, files(run.root), "trace_events.jsonl")
    rows = json_lines(path) if path else []
    spans = [(i, v) for i, v in rows if v.get("ph") in ("B", "E")]
    if not spans:
        return
    index, value = draw(st.sampled_from(spans))
    op = draw(st.sampled_from(["duplicate", "drop", "orphan E", "orphan B", "swap phase"]))
    if op == "duplicate":
        insert_lines(path, index, [json.dumps(value).encode()])
    elif op == "drop":
        replace_line(path, index, b"")
    elif op == "orphan E":
        insert_lines(path, index, [json.dumps({**value, "ph": "E", "name": "never_began"}).encode()])
    elif op == "orphan B":
        insert_lines(path, index + 1, [json.dumps({**value, "ph": "B", "name": "never_ends"}).encode()])
    else:
        replace_line(path, index, json.dumps({**value, "ph": "E" if value["ph"] == "B" else "B"}).encode())
    run.done.append(f"{op} event at line {index} of {path.name}")


def huge_int(run: Mutated, draw) -> None:
    path = pick(draw, files(run.root), "trace_events.jsonl", "timing_spans.jsonl", "metrics.jsonl")
    rows = json_lines(path) if path else []
    if not rows:
        return
    index, value = draw(st.sampled_from(rows))
    key = draw(st.sampled_from(["args.step", "ts", "dur", "step", "pid", "tid"]))
    number = draw(st.sampled_from(HUGE_INTS))
    replace_line(path, index, with_raw(value, key, str(number).encode()))
    run.done.append(f"{key}={number} in line {index} of {path.name}")


def deep_nesting(run: Mutated, draw) -> None:
    path = pick(draw, files(run.root), "trace_events.jsonl", "metrics.jsonl", "timing_spans.jsonl")
    rows = json_lines(path) if path else []
    if not rows:
        return
    index, value = draw(st.sampled_from(rows))
    keys = ["pid", "ts", "dur", "name", "tid", "args.step", "step"]
    key = draw(st.sampled_from([k for k in keys if "ph" not in value or k not in KNOWN_INGEST_CRASHES]))
    depth = draw(st.sampled_from([1000, 1100]))
    replace_line(path, index, with_raw(value, key, b"[" * depth + b"]" * depth))
    run.done.append(f"{key} nested {depth} deep in line {index} of {path.name}")


def non_utf8_name(run: Mutated, draw) -> None:
    where = draw(st.sampled_from(["file", "folder", "subfolder"]))
    bad = os.fsdecode(draw(st.sampled_from([b"\xff", b"\xfe\xfd", b"\xc3\x28", b"\xed\xa0\x80"])))
    if where == "file":
        path = pick(draw, files(run.root))
        target = path.with_name(f"{path.stem}{bad}{path.suffix}" if draw(st.booleans()) else path.name + bad)
        os.rename(path, target)
        run.done.append(f"rename {path.name} to a non-UTF-8 name")
    elif where == "folder":
        target = run.root.with_name(run.root.name + bad)
        os.rename(run.root, target)
        run.root = target
        run.done.append("run folder renamed to a non-UTF-8 name")
    else:
        path = pick(draw, files(run.root))
        folder = path.parent / f"sub{bad}"
        folder.mkdir(exist_ok=True)
        os.rename(path, folder / path.name)
        run.done.append(f"{path.name} moved into a non-UTF-8 folder")


def corrupt_gzip(run: Mutated, draw) -> None:
    path = pick(draw, files(run.root), ".jsonl", ".json", ".log")
    if path is None:
        return
    packed = bytearray(gzip.compress(path.read_bytes()))
    how = draw(st.sampled_from(["flip", "truncate", "trailing garbage"]))
    if how == "flip":
        at = draw(st.integers(10, max(10, len(packed) - 9)))
        for i in range(at, min(len(packed), at + draw(st.integers(1, 40)))):
            packed[i] ^= 0xA5
    elif how == "truncate":
        packed = packed[: draw(st.integers(0, len(packed) - 1))]
    else:
        packed += b"not gzip"
    # Either in place (the trace reader looks for the gzip magic) or as a `.gz` beside the original.
    target = path if draw(st.booleans()) else path.with_name(path.name + ".gz")
    target.write_bytes(bytes(packed))
    run.unaccountable.add(target.name)
    run.done.append(f"{how} gzip of {path.name} as {target.name}")


def odd_name(run: Mutated, draw) -> None:
    path = pick(draw, files(run.root))
    name = draw(st.sampled_from(ODD_NAMES))
    target = path.with_name(name)
    if target.exists():
        return
    os.rename(path, target)
    run.done.append(f"rename {path.name} to {name!r}")


def many_keys(run: Mutated, draw) -> None:
    path = pick(draw, files(run.root), "metrics.jsonl")
    if path is None:
        return
    keys = draw(st.sampled_from([2_000, 5_000, 12_000]))
    row = {"step": draw(st.integers(0, 40)), **{f"env/all/metric_{k}": k * 0.5 for k in range(keys)}}
    lines = path.read_bytes().split(b"\n")
    at = draw(st.integers(0, len(lines)))
    lines.insert(at, json.dumps(row).encode())
    path.write_bytes(b"\n".join(lines))
    run.done.append(f"metrics row of {keys} keys at line {at}")


def deep_profile(run: Mutated, draw) -> None:
    depth = draw(st.sampled_from([127, 200, 600]))
    node = {"function": "leaf", "file_path": "/app/leaf.py", "line_no": 1, "time": 0.5, "children": []}
    for level in range(depth):
        node = {
            "function": f"recurse_{level}",
            "file_path": "/app/recurse.py",
            "line_no": level + 1,
            "time": 1.0,
            "await_time": 0.0,
            "is_application_code": True,
            "children": [node],
        }
    document = {"start_time": 1.7e9, "duration": 1.0, "sample_count": 100, "cpu_time": 0.9, "root_frame": node}
    (run.root / f"deep_{depth}_profile.json").write_text(json.dumps(document))
    run.done.append(f"profile {depth} calls deep")


MUTATIONS = (
    truncate_line,
    garbage,
    non_finite,
    empty_file,
    missing_file,
    unmatched_events,
    huge_int,
    deep_nesting,
    non_utf8_name,
    corrupt_gzip,
    odd_name,
    many_keys,
    deep_profile,
)

# -- the checks -------------------------------------------------------------------------------------


def strict_json(text: str):
    def refuse(constant: str):
        raise AssertionError(f"non-strict JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def record_account(documents: list[dict], root: Path, unaccountable: set[str]) -> list[str]:
    """Inputs whose records + skipped differ from their lines (JSONL) or their one document (config)."""
    on_disk = {printable(str(p)): p for p in files(root)}
    wrong = []
    for document in documents:
        for info in document["run"]["inputs"]:
            path = on_disk.get(info["path"])
            if path is None or path.name in unaccountable:
                continue
            data = path.read_bytes()
            if info["kind"] in LINE_INPUTS:
                document = data.lstrip().startswith(b"[") or b'"traceEvents"' in data[:65536]
                if data[:2] == b"\x1f\x8b" or (info["kind"] == "trace" and document):
                    continue  # gzip, or one JSON document of events: not one record per line
                expected = sum(1 for line in data.split(b"\n") if line.strip())
            elif info["kind"] == "config":
                expected = 1
            else:
                continue
            if info["records"] + info["skipped"] != expected:
                wrong.append(f"{path.name}: {info['records']} read + {info['skipped']} skipped != {expected}")
    return wrong


def _serve(conn) -> None:
    """The worker process: run each command it is sent with click's runner, answer what it printed."""
    import traceback

    from click.testing import CliRunner

    from trace_doctor.cli import main

    while (request := conn.recv()) is not None:
        args, env = request
        result = CliRunner().invoke(main, args, env=env)
        stderr = result.stderr
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            stderr += "".join(traceback.format_exception(result.exception))  # escaped the CLI: a crash
        conn.send(Outcome(result.exit_code, result.stdout, stderr))


@dataclass
class Outcome:
    exit_code: int | None  # None: no answer (a hang, or the process died)
    stdout: str
    stderr: str


class Worker:
    """A process that runs commands, so a hang can be stopped and a dying process (a crash in native
    code, memory) is seen, not suffered; started once (importing polars takes a second), again
    only after one of those."""

    def __init__(self):
        self._start()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        child.close()

    def run(self, args: list[str], env: dict[str, str], timeout: float) -> Outcome:
        self._conn.send((args, env))
        try:
            if self._conn.poll(timeout):
                return self._conn.recv()
            problem = f"no answer in {timeout:.0f} s: a hang"
        except EOFError:
            problem = "the process died"
        self._process.kill()
        self._process.join()
        problem += f" (exit status {self._process.exitcode})"
        self._start()
        return Outcome(None, "", problem)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send(None)
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()


def crash_log(stderr: str) -> str:
    """The traceback an internal error wrote, to show in the failure."""
    marker = "traceback in "
    if marker not in stderr:
        return ""
    path = stderr.split(marker, 1)[1].split(";", 1)[0].strip()
    with contextlib.suppress(OSError):
        return Path(path).read_text()
    return ""


def command_args(command: str, target: Path, scratch: Path) -> list[str]:
    return {
        "analyze": ["analyze", str(target), "--format", "json", "--no-html"],
        "analyze-html": ["analyze", str(target), "--format", "json", "--html", str(scratch / "report.html")],
        "bundle": ["bundle", str(target), "-o", str(scratch / "bundle.zip")],
        "export": [
            "export",
            str(target),
            "--chrome-json",
            str(scratch / "t.json"),
            "--perfetto",
            str(scratch / "t.pf"),
        ],
        "ingest": ["ingest", str(target), "--out", str(scratch / "dataset")],
    }[command]


@pytest.fixture(scope="module")
def worker():
    started = Worker()
    yield started
    started.close()


@pytest.fixture(scope="module")
def cache_env(tmp_path_factory) -> dict[str, str]:
    # The cache is on, small: its keys, entries and eviction are fuzzed with everything else. A
    # crash's traceback goes to a temporary folder of the test session's.
    return {
        "TRACE_DOCTOR_CACHE": "on",
        "TRACE_DOCTOR_CACHE_DIR": str(tmp_path_factory.mktemp("fuzz-cache")),
        "TRACE_DOCTOR_CACHE_MAX_MB": "1",
        "TMPDIR": str(tmp_path_factory.mktemp("fuzz-tmp")),
    }


@pytest.fixture(autouse=True)
def _tracebacks_in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@FUZZ
@given(data=st.data())
def test_mutated_log_directories_never_crash(worker, cache_env, data):
    draw = data.draw
    with tempfile.TemporaryDirectory(prefix="td-fuzz-") as tmp:
        scratch = Path(tmp)
        tree = scratch / "runs"
        tree.mkdir()
        bases = draw(st.lists(st.sampled_from(BASES), min_size=1, max_size=2, unique=True))
        runs = []
        for base in bases:
            shutil.copytree(base, tree / base.name, ignore=shutil.ignore_patterns("EXPECTED.json"))
            runs.append(Mutated(tree / base.name))
        for _ in range(draw(st.integers(1, 4))):
            run = draw(st.sampled_from(runs))
            if files(run.root):
                draw(st.sampled_from(MUTATIONS))(run, draw)
        target = runs[0].root if len(runs) == 1 else tree
        command = draw(st.sampled_from(["analyze"] * 6 + ["analyze-html", "bundle", "export", "ingest"]))
        done = "; ".join(step for run in runs for step in run.done)
        result = worker.run(command_args(command, target, scratch), cache_env, HANG_SECONDS)
        context = f"{command} after: {done}\nstderr: {result.stderr}\n{crash_log(result.stderr)}"
        assert result.exit_code in (0, 1, 2), context
        assert "Traceback" not in result.stdout and "Traceback" not in result.stderr, context
        if result.exit_code == 2:
            assert result.stderr.startswith("trace-doctor: "), context
            return
        if command.startswith("analyze"):
            document = strict_json(result.stdout)
            documents = document.get("runs", [document])
            unaccountable = {name for run in runs for name in run.unaccountable}
            assert record_account(documents, tree, unaccountable) == [], context


def test_the_fuzzer_can_see_a_crash(monkeypatch, tmp_path):
    """The harness itself: an internal error in a command is exit 3, which the property refuses."""
    import trace_doctor.api as api

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(api, "analyze", broken)  # the CLI imports it when it analyses
    shutil.copytree(BASES[0], tmp_path / "run")
    result = CliRunner().invoke(main, command_args("analyze", tmp_path / "run", tmp_path))
    assert result.exit_code == 3
    assert "internal error (a bug in trace-doctor" in result.stderr and "RuntimeError: a bug" in crash_log(
        result.stderr
    )


@pytest.mark.parametrize("key", DEEP_NESTED_KEYS)
def test_a_field_nested_1100_deep_is_a_warning_not_a_crash(key, tmp_path):
    run = Mutated(Path(shutil.copytree(BASES[0], tmp_path / "run")))
    trace = run.root / "trace_events.jsonl"
    index, value = next((i, v) for i, v in json_lines(trace) if "ph" in v)
    replace_line(trace, index, with_raw(value, key, b"[" * 1100 + b"]" * 1100))
    result = CliRunner().invoke(main, command_args("analyze", run.root, tmp_path))
    assert result.exit_code in (0, 1, 2), result.stderr
