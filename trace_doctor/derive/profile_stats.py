"""Frame aggregations over pyinstrument profiles shared by the profile rules (TD107-TD109).

A profile's frames form a tree (`frame_id` / `parent_id`). Each real frame gets its exclusive time
(its `time_s` minus its children's, where the synthetic `[self]` child counts as the frame's own),
a library category (built-ins inherit their caller's, since pyinstrument files them under
`<built-in>`), and an activity: waiting in the event loop's poll, blocking I/O, awaiting, or CPU.
Trees are walked iteratively so deep profiles never hit the recursion limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import polars as pl

SELF_FRAME = "[self]"
WAIT_FRAMES = frozenset({"[await]", "[out-of-context]"})

# The event loop idling in its selector: `selectors.py select` -> `epoll.poll` / `kqueue.control`.
IDLE_POLL_CALLS = frozenset({"poll", "select", "control", "epoll_wait", "kevent"})
# Built-in calls that block on I/O, sleep or a lock: time in them is waiting, not CPU.
BLOCKING_CALLS = frozenset(
    {
        "read",
        "readinto",
        "readline",
        "recv",
        "recv_into",
        "recvfrom",
        "recvfrom_into",
        "send",
        "sendall",
        "sendto",
        "write",
        "flush",
        "connect",
        "connect_ex",
        "accept",
        "do_handshake",
        "getaddrinfo",
        "gethostbyname",
        "sleep",
        "acquire",
        "wait",
        "join",
        "_wait_for_tstate_lock",
    }
)
SERIALIZATION_FUNCTIONS = frozenset(
    {"model_dump", "model_dump_json", "serialize_sequence_via_list", "to_jsonable_python"}
)
PYDANTIC_SERIALIZATION_FUNCTIONS = frozenset(
    {"__repr__", "__repr_str__", "__repr_args__", "__str__", "dump_python", "dump_json", "to_json"}
)
# Libraries whose main-thread self time is CPU work that starves the event loop and the SDK thread.
CPU_LIBRARIES: dict[str, str] = {
    "numpy": "numpy",
    "torch": "torch (CPU)",
    "torchvision": "torch (CPU)",
    "tokenizers": "tokenizers",
    "transformers": "transformers",
    "re": "regex (re)",
    "sre_parse": "regex (re)",
    "sre_compile": "regex (re)",
    "_sre": "regex (re)",
    "regex": "regex (re)",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic",
}
APPLICATION = "application code"
# Built-in methods named by their C type: their library is known even though their file is not.
BUILTIN_OWNERS = {
    "Pattern": "re",
    "Match": "re",
    "SRE_Pattern": "re",
    "ndarray": "numpy",
    "Tensor": "torch",
    "TensorBase": "torch",
}

_SITE_PACKAGES = re.compile(r"[/\\](?:site|dist)-packages[/\\]([^/\\]+)")
_STDLIB = re.compile(r"[/\\]lib[/\\]python3(?:\.\d+)?[/\\]([^/\\]+)")


@dataclass(frozen=True)
class HotFrame:
    """A frame a reader can find in the profile: where it is and how many seconds it holds."""

    profile: str
    function: str
    file_path: str
    line_no: int | None
    seconds: float
    category: str
    called_from: str | None = None  # for built-ins, which have no file: `function (file:line)` of the caller

    def to_dict(self) -> dict:
        return {
            "profile": self.profile,
            "function": self.function,
            "file_path": self.file_path,
            "line_no": self.line_no,
            "seconds": round(self.seconds, 6),
            "category": self.category,
            "called_from": self.called_from,
        }

    def where(self) -> str:
        """`function at file:line`, or for a built-in `function called from caller (file:line)`."""
        if self.called_from and self.file_path in ("", "<built-in>"):
            return f"{self.function} called from {self.called_from}"
        return f"{self.function} at {self.file_path}:{self.line_no}"


@dataclass
class ProfileBreakdown:
    """Where one profile's wall time went: CPU by category, idle poll, blocking I/O, await, serialization."""

    profile: str
    wall_s: float
    cpu_time_s: float | None
    async_mode: str
    await_frames: int
    idle_poll_s: float = 0.0
    blocking_io_s: float = 0.0
    await_s: float = 0.0
    serialization_s: float = 0.0
    cpu_by_category: dict[str, float] = field(default_factory=dict)
    hot_cpu_frames: list[HotFrame] = field(default_factory=list)
    serialization_frames: list[HotFrame] = field(default_factory=list)
    idle_poll_frames: list[HotFrame] = field(default_factory=list)

    @property
    def runs_event_loop(self) -> bool:
        """Whether this thread drives an asyncio loop (idle polls, awaits, or asyncio frames)."""
        return self.idle_poll_s > 0 or self.await_frames > 0 or "asyncio" in self.cpu_by_category

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu_by_category.values())


