"""pyinstrument profiles -> the `frames` and `profiles` tables.

Three on-disk shapes (FORMATS.md 4.1/4.2): the JSON renderer's processed tree (`root_frame`),
the raw session (`.pyisession`, `frame_records` of sampled stacks, merged here into a tree), and
the HTML renderer's session + raw tree (`{"session": ..., "frame_tree": ...}`). Every tree is
walked with an explicit stack, so a 50,000-deep recursion profile is only a memory cost.

Time columns: `time_s` is inclusive. For a real frame `self_time_s` is the time not attributed to
any child plus its `[self]` leaves, so summing `self_time_s` over non-synthetic frames plus the
`[await]`/`[out-of-context]` time gives the root's time. Synthetic rows repeat their own time
(`[self]` in self_time_s, `[await]` in await_time_s): filter on `synthetic` before summing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from trace_doctor.file_names import input_path
from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.reading.input_stream import InputStream
from trace_doctor.ingest.reading.jsonl import CHUNK_BYTES, INT64_MAX, UTF8_BOM, decode_json_text
from trace_doctor.model import FRAMES_SCHEMA, PROFILES_SCHEMA, IngestWarning, InputFile

SELF = "[self]"
AWAIT_FRAMES = frozenset({"[await]", "[out-of-context]"})
SYNTHETIC = AWAIT_FRAMES | {SELF}
THREAD_MARKER = "\x00<thread>\x00"
LIBRARY_PATH_HINTS = ("/site-packages/", "/dist-packages/", "/lib/python3", "\\site-packages\\", "\\Lib\\")


@dataclass
class _Frame:
    """One frame as the walker needs it, whatever the source format."""

    function: str
    file_path: str
    line_no: int | None
    class_name: str | None
    time: float
    await_time: float | None  # None: compute from [await] descendants
    is_app: bool | None  # None: decide from file_path and sys_prefixes
    children: list[Any]


@dataclass
class _Profile:
    """One profile's header fields and its root(s), with a frame adapter for its format."""

    format: str
    target_description: str | None
    start_time: float | None
    duration: float | None
    cpu_time: float | None
    sample_count: int | None
    roots: list[Any]
    adapt: Callable[[Any], _Frame]
    sys_prefixes: tuple[str, ...] = ()


@dataclass
class _Columns:
    """Column lists of the frames table, filled row by row."""

    data: dict[str, list[Any]] = field(default_factory=lambda: {name: [] for name in FRAMES_SCHEMA})

    def __len__(self) -> int:
        return len(self.data["frame_id"])


class _BadFrame(ValueError):
    """A frame object that lacks what every frame must have."""


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _BadFrame(f"'{name}' is {type(value).__name__}, expected a number")
    return float(value)


def _optional_number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _line(value: Any) -> int | None:
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        value = int(value)
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX
    return value if ok else None


def _children(raw: dict[str, Any]) -> list[Any]:
    children = raw.get("children", [])
    if not isinstance(children, list):
        raise _BadFrame(f"'children' is {type(children).__name__}, expected a list")
    return children


def _adapt_renderer_frame(raw: Any) -> _Frame:
    """A JSON-renderer frame: processed, with its own is_application_code and await_time."""
    if not isinstance(raw, dict):
        raise _BadFrame(f"frame is {type(raw).__name__}, expected an object")
    function = raw.get("function")
    if not isinstance(function, str):
        raise _BadFrame("frame has no 'function' string")
    is_app = raw.get("is_application_code")
    class_name = raw.get("class_name")
    return _Frame(
        function=function,
        file_path=raw.get("file_path") if isinstance(raw.get("file_path"), str) else "",
        line_no=_line(raw.get("line_no")),
        class_name=class_name if isinstance(class_name, str) and class_name else None,
        time=_number(raw.get("time"), "time"),
        await_time=_optional_number(raw.get("await_time")),
        is_app=is_app if isinstance(is_app, bool) else None,
        children=_children(raw),
    )


def _split_identifier(identifier: str) -> tuple[str, str, int | None]:
    """`function\\x00file\\x00line` -> parts; a plain `[self]`/`[await]` has no file or line."""
    parts = identifier.split("\x00")
    function = parts[0]
    file_path = parts[1] if len(parts) > 1 else ""
    line_no = _line(parts[2]) if len(parts) > 2 else None
    return function, file_path, line_no


