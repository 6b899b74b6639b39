"""What a watch refresh costs on a large run (issue 28): it must follow the growth, not the size.

    python benchmarks/live_refresh.py [--steps 3000 --samples 64] [--append-mb 1] [--repeats 3] [--markdown FILE]
        [--increments 50] [--long 300] [--before CHECKOUT]

The run is benchmarks/generate_large_run.py's (deterministic, kept in benchmarks/data/ and reused, as
benchmarks/run.py keeps it). Each measure runs in its own subprocess, round-robin over the repeats:

- cold: `trace-doctor analyze RUN --no-html --format json` with the table cache off (wall, peak RSS);
- watch: a copy of the run without its last steps (the last `--append-mb` MB of its streamed files:
  trace_events.jsonl, metrics.jsonl, timing_spans.jsonl) is followed by a `Watch`: its first look
  (catching up with the files so far, the analysis included), then the last steps are appended and one
  look is timed. That look's parts: reading what the files gained (LiveRun.look: the new lines parsed,
  progress events), building the tables (LiveRun.tables) and re-running the rules (analyze). Memory:
  the child's peak RSS (the kernel's, wait4) and its RSS before and after the refresh (/proc/self/statm).

- growth (`--increments N`): a copy of the run whose streamed files start empty and grow by 1/N of their
  lines N times; after each growth the watch's process reads what they gained (LiveRun.look, until
  caught up) and runs the findings refresh (LiveRun.tables + analyze): its time and the process's RSS
  after it, at every increment. Flat memory: the RSS at the start and the end of the last 10.

- long (`--long N`): what a day of watching does to memory. A copy of the run with 90% of its streamed
  files written is caught up with, then refreshed N times with nothing appended (RSS must not move: the
  watch keeps nothing per refresh), then N times growing by 10%/N of the files each (about a step per
  refresh at 3000 steps and N=300: RSS may only follow the data). After each refresh the RSS (after a
  gc.collect(), so what is counted is what is held) and its least-squares slope in MB per refresh.

`--before CHECKOUT`: every watch measure is run a second time importing CHECKOUT's package (a
worktree of an earlier commit), in the same rounds, so before and after share the machine's load.

A look that only reads what the files gained is what runs every `--interval` seconds; the findings refresh
(tables + rules) runs when steps arrived and the watch's analysis is due (watch.py: at most once per
`analysis_interval_s`, and never more than 1/ANALYSIS_BUDGET of the time the watch runs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run as bench  # noqa: E402  (benchmarks/run.py: the generated runs and the child runner)

STREAMED = ("trace_events.jsonl", "metrics.jsonl", "timing_spans.jsonl")
LONG_START = 0.9  # the long measure's run is caught up with at this share of its files
PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def split_run(full: Path, live: Path, append_bytes: int) -> dict[str, int]:
    """Copy `full` to `live` without its last steps (about `append_bytes` of its streamed files); the byte
    offset in each streamed file where the held-back tail starts."""
    steps = sum(1 for _ in open(full / "metrics.jsonl", "rb"))
    sizes = {name: (full / name).stat().st_size for name in STREAMED}
    held = max(1, math.ceil(append_bytes / (sum(sizes.values()) / steps)))
    live.mkdir(parents=True)
    for path in full.iterdir():
        if path.is_file() and path.name not in STREAMED:
            shutil.copy(path, live / path.name)
    cuts = {}
    for name in STREAMED:
        # One line per step in metrics.jsonl and timing_spans.jsonl; the trace is cut at the same share.
        with open(full / name, "rb") as f:
            if name == "trace_events.jsonl":
                f.seek(round(sizes[name] * (steps - held) / steps))
                f.readline()
            else:
                for _ in range(steps - held):
                    f.readline()
            cuts[name] = f.tell()
        with open(full / name, "rb") as src, open(live / name, "wb") as dst:
            remaining = cuts[name]
            while remaining:
                chunk = src.read(min(remaining, 1 << 24))
                dst.write(chunk)
                remaining -= len(chunk)
    return cuts


def child(full: Path, live: Path, cuts: dict[str, int]) -> None:
    """The watch measure, in its own process: prints one JSON line."""
    import trace_doctor.api as api
    from trace_doctor.policy.live import WatchPolicy
    from trace_doctor.watch import Watch

    parts: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                parts[name] = parts.get(name, 0.0) + time.perf_counter() - start

        return wrapper

    api.analyze = timed("analyze", api.analyze)
    # The interval out of the way: after the first look, the findings refresh waits only on its own
    # cost share (max_analysis_share), so the refresh look below reads and reports progress only.
    watch = Watch(live, policy=WatchPolicy(analysis_interval_s=1e-9, min_stall_s=1e9))
    caught_up = [False]
    read = timed("read", watch.live.look)

    def look_and_note():
        look = read()
        caught_up[0] = look.caught_up
        return look

    watch.live.look = look_and_note
    watch.live.tables = timed("tables", watch.live.tables)
    start = time.perf_counter()
    looks = 0
    while not caught_up[0]:  # a look reads at most READ_LIMIT of a file (reading/tail.py)
        watch.look()
        looks += 1
    catch_up = time.perf_counter() - start
    catch_up_parts, parts = parts, {}
    peak_before, rss_before = _peak_mb(), _rss_mb()
    appended = 0
    for name, cut in cuts.items():
        with open(full / name, "rb") as src, open(live / name, "ab") as dst:
            src.seek(cut)
            tail = src.read()
            dst.write(tail)
            appended += len(tail)
    start = time.perf_counter()
    events = watch.look()
    refresh = time.perf_counter() - start
    rss_after_look, peak_after_look = _rss_mb(), _peak_mb()
    # The findings refresh the watch runs when it is due: the tables of the run so far, the rules on them.
    api.analyze(watch.live.tables(), settings=watch.settings)
    print(
        json.dumps(
            {
                "catch_up_s": catch_up,
                "catch_up_looks": looks,
                "catch_up_parts": catch_up_parts,
                "refresh_s": refresh,
                "refresh_parts": parts,
                "appended_bytes": appended,
                "new_steps": sum(e.event == "progress" for e in events),
                "rss_before_mb": rss_before,
                "rss_after_look_mb": rss_after_look,
                "peak_before_refresh_mb": peak_before,
                "peak_after_look_mb": peak_after_look,
                "peak_after_findings_mb": _peak_mb(),
            }
        )
    )


class GrowingCopy:
    """A copy of the run whose streamed files start empty and are written up to a share of the run's."""

    def __init__(self, full: Path, live: Path) -> None:
        self.full, self.live = full, live
        live.mkdir(parents=True)
        for path in full.iterdir():
            if path.is_file() and path.name not in STREAMED:
                shutil.copy(path, live / path.name)
        self.sizes = {name: (full / name).stat().st_size for name in STREAMED}
        self.written = dict.fromkeys(STREAMED, 0)

    def grow_to(self, share: float) -> None:
        for name in STREAMED:
            with open(self.full / name, "rb") as src, open(self.live / name, "ab") as dst:
                src.seek(max(self.written[name], round(self.sizes[name] * share) - 1))
                src.readline()  # to the end of the line the share ends in
                cut = src.tell()
                src.seek(self.written[name])
                dst.write(src.read(cut - self.written[name]))
                self.written[name] = cut


