"""Side-by-side benchmark of trace-doctor against plain parses of the same trace (`make bench`).

Generates large runs into benchmarks/data/ (git-ignored; a run is reused while its parameters and
the generator are unchanged), then for each size runs every contender in its own subprocess
several times, round-robin (one run of each per round), and reports the median wall time and peak
RSS (from the child's own rusage), with ratios against the naive parse (json.loads per line into a
list, what the cookbook's trace converter does). The table cache is off except for the cached
re-analysis. Contenders: `cat`, the naive parse, pandas, polars (inferred and projected), load_run,
`trace-doctor analyze` of the JSONL trace and of the converted `trace.json` array of the same run,
the cached re-analysis, and analyze + the HTML report.

Targets. Issue 6: analysis <= 0.25x the naive time and <= 0.5x its peak memory; doubling the
events <= 2.2x the time; the HTML report <= 10 MB and written in at most the analysis time again.
Issue 16: analysis <= 0.15x the naive time at 3000x64 and 12000x64 and <= 0.35x its peak at
3000x64; peak memory of the largest size < 1.5x the smallest's (24000x64 vs 3000x64); the cached
re-analysis of an unchanged run < 0.5 s. Issue 28: peak memory at 12000x64 < 1.3x 3000x64's.

    python benchmarks/run.py [--sizes 3000x64,12000x64,24000x64] [--repeats 3] [--only KEYS]
        [--skip KEYS] [--markdown benchmarks/RESULTS.md --title "Issue 16: any trace size (after)"]
        [--before CHECKOUT]  # e.g. `git worktree add --detach /tmp/base <commit>`: before and after, same rounds
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
PYTHON = sys.executable
CLI = str(Path(PYTHON).with_name("trace-doctor"))
SEED = 0
STAMP = "bench-params.json"
# The environment the children get: as this process found it. Importing polars (main() imports the
# package) sets _RJEM_MALLOC_CONF to polars' own default in os.environ, which every child would
# inherit, and the CLI's allocator setting (trace_doctor/cli.py) would then never apply: the
# analysis measured with another allocator than a user's shell gives it (~100 MB more at 3000x64).
BASE_ENV = dict(os.environ)

NAIVE = "import json,sys\nevents=[json.loads(line) for line in open(sys.argv[1])]\nprint(len(events))"
PANDAS = "import pandas,sys\nframe=pandas.read_json(sys.argv[1], lines=True)\nprint(len(frame))"
POLARS = "import polars,sys\nframe=polars.read_ndjson(sys.argv[1])\nprint(frame.height)"
# The columns trace-doctor's trace reader projects every event into (trace_parse.EVENT_SCHEMA when
# this contender was written): what span pairing and attribution need, `args` kept as JSON text
# (the step and track come out of it). Written out here so the contender stays the same while the
# reader changes.
POLARS_PROJECTED = (
    "import polars as pl,sys\n"
    "schema={'name':pl.String,'ph':pl.String,'pid':pl.Int64,'tid':pl.Int64,'ts':pl.Float64,"
    "'dur':pl.Float64,'cat':pl.String,'args':pl.String}\n"
    "frame=pl.read_ndjson(sys.argv[1],schema=schema)\nprint(frame.height)"
)
# The spans table may stay on disk (issue 16): its height is read without reading the table.
INGEST = "import sys\nfrom trace_doctor.api import load_run\nrun=load_run(sys.argv[1])\nprint(run.height('spans'))"
HTML = (
    "import sys\nfrom trace_doctor.api import load_run, analyze\nfrom trace_doctor.report.html import write_html\n"
    "import time\nresult=analyze(load_run(sys.argv[1]))\nt=time.perf_counter()\nwrite_html(result, sys.argv[2])\n"
    "print(f'html_write_s={time.perf_counter()-t:.3f}')"
)
# pandas peaks at ~13x the trace's size (2 GB at 156 MB): past this it would only measure swap or
# the OOM killer on a 24 GB machine shared with other jobs.
PANDAS_MAX_TRACE_MB = 400

# Labels stay those of earlier rounds so RESULTS.md tables compare row by row.
NAIVE_LABEL = "naive json.loads list"
ANALYZE = "trace-doctor analyze (json)"
ANALYZE_TRACE_JSON = "analyze, converted trace.json array"
CACHED = "analyze, cached tables"
KEYS = {
    "cat": "cat FILE > /dev/null",
    "naive": NAIVE_LABEL,
    "pandas": "pandas read_json(lines)",
    "polars": "polars read_ndjson",
    "polars-projected": "polars read_ndjson, projected (8 columns, args as text)",
    "ingest": "trace-doctor ingest only (load_run)",
    "analyze": ANALYZE,
    "analyze-before": "trace-doctor analyze (json), the --before checkout",
    "trace-json": ANALYZE_TRACE_JSON,
    "cached": CACHED,
    "html": "HTML: analyze + write_html",
}


@dataclass
class Measure:
    label: str
    seconds: float
    peak_mb: float
    note: str = ""
    cpu_s: float = float("nan")  # user + system of the child: what load on a shared machine moves least


@dataclass
class Contender:
    key: str
    argv: list[str]
    env: dict[str, str]

    @property
    def label(self) -> str:
        return KEYS[self.key]


@dataclass
class SizeResult:
    size: str
    run: Path
    measures: list[Measure]
    skipped: list[str] = field(default_factory=list)

    def get(self, label: str) -> Measure | None:
        return next((m for m in self.measures if m.label == label), None)


def run_child(argv: list[str], env: dict[str, str]) -> tuple[float, float, str, float]:
    """Wall seconds, peak RSS (MB), stdout and CPU seconds (user + system) of one child process
    (its own rusage, not ours)."""
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
    return seconds, usage.ru_maxrss / 1024, out.decode(), usage.ru_utime + usage.ru_stime


def run_params(steps: int, samples: int) -> dict:
    """What a generated run depends on: its arguments and the generator's own code."""
    generator = hashlib.sha256((HERE / "generate_large_run.py").read_bytes()).hexdigest()[:16]
    return {"steps": steps, "samples": samples, "seed": SEED, "generator": generator}


