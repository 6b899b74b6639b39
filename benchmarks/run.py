"""Side-by-side benchmark of trace-doctor against plain parses of the same trace (`make bench`).

Generates large runs into benchmarks/data/ (git-ignored), then for each size runs every contender
in its own subprocess several times, round-robin (one run of each per round), and reports the
median wall time and peak RSS (from the child's own rusage), with ratios against the naive parse
(json.loads per line into a list, what the cookbook's trace converter does). Targets (issue 6):
analysis <= 0.25x the naive time and <= 0.5x its peak memory; doubling the events <= 2.2x the time;
the HTML report <= 10 MB and written in at most the analysis time again.

    python benchmarks/run.py [--sizes 3000x64,6000x64] [--repeats 3] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
PYTHON = sys.executable
CLI = str(Path(PYTHON).with_name("trace-doctor"))

NAIVE = "import json,sys\nevents=[json.loads(line) for line in open(sys.argv[1])]\nprint(len(events))"
PANDAS = "import pandas,sys\nframe=pandas.read_json(sys.argv[1], lines=True)\nprint(len(frame))"
POLARS = "import polars,sys\nframe=polars.read_ndjson(sys.argv[1])\nprint(frame.height)"
INGEST = "import sys\nfrom trace_doctor.api import load_run\nrun=load_run(sys.argv[1])\nprint(run.spans.height)"
HTML = (
    "import sys\nfrom trace_doctor.api import load_run, analyze\nfrom trace_doctor.report.html import write_html\n"
    "import time\nresult=analyze(load_run(sys.argv[1]))\nt=time.perf_counter()\nwrite_html(result, sys.argv[2])\n"
    "print(f'html_write_s={time.perf_counter()-t:.3f}')"
)


@dataclass
class Measure:
    label: str
    seconds: float
    peak_mb: float
    note: str = ""


def run_child(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) and stdout of one child process (its own rusage, not ours)."""
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out_file, stderr=err_file, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        out_file.seek(0)
        err_file.seek(0)
        out, err = out_file.read(), err_file.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # 1 = the CI gate tripped, still a complete analysis
        raise RuntimeError(f"{argv[:3]} failed ({proc.returncode}): {err.decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024, out.decode()


def ensure_run(steps: int, samples: int) -> Path:
    out = DATA / f"rl_{steps}x{samples}"
    if not (out / "config.json").exists():
        print(f"generating {out.name} ...", file=sys.stderr)
        subprocess.run(
            [PYTHON, str(HERE / "generate_large_run.py"), str(out), "--steps", str(steps), "--samples", str(samples)],
            check=True,
        )
    return out


def html_available() -> bool:
    probe = subprocess.run([PYTHON, "-c", "from trace_doctor.report.html import write_html"], capture_output=True)
    return probe.returncode == 0


def bench_size(run: Path, repeats: int, with_html: bool) -> list[Measure]:
    trace = str(run / "trace_events.jsonl")
    # Analysis runs without the table cache: the point is the cold parse of a new run.
    cold = {**os.environ, "TRACE_DOCTOR_CACHE": "off"}
    contenders: list[tuple[str, list[str], dict[str, str]]] = [
        ("cat FILE > /dev/null", ["sh", "-c", 'cat "$1" > /dev/null', "sh", trace], cold),
        ("naive json.loads list", [PYTHON, "-c", NAIVE, trace], cold),
        ("pandas read_json(lines)", [PYTHON, "-c", PANDAS, trace], cold),
        ("polars read_ndjson", [PYTHON, "-c", POLARS, trace], cold),
        ("trace-doctor ingest only (load_run)", [PYTHON, "-c", INGEST, str(run)], cold),
        ("trace-doctor analyze (json)", [CLI, "analyze", str(run), "--no-html", "--format", "json"], cold),
    ]
    with tempfile.TemporaryDirectory() as cache_dir, tempfile.TemporaryDirectory() as html_dir:
        cache_env = {**os.environ, "TRACE_DOCTOR_CACHE": "on", "TRACE_DOCTOR_CACHE_DIR": cache_dir}
        analyze_cached = [CLI, "analyze", str(run), "--no-html", "--format", "json"]
        run_child(analyze_cached, cache_env)  # fills the cache
        contenders.append(("analyze, cached tables", analyze_cached, cache_env))
        report = Path(html_dir) / "report.html"
        if with_html:
            contenders.append(("HTML: analyze + write_html", [PYTHON, "-c", HTML, str(run), str(report)], cold))
        # Round-robin: every contender once per round, so a shared machine's drift (other jobs,
        # thermal, noisy neighbours) falls on all of them alike instead of on whichever ran last.
        runs: dict[str, list[tuple[float, float, str]]] = {label: [] for label, _, _ in contenders}
        for _ in range(repeats):
            for label, argv, env in contenders:
                runs[label].append(run_child(argv, env))
        measures = []
        for label, _, _ in contenders:
            results = runs[label]
            note = (
                results[-1][2].strip().splitlines()[-1] if label.startswith("HTML") and results[-1][2].strip() else ""
            )
            if label.startswith("HTML"):
                note += f" size={report.stat().st_size / 1e6:.2f}MB"
            measures.append(
                Measure(label, statistics.median(r[0] for r in results), statistics.median(r[1] for r in results), note)
            )
    return measures


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GB RAM"
    except (OSError, ValueError, IndexError):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{cpu}, {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} cores{mem}, "
        f"{platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, load avg at start {load:.1f}"
    )


