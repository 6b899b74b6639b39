"""Hostile and very large inputs (issue 14): time and peak memory of ingest and analysis (`make bench`).

Each case is a generated run directory (benchmarks/data/limits/, git-ignored): garbage lines, gzip
bombs, one event repeated hundreds of MB, a converted `trace.json` JSON array, a PyTorch-profiler
object with `traceEvents` after its other keys, metrics rows with thousands of keys. Every case runs
in its own subprocess: `trace-doctor analyze --format json` (wall time, peak RSS from the child's
own rusage) and `load_run` alone, which also reports what it kept (records, skipped, warnings listed,
the tables' in-memory size), so peak memory can be set against the table kept and the input size.

    python benchmarks/ingest_limits.py [--cases a,b] [--scale 1.0] [--timeout 600] [--root DIR ...] [--markdown FILE]

`--root` (repeatable) measures other checkouts of the package on the same inputs, case by case in
turn (e.g. the code before a change, then this one), so a shared machine's drift falls on both.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data" / "limits"
PYTHON = sys.executable
MB = 1024 * 1024

# The cookbook writer's exact line layout (see FORMATS.md section 2).
B_EVENT = (
    b'{"name": "train_step", "ph": "B", "pid": 0, "tid": 1, "ts": 1.0, '
    b'"args": {"track": "main", "thread": "MainThread"}, "cat": "async"}\n'
)
X_EVENT = b'{"ph":"X","cat":"kernel","name":"gemm","pid":1,"tid":7,"ts":10.5,"dur":3.25,"args":{"stream":7}}\n'

LOAD = """
import gc, json, os, sys, time
from trace_doctor.api import load_run
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
before = rss()
run = load_run(sys.argv[1])
gc.collect()
time.sleep(0.3)
tables = [run.steps, run.spans, run.step_spans, run.frames, run.checkpoints, run.log_events]
print(json.dumps({
    "records": run.records_read, "skipped": run.records_skipped, "warnings": len(run.warnings),
    "kept_mb": rss() - before, "table_mb": sum(t.estimated_size() for t in tables) / 2**20,
    "spans": run.spans.height, "steps": run.steps.height, "steps_columns": run.steps.width,
}))
"""
# The load child returns freed memory at once, so what it still holds after load_run is the tables.
LOAD_ALLOCATOR = "dirty_decay_ms:0,muzzy_decay_ms:0"
# Each child reports its own high-water mark (VmHWM) as it exits. The rusage of a child carries the
# parent's size at fork across exec, so a parent that ever held a large output would set a floor.
# The CLI leaves through os._exit (no atexit), hence the wrapper.
PEAK_PROLOGUE = """
import atexit, os, sys
def _peak(_exit=os._exit):
    def report(code=0):
        if not getattr(report, "done", False):
            report.done = True
            with open("/proc/self/status") as fh:
                sys.stderr.write(next(line for line in fh if line.startswith("VmHWM")))
            sys.stderr.flush()
        if code is not None:
            _exit(code)
    os._exit = report
    atexit.register(report, None)
