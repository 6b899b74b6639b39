"""Snapshot the JSON document and exit code of every fixture and corpus run, to diff a change against.

    python tools/json_snapshot.py OUT_DIR            # write OUT_DIR/<target>.json (+ .rc)
    python tools/json_snapshot.py OUT_DIR --diff REF  # then list the targets whose document or code differ

A refactor must leave every document byte-identical apart from `tool.version`; a behaviour change
shows up here target by target, to be explained in the closing note. Targets: every fixture run and
file, the bundled sample run, the fixture folders as fleets, and every corpus file and folder.
Run from the repository root; the corpus is read in place from ../shared/corpus.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# ../shared/corpus beside the checkout (a worktree elsewhere can point there with a symlink)
CORPUS = (ROOT.parent / "shared" / "corpus").resolve()


def targets() -> list[str]:
    found: list[str] = ["trace_doctor/sample_run", "fixtures/runs", "fixtures/training"]
    for group in ("fixtures/runs", "fixtures/training"):
        found += sorted(str(p.relative_to(ROOT)) for p in (ROOT / group).iterdir() if p.is_dir())
    found += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "fixtures/profiles").glob("*.json*"))
    found += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "fixtures/dumps").iterdir())
    if CORPUS.is_dir():
        for path in sorted(CORPUS.rglob("*")):
            if path.name == "PROVENANCE.md":
                continue
            found.append(str(path))
    return found


def name_of(target: str) -> str:
    digest = hashlib.sha1(target.encode()).hexdigest()[:8]
    tail = target.replace(str(CORPUS), "corpus").replace("/", "__")[-80:]
    return f"{tail}.{digest}"


def normalise(text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    docs = doc.get("runs", [doc]) if isinstance(doc, dict) else []
    for one in [doc, *docs]:
        if isinstance(one, dict) and isinstance(one.get("tool"), dict):
            one["tool"]["version"] = "-"
    return json.dumps(doc, indent=1, sort_keys=False, ensure_ascii=False) + "\n"


def snapshot(target: str, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACE_DOCTOR_CACHE": "off", "COLUMNS": "100", "NO_COLOR": "1"}
    cmd = [sys.executable, "-m", "trace_doctor.cli", "analyze", target, "--format", "json", "--no-html", "-j", "1"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    # Not with_suffix: the name's digest after its last dot would be replaced.
    stem = name_of(target)
    (out / f"{stem}.json").write_text(normalise(done.stdout))
    (out / f"{stem}.rc").write_text(f"{target}\n{done.returncode}\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--diff", metavar="REF", help="a snapshot folder to compare with")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", help="only targets containing this text")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = [t for t in targets() if not args.only or args.only in t]
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda t: snapshot(t, out), chosen))
    print(f"{len(chosen)} targets written to {out}")
    if not args.diff:
        return 0
    ref = Path(args.diff)
    differ = 0
    for target in chosen:
        stem = name_of(target)
        for suffix in (".json", ".rc"):
            a, b = ref / (stem + suffix), out / (stem + suffix)
            if not a.exists() or a.read_text() != b.read_text():
                differ += 1
                print(f"differs ({suffix}): {target}    diff {a} {b}")
    print(f"{differ} difference(s)")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