def _stamp_matches(folder: Path, params: dict) -> bool:
    try:
        return json.loads((folder / STAMP).read_text()) == params
    except (OSError, ValueError):
        return False


def ensure_run(steps: int, samples: int, data: Path = DATA) -> Path:
    """The generated run of this size, generated only when missing or made by other parameters.

    The stamp is written last, so an interrupted generation is redone rather than measured."""
    out = data / f"rl_{steps}x{samples}"
    params = run_params(steps, samples)
    if not _stamp_matches(out, params):
        print(f"generating {out.name} ...", file=sys.stderr, flush=True)
        (out / STAMP).unlink(missing_ok=True)
        subprocess.run(
            [PYTHON, str(HERE / "generate_large_run.py"), str(out), "--steps", str(steps), "--samples", str(samples)]
            + ["--seed", str(SEED)],
            check=True,
        )
        (out / STAMP).write_text(json.dumps(params) + "\n")
    return out


def convert_to_trace_json(jsonl: Path, out: Path) -> None:
    """The cookbook converter's output (`json.dump(list of events)`: one line, `, ` between events)
    written a line at a time: the generator's lines are already json.dumps of each event, so the
    bytes are the converter's without holding the trace in memory."""
    with open(jsonl, "rb") as lines, open(out, "wb") as doc:
        doc.write(b"[")
        first = True
        for line in lines:
            line = line.rstrip(b"\r\n")
            if not line:
                continue
            doc.write(line if first else b", " + line)
            first = False
        doc.write(b"]")


def ensure_trace_json_run(run: Path) -> Path:
    """A sibling run folder holding the converted `trace.json` instead of `trace_events.jsonl`; the
    other files are hard links to the run's (copies where links are refused)."""
    out = run.with_name(run.name + "_trace_json")
    params = {**json.loads((run / STAMP).read_text()), "converted": "trace.json"}
    if _stamp_matches(out, params):
        return out
    print(f"converting {run.name} to trace.json ...", file=sys.stderr, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / STAMP).unlink(missing_ok=True)
    for name in ("config.json", "metrics.jsonl", "timing_spans.jsonl"):
        (out / name).unlink(missing_ok=True)
        try:
            os.link(run / name, out / name)
        except OSError:
            shutil.copyfile(run / name, out / name)
    partial = out / "trace.json.partial"
    convert_to_trace_json(run / "trace_events.jsonl", partial)
    partial.replace(out / "trace.json")
    (out / STAMP).write_text(json.dumps(params) + "\n")
    return out