_peak()
"""


@dataclass
class Case:
    name: str
    what: str
    make: Callable[[Path, float], None]


def _write_repeated(path: Path, line: bytes, size: int) -> None:
    block = line * max(1, (4 * MB) // len(line))
    with open(path, "wb") as out:
        written = 0
        while written + len(block) <= size:
            out.write(block)
            written += len(block)
        out.write(line * ((size - written) // len(line)))


def _gzip_repeated(path: Path, unit: bytes, size: int, *, prefix: bytes = b"") -> None:
    """A gzip stream of `prefix` then `unit` repeated to `size` bytes (a bomb: ~1000:1)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = unit * max(1, MB // len(unit))
    with open(path, "wb") as out:
        out.write(packer.compress(prefix))
        written = 0
        while written < size:
            out.write(packer.compress(block))
            written += len(block)
        out.write(packer.flush())


def _garbage(size: int) -> bytes:
    lines = b"".join(b"garbage line %d: not json\n" % i for i in range(size // 20))
    return lines[: lines.rfind(b"\n", 0, size) + 1]


def make_garbage_trace(out: Path, scale: float) -> None:
    (out / "trace_events.jsonl").write_bytes(B_EVENT + _garbage(int(8 * MB * scale)))


def make_garbage_metrics(out: Path, scale: float) -> None:
    (out / "metrics.jsonl").write_bytes(b'{"step": 0, "time/total": 1.0}\n' + _garbage(int(8 * MB * scale)))


def make_garbage_spans(out: Path, scale: float) -> None:
    first = b'{"step": 0, "spans": [{"name": "a", "duration": 1.0, "wall_start": 0.0, "wall_end": 1.0}]}\n'
    (out / "timing_spans.jsonl").write_bytes(first + _garbage(int(8 * MB * scale)))


def make_bomb_zeros(out: Path, scale: float) -> None:
    _gzip_repeated(out / "trace_events.jsonl", b"\0", int(1024 * MB * scale))


def make_bomb_lines(out: Path, scale: float) -> None:
    _gzip_repeated(out / "trace_events.jsonl", b"garbage\n", int(1024 * MB * scale))


def make_bomb_events(out: Path, scale: float) -> None:
    event = B_EVENT.rstrip(b"\n")
    _gzip_repeated(out / "trace.json.gz", b", " + event, int(1024 * MB * scale), prefix=b"[" + event)


def make_repeated_b(out: Path, scale: float) -> None:
    _write_repeated(out / "trace_events.jsonl", B_EVENT, int(300 * MB * scale))


def make_repeated_x(out: Path, scale: float) -> None:
    _write_repeated(out / "trace_events.jsonl", X_EVENT, int(300 * MB * scale))


def _cookbook_trace(scale: float) -> Path:
    steps = max(100, int(4500 * scale))
    run = HERE / "data" / f"rl_{steps}x64"
    if not (run / "trace_events.jsonl").exists():
        subprocess.run(
            [PYTHON, str(HERE / "generate_large_run.py"), str(run), "--steps", str(steps), "--samples", "64"],
            check=True,
        )
    return run / "trace_events.jsonl"


def make_trace_json(out: Path, scale: float) -> None:
    """What the cookbook's converter writes: json.dump(list of events), one line."""
    with open(_cookbook_trace(scale), "rb") as lines, open(out / "trace.json", "wb") as doc:
        doc.write(b"[")
        for index, line in enumerate(lines):
            doc.write((b", " if index else b"") + line.rstrip(b"\n"))
        doc.write(b"]")


def make_pytorch_object(out: Path, scale: float) -> None:
    """A PyTorch-profiler trace: pretty-printed, device and distributed metadata first, X events."""
    ranks = list(range(512))
    header = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": i, "name": "NVIDIA H100", "totalGlobalMem": 85e9} for i in range(8)],
        "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 512, "pg_config": [{"ranks": ranks}] * 8},
    }
    count = int(1_000_000 * scale)
    with gzip.open(out / "rank-3.pt.trace.json.gz", "wb", compresslevel=1) as doc:
        doc.write(json.dumps(header, indent=2)[:-2].encode() + b',\n  "traceEvents": [\n')
        for i in range(count):
            event = {
                "ph": "X",
                "cat": "cpu_op" if i % 3 else "kernel",
                "name": f"aten::op_{i % 97}",
                "pid": 4037,
                "tid": 23695 + i % 4,
                "ts": 1682725898236567 + i * 10,
                "dur": 8.0 + i % 5,
                "args": {"External id": i, "Sequence number": i // 2},
            }
            doc.write(b"    " + json.dumps(event).encode() + (b",\n" if i + 1 < count else b"\n"))
        doc.write(b'  ],\n  "traceName": "rank-3.pt.trace.json",\n  "displayTimeUnit": "ms"\n}\n')


def _wide(keys: int) -> Callable[[Path, float], None]:
    def make(out: Path, scale: float) -> None:
        row = {"step": 0, "time/total": 1.0, **{f"env/task_{i}/reward": i / keys for i in range(keys)}}
        (out / "metrics.jsonl").write_text(json.dumps(row) + "\n")

    return make


def make_distinct_keys(out: Path, scale: float) -> None:
    """Each of 5,000 rows adds two keys of its own: 10,000 mostly-null columns."""
    with open(out / "metrics.jsonl", "w") as fh:
        for i in range(int(5000 * scale)):
            row = {"step": i, "time/total": 1.0, f"env/task_{i}/reward": 0.5, f"env/task_{i}/turns": 3}
            fh.write(json.dumps(row) + "\n")


CASES = [
    Case("garbage-trace", "8 MB of garbage lines in trace_events.jsonl", make_garbage_trace),
    Case("garbage-metrics", "8 MB of garbage lines in metrics.jsonl", make_garbage_metrics),
    Case("garbage-spans", "8 MB of garbage lines in timing_spans.jsonl", make_garbage_spans),
    Case("bomb-zeros", "1 MB gzip of 1 GB of zero bytes, named trace_events.jsonl", make_bomb_zeros),
    Case("bomb-lines", "1.5 MB gzip of 1 GB of garbage lines, named trace_events.jsonl", make_bomb_lines),
    Case("bomb-events", "4 MB gzip of a 1 GB JSON array of one event, trace.json.gz", make_bomb_events),
    Case("repeated-B", "300 MB of one cookbook B event (one track, nested 2.3M deep)", make_repeated_b),
    Case("repeated-X", "300 MB of one compact X event", make_repeated_x),
    Case("trace-json", "converted trace.json (JSON array, one line) of a 4500x64 RL run", make_trace_json),
    Case("pytorch-object", "PyTorch-profiler .json.gz, traceEvents after other keys, 1M X events", make_pytorch_object),
    Case("wide-1k", "one metrics row with 1,000 keys", _wide(1000)),
    Case("wide-4k", "one metrics row with 4,000 keys", _wide(4000)),
    Case("wide-20k", "one metrics row with 20,000 keys", _wide(20000)),
    Case("distinct-keys", "5,000 metrics rows, 2 keys of their own each (10,002 columns)", make_distinct_keys),
]


def ensure(case: Case, scale: float) -> Path:
    """The case's run directory, generated (in a child process) if it is not there yet."""
    out = DATA / f"{case.name}@{scale:g}"
    done = out / ".complete"
    if not done.exists():
        out.mkdir(parents=True, exist_ok=True)
        print(f"generating {out.name} ...", file=sys.stderr, flush=True)
        # In a child: a child forked from a parent that grew while generating would report the
        # parent's size as its own peak (Linux carries the high-water mark across exec).
        subprocess.run([PYTHON, __file__, "--generate", case.name, "--scale", str(scale)], check=True)
        done.touch()
    return out


def run_child(code: str, args: list[str], env: dict[str, str], timeout: float) -> tuple[float, float, str, int | None]:
    """Wall seconds, peak RSS (MB), stdout and exit code of `python -c code args` (None: killed at the timeout)."""
    argv = [PYTHON, "-c", PEAK_PROLOGUE + code, *args]
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out_file, stderr=err_file, env=env, cwd=tempfile.gettempdir())
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                return time.perf_counter() - start, usage.ru_maxrss / 1024, "", None
            time.sleep(0.05)
        seconds = time.perf_counter() - start
        out_file.seek(0)
        err_file.seek(0)
        reported = [line for line in err_file.read().decode(errors="replace").splitlines() if line.startswith("VmHWM")]
        peak = int(reported[-1].split()[1]) / 1024 if reported else usage.ru_maxrss / 1024
        return seconds, peak, out_file.read().decode(errors="replace"), os.waitstatus_to_exitcode(status)


def input_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file() and not f.name.startswith(".")) / MB


def measure(case: Case, path: Path, root: Path, timeout: float) -> dict:
    env = {**os.environ, "TRACE_DOCTOR_CACHE": "off", "PYTHONPATH": str(root)}
    cli = ["analyze", str(path), "--no-html", "--format", "json"]
    wall, peak, out, code = run_child("from trace_doctor.cli import run; run()", cli, env, timeout)
    result = {"case": case.name, "what": case.what, "input_mb": input_mb(path), "wall": wall, "peak": peak, "rc": code}
    if code in (0, 1):
        result["warnings_json"] = out.count('"problem":')
    del out
    load_env = {**env, "_RJEM_MALLOC_CONF": LOAD_ALLOCATOR}
    load_wall, load_peak, load_out, load_code = run_child(LOAD, [str(path)], load_env, timeout)
    result.update(load_wall=load_wall, load_peak=load_peak, load_rc=load_code)
    if load_code == 0:
        result.update(json.loads(load_out.strip().splitlines()[-1]))
    return result


def table(results: list[dict]) -> str:
    lines = [
        "| case | package | input MB | analyze s | analyze peak MB | load_run s | load_run peak MB | kept MB | "
        "peak / kept | records | skipped | warnings listed | exit |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        timed_out = r["rc"] is None
        kept = (
            f"{r['kept_mb']:,.0f} | {r['load_peak'] / max(r['kept_mb'], 1):.1f}x | {r['records']:,} | "
            f"{r['skipped']:,} | {r['warnings']:,}"
            if "records" in r
            else "- | - | - | - | -"
        )
        lines.append(
            f"| {r['case']} | {r['package']} | {r['input_mb']:,.1f} | {'>' if timed_out else ''}{r['wall']:.2f} | "
            f"{r['peak']:,.0f} | {r['load_wall']:.2f} | {r['load_peak']:,.0f} | {kept} | "
            f"{'timeout' if timed_out else r['rc']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(c.name for c in CASES))
    parser.add_argument("--scale", type=float, default=1.0, help="input sizes relative to the defaults")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before a child is killed")
    parser.add_argument("--root", type=Path, action="append", help="checkout whose package is measured (repeatable)")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    parser.add_argument("--generate", help=argparse.SUPPRESS)  # ensure() runs this in a child
    args = parser.parse_args()
    if args.generate:
        case = next(c for c in CASES if c.name == args.generate)
        case.make(DATA / f"{case.name}@{args.scale:g}", args.scale)
        return
    sys.path.insert(0, str(HERE))
    from run import machine

    roots = args.root or [ROOT]
    chosen = [c for c in CASES if c.name in args.cases.split(",")]
    print(f"machine: {machine()}\npackages: {', '.join(map(str, roots))}\n", flush=True)
    results = []
    for case in chosen:
        path = ensure(case, args.scale)
        for root in roots:
            r = measure(case, path, root, args.timeout)
            r["package"] = root.name
            results.append(r)
            print(
                f"{case.name} [{root.name}]: analyze {r['wall']:.2f} s / {r['peak']:,.0f} MB (exit {r['rc']}), "
                f"load_run {r['load_wall']:.2f} s / {r['load_peak']:,.0f} MB, kept {r.get('kept_mb', 0):,.0f} MB",
                flush=True,
            )
    text = table(results)
    print("\n" + text)
    if args.markdown:
        args.markdown.write_text(f"machine: {machine()}\n\n{text}\n")


if __name__ == "__main__":
    main()
