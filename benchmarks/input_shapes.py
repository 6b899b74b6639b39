"""Time and peak memory against the input's shape (issue 30): a large logs.log, one huge log line, a run
folder of many small files, a console-only run (no metrics.jsonl: the steps are its log's printed tables).
Each case is a generated run (benchmarks/data/shapes/, git-ignored), analysed
by `trace-doctor analyze --format json --no-html` in a subprocess (wall time, the child's peak RSS).

    python benchmarks/input_shapes.py [--root DIR ...] [--log-mb 200] [--line-mb 300] [--files 2500,20000]
                                      [--console-mb 200] [--cases log,line,files,console]

`--root` (repeatable) measures other checkouts on the same inputs, in turn (the code before a change, then
this one). The log's lines are the cookbook's mix (records with and without events, continuation lines,
a repeated warning); each run but the console-only one has a small metrics.jsonl, as a cookbook run does.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "shapes"
MB = 1024 * 1024
METRICS = b'{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 0.9}\n'
LOG_LINES = (
    "tinker_cookbook.rl.train:{n} [INFO] Step {n}: loss=0.5 took 1.2s\n",
    'httpx:1025 [INFO] HTTP Request: POST https://tinker.example/api/v1/forward_backward "HTTP/1.1 200 OK"\n',
    "tinker_cookbook.utils.ml_log:{n} [INFO] metric table row {n}\n",
    "  continuation line {n} with some text to pad it to an ordinary length\n",
    "tinker_cookbook.rl.train:88 [WARNING] Renderer warning repeated\n",
)

# The cookbook's console metrics table (PrettyPrintLogger), one per step, as logs.log holds it.
# The record's first line ends with a space (its message is a newline and the table), the title is centred.
TABLE_RECORD = (
    "tinker_cookbook.utils.ml_log:303 [INFO] \n"
    + " " * 14
    + "Step {n}"
    + " " * 15
    + """
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━┓
┃ Metric                       ┃ Value     ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━┩
│ env/all/reward/total         │ 0.{n:06d}  │
│ optim/lr                     │ 0.000100  │
│ progress/done_frac           │ 0.500000  │
│ time/sample                  │ 1.{n:06d}  │
│ time/total                   │ 3.250000  │
│ time/train                   │ 2.{n:06d}  │
└──────────────────────────────┴───────────┘
"""
)
# Log lines between two tables: a cookbook step logs a few hundred lines (HTTP requests, rollouts).
LINES_PER_STEP = 200


def big_log(megabytes: int) -> Path:
    run = DATA / f"log-{megabytes}mb"
    log = run / "logs.log"
    if not log.exists() or log.stat().st_size < megabytes * MB:
        run.mkdir(parents=True, exist_ok=True)
        (run / "metrics.jsonl").write_bytes(METRICS)
        with open(log, "w") as out:
            n = 0
            while out.tell() < megabytes * MB:
                out.write("".join(line.format(n=n + i) for i, line in enumerate(LOG_LINES)))
                n += len(LOG_LINES)
    return run


def console_only(megabytes: int) -> Path:
    """A run whose only record of its steps is logs.log's printed tables (no metrics.jsonl)."""
    run = DATA / f"console-{megabytes}mb"
    log = run / "logs.log"
    if not log.exists() or log.stat().st_size < megabytes * MB:
        run.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as out:
            step = 0
            while out.tell() < megabytes * MB:
                n = step * LINES_PER_STEP
                out.write("".join(LOG_LINES[i % len(LOG_LINES)].format(n=n + i) for i in range(LINES_PER_STEP)))
                out.write(TABLE_RECORD.format(n=step))
                step += 1
    return run


def long_line(megabytes: int) -> Path:
    run = DATA / f"line-{megabytes}mb"
    log = run / "logs.log"
    if not log.exists():
        run.mkdir(parents=True, exist_ok=True)
        (run / "metrics.jsonl").write_bytes(METRICS)
        with open(log, "w") as out:
            out.write("tinker_cookbook.rl.train:1 [INFO] start\ntinker_cookbook.rl.train:2 [INFO] ")
            for _ in range(megabytes):
                out.write("abc def " * (MB // 8))
            out.write("\ntinker_cookbook.rl.train:3 [ERROR] end\n")
    return run


def many_files(count: int) -> Path:
    run = DATA / f"files-{count}"
    if not (run / "metrics.jsonl").exists():
        run.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            (run / f"f{i:05d}.txt").write_text("x")
        (run / "metrics.jsonl").write_bytes(METRICS)
    return run


def measure(root: Path, run: Path) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, exit code) of one analysis in a child process."""
    env = dict(os.environ, PYTHONPATH=str(root), TRACE_DOCTOR_CACHE="off")
    script = (
        "import resource, subprocess, sys, time\n"
        "t = time.monotonic()\n"
        "code = subprocess.call([sys.executable, '-m', 'trace_doctor.cli', 'analyze', sys.argv[1], '--no-html', "
        "'--format', 'json'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)\n"
    )
    # Run from the checkout: `python -m` puts the working folder first on the path, before PYTHONPATH.
    out = subprocess.run(
        [sys.executable, "-c", script, str(run.resolve())],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    wall, rss_kb, code = out.stdout.split()
    return float(wall), int(rss_kb) / 1024, int(code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", action="append", type=Path, help="checkout(s) to measure (default: this one)")
    parser.add_argument("--log-mb", type=int, default=200)
    parser.add_argument("--line-mb", type=int, default=300)
    parser.add_argument("--files", default="2500,20000")
    parser.add_argument("--console-mb", type=int, default=200)
    parser.add_argument("--cases", default="log,line,files,console", help="which cases, comma-separated")
    args = parser.parse_args()
    roots = args.root or [HERE.parent]
    chosen = set(args.cases.split(","))
    cases = []
    if "log" in chosen:
        cases.append((f"logs.log of {args.log_mb} MB", big_log(args.log_mb)))
    if "line" in chosen:
        cases.append((f"one line of {args.line_mb} MB", long_line(args.line_mb)))
    if "files" in chosen:
        cases += [(f"{int(n):,} small files", many_files(int(n))) for n in args.files.split(",")]
    if "console" in chosen:
        cases.append((f"console-only run, logs.log of {args.console_mb} MB", console_only(args.console_mb)))
    print("| case | checkout | wall s | peak RSS MB | exit |")
    print("|---|---|---:|---:|---:|")
    for name, run in cases:
        for root in roots:
            wall, rss, code = measure(root, run)
            print(f"| {name} | {root} | {wall:.1f} | {rss:.0f} | {code} |", flush=True)


if __name__ == "__main__":
    main()