def is_synthetic(function: str) -> bool:
    return function.startswith("[") and function.endswith("]")


def _call_name(function: str) -> str:
    """`epoll.poll` -> `poll`; pyinstrument names built-ins by their qualified name."""
    return function.rsplit(".", 1)[-1]


def category_of(file_path: str | None, is_application_code: bool | None) -> str | None:
    """The library a frame's file belongs to, or None for built-ins (they inherit the caller's)."""
    path = file_path or ""
    if not path or path == "<built-in>":
        return None
    if path.startswith("<frozen importlib"):
        return "import system"
    match = _SITE_PACKAGES.search(path)
    if match:
        return match.group(1).removesuffix(".py")
    match = _STDLIB.search(path)
    if match:
        return match.group(1).removesuffix(".py")
    if is_application_code or not path.startswith("<"):
        return APPLICATION
    return "other"


def is_idle_poll(function: str, file_path: str | None) -> bool:
    path = file_path or ""
    name = _call_name(function)
    if path.endswith("selectors.py") and name == "select":
        return True
    return (path in ("", "<built-in>")) and name in IDLE_POLL_CALLS and not is_synthetic(function)


def is_blocking_call(function: str, file_path: str | None) -> bool:
    return (file_path or "") in ("", "<built-in>") and _call_name(function) in BLOCKING_CALLS


def is_serialization(function: str, file_path: str | None) -> bool:
    """Pydantic model_dump / repr, tinker's _compat model_dump, json.dumps / orjson of payloads."""
    path = (file_path or "").replace("\\", "/")
    name = _call_name(function)
    if name in SERIALIZATION_FUNCTIONS:
        return True
    if "pydantic" in path and name in PYDANTIC_SERIALIZATION_FUNCTIONS:
        return True
    if name == "dumps" and ("json" in path or path == "<built-in>") and "pickle" not in path:
        return True
    return False


def wall_times(profiles: pl.DataFrame, frames: pl.DataFrame) -> dict[str, float]:
    """Each profile's wall time: its recorded duration, else its root frames' total time."""
    walls: dict[str, float] = {}
    roots = frames.filter(pl.col("parent_id").is_null()).group_by("profile").agg(pl.col("time_s").sum())
    for name, total in roots.iter_rows():
        walls[name] = float(total or 0.0)
    if not profiles.is_empty() and "duration_s" in profiles.columns:
        for name, duration in profiles.select("profile", "duration_s").iter_rows():
            if duration is not None and duration > 0:
                walls[name] = float(duration)
    return walls


def _profile_meta(profiles: pl.DataFrame) -> dict[str, tuple[float | None, str]]:
    meta: dict[str, tuple[float | None, str]] = {}
    if profiles.is_empty():
        return meta
    for row in profiles.iter_rows(named=True):
        meta[row["profile"]] = (row.get("cpu_time_s"), row.get("async_mode") or "unknown")
    return meta


def breakdown(profiles: pl.DataFrame, frames: pl.DataFrame, *, top: int = 10) -> list[ProfileBreakdown]:
    """One breakdown per profile, sorted by profile name."""
    if frames.is_empty():
        return []
    walls = wall_times(profiles, frames)
    meta = _profile_meta(profiles)
    result = []
    for name in sorted(frames["profile"].unique().drop_nulls().to_list()):
        rows = frames.filter(pl.col("profile") == name).sort("depth", "frame_id").to_dicts()
        cpu_time, async_mode = meta.get(name, (None, "unknown"))
        result.append(_breakdown_one(name, rows, walls.get(name, 0.0), cpu_time, async_mode, top))
    return result