def html_available() -> bool:
    probe = subprocess.run([PYTHON, "-c", "from trace_doctor.report.html import write_html"], capture_output=True)
    return probe.returncode == 0


def same_analysis(first: str, second: str, renames: dict[str, str] | None = None) -> bool:
    """Whether two `analyze --format json` outputs agree on everything but the input files' names."""
    for old, new in (renames or {}).items():
        second = second.replace(old, new)
    a, b = json.loads(first), json.loads(second)
    keys = ("summary", "findings", "rules", "ingest_warnings")
    return all(a.get(k) == b.get(k) for k in keys)


def bench_size(
    run: Path, repeats: int, keys: list[str], outputs: Path | None = None, before: Path | None = None
) -> SizeResult:
    """Every selected contender on this run, `repeats` rounds; the cold analysis's JSON goes to `outputs`.
    `before`: another checkout, whose cold analysis (`analyze-before`) runs in the same rounds."""
    trace = str(run / "trace_events.jsonl")
    size = run.name.removeprefix("rl_")
    result = SizeResult(size, run, [])
    # Analysis runs without the table cache: the point is the cold parse of a new run.
    cold = {**BASE_ENV, "TRACE_DOCTOR_CACHE": "off"}
    analyze_argv = [CLI, "analyze", str(run), "--no-html", "--format", "json"]
    if "pandas" in keys and os.path.getsize(trace) > PANDAS_MAX_TRACE_MB * 1e6:
        keys = [k for k in keys if k != "pandas"]
        result.skipped.append(f"pandas skipped: trace over {PANDAS_MAX_TRACE_MB} MB (its peak is ~13x the trace)")
    if "html" in keys and not html_available():
        keys = [k for k in keys if k != "html"]
        result.skipped.append("HTML skipped: the report writer does not import")
    trace_json_run = ensure_trace_json_run(run) if "trace-json" in keys else None
    with tempfile.TemporaryDirectory() as cache_dir, tempfile.TemporaryDirectory() as html_dir:
        # A cap above any size measured: the default (1 GB) would evict a large run's own tables.
        cache_env = {
            **BASE_ENV,
            "TRACE_DOCTOR_CACHE": "on",
            "TRACE_DOCTOR_CACHE_DIR": cache_dir,
            "TRACE_DOCTOR_CACHE_MAX_MB": "1000000",
        }
        report = Path(html_dir) / "report.html"
        argvs = {
            "cat": (["sh", "-c", 'cat "$1" > /dev/null', "sh", trace], cold),
            "naive": ([PYTHON, "-c", NAIVE, trace], cold),
            "pandas": ([PYTHON, "-c", PANDAS, trace], cold),
            "polars": ([PYTHON, "-c", POLARS, trace], cold),
            "polars-projected": ([PYTHON, "-c", POLARS_PROJECTED, trace], cold),
            "ingest": ([PYTHON, "-c", INGEST, str(run)], cold),
            "analyze": (analyze_argv, cold),
            # The same command importing the package of another checkout (PYTHONPATH first on the path).
            "analyze-before": (analyze_argv, {**cold, "PYTHONPATH": str(before)}),
            "trace-json": ([CLI, "analyze", str(trace_json_run), "--no-html", "--format", "json"], cold),
            "cached": (analyze_argv, cache_env),
            "html": ([PYTHON, "-c", HTML, str(run), str(report)], cold),
        }
        contenders = [Contender(k, *argvs[k]) for k in KEYS if k in keys and (k != "analyze-before" or before)]
        if "cached" in keys:
            run_child(analyze_argv, cache_env)  # fills the cache: the measured runs are re-analyses
        # Round-robin: every contender once per round, so a shared machine's drift (other jobs,
        # thermal, noisy neighbours) falls on all of them alike instead of on whichever ran last.
        runs: dict[str, list[tuple[float, float, str, float]]] = {c.key: [] for c in contenders}
        for _ in range(repeats):
            for contender in contenders:
                runs[contender.key].append(run_child(contender.argv, contender.env))
        cold_out = runs["analyze"][0][2] if "analyze" in runs else None
        if cold_out is not None and outputs is not None:
            outputs.mkdir(parents=True, exist_ok=True)
            (outputs / f"{size}.json").write_text(cold_out)
        for contender in contenders:
            results = runs[contender.key]
            note = _note(contender.key, results, cold_out, run, trace_json_run, report)
            result.measures.append(
                Measure(
                    contender.label,
                    statistics.median(r[0] for r in results),
                    statistics.median(r[1] for r in results),
                    note,
                    statistics.median(r[3] for r in results),
                )
            )
    return result


