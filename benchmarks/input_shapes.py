"""Time and peak memory against the input's shape (issue 30): a large logs.log, one huge log line, a run
folder of many small files. Each case is a generated run (benchmarks/data/shapes/, git-ignored), analysed
by `trace-doctor analyze --format json --no-html` in a subprocess (wall time, the child's peak RSS).

    python benchmarks/input_shapes.py [--root DIR ...] [--log-mb 200] [--line-mb 300] [--files 2500,20000]

`--root` (repeatable) measures other checkouts on the same inputs, in turn (the code before a change, then
this one). The log's lines are the cookbook's mix (records with and without events, continuation lines,
a repeated warning); each run has a small metrics.jsonl, as a cookbook run does.
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
    args = parser.parse_args()
    roots = args.root or [HERE.parent]
    cases = [
        (f"logs.log of {args.log_mb} MB", big_log(args.log_mb)),
        (f"one line of {args.line_mb} MB", long_line(args.line_mb)),
    ]
    cases += [(f"{int(n):,} small files", many_files(int(n))) for n in args.files.split(",")]
    print("| case | checkout | wall s | peak RSS MB | exit |")
    print("|---|---|---:|---:|---:|")
    for name, run in cases:
        for root in roots:
            wall, rss, code = measure(root, run)
            print(f"| {name} | {root} | {wall:.1f} | {rss:.0f} | {code} |", flush=True)


if __name__ == "__main__":
    main()