def growth_child(full: Path, live: Path, increments: int) -> None:
    """The growth measure, in its own process: prints one JSON line."""
    import trace_doctor.api as api
    from trace_doctor.ingest.live_run import LiveRun
    from trace_doctor.settings import Settings

    copy = GrowingCopy(full, live)
    watched = LiveRun(live)
    settings = Settings()
    rows = []
    for number in range(1, increments + 1):
        copy.grow_to(number / increments)
        start = time.perf_counter()
        while not watched.look().caught_up:
            pass
        looked = time.perf_counter()
        run = watched.tables()
        tabled = time.perf_counter()
        api.analyze(run, settings=settings)
        del run
        rows.append(
            {
                "look_s": looked - start,
                "tables_s": tabled - looked,
                "analyze_s": time.perf_counter() - tabled,
                "rss_mb": _rss_mb(),
            }
        )
    print(json.dumps({"increments": rows, "peak_mb": _peak_mb()}))


def long_child(full: Path, live: Path, refreshes: int) -> None:
    """The long measure, in its own process: prints one JSON line."""
    import gc

    import trace_doctor.api as api
    from trace_doctor.ingest.live_run import LiveRun
    from trace_doctor.settings import Settings

    copy = GrowingCopy(full, live)
    watched = LiveRun(live)
    settings = Settings()

    def refresh() -> dict[str, float]:
        start = time.perf_counter()
        while not watched.look().caught_up:
            pass
        run = watched.tables()
        api.analyze(run, settings=settings)
        del run
        gc.collect()
        return {"s": time.perf_counter() - start, "rss_mb": _rss_mb()}

    copy.grow_to(LONG_START)
    refresh()
    still = [refresh() for _ in range(refreshes)]
    growing = []
    for number in range(1, refreshes + 1):
        copy.grow_to(LONG_START + (1 - LONG_START) * number / refreshes)
        growing.append(refresh())
    print(json.dumps({"still": still, "growing": growing, "peak_mb": _peak_mb()}))