def _note(
    key: str,
    results: list[tuple[float, float, str, float]],
    cold_out: str | None,
    run: Path,
    trace_json_run: Path | None,
    report: Path,
) -> str:
    spread = f"{min(r[0] for r in results):.2f}-{max(r[0] for r in results):.2f} s" if len(results) > 1 else ""
    parts = [spread] if spread else []
    if key == "html" and results[-1][2].strip():
        parts.append(results[-1][2].strip().splitlines()[-1])
        parts.append(f"size={report.stat().st_size / 1e6:.2f}MB")
    if key == "analyze-before" and cold_out is not None:
        same = all(r[2] == cold_out for r in results)
        parts.append("JSON byte-identical to analyze" if same else "JSON DIFFERS from analyze")
    if key == "cached" and cold_out is not None:
        same = all(same_analysis(cold_out, r[2]) for r in results)
        parts.append("same JSON as cold" if same else "JSON DIFFERS from cold")
    if key == "trace-json" and trace_json_run is not None:
        size_mb = (trace_json_run / "trace.json").stat().st_size / 1e6
        parts.append(f"trace.json {size_mb:,.0f} MB")
        if cold_out is not None:
            renames = {
                str(trace_json_run / "trace.json"): str(run / "trace_events.jsonl"),
                str(trace_json_run): str(run),
            }
            same = all(same_analysis(cold_out, r[2], renames) for r in results)
            parts.append("same findings as JSONL" if same else "findings DIFFER from JSONL")
    return ", ".join(parts)


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
    try:
        import polars

        libs = f", polars {polars.__version__}"
    except ImportError:
        libs = ""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{cpu}, {cores} cores{mem}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}{libs}, load avg {load():.1f}"
    )


def load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def commit_measured() -> tuple[str, str]:
    """(short id, description) of the trace_doctor package the children import: the checkout's
    commit, the last commit that changed the package (harness-only commits leave it as it was), and
    whether it has local edits."""
    import trace_doctor

    package = Path(trace_doctor.__file__).resolve().parent

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(package), *args], capture_output=True, text=True, check=True).stdout

    try:
        head = git("rev-parse", "--short", "HEAD").strip()
        changed = git("log", "-1", "--format=%h", "--", ".").strip()
        dirty = git("status", "--porcelain", "--", ".").strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown", f"unknown (package at {package}, not a git checkout)"
    short = f"{head}-dirty" if dirty else head
    edits = " + uncommitted changes" if dirty else ""
    return short, f"{head}, trace_doctor/ as of {changed}{edits} (package at {package})"


