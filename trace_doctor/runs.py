"""What a run is: split what the user named into runs, so two runs are never merged into one.

A run is the folder one training process wrote (its `log_path`: metrics, trace, timing spans, config,
checkpoints, `logs.log`), or the loose files named together on the command line. A folder may hold
many runs (a sweep, a copied results folder, a whole corpus); a folder may also hold several runs
side by side under renamed files (`arithmetic_metrics.jsonl` next to `distillation_on_metrics.jsonl`),
told apart by the name before the kind.

Files that do not define a run by themselves (profiles, dumps, captured stdout, a W&B `output.log`)
belong to the nearest run folder above them; where none is above, each folder of them is a run.

    >>> from trace_doctor import sample_run_path
    >>> [run.label for run in split_runs([sample_run_path()]).runs]
    ['sample_run']
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from trace_doctor.did_you_mean import missing_path
from trace_doctor.discover import discover
from trace_doctor.file_names import input_path
from trace_doctor.humanize import printable
from trace_doctor.model import PassedOver

# Kinds whose file marks the folder it is in as a run's folder.
ANCHOR_KINDS = ("metrics", "trace", "spans", "config", "checkpoints")
# The cookbook's own names: a folder holding them is one run, whatever else is beside them.
STANDARD_NAMES = re.compile(
    r"^(metrics\.jsonl(\.pre_resume_\d+)?|trace_events\.jsonl|trace\.json|timing_spans\.jsonl|config\.json"
    r"|checkpoints\.jsonl|logs\.log|code\.diff)$"
    # gzipped line files keep their names' meaning (discover.classify)
    r"|^(metrics\.jsonl(\.pre_resume_\d+)?|trace_events\.jsonl|timing_spans\.jsonl|checkpoints\.jsonl)\.gz$"
)
# A renamed file: `<run name><sep><kind word>[<sep>...].<ext>`, e.g. `gptoss-20b-v2-metrics.jsonl`.
RENAMED = re.compile(
    r"^(?P<prefix>.+?)[-_.]+(?:training_)?(?:metrics|checkpoints|trace_events|trace|timing_spans|spans|config|logs?)"
    r"(?:[-_.][^/]*)?\.(?:jsonl|json|log)(?:\.gz)?$",
    re.IGNORECASE,
)
# Characters a run id keeps: it names a Parquet partition folder and a report file.
# Longest run id: it names a partition folder (`run=<id>`) and a report file (`<id>.html`).
MAX_ID_CHARS = 120
UNSAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class RunSource:
    """One run: where it is, what to call it, and the files it is made of."""

    run_id: str  # stable and file-name safe: derived from the run's path relative to what was named
    label: str  # the same for people: the relative path, with the run's name when a folder holds several
    root: Path  # the folder (or, for loose files, the first file)
    files: tuple[Path, ...]
    whole_folder: bool = False  # the run is everything under `root` (ingest it as a folder)
    path: str = ""  # what the run's documents call its path: the folder, or `folder/name*`
    # Files in the run's folder that discovery looked at and did not read, with the reason.
    passed_over: tuple[PassedOver, ...] = ()


@dataclass
class RunSplit:
    runs: list[RunSource] = field(default_factory=list)
    passed_over: list[PassedOver] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def run_prefix(path: Path) -> str:
    """The run name a file carries before its kind (`arithmetic` in `arithmetic_metrics.jsonl`), or ""."""
    if STANDARD_NAMES.match(path.name):
        return ""
    match = RENAMED.match(path.name)
    if match:
        return match.group("prefix")
    return path.name.split(".", 1)[0]


def _is_anchor(kind: str, path: Path) -> bool:
    return kind in ANCHOR_KINDS or (kind == "log" and path.name == "logs.log")


def _run_id(parts: list[str]) -> str:
    cleaned = [UNSAFE_ID.sub("_", p).strip("_") or "_" for p in parts if p]
    joined = "__".join(cleaned) or "run"
    if len(joined) <= MAX_ID_CHARS:
        return joined
    # File systems cap a name at 255 bytes; a sweep's folder names can be longer than that together.
    # The end says which run it is, the digest keeps two long ids apart.
    digest = hashlib.sha1(joined.encode()).hexdigest()[:10]
    return f"{joined[-(MAX_ID_CHARS - 12) :].lstrip('_.-')}-{digest}"


def _split_folder(top: Path, out: RunSplit, *, named: bool) -> None:
    """The runs under one folder; `named`: label them with the folder's own name too (several were given)."""
    found = discover([top])
    kinds: dict[Path, str] = {path: kind for kind, paths in found.files.items() for path in paths}
    if not kinds:
        return
    anchors: dict[Path, set[str]] = {}
    for path, kind in kinds.items():
        if _is_anchor(kind, path):
            anchors.setdefault(path.parent, set()).add(run_prefix(path))
    # A folder's runs, keyed by (folder, run name); files join the run of their folder, or of the
    # nearest folder above theirs that has runs.
    groups: dict[tuple[Path, str], list[Path]] = {}
    for path in sorted(kinds):
        home = next((d for d in (path.parent, *path.parent.parents) if d in anchors), None)
        if home is None:
            groups.setdefault((path.parent, ""), []).append(path)
            continue
        names = anchors[home]
        if len(names) == 1:
            groups.setdefault((home, next(iter(names))), []).append(path)
            continue
        name = run_prefix(path) if path.parent == home else ""
        if name in names:
            groups.setdefault((home, name), []).append(path)
        else:
            runs = ", ".join(sorted(n or "(cookbook names)" for n in names))
            out.passed_over.append(
                PassedOver(str(path), f"belongs to none of the {len(names)} runs in {home} ({runs}): name it with one")
            )
    single = len(groups) == 1
    # What was passed over belongs to the run whose folder holds it, when that folder holds one run.
    runs_in: dict[Path, list[tuple[Path, str]]] = {}
    for folder, name in groups:
        runs_in.setdefault(folder, []).append((folder, name))
    passed_by_run: dict[tuple[Path, str], list[PassedOver]] = {}
    for item in found.passed_over:
        where = Path(item.path).parent
        home = next((d for d in (where, *where.parents) if d in runs_in), None)
        if home is not None and len(runs_in[home]) == 1:
            passed_by_run.setdefault(runs_in[home][0], []).append(item)
        else:
            out.passed_over.append(item)
    for (folder, name), files in sorted(groups.items(), key=lambda item: (str(item[0][0]), item[0][1])):
        try:
            relative = folder.relative_to(top).parts
        except ValueError:
            relative = ()
        parts = [top.name if named or not relative else "", *relative]
        several = name and len(anchors.get(folder, ())) > 1
        label = printable("/".join(p for p in [*parts, f"{name}*" if several else ""] if p) or top.name)
        out.runs.append(
            RunSource(
                run_id=_run_id([*parts, name if several else ""]),
                label=label,
                root=folder,
                files=tuple(files),
                whole_folder=single,
                path=str(folder / f"{name}*") if several else str(folder),
                passed_over=tuple(passed_by_run.get((folder, name), ())),
            )
        )