def rss_slope(rows: list[dict[str, float]]) -> float:
    """Least-squares MB of RSS per refresh."""
    return statistics.linear_regression(range(len(rows)), [r["rss_mb"] for r in rows]).slope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--append-mb", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--increments", type=int, default=0, help="also the growth measure, in N increments")
    parser.add_argument("--long", type=int, default=0, help="also the long measure: N still, then N growing refreshes")
    parser.add_argument("--before", type=Path, help="a checkout whose package the watch measures also run with")
    parser.add_argument("--no-again", action="store_true", help="skip `analyze` again after the append")
    parser.add_argument("--child", nargs=3, metavar=("FULL", "LIVE", "CUTS"), help=argparse.SUPPRESS)
    parser.add_argument("--growth-child", nargs=3, metavar=("FULL", "LIVE", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--long-child", nargs=3, metavar=("FULL", "LIVE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), Path(args.child[1]), json.loads(args.child[2]))
        return
    if args.growth_child:
        growth_child(Path(args.growth_child[0]), Path(args.growth_child[1]), int(args.growth_child[2]))
        return
    if args.long_child:
        long_child(Path(args.long_child[0]), Path(args.long_child[1]), int(args.long_child[2]))
        return
    full = bench.ensure_run(args.steps, args.samples)
    env = {**bench.BASE_ENV, "TRACE_DOCTOR_CACHE": "off"}
    # The package each watch measure imports: this checkout's, and the --before one's.
    versions = {"after": env}
    if args.before is not None:
        versions = {"before": {**env, "PYTHONPATH": str(args.before.resolve())}, **versions}
    trace_mb = (full / "trace_events.jsonl").stat().st_size / 1e6
    cold: list[tuple[float, float]] = []
    watched: dict[str, list[tuple[dict, float]]] = {version: [] for version in versions}
    grown: dict[str, list[tuple[dict, float]]] = {version: [] for version in versions}
    long: dict[str, list[tuple[dict, float]]] = {version: [] for version in versions}
    again: list[dict[str, float]] = []
    loads: list[float] = []
    for _ in range(args.repeats):
        loads.append(os.getloadavg()[0])
        argv = [sys.executable, "-m", "trace_doctor.cli", "analyze", str(full), "--no-html", "--format", "json"]
        seconds, peak, _, _ = bench.run_child(argv, env)
        cold.append((seconds, peak))
        for version, version_env in versions.items():
            with tempfile.TemporaryDirectory(dir=bench.DATA) as tmp:
                live = Path(tmp) / "live"
                cuts = split_run(full, live, round(args.append_mb * 2**20))
                argv = [sys.executable, __file__, "--child", str(full), str(live), json.dumps(cuts)]
                _, peak, out, _ = bench.run_child(argv, version_env)
                watched[version].append((json.loads(out.strip().splitlines()[-1]), peak))
            if args.increments:
                with tempfile.TemporaryDirectory(dir=bench.DATA) as tmp:
                    argv = [sys.executable, __file__, "--growth-child", str(full), str(Path(tmp) / "live")]
                    _, peak, out, _ = bench.run_child([*argv, str(args.increments)], version_env)
                    grown[version].append((json.loads(out.strip().splitlines()[-1]), peak))
            if args.long:
                with tempfile.TemporaryDirectory(dir=bench.DATA) as tmp:
                    argv = [sys.executable, __file__, "--long-child", str(full), str(Path(tmp) / "live")]
                    _, peak, out, _ = bench.run_child([*argv, str(args.long)], version_env)
                    long[version].append((json.loads(out.strip().splitlines()[-1]), peak))
        if not args.no_again:
            again.append(analyze_again(full, round(args.append_mb * 2**20)))
        loads.append(os.getloadavg()[0])
    text = report(args, trace_mb, cold, watched, again, grown, loads, long)
    print(text)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(text + "\n")


