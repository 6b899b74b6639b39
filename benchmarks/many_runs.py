"""Many runs at once (issue 12): a sweep folder of small and large runs against the same runs analysed alone.

    python benchmarks/many_runs.py [--small 200 --large 8 --small-steps 30 --large-steps 1000 --samples 16]
                                   [--repeats 3] [--jobs 1,2,4] [--wait-idle 0.8] [--markdown FILE]

Generates one sweep folder with benchmarks/generate_large_run.py (deterministic; kept in benchmarks/data/,
reused when present): `sweep/small_000..` (`--small-steps` steps each) and `sweep/large_0..` (`--large-steps`).
Then, each in its own subprocess with the table cache off, round-robin over the repeats (one run of each
per round, so drift on a shared machine falls on all of them alike):

- the start-up a spawned worker pays before its first run: `python -c "import trace_doctor.fleet, polars"`,
  and `import trace_doctor.cli` (what a spawned worker actually imports: it re-runs the console script);
- one small run alone and one large run alone: `trace-doctor analyze RUN --no-html --format json`;
- two small runs named together at --jobs 1 and 2 (the difference is what spawning the workers costs);
- the whole sweep: `trace-doctor analyze sweep --no-html --format json --jobs N` for each N (its JSON is
  checked: every run present and analysed).

Reported: median wall time; CPU seconds of the tree (user + system, workers included once reaped); peak
memory of the whole process tree (parent + spawned workers), polled from /proc every 50 ms (psutil is not a
dependency): summed RSS, which counts shared library pages once per process, and summed PSS, which shares
them out (also with other processes on the machine that map the same libraries); the command's own process;
the largest single process's own peak RSS (the kernel's, from wait4); the share of the machine's CPU that
other processes used meanwhile (this harness's polling included: ~3 ms of CPU per poll). The expected
sequential cost is N_small * t_small + N_large * t_large, the sum of the runs analysed alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
PYTHON = sys.executable
CLI = str(Path(PYTHON).with_name("trace-doctor"))
PAGE = os.sysconf("SC_PAGE_SIZE")
POLL_S = 0.05

STARTUP = "import trace_doctor.fleet, polars"
WORKER_STARTUP = "import trace_doctor.cli, trace_doctor.fleet"


@dataclass
class Sample:
    seconds: float
    tree_rss_mb: float  # polled peak of the summed RSS of the tree
    tree_pss_mb: float  # polled peak of the summed PSS of the tree
    max_rss_mb: float  # largest single process in the tree (kernel's own peak, wait4)
    cpu_s: float  # user + system of the tree (reaped descendants included)
    processes: int  # most processes seen in the tree at once
    parent_rss_mb: float  # polled peak RSS of the command's own process (no workers)
    idle: float  # share of the machine's CPU time idle while it ran
    stdout: bytes = b""

    @property
    def others(self) -> float:
        """Share of the machine's CPU that processes outside the measured tree used while it ran."""
        return max(0.0, 1.0 - self.idle - self.cpu_s / (self.seconds * cores()))


@dataclass
class Contender:
    label: str
    argv: list[str]
    samples: list[Sample] = field(default_factory=list)

    def median(self, name: str) -> float:
        return statistics.median(getattr(s, name) for s in self.samples)