def _adapt_html_frame(raw: Any) -> _Frame:
    """A JSONForHTMLRenderer frame: raw tree, identifier string, attributes `l<line>`/`c<Class>`."""
    if not isinstance(raw, dict) or not isinstance(raw.get("identifier"), str):
        raise _BadFrame("frame has no 'identifier' string")
    function, file_path, line_no = _split_identifier(raw["identifier"])
    attributes = raw.get("attributes") if isinstance(raw.get("attributes"), dict) else {}
    classes = [(v, k[1:]) for k, v in attributes.items() if k.startswith("c") and isinstance(v, (int, float))]
    # A frame can be sampled under several classes (inherited methods); the one seen longest names it.
    class_name = max(classes)[1] if classes else None
    return _Frame(
        function, file_path, line_no, class_name, _number(raw.get("time"), "time"), None, None, _children(raw)
    )


@dataclass
class _TrieNode:
    """A merged stack frame of a .pyisession: the samples' time summed over every stack through it."""

    function: str
    file_path: str
    line_no: int | None
    time: float = 0.0
    class_times: dict[str, float] = field(default_factory=dict)
    children: dict[str, _TrieNode] = field(default_factory=dict)


def _adapt_trie_node(node: Any) -> _Frame:
    class_name = max((t, c) for c, t in node.class_times.items())[1] if node.class_times else None
    # pyinstrument orders children by time, longest first; identifier breaks ties deterministically.
    children = sorted(node.children.items(), key=lambda item: (-item[1].time, item[0]))
    return _Frame(
        node.function, node.file_path, node.line_no, class_name, node.time, None, None, [c for _, c in children]
    )


def _merge_frame_records(records: Any, source: str, warnings: FileWarnings) -> list[_TrieNode]:
    """Merge `[stack, seconds]` samples into a forest keyed by frame identity (attributes aside)."""
    roots: dict[str, _TrieNode] = {}
    bad = 0
    for record in records if isinstance(records, list) else []:
        if not (isinstance(record, list) and len(record) == 2 and isinstance(record[0], list)):
            bad += 1
            continue
        stack, seconds = record
        seconds = _optional_number(seconds)
        if seconds is None or not all(isinstance(info, str) for info in stack):
            bad += 1
            continue
        if stack and THREAD_MARKER in stack[0]:
            stack = stack[1:]
        level = roots
        for info in stack:
            base, *attributes = info.split("\x01")
            node = level.get(base)
            if node is None:
                node = level[base] = _TrieNode(*_split_identifier(base))
            node.time += seconds
            for attribute in attributes:
                if attribute.startswith("c"):
                    node.class_times[attribute[1:]] = node.class_times.get(attribute[1:], 0.0) + seconds
            level = node.children
    if bad:
        warnings.append(IngestWarning(source, None, f"{bad} frame record(s) are not [stack, seconds] pairs; skipped"))
    return sorted(roots.values(), key=lambda n: (-n.time, n.function, n.file_path))


def _description(doc: dict[str, Any]) -> str | None:
    value = doc.get("target_description", doc.get("program"))
    return value if isinstance(value, str) else None


def _prefixes(value: Any) -> tuple[str, ...]:
    return tuple(p for p in value if isinstance(p, str) and p) if isinstance(value, list) else ()


def _profile_of(doc: Any, source: str, warnings: FileWarnings) -> _Profile | None:
    """Recognise one decoded document as a profile of one of the three formats."""
    if not isinstance(doc, dict):
        return None
    if "root_frame" in doc:
        root = doc["root_frame"]
        return _Profile(
            "json",
            _description(doc),
            _optional_number(doc.get("start_time")),
            _optional_number(doc.get("duration")),
            _optional_number(doc.get("cpu_time")),
            _line(doc.get("sample_count")),
            [root] if root is not None else [],
            _adapt_renderer_frame,
        )
    if "frame_records" in doc:
        roots = _merge_frame_records(doc["frame_records"], source, warnings)
        return _Profile(
            "pyisession",
            _description(doc),
            _optional_number(doc.get("start_time")),
            _optional_number(doc.get("duration")),
            _optional_number(doc.get("cpu_time")),
            _line(doc.get("sample_count")),
            list(roots),
            _adapt_trie_node,
            _prefixes(doc.get("sys_prefixes")),
        )
    if isinstance(doc.get("session"), dict) and "frame_tree" in doc:
        session = doc["session"]
        root = doc["frame_tree"]
        return _Profile(
            "html-session",
            _description(session),
            _optional_number(session.get("start_time")),
            _optional_number(session.get("duration")),
            _optional_number(session.get("cpu_time")),
            _line(session.get("sample_count")),
            [root] if root is not None else [],
            _adapt_html_frame,
            _prefixes(session.get("sys_prefixes")),
        )
    return None