def analyze_again(full: Path, append_bytes: int) -> dict[str, float]:
    """`analyze` of a copy of the run without its last steps with the table cache on (a cold analysis that
    fills the cache), then again after the last steps are appended: each in its own process."""
    with tempfile.TemporaryDirectory() as tmp:
        live = Path(tmp) / "live"
        cuts = split_run(full, live, append_bytes)
        env = {**bench.BASE_ENV, "TRACE_DOCTOR_CACHE": "on", "TRACE_DOCTOR_CACHE_DIR": str(Path(tmp) / "cache")}
        argv = [sys.executable, "-m", "trace_doctor.cli", "analyze", str(live), "--no-html", "--format", "json"]
        first, first_peak, _, _ = bench.run_child(argv, env)
        for name, cut in cuts.items():
            with open(full / name, "rb") as src, open(live / name, "ab") as dst:
                src.seek(cut)
                dst.write(src.read())
        grown, grown_peak, _, _ = bench.run_child(argv, env)
    return {"first_s": first, "first_mb": first_peak, "grown_s": grown, "grown_mb": grown_peak}


def report(
    args,
    trace_mb: float,
    cold: list[tuple[float, float]],
    watched: dict[str, list[tuple[dict, float]]],
    again: list[dict],
    grown: dict[str, list[tuple[dict, float]]],
    loads: list[float],
    long: dict[str, list[tuple[dict, float]]],
) -> str:
    def med(values) -> float:
        return statistics.median(list(values))

    cold_s, cold_mb = med(s for s, _ in cold), med(m for _, m in cold)
    from trace_doctor.policy.live import WatchPolicy

    policy = WatchPolicy()
    from trace_doctor.ingest.reading.tail import READ_LIMIT

    read_mb = READ_LIMIT // 2**20
    some = next(iter(watched.values()))
    lines = [
        f"### {args.steps}x{args.samples}: {trace_mb:.0f} MB trace_events.jsonl, "
        f"{med(r['appended_bytes'] for r, _ in some) / 2**20:.2f} MB appended "
        f"({med(r['new_steps'] for r, _ in some):.0f} steps), {len(cold)} repeat(s) (medians), "
        f"load average {min(loads):.1f}-{max(loads):.1f}",
        "",
        "| measure | wall s | vs cold analyze | memory |",
        "|---|---:|---:|---|",
        f"| cold `analyze --no-html --format json` | {cold_s:.2f} | 1.00x | peak {cold_mb:.0f} MB |",
    ]
    for version, results in watched.items():
        runs = [m for m, _ in results]
        refresh = med(r["refresh_s"] for r in runs)
        read = med(r["refresh_parts"].get("read", 0.0) for r in runs)
        tables = med(r["refresh_parts"].get("tables", 0.0) for r in runs)
        findings = med(r["refresh_parts"].get("tables", 0.0) + r["refresh_parts"].get("analyze", 0.0) for r in runs)
        # The watch's cadence after this refresh: its cost over the share it may take (watch.py).
        wait = max(policy.analysis_interval_s, findings / policy.max_analysis_share)
        catch_up = med(r["catch_up_s"] for r in runs)
        tag = f"{version}: " if len(watched) > 1 else ""
        lines += [
            f"| {tag}watch: catching up ({med(r['catch_up_looks'] for r in runs):.0f} looks of at most "
            f"{read_mb} MB a file; "
            f"the rules once, when caught up) | {catch_up:.2f} | {catch_up / cold_s:.2f}x | "
            f"peak {med(m for _, m in results):.0f} MB (the whole child) |",
            f"| {tag}watch refresh look (read, progress events) | {refresh:.3f} | {refresh / cold_s:.1%} | "
            f"RSS {med(r['rss_before_mb'] for r in runs):.0f} -> {med(r['rss_after_look_mb'] for r in runs):.0f} MB |",
            f"| {tag}of which reading what the files gained | {read:.3f} | {read / cold_s:.1%} | |",
            f"| {tag}findings refresh (tables + rules), when due | {findings:.2f} | {findings / cold_s:.1%} | "
            f"peak -> {med(r['peak_after_findings_mb'] for r in runs):.0f} MB |",
            f"| {tag}of which LiveRun.tables() | {tables:.2f} | {tables / cold_s:.1%} | |",
            f"| {tag}findings refresh per second watched (next one due {wait:.0f} s later, "
            f"max_analysis_share {policy.max_analysis_share:g}) | {findings / wait:.3f} | "
            f"{findings / wait / cold_s:.2%} | |",
        ]
    for version, results in grown.items():
        if not results:
            continue
        tag = f"{version}: " if len(grown) > 1 else ""
        runs = [r["increments"] for r, _ in results]
        last = [r[-1] for r in runs]
        findings = med(r["tables_s"] + r["analyze_s"] for r in last)
        tail = [r[-10:] for r in runs]
        lines += [
            f"| {tag}growth: findings refresh after the last of {args.increments} increments "
            f"(tables {med(r['tables_s'] for r in last):.2f} s) | {findings:.2f} | {findings / cold_s:.1%} | "
            f"RSS over the last 10: {med(t[0]['rss_mb'] for t in tail):.0f} -> "
            f"{med(t[-1]['rss_mb'] for t in tail):.0f} MB "
            f"(max {med(max(x['rss_mb'] for x in t) for t in tail):.0f}); "
            f"peak {med(m for _, m in results):.0f} MB |",
        ]
    for version, results in long.items():
        tag = f"{version}: " if len(long) > 1 else ""
        for kind, what in (("still", "nothing appended"), ("growing", f"{1 - LONG_START:.0%} of the run appended")):
            rows = [r[kind] for r, _ in results if r[kind]]
            if not rows:
                continue
            lines.append(
                f"| {tag}long: {len(rows[0])} findings refreshes, {what} "
                f"| {med(med(x['s'] for x in r) for r in rows):.2f} (median) "
                f"| {med(med(x['s'] for x in r) for r in rows) / cold_s:.1%} "
                f"| RSS {med(r[0]['rss_mb'] for r in rows):.0f} -> {med(r[-1]['rss_mb'] for r in rows):.0f} MB, "
                f"slope {med(rss_slope(r) for r in rows):+.3f} MB per refresh |"
            )
    if again:
        lines += [
            f"| `analyze` with the table cache on, first (fills the cache, stores the resume state) | "
            f"{med(a['first_s'] for a in again):.2f} | {med(a['first_s'] for a in again) / cold_s:.2f}x | "
            f"peak {med(a['first_mb'] for a in again):.0f} MB |",
            f"| `analyze` again after the append (cache on) | {med(a['grown_s'] for a in again):.2f} | "
            f"{med(a['grown_s'] for a in again) / cold_s:.1%} | peak {med(a['grown_mb'] for a in again):.0f} MB |",
        ]
    lines.append("")
    for version, results in grown.items():
        for r, _ in results:
            lines.append(
                f"{version} growth RSS per increment (MB): " + " ".join(f"{x['rss_mb']:.0f}" for x in r["increments"])
            )
            lines.append(
                f"{version} growth findings refresh per increment (s): "
                + " ".join(f"{x['tables_s'] + x['analyze_s']:.2f}" for x in r["increments"])
            )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