def split_runs(paths: list[str | os.PathLike[str]]) -> RunSplit:
    """Runs under `paths`: each folder split into its runs; the loose files named together are one run."""
    out = RunSplit()
    loose: list[Path] = []
    for raw in paths:
        path = input_path(raw)
        if not path.exists():
            out.missing.append(missing_path(path))
        elif path.is_dir():
            _split_folder(path, out, named=len(paths) > 1)
        else:
            loose.append(path)
    if loose:
        out.runs.append(
            RunSource(
                run_id=_run_id([loose[0].parent.name, loose[0].name]),
                label=str(loose[0]),
                root=loose[0],
                files=tuple(loose),
                path=str(loose[0]),
            )
        )
    out.runs = _unique_ids(_named_once(out))
    return out


def _named_once(out: RunSplit) -> list[RunSource]:
    """The runs, each once: a run named directly and again inside a folder named beside it (`sweep
    sweep/run7`, overlapping shell globs) is the same files, which a fleet would count twice and a dataset
    would hold twice. The repeat is listed as passed over, naming the run it repeats."""
    seen: dict[frozenset[str], str] = {}
    once = []
    for run in out.runs:
        files = frozenset(os.path.realpath(f) for f in run.files)
        if files in seen:
            out.passed_over.append(PassedOver(run.path, f"a run named twice: analysed once, as {seen[files]}"))
            continue
        seen[files] = run.label
        once.append(run)
    return once


def folder_run(paths: list[str | os.PathLike[str]], runs: list[RunSource]) -> RunSource | None:
    """The run of the one folder named, when that folder is itself a run and also holds others below it (an
    earlier attempt copied inside, a nested evaluation run): what a command of one run (export, bundle,
    --baseline) reads, without the nested runs' files. None otherwise."""
    if len(paths) != 1:
        return None
    folder = input_path(paths[0])
    own = [run for run in runs if run.root == folder and run.path == str(folder)]
    return own[0] if len(own) == 1 else None


def _unique_ids(runs: list[RunSource]) -> list[RunSource]:
    """Runs with unique ids: they name partitions and report files, and a repeat overwrites a run's data.

    A repeat takes the first `<id>-<n>` that no run has: `x y`, `x_y` and `x_y-2` clean to `x_y`,
    `x_y` and `x_y-2`, so the second `x_y` cannot be `x_y-2` too.
    """
    taken = {run.run_id for run in runs}
    seen: set[str] = set()
    unique = []
    for run in runs:
        if run.run_id not in seen:
            seen.add(run.run_id)
            unique.append(run)
            continue
        count = 2
        while f"{run.run_id}-{count}" in taken:
            count += 1
        run_id = f"{run.run_id}-{count}"
        taken.add(run_id)
        seen.add(run_id)
        unique.append(replace(run, run_id=run_id))
    return unique