def _breakdown_one(
    name: str, rows: list[dict], wall: float, cpu_time: float | None, async_mode: str, top: int
) -> ProfileBreakdown:
    by_id = {r["frame_id"]: r for r in rows}
    child_time: dict[int, float] = {}
    for r in rows:
        parent = r["parent_id"]
        if parent is not None and r["function"] != SELF_FRAME:
            child_time[parent] = child_time.get(parent, 0.0) + (r["time_s"] or 0.0)

    out = ProfileBreakdown(name, wall, cpu_time, async_mode, await_frames=0)
    category: dict[int, str] = {}
    under_serialization: dict[int, bool] = {}
    under_idle: dict[int, bool] = {}
    cpu_frames: list[HotFrame] = []
    # Rows are sorted by depth, so a parent is always classified before its children.
    for r in rows:
        fid, parent, function = r["frame_id"], r["parent_id"], r["function"] or ""
        inherited = category.get(parent, "other") if parent is not None else "other"
        if is_synthetic(function):
            category[fid] = inherited
            under_serialization[fid] = under_serialization.get(parent, False)
            under_idle[fid] = under_idle.get(parent, False)
            if function in WAIT_FRAMES:
                out.await_frames += 1
                if not under_idle[fid]:
                    out.await_s += r["time_s"] or 0.0
            continue
        own = category_of(r["file_path"], r["is_application_code"])
        if own is None and "." in function:
            own = BUILTIN_OWNERS.get(function.split(".", 1)[0])
        category[fid] = own if own is not None else inherited
        time_s = r["time_s"] or 0.0
        parent_ser = under_serialization.get(parent, False)
        parent_idle = under_idle.get(parent, False)
        ser = is_serialization(function, r["file_path"])
        idle = is_idle_poll(function, r["file_path"])
        if ser and not parent_ser:
            out.serialization_s += time_s
            out.serialization_frames.append(_hot(name, r, time_s, category[fid], by_id))
        if idle and not parent_idle and not parent_ser:
            out.idle_poll_s += time_s
            out.idle_poll_frames.append(_hot(name, r, time_s, category[fid], by_id))
        under_serialization[fid] = parent_ser or ser
        under_idle[fid] = parent_idle or idle
        exclusive = max(0.0, time_s - child_time.get(fid, 0.0))
        if exclusive <= 0 or under_idle[fid] or under_serialization[fid]:
            continue
        if is_blocking_call(function, r["file_path"]):
            out.blocking_io_s += exclusive
            continue
        cat = category[fid]
        out.cpu_by_category[cat] = out.cpu_by_category.get(cat, 0.0) + exclusive
        cpu_frames.append(_hot(name, r, exclusive, cat, by_id))
    out.hot_cpu_frames = sorted(_combine(cpu_frames), key=_hot_key)[:top]
    out.serialization_frames = sorted(out.serialization_frames, key=_hot_key)[:top]
    out.idle_poll_frames = sorted(out.idle_poll_frames, key=_hot_key)[:top]
    return out


def _hot(profile: str, row: dict, seconds: float, category: str, by_id: dict[int, dict]) -> HotFrame:
    caller = None
    if (row["file_path"] or "") in ("", "<built-in>") and row["parent_id"] in by_id:
        parent = by_id[row["parent_id"]]
        caller = f"{parent['function']} ({parent['file_path']}:{parent['line_no']})"
    return HotFrame(profile, row["function"] or "", row["file_path"] or "", row["line_no"], seconds, category, caller)


def _combine(frames: list[HotFrame]) -> list[HotFrame]:
    """Sum the self time of one code location reached through many call paths."""
    totals: dict[tuple, HotFrame] = {}
    for frame in frames:
        key = (frame.function, frame.file_path, frame.line_no, frame.called_from)
        seen = totals.get(key)
        totals[key] = (
            frame
            if seen is None
            else HotFrame(
                seen.profile,
                seen.function,
                seen.file_path,
                seen.line_no,
                seen.seconds + frame.seconds,
                seen.category,
                seen.called_from,
            )
        )
    return list(totals.values())


def _hot_key(frame: HotFrame) -> tuple:
    return (-frame.seconds, frame.function, frame.file_path, frame.line_no or 0)


def cpu_share(item: ProfileBreakdown) -> float:
    """CPU share of wall time, capped by the process CPU time pyinstrument measured when known."""
    if item.wall_s <= 0:
        return 0.0
    share = item.cpu_s / item.wall_s
    if item.cpu_time_s is not None and item.cpu_time_s >= 0:
        share = min(share, item.cpu_time_s / item.wall_s)
    return share


# The SDK's wait for a request's result (`AwaitableConcurrentFuture.result_async` in the guide; `APIFuture.
# result_async`, `_APIFuture._result_async`): time under it in an async-mode profile is time waiting for the server.
RESULT_WAIT_FUNCTIONS = frozenset({"result_async", "_result_async"})