def _is_application_code(file_path: str, parent_is_app: bool | None, sys_prefixes: tuple[str, ...]) -> bool:
    """pyinstrument's rule: not synthetic, not `<...>` generated code, not under a sys prefix."""
    if not file_path:
        return False
    if file_path.startswith("<"):
        if file_path.startswith("<ipython-input-"):
            return True
        if file_path in ("<string>", "<stdin>"):
            return bool(parent_is_app)  # exec'd code belongs to whoever exec'd it
        return False
    if sys_prefixes:
        return not any(file_path.startswith(prefix) for prefix in sys_prefixes)
    # Sessions before pyinstrument 5.0 carry no sys_prefixes: fall back to the install layout.
    return not any(hint in file_path for hint in LIBRARY_PATH_HINTS)


def _flatten(profile: _Profile, name: str, out: _Columns, source: str, warnings: FileWarnings) -> tuple[int, int, bool]:
    """Append one profile's frames (pre-order) to `out`; return (kept, skipped, has_await_frames)."""
    first = len(out)
    data = out.data
    times: list[float] = []
    awaits: list[float | None] = []
    parents: list[int | None] = []
    skipped = 0
    problems: dict[str, int] = {}
    has_await = False
    stack: list[tuple[Any, int | None, int]] = [(root, None, 0) for root in reversed(profile.roots)]
    while stack:
        raw, parent, depth = stack.pop()
        try:
            frame = profile.adapt(raw)
        except _BadFrame as exc:
            skipped += 1
            problems[str(exc)] = problems.get(str(exc), 0) + 1
            continue
        local = len(times)
        synthetic = frame.function in SYNTHETIC
        has_await = has_await or frame.function in AWAIT_FRAMES
        if frame.is_app is not None:
            is_app = frame.is_app
        elif synthetic:
            is_app = False
        else:
            parent_app = data["is_application_code"][first + parent] if parent is not None else None
            is_app = _is_application_code(frame.file_path, parent_app, profile.sys_prefixes)
        data["profile"].append(name)
        data["frame_id"].append(local)
        data["parent_id"].append(parent)
        data["depth"].append(depth)
        data["function"].append(frame.function)
        data["file_path"].append(frame.file_path)
        data["line_no"].append(frame.line_no)
        data["class_name"].append(frame.class_name)
        data["time_s"].append(frame.time)
        data["is_application_code"].append(is_app)
        data["synthetic"].append(synthetic)
        times.append(frame.time)
        awaits.append(frame.time if frame.function in AWAIT_FRAMES else (0.0 if synthetic else frame.await_time))
        parents.append(parent)
        for child in reversed(frame.children):
            stack.append((child, local, depth + 1))
    functions = data["function"][first:]
    children_time = [0.0] * len(times)
    self_leaves = [0.0] * len(times)
    derived_await = [0.0] * len(times)
    # Pre-order numbering puts every child after its parent: one reverse pass aggregates upward.
    for local in range(len(times) - 1, -1, -1):
        own_await = awaits[local] if awaits[local] is not None else derived_await[local]
        awaits[local] = own_await
        parent = parents[local]
        if parent is not None:
            children_time[parent] += times[local]
            derived_await[parent] += own_await
            if functions[local] == SELF:
                self_leaves[parent] += times[local]
    for local, function in enumerate(functions):
        if function == SELF:
            self_time = times[local]
        elif function in AWAIT_FRAMES:
            self_time = 0.0
        else:
            self_time = max(0.0, times[local] - children_time[local]) + self_leaves[local]
        data["self_time_s"].append(self_time)
        data["await_time_s"].append(awaits[local])
    for problem, count in sorted(problems.items()):
        warnings.append(IngestWarning(source, None, f"{count} frame(s) skipped with their subtrees: {problem}"))
    return len(times), skipped, has_await


def async_mode_of(profile: _Profile, has_await_frames: bool, frame_count: int) -> str:
    """Whether the profile attributes awaits to coroutines: enabled, disabled or unknown.

    `[await]`/`[out-of-context]` frames exist only in async mode. The CLI (`Program: ...`) has no
    async mode at all. The Python API (`Profile at file:line`) defaults to async_mode="enabled".
    Otherwise a tree with no await frames attributed no awaits: disabled in effect, which is what
    the rules need; with neither frames nor a description there is nothing to judge: unknown.
    """
    description = profile.target_description or ""
    if has_await_frames:
        return "enabled"
    if description.startswith("Program:"):
        return "disabled"
    if description.startswith("Profile at"):
        return "enabled"
    return "disabled" if frame_count else "unknown"


