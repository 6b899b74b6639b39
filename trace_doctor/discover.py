"""Find every input trace-doctor can read under the given paths, by name and by content.

A cookbook log directory has fixed names (metrics.jsonl, trace_events.jsonl, ...), but users
rename files (`arithmetic_metrics.jsonl`), drop in profiles and dumps under any name, and convert
traces to `trace.json`. Names decide where they are unambiguous; a short sniff of the content
decides the rest. Every file looked at and not read is reported with the reason.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from trace_doctor.file_names import input_path
from trace_doctor.ingest.parsers.rollouts import is_rollout_summaries_name
from trace_doctor.ingest.reading.textfile import utf16_as_utf8, utf16_encoding
from trace_doctor.model import PassedOver

KINDS = (
    "metrics",
    "trace",
    "spans",
    "config",
    "checkpoints",
    "rollouts",
    "profile",
    "dump",
    "log",
    "code_diff",
    "wandb_metadata",
)

SNIFF_BYTES = 256 * 1024
# Deep enough for a sweep's folder of runs (results/<sweep>/<model>/<run>/wandb/<id>/files/output.log).
MAX_DEPTH = 10
# Directories a run never keeps trace-doctor inputs in, and that can be huge.
SKIP_DIRS = {".git", "__pycache__", "node_modules", ".venv", "venv", "site-packages", ".trace-doctor-cache"}

DUMP_MARKERS = (
    re.compile(rb"^===== \d{4}-\d\d-\d\d \d\d:\d\d:\d\d asyncio task dump \[", re.M),
    re.compile(rb"^# \d{4}-\d\d-\d\d \d\d:\d\d:\d\d stacks:", re.M),
    re.compile(rb"^--- \[[\w-]+\] ident=\d+", re.M),
    re.compile(rb"^\[\d\d:\d\d:\d\d\] [\w-]+:\s*$", re.M),
    re.compile(rb"^tid\s+task id\s+task name\s+coroutine stack", re.M),
)
LOG_RECORD = re.compile(rb"^[\w.<>-]+:\d+ \[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\] ", re.M)
TEXT_SUFFIXES = {".log", ".txt", ".out", ".err", ".stdout", ".stderr"}


@dataclass
class Discovered:
    """Inputs by kind, plus what was passed over and why."""

    files: dict[str, list[Path]] = field(default_factory=lambda: {k: [] for k in KINDS})
    passed_over: list[PassedOver] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def add(self, kind: str, path: Path) -> None:
        if path not in self.files[kind]:
            self.files[kind].append(path)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.files.values())


def _head(path: Path) -> bytes | str:
    """The first bytes of the file (decompressed for .gz), or why they could not be read."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError as exc:
        return f"cannot read file: {exc.strerror or exc}"
    if path.suffix == ".gz" and head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as fh:
                head = fh.read(SNIFF_BYTES)
        except (OSError, EOFError, zlib.error) as exc:
            # A corrupt deflate stream raises zlib.error, which is not an OSError.
            return f"corrupt gzip: {exc}"
    return head


# Archive and compressor signatures (their first bytes; tar's "ustar" sits at offset 257 of its
# first header, seen through gzip for a .tar.gz since _head decompresses .gz files).
ARCHIVE_MAGIC = (
    (b"PK\x03\x04", "a zip archive"),
    (b"PK\x05\x06", "an empty zip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"),
    (b"\xfd7zXZ\x00", "an xz-compressed file"),
    (b"\x28\xb5\x2f\xfd", "a zstd-compressed file"),
    (b"BZh", "a bzip2-compressed file"),
    (b"\x1f\x8b", "a gzip-compressed file"),
)


def _archive_kind(head: bytes) -> str | None:
    """What kind of archive or compressed file `head` starts, if any."""
    if head[257:262] == b"ustar":
        return "a tar archive"
    for magic, kind in ARCHIVE_MAGIC:
        if head.startswith(magic):
            # "BZh" is also three letters of text: bzip2 follows it with the block size digit.
            if magic == b"BZh" and not head[3:4].isdigit():
                continue
            return kind
    return None


def _first_line(head: bytes) -> bytes:
    for raw in head.split(b"\n"):
        if raw.strip():
            return raw.strip()
    return b""