def table(result: SizeResult) -> str:
    run = result.run
    naive = result.get(NAIVE_LABEL)
    trace_mb = (run / "trace_events.jsonl").stat().st_size / 1e6
    spans_mb = (run / "timing_spans.jsonl").stat().st_size / 1e6
    with open(run / "trace_events.jsonl", "rb") as fh:
        events = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 24), b""))
    lines = [
        f"### {result.size}: {events:,} events, {trace_mb:,.0f} MB trace_events.jsonl, "
        f"{spans_mb:,.0f} MB timing_spans.jsonl",
        "",
        "| contender | wall s (median) | CPU s (median) | peak RSS MB | time vs naive | CPU vs naive "
        "| memory vs naive | note |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for m in result.measures:
        time_ratio = f"{m.seconds / naive.seconds:.2f}x" if naive else "-"
        cpu_ratio = f"{m.cpu_s / naive.cpu_s:.2f}x" if naive else "-"
        mem_ratio = f"{m.peak_mb / naive.peak_mb:.2f}x" if naive else "-"
        lines.append(
            f"| {m.label} | {m.seconds:.2f} | {m.cpu_s:.2f} | {m.peak_mb:.0f} | {time_ratio} | {cpu_ratio} "
            f"| {mem_ratio} | {m.note} |"
        )
    lines += [f"\n{s}" for s in result.skipped]
    return "\n".join(lines)


@dataclass
class Target:
    name: str
    size: str
    measured: str
    holds: bool | None  # None: recorded, no bar to meet

    def row(self) -> str:
        verdict = "-" if self.holds is None else ("yes" if self.holds else "**no**")
        return f"| {self.name} | {self.size} | {self.measured} | {verdict} |"


# Issue 16's bars, by the sizes the issue names.
ISSUE16_TIME = {"3000x64": 0.15, "12000x64": 0.15}
ISSUE16_PEAK = {"3000x64": 0.35}
CACHED_MAX_S = 0.5
GROWTH_MAX = 1.5
# Issue 28: the peak of 12000x64 against 3000x64's (1.43x when the issue was written).
ISSUE28_GROWTH = ("12000x64", "3000x64", 1.3)


def targets(results: list[SizeResult]) -> list[Target]:
    """Each target with the measured value and whether it holds (issue 6's, then issue 16's)."""
    out: list[Target] = []
    for r in results:
        naive, analysis = r.get(NAIVE_LABEL), r.get(ANALYZE)
        if naive and analysis:
            time_ratio, mem_ratio = analysis.seconds / naive.seconds, analysis.peak_mb / naive.peak_mb
            out.append(Target("analysis <= 0.25x naive time", r.size, f"{time_ratio:.2f}x", time_ratio <= 0.25))
            out.append(Target("analysis <= 0.5x naive peak RSS", r.size, f"{mem_ratio:.2f}x", mem_ratio <= 0.5))
            if r.size in ISSUE16_TIME:
                bar = ISSUE16_TIME[r.size]
                out.append(Target(f"analysis <= {bar}x naive time", r.size, f"{time_ratio:.2f}x", time_ratio <= bar))
            if r.size in ISSUE16_PEAK:
                bar = ISSUE16_PEAK[r.size]
                out.append(Target(f"analysis <= {bar}x naive peak RSS", r.size, f"{mem_ratio:.2f}x", mem_ratio <= bar))
        html = r.get(KEYS["html"])
        if analysis and html is not None and "html_write_s=" in html.note and "size=" in html.note:
            write_s = float(html.note.split("html_write_s=")[1].split()[0].rstrip(","))
            size_mb = float(html.note.split("size=")[1].split("MB")[0])
            out.append(
                Target(
                    "HTML <= 10 MB, written in <= analysis time",
                    r.size,
                    f"{size_mb:.2f} MB in {write_s:.2f} s",
                    size_mb <= 10 and write_s <= analysis.seconds,
                )
            )
        cached = r.get(CACHED)
        if cached:
            out.append(
                Target(
                    f"cached re-analysis < {CACHED_MAX_S} s", r.size, f"{cached.seconds:.2f} s", cached.seconds < 0.5
                )
            )
        converted = r.get(ANALYZE_TRACE_JSON)
        if converted and analysis:
            out.append(
                Target(
                    "converted trace.json: peak vs JSONL analysis (recorded)",
                    r.size,
                    f"{converted.peak_mb:.0f} MB = {converted.peak_mb / analysis.peak_mb:.2f}x",
                    None,
                )
            )
    for before, after in zip(results, results[1:], strict=False):
        first, second = before.get(ANALYZE), after.get(ANALYZE)
        if first and second and _steps(after.size) == 2 * _steps(before.size):
            scaling = second.seconds / first.seconds
            out.append(
                Target(
                    "doubling events <= 2.2x time", f"{after.size} / {before.size}", f"{scaling:.2f}x", scaling <= 2.2
                )
            )
    by_size = {r.size: r.get(ANALYZE) for r in results}
    large_size, small_size, bar = ISSUE28_GROWTH
    if by_size.get(large_size) and by_size.get(small_size):
        large, small = by_size[large_size], by_size[small_size]
        growth = large.peak_mb / small.peak_mb
        out.append(
            Target(
                f"analysis peak RSS, {large_size} / {small_size} < {bar}x",
                f"{large_size} / {small_size}",
                f"{large.peak_mb:.0f} / {small.peak_mb:.0f} MB = {growth:.2f}x",
                growth < bar,
            )
        )
    if len(results) >= 2:
        small, large = results[0].get(ANALYZE), results[-1].get(ANALYZE)
        if small and large:
            growth = large.peak_mb / small.peak_mb
            out.append(
                Target(
                    f"analysis peak RSS, largest / smallest < {GROWTH_MAX}x",
                    f"{results[-1].size} / {results[0].size}",
                    f"{large.peak_mb:.0f} / {small.peak_mb:.0f} MB = {growth:.2f}x",
                    growth < GROWTH_MAX,
                )
            )
    return out


def _steps(size: str) -> int:
    return int(size.split("x")[0])


def target_lines(found: list[Target]) -> list[str]:
    return ["| target | size | measured | holds |", "|---|---|---:|---|"] + [t.row() for t in found]


def markdown_section(
    title: str, header: str, commit: str, repeats: int, results: list[SizeResult], found: list[Target]
) -> str:
    over = [f"{t.name} at {t.size} ({t.measured})" for t in found if t.holds is False]
    body = [
        f"## {title}",
        "",
        f"`benchmarks/run.py` ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC), {repeats} rounds, round-robin, "
        "each contender in its own subprocess, median wall time, CPU time (user + system) and peak RSS "
        "(the child's rusage), table cache off except the cached re-analysis.",
        "",
        f"commit measured: {commit}",
        "",
        header,
        "",
    ]
    body += [table(r) + "\n" for r in results]
    body += target_lines(found)
    body += ["", "Over target: " + ("; ".join(over) if over else "none") + "."]
    return "\n".join(body) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="3000x64,12000x64,24000x64")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", help=f"comma-separated contenders, of: {','.join(KEYS)}")
    parser.add_argument("--skip", default="", help="comma-separated contenders to leave out")
    parser.add_argument("--data", type=Path, default=DATA, help="where generated runs are kept and reused")
    parser.add_argument(
        "--before", type=Path, help="another checkout (e.g. a `git worktree` of the base commit): adds analyze-before"
    )
    parser.add_argument("--markdown", type=Path, help="append the tables to this file as a new section")
    parser.add_argument("--title", default="Issue 16: any trace size", help="the appended section's title")
    args = parser.parse_args()
    keys = args.only.split(",") if args.only else [k for k in KEYS if k != "analyze-before" or args.before]
    keys = [k for k in keys if k not in args.skip.split(",")]
    unknown = [k for k in keys if k not in KEYS]
    if unknown:
        sys.exit(f"unknown contenders {unknown}; known: {', '.join(KEYS)}")
    if not Path(CLI).exists() and shutil.which("trace-doctor") is None:
        sys.exit("trace-doctor is not installed in this environment (run `make bench`)")
    # Byte-compile the package as `pip install` does: with PYTHONDONTWRITEBYTECODE set (CI images
    # often set it) an editable install would otherwise recompile every module on every run
    # (~0.15 s per analysis here), which no installed copy pays.
    import trace_doctor

    subprocess.run([PYTHON, "-m", "compileall", "-q", str(Path(trace_doctor.__file__).parent)], check=True)
    if args.before:
        subprocess.run([PYTHON, "-m", "compileall", "-q", str(args.before / "trace_doctor")], check=True)
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    # Every input is generated (and converted) before anything is timed.
    runs = [ensure_run(steps, samples, args.data) for steps, samples in sizes]
    if "trace-json" in keys:
        for run in runs:
            ensure_trace_json_run(run)
    commit_id, commit = commit_measured()
    header = f"machine: {machine()} at start"
    print(f"{header}\ncommit: {commit}\n", flush=True)
    results = []
    for run in runs:
        result = bench_size(run, args.repeats, keys, args.data / "outputs" / commit_id, args.before)
        results.append(result)
        print(table(result) + "\n", flush=True)
    header += f", {load():.1f} at the end"
    found = targets(results)
    print("\n".join(target_lines(found)))
    if args.markdown:
        with open(args.markdown, "a") as fh:
            fh.write("\n" + markdown_section(args.title, header, commit, args.repeats, results, found))


if __name__ == "__main__":
    main()