def table(name: str, run: Path, measures: list[Measure]) -> str:
    naive = next(m for m in measures if m.label.startswith("naive"))
    size = (run / "trace_events.jsonl").stat().st_size / 1e6
    with open(run / "trace_events.jsonl", "rb") as fh:
        events = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 24), b""))
    lines = [
        f"### {name}: {events:,} events, {size:,.0f} MB trace_events.jsonl",
        "",
        "| contender | wall s (median) | peak RSS MB | time vs naive | memory vs naive | note |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for m in measures:
        lines.append(
            f"| {m.label} | {m.seconds:.2f} | {m.peak_mb:.0f} | {m.seconds / naive.seconds:.2f}x "
            f"| {m.peak_mb / naive.peak_mb:.2f}x | {m.note} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="3000x64,6000x64")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    args = parser.parse_args()
    if not Path(CLI).exists() and shutil.which("trace-doctor") is None:
        sys.exit("trace-doctor is not installed in this environment (run `make bench`)")
    # Byte-compile the package as `pip install` does: with PYTHONDONTWRITEBYTECODE set (CI images
    # often set it) an editable install would otherwise recompile every module on every run
    # (~0.15 s per analysis here), which no installed copy pays.
    import trace_doctor

    subprocess.run([PYTHON, "-m", "compileall", "-q", str(Path(trace_doctor.__file__).parent)], check=True)
    with_html = html_available()
    print(f"machine: {machine()}\n")
    results = []
    for size in args.sizes.split(","):
        steps, samples = (int(x) for x in size.split("x"))
        run = ensure_run(steps, samples)
        measures = bench_size(run, args.repeats, with_html)
        results.append((size, measures))
        text = table(size, run, measures)
        print(text + "\n", flush=True)
    verdicts = targets(results)
    print("\n".join(verdicts))
    if args.markdown:
        body = [f"machine: {machine()}", ""] + [
            table(s, ensure_run(*(int(x) for x in s.split("x"))), m) + "\n" for s, m in results
        ]
        args.markdown.write_text("\n".join(body + verdicts) + "\n")


ANALYZE = "trace-doctor analyze (json)"


def targets(results: list[tuple[str, list[Measure]]]) -> list[str]:
    """One line per issue-6 target with the measured value and whether it holds."""
    lines = ["| target | size | measured | holds |", "|---|---|---:|---|"]
    for size, measures in results:
        naive = next(m for m in measures if m.label.startswith("naive"))
        analysis = next(m for m in measures if m.label == ANALYZE)
        time_ratio, mem_ratio = analysis.seconds / naive.seconds, analysis.peak_mb / naive.peak_mb
        lines.append(
            f"| analysis <= 0.25x naive time | {size} | {time_ratio:.2f}x | {'yes' if time_ratio <= 0.25 else 'no'} |"
        )
        lines.append(
            f"| analysis <= 0.5x naive peak RSS | {size} | {mem_ratio:.2f}x | {'yes' if mem_ratio <= 0.5 else 'no'} |"
        )
        html = next((m for m in measures if m.label.startswith("HTML")), None)
        if html is not None and "html_write_s=" in html.note and "size=" in html.note:
            write_s = float(html.note.split("html_write_s=")[1].split()[0])
            size_mb = float(html.note.split("size=")[1].split("MB")[0])
            ok = size_mb <= 10 and write_s <= analysis.seconds
            lines.append(
                f"| HTML <= 10 MB, written in <= analysis time | {size} | {size_mb:.2f} MB in {write_s:.2f} s "
                f"| {'yes' if ok else 'no'} |"
            )
    if len(results) >= 2:
        first = next(m for m in results[0][1] if m.label == ANALYZE)
        second = next(m for m in results[1][1] if m.label == ANALYZE)
        scaling = second.seconds / first.seconds
        lines.append(
            f"| doubling events <= 2.2x time | {results[1][0]} / {results[0][0]} | {scaling:.2f}x "
            f"| {'yes' if scaling <= 2.2 else 'no'} |"
        )
    return lines


if __name__ == "__main__":
    main()