def _classify_jsonl(head: bytes) -> str | None:
    line = _first_line(head)
    if not line.startswith(b"{"):
        return None
    if b'"ph"' in line and b'"ts"' in line:
        return "trace"
    if line.startswith(b'{"step"') and b'"spans": [' in line[:4096]:
        return "spans"
    if b'"state_path"' in line or b'"sampler_path"' in line:
        return "checkpoints"
    if b'"traj_idx"' in line and b'"group_idx"' in line:
        return "rollouts"  # RL rollout summaries under another name (FORMATS.md 3.6)
    if b'"schema_version"' in line:
        return None
    return "metrics"


def _classify_json(head: bytes) -> str | None:
    stripped = head.lstrip()
    if stripped.startswith(b"["):
        return "trace" if b'"ph"' in stripped[:4096] else None
    if not stripped.startswith(b"{"):
        return None
    window = stripped[:8192]
    if b'"root_frame"' in head or (b'"frame_tree"' in window and b'"session"' in window):
        return "profile"
    if b'"frame_records"' in head:
        return "profile"
    if b'"traceEvents"' in window:
        return "trace"
    if b'"traceEvents"' in head:
        # A PyTorch profiler trace puts its device and distributed-run metadata first: the key is
        # a trace's when the head's top-level object reaches it (not text or a nested key).
        from trace_doctor.ingest.trace.trace_document import has_trace_events

        return "trace" if has_trace_events(stripped) else None
    return None


# The inputs known by their exact name (classify's first tests).
INPUT_FILE_NAMES = frozenset(
    {
        "metrics.jsonl",
        "trace_events.jsonl",
        "timing_spans.jsonl",
        "config.json",
        "checkpoints.jsonl",
        "code.diff",
        "wandb-metadata.json",
        "logs.log",
    }
)


# Inputs known by name whose readers also read them gzipped (named `<name>.gz`).
GZIP_READ_NAMES = frozenset({"metrics.jsonl", "trace_events.jsonl", "timing_spans.jsonl", "checkpoints.jsonl"})


def classify(path: Path) -> tuple[str | None, str]:
    """Kind of one file, or None with the reason it is not an input."""
    name = path.name
    # The line readers read gzip wherever they find it: a log folder gzipped file by file for
    # sharing (`gzip -r`) keeps its files' kinds.
    plain = name.removesuffix(".gz")
    if (plain != name and plain in GZIP_READ_NAMES) or re.fullmatch(r"metrics\.jsonl\.pre_resume_\d+\.gz", name):
        # A stream that does not even start is said here, as for any `.gz` (one that breaks later
        # is read up to the break, with a warning).
        head = _head(path)
        if isinstance(head, str):
            return None, head
    if plain == "metrics.jsonl" or re.fullmatch(r"metrics\.jsonl\.pre_resume_\d+", plain):
        return "metrics", ""
    if plain == "trace_events.jsonl":
        return "trace", ""
    if plain == "timing_spans.jsonl":
        return "spans", ""
    if name == "config.json":
        return "config", ""
    if plain == "checkpoints.jsonl":
        return "checkpoints", ""
    if is_rollout_summaries_name(name):
        return "rollouts", ""
    if name == "code.diff":
        return "code_diff", ""
    if name == "wandb-metadata.json":
        # W&B's record of the training machine (python, host, args, git): run metadata, not timing.
        return "wandb_metadata", ""
    if name == "logs.log":
        # The cookbook's log by name, even with NUL runs in it (a crash mid-write leaves them).
        return "log", ""
    if name.endswith(".pyisession"):
        return "profile", ""
    head = _head(path)
    if isinstance(head, str):
        return None, head
    if not head.strip():
        return None, "empty file"
    if name.endswith(".html") or name.endswith(".htm"):
        return None, "HTML (timing_gantt/logtree pages are summaries of inputs read elsewhere)"
    if utf16_encoding(head) and re.search(r"\.jsonl?(\.gz)?$", name):
        return None, "UTF-16 JSON: the JSON readers take UTF-8 (convert it: iconv -f UTF-16 -t UTF-8)"
    if name.endswith(".jsonl") or name.endswith(".jsonl.gz"):
        kind = _classify_jsonl(head)
        return (
            (kind, "")
            if kind
            else (None, "JSONL that is not metrics, trace, timing spans, checkpoints or rollout summaries")
        )
    if name.endswith(".json") or name.endswith(".json.gz"):
        kind = _classify_json(head)
        return (kind, "") if kind else (None, "JSON that is neither a pyinstrument profile nor a trace")
    archive = _archive_kind(head)
    if archive:
        # Runs are shared as archives; nothing here is read from inside one (no extraction of
        # untrusted archives behind the user's back), but the user learns what to do.
        todo = "decompress it" if archive.endswith("compressed file") else "unpack it"
        return None, f"{archive}: {todo} and analyze what it holds"
    head = utf16_as_utf8(head)  # a UTF-16 log (PowerShell's redirect) is text, classified as its UTF-8
    if b"\x00" in head[:4096] and not name.endswith(".pyisession"):
        return None, "binary file"
    if any(marker.search(head) for marker in DUMP_MARKERS):
        return "dump", ""
    if path.suffix in TEXT_SUFFIXES or LOG_RECORD.search(head):
        return "log", ""
    return None, "not a recognised input"