def result_wait_s(frames: pl.DataFrame) -> dict[str, float]:
    """Per profile, the seconds spent under the SDK's result waits (outermost occurrences only)."""
    if frames.is_empty():
        return {}
    out: dict[str, float] = {}
    for (profile,), group in frames.group_by(["profile"], maintain_order=True):
        rows = {r["frame_id"]: r for r in group.to_dicts()}
        total = 0.0
        for row in rows.values():
            if row["function"] not in RESULT_WAIT_FUNCTIONS:
                continue
            parent, nested = rows.get(row["parent_id"]), False
            while parent is not None:
                if parent["function"] in RESULT_WAIT_FUNCTIONS:
                    nested = True
                    break
                parent = rows.get(parent["parent_id"])
            if not nested:
                total += row["time_s"] or 0.0
        out[str(profile)] = total
    return out


def top_categories(values: dict[str, float], n: int = 5) -> list[tuple[str, float]]:
    return sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


# A source line that calls into a CPU library from application code (the C call has no frame).
_CPU_CALL_IN_CODE = re.compile(
    r"\b(np|numpy|torch|scipy|re|regex|tokenizer\w*|json|orjson)(\.\w+)+\(|\.(encode|batch_encode\w*|apply_chat_template)\("
)
# A matrix product written with the operator (`scores = features @ weights.T`): numpy or torch on the CPU, in
# BLAS, which releases the GIL while it runs. A decorator line (`@scope`) starts with the `@` and is not one.
_MATMUL_IN_CODE = re.compile(r"[\w)\]]\s*@\s*[\w(]")


@dataclass(frozen=True)
class StackState:
    """What one thread was doing in one stack-watchdog block, read from its innermost frames."""

    source: str
    snapshot: int
    label: str
    timestamp: object
    line: int | None
    state: str  # serialization | idle-poll | cpu | other
    detail: str  # the library or call that decided the state
    function: str
    file_path: str
    line_no: int | None

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "line": self.line,
            "timestamp": str(self.timestamp) if self.timestamp is not None else None,
            "label": self.label,
            "state": self.state,
            "detail": self.detail,
            "function": self.function,
            "file_path": self.file_path,
            "line_no": self.line_no,
        }


def stack_states(stack_snapshots: pl.DataFrame) -> list[StackState]:
    """Classify every (block, thread) of the stack watchdog; sorted by source, block and label."""
    if stack_snapshots.is_empty():
        return []
    ordered = stack_snapshots.sort("source", "snapshot", "label", "frame_index")
    states = []
    for (source, snapshot, label), group in ordered.group_by(["source", "snapshot", "label"], maintain_order=True):
        frames = [f for f in group.to_dicts() if f.get("function")]
        if not frames:
            continue
        states.append(_classify_stack(source, snapshot, label, frames))
    return states


# Profilers sample from inside the thread they watch; their frames are never the thread's own work.
_TOOLING = re.compile(r"[/\\](pyinstrument|viztracer|yappi|py_spy|aiomonitor)[/\\]")


def _stack_category(path: str | None) -> str:
    """The library a stack frame's file belongs to. py-spy shows an installed package's file relative to
    site-packages (`torch/nn/functional.py`): such a path names a CPU library by its first part."""
    category = category_of(path, None) or "other"
    first, slash, _ = (path or "").partition("/")
    if category == APPLICATION and slash and first in CPU_LIBRARIES:
        return first
    return category


def _classify_stack(source: str, snapshot: int, label: str, frames: list[dict]) -> StackState:
    own = [f for f in frames if not _TOOLING.search(f.get("file_path") or "")]
    frames = own or frames
    inner = frames[-1]
    block_line = min((f["line"] for f in frames if f.get("line") is not None), default=None)

    def state(kind: str, detail: str, frame: dict) -> StackState:
        return StackState(
            source,
            snapshot,
            label,
            frames[0].get("timestamp"),
            block_line,
            kind,
            detail,
            frame["function"],
            frame.get("file_path") or "",
            frame.get("line_no"),
        )

    for frame in reversed(frames):
        if is_serialization(frame["function"], frame.get("file_path")):
            return state("serialization", frame["function"], frame)
    if is_idle_poll(inner["function"], inner.get("file_path")) or (
        _call_name(inner["function"]) in IDLE_POLL_CALLS and "selector" in (inner.get("code") or "")
    ):
        return state("idle-poll", "selectors", inner)
    category = _stack_category(inner.get("file_path"))
    if category in CPU_LIBRARIES:
        return state("cpu", CPU_LIBRARIES[category], inner)
    call = _CPU_CALL_IN_CODE.search(inner.get("code") or "")
    if call:
        return state("cpu", call.group(0).rstrip("("), inner)
    if _MATMUL_IN_CODE.search(inner.get("code") or ""):
        return state("cpu", "matrix product (@, BLAS)", inner)
    return state("other", category, inner)