def load_sibling(name: str):
    """A script of this folder as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def load_generator():
    return load_sibling("generate_large_run")


def ensure_sweep(small: int, large: int, small_steps: int, large_steps: int, samples: int) -> Path:
    """The sweep folder, generated once per parameter set (a marker file says it is complete)."""
    params = {
        "small": small,
        "large": large,
        "small_steps": small_steps,
        "large_steps": large_steps,
        "samples": samples,
    }
    base = DATA / f"many_{small}x{small_steps}_{large}x{large_steps}_s{samples}"
    marker = base / "complete.json"
    if marker.exists() and json.loads(marker.read_text()) == params:
        return base / "sweep"
    if base.exists():
        shutil.rmtree(base)
    generator = load_generator()
    print(f"generating {base.name} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    width = max(3, len(str(small - 1)))
    for i in range(small):
        generator.generate(base / "sweep" / f"small_{i:0{width}d}", small_steps, samples, seed=i)
    for i in range(large):
        generator.generate(base / "sweep" / f"large_{i}", large_steps, samples, seed=100_000 + i)
    marker.write_text(json.dumps(params) + "\n")
    print(f"generated in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return base / "sweep"


def folder_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, resident pages) for every process visible in /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue  # exited meanwhile
        fields = stat[stat.rfind(b")") + 2 :].split()
        table[int(name)] = (int(fields[1]), int(fields[21]))
    return table


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeSampler(threading.Thread):
    """Polls the summed RSS and PSS of a process and all its descendants until stopped."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.stop = threading.Event()
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_root = 0
        self.most = 0

    def poll(self) -> None:
        table = _proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        tree, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            if pid in table:
                tree.append(pid)
                todo.extend(children.get(pid, ()))
        self.peak_rss = max(self.peak_rss, sum(table[pid][1] for pid in tree) * PAGE)
        if self.root in table:
            self.peak_root = max(self.peak_root, table[self.root][1] * PAGE)
        self.peak_pss = max(self.peak_pss, sum(_pss_kb(pid) for pid in tree) * 1024)
        self.most = max(self.most, len(tree))

    def run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            self.stop.wait(POLL_S)


def cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of the whole machine since boot."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    return values[3] + values[4], sum(values[:8])


def wait_idle(share: float, limit_s: float = 900.0) -> float:
    """Wait until the machine was at least `share` idle over one second (other jobs on a shared machine)."""
    deadline = time.monotonic() + limit_s
    while True:
        idle_before, total_before = cpu_times()
        time.sleep(1.0)
        idle_after, total_after = cpu_times()
        idle = (idle_after - idle_before) / max(1, total_after - total_before)
        if idle >= share or time.monotonic() > deadline:
            return idle


def run_child(argv: list[str], env: dict[str, str]) -> Sample:
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        idle_before, total_before = cpu_times()
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out_file, stderr=err_file, env=env)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)  # releases the GIL: the sampler keeps polling
        seconds = time.perf_counter() - start
        idle_after, total_after = cpu_times()
        sampler.stop.set()
        sampler.join()
        out_file.seek(0)
        err_file.seek(0)
        out, err = out_file.read(), err_file.read()
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # 1 = the CI gate tripped, still a complete analysis
        raise RuntimeError(f"{argv[:4]} failed ({code}): {err.decode()[-2000:]}")
    return Sample(
        seconds=seconds,
        tree_rss_mb=sampler.peak_rss / 2**20,
        tree_pss_mb=sampler.peak_pss / 2**20,
        max_rss_mb=usage.ru_maxrss / 1024,
        cpu_s=usage.ru_utime + usage.ru_stime,
        processes=sampler.most,
        parent_rss_mb=sampler.peak_root / 2**20,
        idle=(idle_after - idle_before) / max(1, total_after - total_before),
        stdout=out,
    )


def check_fleet(stdout: bytes, expected: int, label: str) -> None:
    """The sweep's JSON document names every run and analysed them all."""
    document = json.loads(stdout)
    fleet = document["fleet"]
    if fleet["runs"] != expected or fleet["analysed"] != expected:
        raise RuntimeError(f"{label}: {fleet['runs']} runs, {fleet['analysed']} analysed, expected {expected}")


