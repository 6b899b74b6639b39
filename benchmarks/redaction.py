"""Redaction throughput (issue 14): mixed run text at 1 MB and 10 MB, adversarial inputs for linearity.

    python benchmarks/redaction.py [--sizes 1,10] [--repeats 5] [--old-kb 5,10,20] [--markdown FILE]

Inputs (deterministic): lines drawn from the committed fixture runs (cookbook logs, trace events,
metrics rows, timing spans, stdout, thread-stack dumps) with 1% of the lines replaced by the planted
credentials of tests/planted_secrets.py (every type, in the sentence a run writes it in). Measured
in this process, median of the repeats:

- `redact_text` on the whole text (the public path: past 64 KB polars picks the lines to scan);
- the scanner alone on the whole text (one Python `re` pass, no prefilter);
- `redact_frame` on the same lines as a one-column table (how run tables are redacted);
- adversarial 1 MB and 2 MB inputs (long identifier runs, repeated prefixes and key words, a key
  block header with no END line, JSON escapes): time per MB must not grow with the size;
- the redaction this replaced (trace_doctor/report/redact.py before issue 14, taken from git) on
  small inputs of the shapes that made it quadratic.

Every redacted output is checked: no planted secret may survive.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from planted_secrets import CONTEXTS, leaks  # noqa: E402

from trace_doctor.redact import redact_frame, redact_text  # noqa: E402
from trace_doctor.redact.text import _scan  # noqa: E402

SOURCES = ("logs.log", "trace_events.jsonl", "metrics.jsonl", "timing_spans.jsonl", "stdout.txt", "stacks.txt")
SECRET_SHARE = 0.01
OLD_COMMIT = "17ae85d"  # the tree before issue 14: trace_doctor/report/redact.py


def line_pool() -> list[str]:
    lines: list[str] = []
    for run in sorted((ROOT / "fixtures" / "runs").iterdir()):
        for name in SOURCES:
            path = run / name
            if path.exists():
                lines += [line for line in path.read_text(encoding="utf-8", errors="replace").split("\n") if line]
    return lines


def mixed_records(size: int, pool: list[str], seed: int = 14) -> list[str]:
    """Records of about `size` characters in all; a planted private key is one record of several
    lines, as a log record with continuation lines is one row of log_events."""
    rng = random.Random(seed)
    secrets = list(CONTEXTS.values())
    out, total = [], 0
    while total < size:
        record = rng.choice(secrets) if rng.random() < SECRET_SHARE else rng.choice(pool)
        out.append(record)
        total += len(record) + 1
    return out


def adversarial(size: int) -> dict[str, str]:
    """One-line inputs built to make a backtracking scanner restart inside runs it already read."""
    return {
        "identifier run (a...)": "a" * size,
        "key_key_key...": "key_" * (size // 4),
        "password=password=...": "password=" * (size // 9),
        "sk-sk-sk-...": "sk-" * (size // 3),
        "wandb wandb ...": "wandb " * (size // 6),
        "token token ...": "token " * (size // 6),
        "https://user:... (no @)": ("https://user:" + "p" * 50 + " ") * (size // 64),
        "BEGIN PRIVATE KEY, no END": "-----BEGIN RSA PRIVATE KEY-----" + "A" * (size - 31),
        "JSON escapes \\n\\n...": "\\n" * (size // 2),
    }


def timed(func, *args, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = func(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def old_redact_text():
    """The pre-issue-14 redact_text, loaded from git into a temporary module."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{OLD_COMMIT}:trace_doctor/report/redact.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location("old_redact", fh.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.redact_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10", help="mixed-text sizes in MB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--old-kb", default="5,10,20", help="sizes in KB for the old redaction ('' to skip)")
    parser.add_argument("--markdown", metavar="FILE", help="also write the tables to FILE")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from run import machine

    lines = [f"Machine: {machine()}, polars {pl.__version__}.", ""]
    pool = line_pool()
    lines += [
        "### Mixed run text (1% planted credentials)",
        "",
        "| input | redact_text | MB/s | scanner alone | MB/s | redact_frame (one row a record) | leaks |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for mb in (float(s) for s in args.sizes.split(",")):
        records = mixed_records(int(mb * 1_000_000), pool)
        text = "\n".join(records)
        size = len(text.encode()) / 1e6
        t_public, clean = timed(redact_text, text, repeats=args.repeats)
        t_scan, scanned = timed(_scan, text, repeats=max(1, args.repeats // 2))
        assert scanned == clean, "the line-by-line path must equal one scan"
        frame = pl.DataFrame({"line": records})
        t_frame, cleaned = timed(redact_frame, frame, repeats=args.repeats)
        found = leaks(clean) + leaks("\n".join(cleaned["line"].to_list()))
        lines.append(
            f"| {size:.1f} MB, {text.count(chr(10)) + 1:,} lines | {t_public:.3f} s | {size / t_public:.0f} "
            f"| {t_scan:.2f} s | {size / t_scan:.1f} | {t_frame:.3f} s | {', '.join(found) or 'none'} |"
        )
    lines += [
        "",
        "### Adversarial inputs (one line each): 4x the input, about 4x the time (linear)",
        "",
        "redact_text first asks polars whether the line can hold a credential at all; the scanner alone is",
        "the Python pass every line that can goes through.",
        "",
        "| input | redact_text 1 MB | 4 MB | scanner alone 1 MB | 4 MB | ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    small, large = adversarial(1_000_000), adversarial(4_000_000)
    for name in small:
        t1, _ = timed(redact_text, small[name], repeats=args.repeats)
        t4, _ = timed(redact_text, large[name], repeats=max(1, args.repeats // 2))
        s1, _ = timed(_scan, small[name], repeats=max(1, args.repeats // 2))
        s4, _ = timed(_scan, large[name], repeats=1)
        lines.append(f"| {name} | {t1:.3f} s | {t4:.3f} s | {s1:.2f} s | {s4:.2f} s | {s4 / s1:.1f}x |")
    if args.old_kb:
        old = old_redact_text()
        lines += [
            "",
            "### The redaction this replaced, on the shapes that made it quadratic",
            "",
            "| input | before (report/redact.py) | now (redact_text) |",
            "|---|---:|---:|",
        ]
        for kb in (int(s) for s in args.old_kb.split(",")):
            for name in ("identifier run (a...)", "key_key_key..."):
                text = adversarial(kb * 1000)[name]
                t_old, _ = timed(old, text, repeats=1)
                t_new, _ = timed(redact_text, text, repeats=3)
                lines.append(f"| {name}, {kb} KB | {t_old:.2f} s | {t_new * 1000:.1f} ms |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.markdown:
        Path(args.markdown).write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
