"""Find every input trace-doctor can read under the given paths, by name and by content.

A cookbook log directory has fixed names (metrics.jsonl, trace_events.jsonl, ...), but users
rename files (`arithmetic_metrics.jsonl`), drop in profiles and dumps under any name, and convert
traces to `trace.json`. Names decide where they are unambiguous; a short sniff of the content
decides the rest. Every file looked at and not read is reported with the reason.

What each kind is known by is the kind's own declaration (ingest/kinds/); this module walks the
folders, reads the first bytes, sets aside what no kind reads (archives, binaries, HTML, UTF-16 JSON)
and asks the registered kinds about the rest.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from trace_doctor.did_you_mean import missing_path
from trace_doctor.file_names import input_path
from trace_doctor.ingest.kinds.registry import ContentTest, InputKind, Sniffed, registered
from trace_doctor.ingest.reading.gunzip import GZIP_MAGIC, Gunzip
from trace_doctor.ingest.reading.textfile import utf16_as_utf8, utf16_encoding
from trace_doctor.model import PassedOver

SNIFF_BYTES = 256 * 1024
# A text file's last bytes are looked at too: what a user pastes or appends at the end of a long console
# capture (a py-spy dump of the hung process) is past its head.
TAIL_BYTES = 64 * 1024
# Deep enough for a sweep's folder of runs (results/<sweep>/<model>/<run>/wandb/<id>/files/output.log).
MAX_DEPTH = 10
# Directories a run never keeps trace-doctor inputs in, and that can be huge.
SKIP_DIRS = {".git", "__pycache__", "node_modules", ".venv", "venv", "site-packages", ".trace-doctor-cache"}


@dataclass
class Discovered:
    """Inputs by kind, plus what was passed over and why."""

    files: dict[str, list[Path]] = field(default_factory=lambda: {kind.name: [] for kind in registered()})
    passed_over: list[PassedOver] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # What `add` has: a list's membership test made a folder of 20,000 files quadratic (109 s).
        self._added = {(kind, path) for kind, paths in self.files.items() for path in paths}

    def add(self, kind: str, path: Path) -> None:
        if (kind, path) not in self._added:
            self._added.add((kind, path))
            self.files.setdefault(kind, []).append(path)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.files.values())


def _head(path: Path) -> bytes | str:
    """The first bytes of the file (decompressed for .gz), or why they could not be read.

    A gzip file cut short or corrupt midway is classified by what decompresses before the break (its
    reader keeps those records and says where it broke); only one that yields nothing is refused here.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
            if path.suffix == ".gz" and head[:2] == GZIP_MAGIC:
                fh.seek(0)
                gunzip = Gunzip(fh, os.fstat(fh.fileno()).st_size)
                head = gunzip.read(SNIFF_BYTES)
                if not head and gunzip.broken is not None:
                    return f"corrupt gzip: {gunzip.broken.problem()}"
    except OSError as exc:
        return f"cannot read file: {exc.strerror or exc}"
    return head


def _tail(path: Path) -> bytes:
    """The last bytes of a text file longer than its head (none of a gzipped one: its end is only reached by
    decompressing all of it); b"" when it is no longer, or cannot be read."""
    if path.suffix == ".gz":
        return b""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size <= SNIFF_BYTES:
                return b""
            fh.seek(max(SNIFF_BYTES, size - TAIL_BYTES))
            return fh.read(TAIL_BYTES)
    except OSError:
        return b""


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


def _input_file_names() -> frozenset[str]:
    """The names inputs are known by exactly (a folder named so is said, not silently searched)."""
    return frozenset(name for kind in registered() for name in kind.file_names)


def _by_name(name: str, kinds: list[InputKind]) -> tuple[InputKind | None, bool]:
    """The kind `name` is known by, and whether as the gzipped form of a name its parser also reads gzipped."""
    plain = name.removesuffix(".gz")
    for kind in kinds:
        if kind.known_by_name(name):
            return kind, False
        if kind.reads_gzip and plain != name and kind.known_by_name(plain):
            return kind, True
    return None, False