def machine() -> str:
    return load_sibling("run").machine()


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def measure_table(contenders: list[Contender]) -> list[str]:
    lines = [
        "| contender | wall s (median) | wall s (min-max) | CPU s | tree peak RSS MB | tree peak PSS MB "
        "| command's own process MB | largest process MB | processes | other jobs' CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in contenders:
        times = [s.seconds for s in c.samples]
        lines.append(
            f"| {c.label} | {c.median('seconds'):.2f} | {min(times):.2f}-{max(times):.2f} | {c.median('cpu_s'):.2f} "
            f"| {c.median('tree_rss_mb'):.0f} | {c.median('tree_pss_mb'):.0f} | {c.median('parent_rss_mb'):.0f} "
            f"| {c.median('max_rss_mb'):.0f} | {max(s.processes for s in c.samples)} | {c.median('others'):.0%} |"
        )
    return lines


def sweep_table(
    contenders: dict[str, Contender], n_small: int, n_large: int, jobs: list[int], n_cores: int
) -> list[str]:
    small, large, startup = contenders["small"], contenders["large"], contenders["startup"]
    n_runs = n_small + n_large
    t_small, t_large, t_start = small.median("seconds"), large.median("seconds"), startup.median("seconds")
    expected = n_small * t_small + n_large * t_large
    cpu_expected = n_small * small.median("cpu_s") + n_large * large.median("cpu_s")
    large_rss, large_pss = large.median("tree_rss_mb"), large.median("tree_pss_mb")
    sequential = contenders.get("jobs 1")
    lines = [
        f"Expected sequential cost (the runs analysed alone, one after the other): {n_small} x {t_small:.3f} s + "
        f"{n_large} x {t_large:.3f} s = **{expected:.1f} s** wall (small {n_small * t_small:.1f} s, large "
        f"{n_large * t_large:.1f} s), {cpu_expected:.1f} s CPU. Start-up (`{STARTUP}`): {t_start:.3f} s wall / "
        f"{startup.median('cpu_s'):.3f} s CPU per process, {n_runs} x = {n_runs * t_start:.1f} s of the sum. "
        f"One large run alone: {large_rss:.0f} MB RSS / {large_pss:.0f} MB PSS.",
        "",
        "| sweep | wall s | vs sum | vs sum / cores | vs --jobs 1 | CPU s | CPU vs sum | tree peak RSS MB "
        "| vs one large | tree peak PSS MB | vs one large | command's own process MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    pair1, pair2 = contenders.get("pair 1"), contenders.get("pair 2")
    if pair1 and pair2:
        lines[1:1] = [
            "",
            f"Spawning the workers (two small runs named together, --jobs 2 minus --jobs 1): "
            f"{pair2.median('seconds') - pair1.median('seconds'):+.2f} s wall, "
            f"{pair2.median('cpu_s') - pair1.median('cpu_s'):+.2f} s CPU.",
        ]
    for n in jobs:
        c = contenders[f"jobs {n}"]
        wall, cpu, rss, pss = c.median("seconds"), c.median("cpu_s"), c.median("tree_rss_mb"), c.median("tree_pss_mb")
        vs_jobs1 = f"{wall / sequential.median('seconds'):.2f}x" if sequential else ""
        lines.append(
            f"| --jobs {n} | {wall:.2f} | {wall / expected:.2f}x | {wall / (expected / n_cores):.2f}x | {vs_jobs1} "
            f"| {cpu:.1f} | {cpu / cpu_expected:.2f}x | {rss:.0f} | {rss / large_rss:.2f}x | {pss:.0f} "
            f"| {pss / large_pss:.2f}x | {c.median('parent_rss_mb'):.0f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=200, help="small runs in the sweep")
    parser.add_argument("--large", type=int, default=8, help="large runs in the sweep")
    parser.add_argument("--small-steps", type=int, default=30)
    parser.add_argument("--large-steps", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=16, help="concurrent rollouts per step (every run)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", default="1,2,4", help="--jobs values to measure the sweep at")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="before each round, wait (up to 15 min) until the machine is at least this idle, e.g. 0.8",
    )
    args = parser.parse_args()
    if args.small < 1 or args.large < 1:
        sys.exit("--small and --large must be at least 1")
    if not Path(CLI).exists():
        sys.exit("trace-doctor is not installed in this environment (run `make bench`)")
    # Byte-compile the package as `pip install` does (see benchmarks/run.py): with
    # PYTHONDONTWRITEBYTECODE set, every process (and every spawned worker) would recompile it.
    import trace_doctor

    subprocess.run([PYTHON, "-m", "compileall", "-q", str(Path(trace_doctor.__file__).parent)], check=True)
    jobs = [int(n) for n in args.jobs.split(",")]
    sweep = ensure_sweep(args.small, args.large, args.small_steps, args.large_steps, args.samples)
    small_run = sorted(sweep.glob("small_*"))[0]
    large_run = sorted(sweep.glob("large_*"))[0]
    n_cores = cores()
    header = [
        f"machine: {machine()}",
        f"sweep: {args.small} x {args.small_steps} steps ({folder_mb(small_run):.2f} MB each) + {args.large} x "
        f"{args.large_steps} steps ({folder_mb(large_run):.1f} MB each), {args.samples} samples per step; "
        f"{folder_mb(sweep):.0f} MB in all; {args.repeats} repeats, round-robin; memory polled from /proc every "
        f"{POLL_S * 1000:.0f} ms (no psutil)",
    ]
    print("\n".join(header) + "\n", flush=True)

    analyze = [CLI, "analyze", "--no-html", "--format", "json"]
    contenders = {
        "startup": Contender(f"start-up: `{STARTUP}`", [PYTHON, "-c", STARTUP]),
        "worker startup": Contender(f"start-up: `{WORKER_STARTUP}`", [PYTHON, "-c", WORKER_STARTUP]),
        "small": Contender(f"one small run alone ({args.small_steps} steps)", [*analyze, str(small_run)]),
        "large": Contender(f"one large run alone ({args.large_steps} steps)", [*analyze, str(large_run)]),
    }
    # Two small runs named together: a fleet of two, whose --jobs 2 minus --jobs 1 is what spawning costs.
    pair = [str(p) for p in sorted(sweep.glob("small_*"))[:2]]
    if len(pair) == 2:
        for n in (1, 2):
            contenders[f"pair {n}"] = Contender(f"two small runs, --jobs {n}", [*analyze, *pair, "--jobs", str(n)])
    for n in jobs:
        contenders[f"jobs {n}"] = Contender(
            f"sweep of {args.small + args.large} runs, --jobs {n}", [*analyze, str(sweep), "--jobs", str(n)]
        )
    env = {**os.environ, "TRACE_DOCTOR_CACHE": "off"}
    for round_no in range(args.repeats):
        if args.wait_idle:
            idle = wait_idle(args.wait_idle)
            print(f"round {round_no + 1}: machine {idle:.0%} idle at the start", file=sys.stderr, flush=True)
        for key, contender in contenders.items():
            sample = run_child(contender.argv, env)
            if key.startswith(("jobs", "pair")):
                check_fleet(sample.stdout, 2 if key.startswith("pair") else args.small + args.large, contender.label)
            sample.stdout = b""
            contender.samples.append(sample)
            print(
                f"  round {round_no + 1}: {contender.label}: {sample.seconds:.2f} s, "
                f"tree {sample.tree_rss_mb:.0f} MB RSS / {sample.tree_pss_mb:.0f} MB PSS, CPU {sample.cpu_s:.1f} s, "
                f"machine idle {sample.idle:.0%}, other jobs {sample.others:.0%}",
                file=sys.stderr,
                flush=True,
            )
    body = [
        *header,
        "",
        *measure_table(list(contenders.values())),
        "",
        *sweep_table(contenders, args.small, args.large, jobs, n_cores),
    ]
    print("\n".join(body[len(header) :]))
    if args.markdown:
        args.markdown.write_text("\n".join(body) + "\n")


if __name__ == "__main__":
    main()