def _decode_documents(data: bytes, source: str, warnings: FileWarnings) -> list[tuple[int | None, Any]]:
    """The JSON document(s) in a profile file, each with its line when there is one per line.

    One document, or one per line when profiles were appended to one file: then a line that
    does not decode is a warning and the other profiles are kept.
    """
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
    try:
        return [(None, orjson.loads(data))]
    except orjson.JSONDecodeError:
        text = data.decode("utf-8", errors="replace")
        try:
            return [(None, decode_json_text(text))]
        except ValueError as exc:
            lines = [(number, line) for number, line in enumerate(text.split("\n"), start=1) if line.strip()]
            if len(lines) < 2 or getattr(exc, "msg", "") != "Extra data":
                raise
    documents: list[tuple[int | None, Any]] = []
    for number, line in lines:
        try:
            documents.append((number, decode_json_text(line)))
        except ValueError as exc:
            problem = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            warnings.append(IngestWarning(source, number, f"line is not a readable profile document: {problem}"))
    return documents


def _read(path: Path, warnings: FileWarnings) -> bytes | None:
    """The file's bytes, gunzipped (up to the decompression cap) when compressed; None if unreadable."""
    try:
        stream = InputStream(path)
    except OSError as exc:
        warnings.add(None, f"cannot read file: {exc.strerror or exc}")
        return None
    with stream:
        blocks = []
        while block := stream.read(CHUNK_BYTES):
            blocks.append(block)
    # Cut short (by the decompression cap, a gzip stream's break or a failing read), one profile
    # document is unreadable, which the decoder will say; of one profile a line, the lines before are kept.
    for problem in stream.problems():
        warnings.add(None, problem)
    return b"".join(blocks) if blocks or stream.error is None else None


def _parse_profile_file(
    path: Path, info: InputFile, columns: _Columns, header_rows: list[dict[str, Any]], log: FileWarnings
) -> None:
    """One profile file's frames into `columns` and its profiles' rows into `header_rows`."""
    source = str(path)
    data = _read(path, log)
    if data is None:
        info.skipped = 1
        return
    if not data.strip():
        log.add(None, "empty profile file")
        return
    before = log.total
    try:
        documents = _decode_documents(data, source, log)
    except ValueError as exc:
        problem = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        log.append(
            IngestWarning(source, None, f"not a readable pyinstrument profile (truncated or not JSON): {problem}")
        )
        info.skipped = 1
        return
    info.skipped += log.total - before
    if len(documents) == 1 and isinstance(documents[0][1], list):
        documents = [(None, doc) for doc in documents[0][1]]
    single = len(documents) == 1
    for index, (line, doc) in enumerate(documents):
        profile = _profile_of(doc, source, log)
        if profile is None:
            where = line if line is not None else (None if single else index + 1)
            log.append(
                IngestWarning(
                    source, where, "JSON is not a pyinstrument profile (no root_frame, frame_records or frame_tree)"
                )
            )
            info.skipped += 1
            continue
        name = source if single else f"{source}#{index}"
        kept, skipped, has_await = _flatten(profile, name, columns, source, log)
        info.records += kept
        info.skipped += skipped
        header_rows.append(
            {
                "profile": name,
                "format": profile.format,
                "async_mode": async_mode_of(profile, has_await, kept),
                "target_description": profile.target_description,
                "start_time": profile.start_time,
                "duration_s": profile.duration,
                "cpu_time_s": profile.cpu_time,
                "sample_count": profile.sample_count,
            }
        )


def parse_profile_files(
    paths: Iterable[Path], warnings: list[IngestWarning]
) -> tuple[pl.DataFrame, pl.DataFrame, list[InputFile]]:
    """Flatten every profile in `paths` into frames and one profiles row per profile."""
    columns = _Columns()
    header_rows: list[dict[str, Any]] = []
    inputs: list[InputFile] = []
    for path in sorted(input_path(p) for p in paths):
        source = str(path)
        info = InputFile("profile", source)
        inputs.append(info)
        log = FileWarnings(source)
        try:
            _parse_profile_file(path, info, columns, header_rows, log)
        finally:
            warnings.extend(log.close())
    frames = pl.DataFrame(columns.data, schema=FRAMES_SCHEMA)
    profiles_table = (
        pl.DataFrame(header_rows, schema=PROFILES_SCHEMA) if header_rows else pl.DataFrame(schema=PROFILES_SCHEMA)
    )
    return frames, profiles_table, inputs