def _walk(root: Path, passed_over: list[PassedOver]) -> list[Path]:
    found: list[Path] = []
    root_depth = len(root.parts)
    inside = os.path.realpath(root)

    def unlistable(exc: OSError) -> None:
        passed_over.append(PassedOver(str(input_path(exc.filename)), f"cannot list directory: {exc.strerror or exc}"))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unlistable):
        depth = len(Path(dirpath).parts) - root_depth
        if depth >= MAX_DEPTH:
            # Said, not silently skipped: a tree this deep is unusual enough to name.
            passed_over.extend(
                PassedOver(
                    str(input_path(os.path.join(dirpath, d))),
                    f"folder more than {MAX_DEPTH} levels below {root}: not searched",
                )
                for d in sorted(dirnames)
                if d not in SKIP_DIRS
            )
        # os.walk lists a link to a folder and does not enter it (a link can loop). A link within
        # the tree is a second name for a folder read anyway (W&B's `latest-run`); one that leads
        # out of it is a run (or part of one) left unread: said, so it is not missing without a word.
        passed_over.extend(
            PassedOver(
                str(input_path(os.path.join(dirpath, d))),
                "symbolic link to a folder outside the one named: not followed (name it to analyse it)",
            )
            for d in sorted(dirnames)
            if d not in SKIP_DIRS and depth < MAX_DEPTH and _links_outside(os.path.join(dirpath, d), inside)
        )
        # A folder with an input file's name (an archive unpacked into `metrics.jsonl/`, a path
        # mistyped by a script): searched like any folder, and said, since the file the user meant
        # is not there.
        passed_over.extend(
            PassedOver(
                str(input_path(os.path.join(dirpath, d))),
                "a folder named like an input file: its files are searched, it is not read as one",
            )
            for d in sorted(dirnames)
            if d in INPUT_FILE_NAMES and depth < MAX_DEPTH
        )
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and depth < MAX_DEPTH)
        found.extend(input_path(os.path.join(dirpath, f)) for f in sorted(filenames))
    return found


def _links_outside(path: str, root: str) -> bool:
    """Whether `path` is a symbolic link to a folder that is not under `root` (a real path)."""
    if not os.path.islink(path):
        return False
    target = os.path.realpath(path)
    return os.path.commonpath([target, root]) != root


def _plain_copy_beside(path: Path) -> bool:
    """Whether `path` is `X.gz` with a regular file `X` in the same folder."""
    return path.name.endswith(".gz") and path.with_name(path.name.removesuffix(".gz")).is_file()


def discover(paths: list[str | os.PathLike[str]]) -> Discovered:
    """Classify every file under the given directories and files."""
    result = Discovered()
    for raw in paths:
        path = input_path(raw)
        if not path.exists():
            result.missing.append(f"{path} (a broken symbolic link)" if path.is_symlink() else str(path))
            continue
        candidates = _walk(path, result.passed_over) if path.is_dir() else [path]
        for candidate in candidates:
            if not candidate.is_file():
                # Reading a FIFO would block; a dangling link is a file that went away.
                reason = (
                    "broken symbolic link" if not candidate.exists() else "not a regular file (FIFO, socket or device)"
                )
                result.passed_over.append(PassedOver(str(candidate), reason))
                continue
            kind, reason = classify(candidate)
            if kind is not None and _plain_copy_beside(candidate):
                # `gzip -k`: the same records twice would be read as twice the run.
                kind, reason = (
                    None,
                    f"a gzipped copy of {candidate.name.removesuffix('.gz')} beside it (that one is read)",
                )
            if kind is None:
                result.passed_over.append(PassedOver(str(candidate), reason))
            else:
                result.add(kind, candidate)
    return result