def _by_content(sniffed: Sniffed, tests: list[tuple[ContentTest, InputKind]]) -> str | None:
    """The first kind whose test of this shape takes the file (by rank, fallbacks last)."""
    for test, kind in sorted(tests, key=lambda pair: (pair[0].fallback, pair[0].rank, pair[1].order)):
        if test.test(sniffed):
            return kind.name
    return None


def _refusal(shape: str, tests: list[tuple[ContentTest, InputKind]]) -> str:
    """Why a file of `shape` that no kind took is not read: what it would have had to be."""
    ranked = sorted(tests, key=lambda pair: (not pair[0].fallback, pair[0].rank, pair[1].order))
    nouns = [test.noun for test, _ in ranked if test.noun]
    label = "JSONL" if shape == "jsonl" else "JSON"
    if len(nouns) == 2:
        return f"{label} that is neither {nouns[0]} nor {nouns[1]}"
    listed = f"{', '.join(nouns[:-1])} or {nouns[-1]}" if len(nouns) > 1 else "".join(nouns)
    return f"{label} that is not {listed}"


def classify(path: Path) -> tuple[str | None, str]:
    """Kind of one file, or None with the reason it is not an input."""
    name = path.name
    kinds = registered()
    kind, gzipped = _by_name(name, kinds)
    if kind is not None:
        # The line readers read gzip wherever they find it: a log folder gzipped file by file for
        # sharing (`gzip -r`) keeps its files' kinds. A stream that does not even start is said here,
        # as for any `.gz` (one that breaks later is read up to the break, with a warning).
        head = _head(path) if gzipped else b""
        return (None, head) if isinstance(head, str) else (kind.name, "")
    head = _head(path)
    if isinstance(head, str):
        return None, head
    if not head.strip():
        return None, "empty file"
    if name.endswith(".html") or name.endswith(".htm"):
        return None, "HTML (timing_gantt/logtree pages are summaries of inputs read elsewhere)"
    if utf16_encoding(head) and re.search(r"\.jsonl?(\.gz)?$", name):
        return None, "UTF-16 JSON: the JSON readers take UTF-8 (convert it: iconv -f UTF-16 -t UTF-8)"
    suffix = path.suffix
    for shape, endings in (("jsonl", (".jsonl", ".jsonl.gz")), ("json", (".json", ".json.gz"))):
        if name.endswith(endings):
            tests = [(test, kind) for kind in kinds for test in kind.content if test.shape == shape]
            first_line = _first_line(head) if shape == "jsonl" else b""
            sniffed = Sniffed(name, suffix, head, first_line=first_line, document=head.lstrip())
            # A JSONL input's lines are JSON objects; a JSON input is one document.
            if shape == "jsonl" and not first_line.startswith(b"{"):
                found = None
            else:
                found = _by_content(sniffed, tests)
            return (found, "") if found else (None, _refusal(shape, tests))
    archive = _archive_kind(head)
    if archive:
        # Runs are shared as archives; nothing here is read from inside one (no extraction of
        # untrusted archives behind the user's back), but the user learns what to do.
        todo = "decompress it" if archive.endswith("compressed file") else "unpack it"
        return None, f"{archive}: {todo} and analyze what it holds"
    head = utf16_as_utf8(head)  # a UTF-16 log (PowerShell's redirect) is text, classified as its UTF-8
    if b"\x00" in head[:4096]:
        return None, "binary file"
    tests = [(test, kind) for kind in kinds for test in kind.content if test.shape == "text"]
    found = _by_content(Sniffed(name, suffix, head, tail=_tail(path)), tests)
    return (found, "") if found else (None, "not a recognised input")


def _walk(root: Path, passed_over: list[PassedOver]) -> list[Path]:
    found: list[Path] = []
    root_depth = len(root.parts)
    inside = os.path.realpath(root)
    input_names = _input_file_names()

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
            if d in input_names and depth < MAX_DEPTH
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
            result.missing.append(missing_path(path))
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
