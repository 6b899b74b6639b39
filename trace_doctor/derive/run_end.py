"""Where a run stopped and what was in flight when it did, from every source that records it.

Readings, not judgements: the last step logged against the planned length, the trace spans left
open (a B with no E), the `Starting X` log phases with no `X took`, the errors a log ends with,
the last asyncio task dump and thread-stack block of each label and how long each had looked the
same, and the SDK thread's last signs of life (its loop's task dumps, heartbeat warnings, GIL-monitor
lines). rules/checks/run_stopped.py decides from these what kind of stop it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from trace_doctor.derive.log_signals import LogLine, fields_of, gil_monitor_lines, heartbeat_episodes, heartbeat_lines
from trace_doctor.derive.progress import Plan, run_plan
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.ingest.reading.gunzip import GzipBreak
from trace_doctor.ingest.reading.jsonl import TRUNCATED_LAST_LINE
from trace_doctor.knowledge.tinker import TINKER_HOST

METRICS_FILE = "metrics.jsonl"
LOG_FILE = "logs.log"
# Exceptions that end a run on purpose (Ctrl-C, a cancelled task), not a crash.
INTERRUPT_TYPES = ("KeyboardInterrupt", "CancelledError", "SystemExit")
# Open spans listed at each end of a track's stack (the outermost and the innermost ones).
OPEN_SPANS_LISTED = 20
# Tasks a diagnostic tool adds to the loop it dumps: never what the run was waiting on.
DUMPER_TASK = re.compile(r"^periodic-task-dump")
COROUTINE_NAME = re.compile(r"<coroutine object (?P<name>[\w.<>]+)")
# Where a stack frame's file lives: the interpreter's own library (asyncio, selectors, re, threading)
# is never the place a run is stuck in; the innermost frame outside it is.
# py-spy shows the library's files relative to it (`threading.py`, `asyncio/base_events.py`).
STDLIB_FILE = re.compile(
    r"/lib/python3\.\d+/(?!site-packages/)"
    r"|^(?:asyncio|concurrent|multiprocessing)/|^(?:threading|selectors|queue|socket|ssl|subprocess)\.py$"
)
# The log lines a launch writes as it starts (log_kinds: process start, the SDK's session, the plan line).
LAUNCH_KINDS = ("restart", "session", "plan")
# Frames of an event loop idling in select/poll: the thread is awaiting, not running code.
IDLE_LOOP_FUNCTIONS = ("select", "poll", "_run_once", "run_forever")


@dataclass(frozen=True)
class OpenSpan:
    """A trace span begun and never ended: what a thread was inside when the trace stops."""

    track: str
    name: str
    depth: int
    step: int | None
    open_s: float  # from its B to the last event of the trace's last launch
    # The loop's own span (`main`, `do_sync_training`, `training_loop`): begun before the run's first step
    # ended and tied to no step, it is open whenever the process is anywhere in the loop, between steps too.
    encloses_steps: bool = False
    # Its step's metrics row was written, so the step finished: the trace writer lost its E event (its flush
    # loop drops the last batch at exit, FORMATS.md 2), nothing was in flight.
    step_logged: bool = False

    @property
    def in_step(self) -> bool:
        """Whether it says the files end inside a step (neither the loop's own span nor a lost E)."""
        return not (self.encloses_steps or self.step_logged)

    def to_dict(self) -> dict[str, Any]:
        return {
            "track": self.track,
            "name": self.name,
            "depth": self.depth,
            "step": self.step,
            "open_s": round(self.open_s, 6),
            **({"encloses_steps": True} if self.encloses_steps else {}),
            **({"step_logged": True} if self.step_logged else {}),
        }


@dataclass(frozen=True)
class LogLineRef:
    """A log line cited as evidence."""

    source: str
    line: int | None
    text: str
    fields: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.source, "line": self.line, "text": self.text[:240]}


@dataclass(frozen=True)
class DumpState:
    """The last task dump or stack block of one label (`main`, `holder`) and how long it had held."""

    kind: str  # "tasks" | "stacks"
    label: str
    at: str  # timestamp of the last dump
    what: tuple[str, ...]  # pending coroutines, or the stack's innermost frames (innermost last)
    held_s: float  # from the first dump identical to the last one to the last one
    held_dumps: int
    idle: bool = False  # stacks: the thread is idle in its event loop (awaiting)
    source: str = ""
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "label": self.label,
            "at": self.at,
            "what": list(self.what),
            "held_s": round(self.held_s, 3),
            "held_dumps": self.held_dumps,
            "idle": self.idle,
            "file": self.source,
            "line": self.line,
        }


@dataclass(frozen=True)
class RunEnd:
    """Where the run's last launch stopped, and everything in flight then."""

    segment: int | None
    last_step: int | None  # the last step a metrics row was written for
    plan: Plan
    final_checkpoint: bool
    open_spans: tuple[OpenSpan, ...]
    open_phases: tuple[LogLineRef, ...]  # `Starting X` with no `X took`, outermost first
    last_phase: LogLineRef | None  # the last `took`/`Starting` line of the log
    tail_events: tuple[LogLineRef, ...]  # lines of interest after it that are not errors (retries, warnings)
    trailing_errors: tuple[LogLineRef, ...]  # errors after the log's last sign of progress
    exceptions: tuple[LogLineRef, ...]  # traceback final lines among them
    task_dumps: tuple[DumpState, ...]
    stacks: tuple[DumpState, ...]
    heartbeat_failures: tuple[LogLineRef, ...]  # trailing `Session heartbeat failed` lines
    gil_monitor: tuple[LogLineRef, ...]
    log_silence_s: float | None  # timestamped logs: last progress line to the last line
    # A live run judged stalled by the watch: the silence it saw, the process still followed (RunMeta).
    watched_stall_s: float | None = None
    # A terminal's report that the process was SIGKILLed (`Killed`, the OOM killer, a scheduler's cancel)
    # after the log's last sign of progress.
    kill_lines: tuple[LogLineRef, ...] = ()
    # Open spans between a track's outermost and innermost listed ones (a B event repeated millions of
    # times), and the latest step among those in a step.
    unlisted_open_spans: int = 0
    unlisted_open_step: int | None = None
    # The latest checkpoint's batch when it lies past the last row logged (the metrics file ends before the
    # run did: copied while the run went on, or its last rows lost). A checkpoint named for the batch after
    # the last row is the cookbook's own order (it saves before the step of its number), not a gap.
    checkpoint_past_rows: int | None = None
    # How long the SDK's heartbeat warnings after the log's last phase line went on: one outage's warnings
    # repeat with a growing `failed for N seconds`, so the process was alive at least the growth between the
    # first and the last of them past that line (FORMATS.md 5.4).
    heartbeat_alive_s: float | None = None
    # A console's progress bar that never closed, after the log's last phase line (the `Sampling batch N` bar
    # of the step in flight): what the run was doing when its output ended.
    open_bar: LogLineRef | None = None
    # metrics.jsonl's last line cut mid-write (no newline, not JSON; FORMATS.md 1.2): the process stopped while
    # it appended the next step's row, or the file was copied mid-write.
    metrics_cut: LogLineRef | None = None
    # The trainer's own last line (`Training completed successfully`) in the last launch: it ended normally.
    completed_line: LogLineRef | None = None
    # Traces whose gzip stream broke before its end (a copy cut short, a corrupt block): what they leave open is
    # where the copy broke, not what the run was inside, so no span of theirs is read as in flight.
    broken_traces: tuple[str, ...] = ()
    # Log files with lines of which none is a record (`logger:line [LEVEL] message`, Python's default layout; a user's
    # own format, `%(asctime)s %(levelname)s %(name)s: %(message)s`): their phases, plan and errors were not read.
    unread_logs: tuple[str, ...] = ()
    # A stack dump of the live process after the log's last phase line (py-spy's, faulthandler's watchdog): the
    # process was there, stuck where its main thread's frames say, when the dump was taken.
    live_stack: LogLineRef | None = None
    # The SDK's own lines of a wait on the service that end a log after its last phase line: the service pausing
    # training or sampling (queue_state_logger, FORMATS.md 5.4), the client retrying a request to it (a 500, a
    # 429). The process was there, waiting on the service, when its output ended.
    service_waits: tuple[LogLineRef, ...] = ()
    # The last launch's first start-up line (`Command line invocation:`, `Logging to:`, the SDK's session, the
    # plan line): the run was launched, whether or not it logged a step.
    launch_line: LogLineRef | None = None

    @property
    def live_main_frames(self) -> tuple[str, ...]:
        """The live stack dump's main thread's frames, innermost first: py-spy's `MainThread`, else the thread whose
        outermost frame is the script's `<module>` (faulthandler names no thread)."""
        threads = self.live_stack.fields.get("threads") if self.live_stack is not None else None
        if not isinstance(threads, list):
            return ()
        frames = [t.get("frames") or [] for t in threads if isinstance(t, dict)]
        named = [f for t, f in zip(threads, frames, strict=True) if t.get("name") == "MainThread"]
        script = [f for f in frames if f and str(f[-1]).startswith("<module> ")]
        chosen = (named or script or [[]])[0]
        return tuple(str(f) for f in chosen)

    @property
    def in_step_spans(self) -> tuple[OpenSpan, ...]:
        """The open spans that say a step was in flight (OpenSpan.in_step)."""
        return tuple(s for s in self.open_spans if s.in_step)

    @property
    def stopped_step(self) -> int | None:
        """The step the run stopped in: the latest step an open span belongs to, else the one after the
        last step logged (its row was never written), or a checkpoint's batch past it. A pipelined loop may
        be inside two steps at once."""
        open_steps = [s.step for s in self.in_step_spans if s.step is not None]
        open_steps += [self.unlisted_open_step] if self.unlisted_open_step is not None else []
        logged_next = None if self.last_step is None else self.last_step + 1
        if logged_next is not None and self.checkpoint_past_rows is not None and not self.left_open:
            # Files that end with nothing in flight and a checkpoint past their rows: the run got at least as
            # far as that checkpoint (the rows after it were not kept). A loop still inside a step is not
            # moved: a pipelined loop saves ahead of the rows it has logged.
            logged_next = max(logged_next, self.checkpoint_past_rows)
        if open_steps:
            return max([*open_steps, *([logged_next] if logged_next is not None else [])])
        if logged_next is None:
            return 0 if self.left_open or self.last_phase is not None else None
        return logged_next

    @property
    def reached_plan(self) -> bool:
        # An upper bound reached is reached too: the loop never runs past max_steps.
        p = self.plan
        return p.steps is not None and self.last_step is not None and self.last_step + 1 >= p.steps

    @property
    def left_open(self) -> bool:
        """Whether the files end inside a step: spans open in a step, or open log phases. The loop's own
        spans and the lost E events of logged steps do not count (OpenSpan.in_step). A progress bar left
        unfinished counts (open_bar)."""
        return bool(self.in_step_spans or self.open_phases or self.open_bar is not None)

    @property
    def in_wrap_up(self) -> bool:
        """Every planned step logged, yet the files end inside the wrap-up after them (the final eval, the final
        checkpoint) with no final checkpoint saved: the training is done, the run is not."""
        return self.reached_plan and self.left_open and not self.final_checkpoint

    @property
    def ended_normally(self) -> bool:
        """Whether the run ended on its own: its planned steps logged (and not stopped in the wrap-up), the
        trainer's completion line with no exception after it, or its final checkpoint with nothing in flight.
        run-stopped passes such a run; the watch ends on it."""
        return (
            (self.reached_plan and not self.in_wrap_up)
            or (self.completed_line is not None and not self.exceptions)
            or (self.final_checkpoint and not self.left_open)
        )

    @property
    def cut_off(self) -> bool:
        """Whether the files end with the run cut off mid-work: inside a step (left_open), after a terminal's
        kill report, or inside the metrics row it was appending."""
        return self.left_open or bool(self.kill_lines) or self.metrics_cut is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "segment": self.segment,
            "last_step": self.last_step,
            "stopped_step": self.stopped_step,
            "plan": self.plan.to_dict(),
            "final_checkpoint": self.final_checkpoint,
            "open_spans": [s.to_dict() for s in self.open_spans],
            **({"unlisted_open_spans": self.unlisted_open_spans} if self.unlisted_open_spans else {}),
            "open_phases": [p.to_dict() for p in self.open_phases],
            "last_phase": self.last_phase.to_dict() if self.last_phase is not None else None,
            "tail_events": [t.to_dict() for t in self.tail_events[-5:]],
            "trailing_errors": [e.to_dict() for e in self.trailing_errors[:10]],
            "task_dumps": [d.to_dict() for d in self.task_dumps],
            "stacks": [d.to_dict() for d in self.stacks],
            "heartbeat_failures": [h.to_dict() for h in self.heartbeat_failures[-5:]],
            "gil_monitor_lines": len(self.gil_monitor),
            "log_silence_s": self.log_silence_s,
            **({"watched_stall_s": round(self.watched_stall_s, 3)} if self.watched_stall_s is not None else {}),
            **({"kill_lines": [k.to_dict() for k in self.kill_lines[-3:]]} if self.kill_lines else {}),
            **({"checkpoint_past_rows": self.checkpoint_past_rows} if self.checkpoint_past_rows is not None else {}),
            **({"open_bar": self.open_bar.to_dict()} if self.open_bar is not None else {}),
            **({"metrics_cut": self.metrics_cut.to_dict()} if self.metrics_cut is not None else {}),
            **({"completed_line": self.completed_line.to_dict()} if self.completed_line is not None else {}),
            **({"unread_logs": list(self.unread_logs)} if self.unread_logs else {}),
            **({"broken_traces": list(self.broken_traces)} if self.broken_traces else {}),
            **({"heartbeat_alive_s": round(self.heartbeat_alive_s, 3)} if self.heartbeat_alive_s is not None else {}),
            **({"live_stack": self.live_stack.to_dict()} if self.live_stack is not None else {}),
            **({"service_waits": [w.to_dict() for w in self.service_waits[-3:]]} if self.service_waits else {}),
        }


def _last_segment(frame: pl.DataFrame) -> pl.DataFrame:
    if frame.is_empty() or "segment" not in frame.columns:
        return frame
    last = frame["segment"].drop_nulls().max()
    return frame if last is None else frame.filter(pl.col("segment") == last)


# What the open spans are read with: the only columns taken from the spans table.
OPEN_SPAN_COLUMNS = ["name", "track", "depth", "step", "segment", "start_us", "end_us", "closed"]


def _segment_ends(run: Any) -> pl.DataFrame:
    """Per segment (launch), the latest time a span reached (`reached`) and when its first stepped span
    ended (`first_end`): combined from each part's, so a grown run's earlier parts are not read again."""

    def ends(spans: pl.LazyFrame) -> pl.LazyFrame:
        stepped = pl.col("closed").fill_null(True) & pl.col("step").is_not_null()
        return spans.group_by("segment").agg(
            pl.max_horizontal("start_us", "end_us").max().alias("reached"),
            pl.col("end_us").filter(stepped).min().alias("first_end"),
        )

    return run.spans_combined(
        ("run-end-segments",),
        ends,
        lambda found: found.group_by("segment").agg(pl.col("reached").max(), pl.col("first_end").min()),
    )


def _last_steps(run: Any) -> pl.DataFrame:
    """Per segment, track and name, the latest step of a closed span (`step`): combined from each part's,
    so a grown run's earlier parts are not read again."""

    def latest(spans: pl.LazyFrame) -> pl.LazyFrame:
        stepped = spans.filter(pl.col("closed").fill_null(True) & pl.col("step").is_not_null())
        return stepped.group_by("segment", "track", "name").agg(pl.col("step").max())

    return run.spans_combined(
        ("run-end-last-steps",),
        latest,
        lambda found: found.group_by("segment", "track", "name").agg(pl.col("step").max()),
    )


def _open_spans(run: Any, last_step: int | None) -> tuple[tuple[OpenSpan, ...], int, int | None]:
    """The last segment's spans left open (a B with no E): each track's outermost and innermost
    OPEN_SPANS_LISTED, how many are not listed, and the latest step among those of them in a step. Read
    with filtered scans and column expressions: the spans of a long run stay on disk, and a trace that
    stops inside millions of open spans (one B event repeated) holds them as columns, never as objects."""
    if run.height("spans") == 0:
        return (), 0, None
    segments = _segment_ends(run)
    known = segments.filter(pl.col("segment").is_not_null())
    last = known.get_column("segment").max() if known.height else None
    in_last = pl.col("segment") == last if last is not None else pl.lit(True)
    closed = pl.col("closed").fill_null(True)
    open_rows = run.spans_where(in_last & ~closed, OPEN_SPAN_COLUMNS).sort("track", "depth", "start_us")
    if open_rows.is_empty():
        return (), 0, None
    ends = segments.filter(pl.col("segment") == last) if last is not None else segments
    trace_end = float(ends.get_column("reached").max())
    # The cookbook writes `step` on a span's E event only: an open span's step is the one after the
    # last closed span of its name on its track.
    keys = open_rows.select("track", "name").unique()
    next_of = (
        _last_steps(run)
        .filter(in_last)
        .join(keys, on=["track", "name"], how="semi", nulls_equal=True)
        .select("track", "name", (pl.col("step") + 1).alias("_next"))
    )
    # When the run's first step ended: a span with no step begun before it is the loop around the steps.
    first_end = ends.get_column("first_end").min()
    # A span inside an open span of a known step is part of that step: an eval or a checkpoint save runs
    # every N steps, so "the one after its last closed span" would name a step long past. Per track
    # (outermost first), the first span with a step of its own or a next one starts the chain; after it,
    # a span without a step of its own takes its enclosing span's.
    own_or_next = pl.coalesce("step", "_next")
    before_chain = own_or_next.is_not_null().cast(pl.Int64).cum_sum().shift(1, fill_value=0).over("track") == 0
    rows = (
        open_rows.join(next_of, on=["track", "name"], how="left", nulls_equal=True, maintain_order="left")
        .with_columns(pl.when(before_chain).then(own_or_next).otherwise(pl.col("step")).alias("_chain"))
        .with_columns(
            pl.col("_chain").forward_fill().over("track").alias("step"),
            pl.int_range(pl.len()).over("track").alias("_at"),
            pl.len().over("track").alias("_of"),
        )
        .with_columns(
            (
                pl.col("step").is_null() & (pl.col("start_us") < first_end) if first_end is not None else pl.lit(False)
            ).alias("_encloses")
        )
    )
    # Spans of logged steps are lost E events only when nothing is open past them: a span of a later step (or
    # of no known step) says the run was inside a step, and then a span whose step was guessed from its last
    # closed one (an async rollout worker's) is in flight too.
    past_logged = pl.col("step").is_null() | pl.lit(last_step is None) | (pl.col("step") > (last_step or 0))
    beyond = rows.filter(~pl.col("_encloses") & past_logged).height > 0
    step_logged = not beyond and last_step is not None
    listed = (pl.col("_at") < OPEN_SPANS_LISTED) | (pl.col("_at") >= pl.col("_of") - OPEN_SPANS_LISTED)
    found = tuple(
        OpenSpan(
            str(track),
            str(name),
            int(depth or 0),
            step,
            (trace_end - float(start)) / 1e6,
            encloses_steps=bool(encloses),
            step_logged=step_logged and step is not None,
        )
        for track, name, depth, step, start, encloses in rows.filter(listed)
        .select("track", "name", "depth", "step", "start_us", "_encloses")
        .iter_rows()
    )
    unlisted = rows.filter(~listed)
    # Only the unlisted spans that say a step was in flight count toward the step stopped in (OpenSpan.in_step).
    in_step = unlisted.filter(~pl.col("_encloses")) if not step_logged else unlisted.clear()
    latest = in_step.get_column("step").max() if in_step.height else None
    return found, unlisted.height, None if latest is None else int(latest)


def _ref(row: dict[str, Any]) -> LogLineRef:
    text = (row.get("message") or "").strip().splitlines()
    return LogLineRef(
        str(row.get("source") or ""), row.get("line"), text[0] if text else "", fields_of(row.get("fields"))
    )


def _last_launch(events: pl.DataFrame) -> pl.DataFrame:
    """Per source, the events after its last process start (`Command line invocation`, `Logging to:`)."""
    parts = []
    for _, frame in events.sort("source", "line").group_by("source", maintain_order=True):
        starts = frame.with_row_index("_i").filter(pl.col("kind") == "restart")["_i"]
        parts.append(frame.slice(int(starts.max())) if len(starts) else frame)
    return pl.concat(parts) if parts else events


def _log_phases(events: pl.DataFrame) -> tuple[tuple[LogLineRef, ...], LogLineRef | None, float | None]:
    """`timed()` phases still open at the end of the log (a stack of `Starting X` / `X took`), the last
    phase line, and, when lines carry times, the time from the last phase line to the log's last line."""
    phases = events.filter(pl.col("kind") == "took")
    if phases.is_empty():
        return (), None, None
    stack: list[LogLineRef] = []
    last: LogLineRef | None = None
    last_source = phases["source"][-1]
    for row in phases.filter(pl.col("source") == last_source).iter_rows(named=True):
        ref = _ref(row)
        last = ref
        name = ref.fields.get("name")
        if ref.fields.get("phase") == "start":
            stack.append(ref)
        else:
            # A phase ends the innermost open one of its name; phases opened inside it and never
            # ended are dropped with it.
            for i in range(len(stack) - 1, -1, -1):
                if stack[i].fields.get("name") == name:
                    del stack[i:]
                    break
    silence = None
    stamped = events.filter(pl.col("source") == last_source).drop_nulls("timestamp")
    took = stamped.filter(pl.col("kind") == "took")
    if not took.is_empty():
        silence = (stamped["timestamp"].max() - took["timestamp"].max()).total_seconds()
    return tuple(stack), last, silence


def _trailing_errors(events: pl.DataFrame) -> tuple[tuple[LogLineRef, ...], tuple[LogLineRef, ...]]:
    """Errors after each log's last sign of progress (its last phase line), and the traceback final lines
    among them; a file with no phase lines (a console capture) counts its tracebacks only."""
    errors: list[LogLineRef] = []
    for _, frame in events.group_by("source", maintain_order=True):
        progress = frame.filter(pl.col("kind") == "took")
        after = frame if progress.is_empty() else frame.filter(pl.col("line") > progress["line"].max())
        for row in after.filter(pl.col("kind") == "error").iter_rows(named=True):
            ref = _ref(row)
            if progress.is_empty() and "exception_line" not in ref.fields:
                continue
            errors.append(ref)
    exceptions = tuple(e for e in errors if "exception_line" in e.fields)
    return tuple(errors), exceptions


def exception_type(ref: LogLineRef) -> str:
    """The exception class a traceback's final line names (`tinker.BadRequestError` -> BadRequestError)."""
    head = ref.text.split(":", 1)[0].strip()
    return head.rsplit(".", 1)[-1]


def exception_types(ref: LogLineRef) -> tuple[str, ...]:
    """Every exception class of the traceback an error ends with, in the order raised: a chained traceback
    (`During handling of the above exception ...`) names several, a plain one names one."""
    chain = ref.fields.get("exception_chain")
    if isinstance(chain, list) and chain:
        return tuple(str(t).rsplit(".", 1)[-1] for t in chain)
    declared = ref.fields.get("exception_type")
    return (str(declared).rsplit(".", 1)[-1],) if declared else (exception_type(ref),)


def _kill_lines(events: pl.DataFrame, last_phase: LogLineRef | None) -> tuple[LogLineRef, ...]:
    """The shell's or the kernel's kill report after the log's last phase line (any, when it has none)."""
    kills = events.filter(pl.col("kind") == "killed")
    if last_phase is not None:
        kills = kills.filter((pl.col("source") != last_phase.source) | (pl.col("line") > (last_phase.line or 0)))
    return tuple(_ref(row) for row in kills.iter_rows(named=True))


def _held(snapshots: list[tuple[Any, tuple]]) -> tuple[float, int]:
    """How long (s) and over how many dumps the last state had been the same."""
    last_at, last_state = snapshots[-1]
    first_at, count = last_at, 0
    for at, state in reversed(snapshots):
        if state != last_state:
            break
        first_at, count = at, count + 1
    held = (last_at - first_at).total_seconds() if last_at is not None and first_at is not None else 0.0
    return held, count


def _task_states(task_snapshots: pl.DataFrame) -> tuple[DumpState, ...]:
    if task_snapshots.is_empty():
        return ()
    out = []
    frame = task_snapshots.filter(~pl.col("task_name").fill_null("").str.contains(DUMPER_TASK.pattern))
    for (label,), rows in task_snapshots.group_by("label", maintain_order=True):
        rows = frame.filter(pl.col("label") == label)
        snapshots = []
        for (_snapshot,), dump in rows.sort("snapshot").group_by("snapshot", maintain_order=True):
            state = tuple(
                sorted(
                    f"{name}: {_coroutine(coro)}"
                    for name, coro, st in dump.select("task_name", "coroutine", "state").iter_rows()
                    if (st or "pending") == "pending"
                )
            )
            snapshots.append((dump["timestamp"][0], state, dump["source"][0], dump["line"][0]))
        if not snapshots:
            continue
        # In time order across files: a block with no time (a py-spy dump, taken by hand when someone looked at the
        # stuck process) after the timed ones (the watchdog's, written while it ran); in a file, in its order.
        snapshots.sort(key=lambda s: (s[0] is None, s[0] if s[0] is not None else 0))
        held, count = _held([(at, state) for at, state, _, _ in snapshots])
        at, state, source, line = snapshots[-1]
        out.append(DumpState("tasks", str(label), str(at), state, held, count, source=source, line=line))
    return tuple(out)


def _coroutine(text: str | None) -> str:
    found = COROUTINE_NAME.search(text or "")
    return found["name"] if found else (text or "?").split(" at 0x")[0]


def _stack_states(stack_snapshots: pl.DataFrame) -> tuple[DumpState, ...]:
    if stack_snapshots.is_empty():
        return ()
    out = []
    for (label,), rows in stack_snapshots.group_by("label", maintain_order=True):
        snapshots = []
        # Snapshots are numbered within a file: two files' (a watchdog's capture, a py-spy dump beside it) are apart.
        ordered = rows.sort("snapshot", "frame_index")
        for _, block in ordered.group_by(["snapshot", "source"], maintain_order=True):
            frames = [
                (f or "", fn or "?", ln)
                for f, fn, ln, none in block.select("file_path", "function", "line_no", "no_frame").iter_rows()
                if not none
            ]
            idle = bool(frames) and frames[-1][1] in IDLE_LOOP_FUNCTIONS
            own = [fr for fr in frames if not STDLIB_FILE.search(fr[0])]
            # A native frame py-spy read (`--native`) has no line.
            shown = tuple(
                f"{fn} ({f.rsplit('/', 1)[-1]}{'' if ln is None else f':{ln}'})" for f, fn, ln in (own or frames)[-3:]
            )
            snapshots.append((block["timestamp"][0], (shown, idle), block["source"][0], block["line"].min()))
        # In time order across files: a block with no time (a py-spy dump, taken by hand when someone looked at the
        # stuck process) after the timed ones (the watchdog's, written while it ran); in a file, in its order.
        snapshots.sort(key=lambda s: (s[0] is None, s[0] if s[0] is not None else 0))
        held, count = _held([(at, state) for at, state, _, _ in snapshots])
        at, (shown, idle), source, line = snapshots[-1]
        # A py-spy dump carries no time: its block is placed by its file and line alone.
        when = str(at) if at is not None else ""
        out.append(DumpState("stacks", str(label), when, shown, held, count, idle=idle, source=source, line=line))
    return tuple(out)


def _heartbeat_failures(events: pl.DataFrame, last_phase: LogLineRef | None) -> tuple[LogLineRef, ...]:
    """Heartbeat warnings after the log's last phase line (all of them when it has none)."""
    lines = heartbeat_lines(events)
    if last_phase is not None:
        lines = [h for h in lines if h.source != last_phase.source or (h.line or 0) > (last_phase.line or 0)]
    return tuple(LogLineRef(h.source, h.line, h.message.strip().splitlines()[0], dict(h.values)) for h in lines)


def _heartbeat_alive(failures: tuple[LogLineRef, ...]) -> float | None:
    """The longest growth of `failed for N seconds` within one outage among the trailing heartbeat warnings:
    how long the process went on past the last phase line, at least (None with fewer than two of them)."""
    episodes = heartbeat_episodes(
        [
            LogLine(h.source, h.line, h.text, {"seconds": h.fields["seconds"], "session": h.fields.get("session")})
            for h in failures
            if isinstance(h.fields.get("seconds"), int | float)
        ]
    )
    spans = [e[-1].values["seconds"] - e[0].values["seconds"] for e in episodes if len(e) > 1]
    return max(spans) if spans else None


def _metrics_cut(run: Any) -> LogLineRef | None:
    """The live metrics.jsonl's truncated last line, as its ingest warning reports it (a `.pre_resume_` copy's
    is an earlier launch's)."""
    live = {i.path for i in run.inputs if i.kind == "metrics" and Path(i.path).name == METRICS_FILE}
    cut = [w for w in run.warnings if w.path in live and w.problem.startswith(TRUNCATED_LAST_LINE)]
    return LogLineRef(cut[-1].path, cut[-1].line, cut[-1].problem) if cut else None


def _broken_traces(run: Any) -> tuple[str, ...]:
    """The trace files whose gzip stream broke before its end, as their ingest warnings report it."""
    traces = {i.path for i in run.inputs if i.kind == "trace"}
    return tuple(
        sorted({w.path for w in run.warnings if w.path in traces and w.problem.startswith(GzipBreak.BROKE_EARLY)})
    )


def _unread_logs(run: Any) -> tuple[str, ...]:
    """The cookbook logs (`logs.log`) with lines read and no record in its layout among their events."""
    events = run.log_events
    recorded = (
        set(events.filter(pl.col("logger").is_not_null())["source"].to_list())
        if not events.is_empty() and "logger" in events.columns
        else set()
    )
    return tuple(
        i.path
        for i in run.inputs
        if i.kind == "log" and Path(i.path).name == LOG_FILE and i.records > 0 and i.path not in recorded
    )


# Lines that report how a log ended or that the process was alive, not what it was doing: they may follow a wait.
# The log's last timed line (parsers/logs.py) is only where its times end.
END_REPORT_KINDS = ("heartbeat", "gil-monitor", "killed", "version", "live-stack", "last-timed-line")


def _open_bar(events: pl.DataFrame, last_phase: LogLineRef | None) -> LogLineRef | None:
    """The last progress bar of the file the log's phases are in (of any file, when it has none), when it
    comes after the last phase line and stopped short of its total."""
    bars = events.filter(pl.col("kind") == "progress-bar")
    if last_phase is not None:
        bars = bars.filter((pl.col("source") == last_phase.source) & (pl.col("line") > (last_phase.line or 0)))
    if bars.is_empty():
        return None
    bar = _ref(bars.sort("source", "line").row(-1, named=True))
    n, total = bar.fields.get("n"), bar.fields.get("total")
    if not (isinstance(n, int) and isinstance(total, int) and n < total):
        return None
    # A bar closed early (a loop that broke out) with the run going on after it is not the end: only the
    # reports of how the output ended may follow it.
    later = events.filter(
        (pl.col("source") == bar.source)
        & (pl.col("line") > (bar.line or 0))
        & ~pl.col("kind").is_in([*END_REPORT_KINDS, "error"])
    )
    return bar if later.is_empty() else None


def _live_stack(events: pl.DataFrame, last_phase: LogLineRef | None) -> LogLineRef | None:
    """The last live stack dump with no phase line after it in its own file: a dump in a file of its own (py-spy's
    output saved beside the run) is of the process as it sat when the user took it."""
    # A dump that read no thread (a `Timeout (...)!` line alone) says nothing about where the process was.
    dumps = events.filter((pl.col("kind") == "live-stack") & pl.col("fields").str.contains('"frames":["', literal=True))
    if last_phase is not None:
        dumps = dumps.filter((pl.col("source") != last_phase.source) | (pl.col("line") > (last_phase.line or 0)))
    for row in reversed(list(dumps.iter_rows(named=True))):
        later = events.filter(
            (pl.col("source") == row["source"]) & (pl.col("line") > row["line"]) & (pl.col("kind") == "took")
        )
        if later.is_empty():
            return _ref(row)
    return None


def _waits_on_service(row: dict[str, Any]) -> bool:
    """Whether an event is the tinker SDK's own line of a wait on the service: a pause (its templates are the
    SDK's), or a retry of a request to Tinker (not a judge's or another API's client retrying)."""
    if row["kind"] == "paused":
        return True
    if row["kind"] != "request-retry":
        return False
    fields = fields_of(row.get("fields"))
    logger = row.get("logger") or ""
    url = str(fields.get("url") or "")
    return logger.startswith("tinker") or fields.get("service") == "tinker" or TINKER_HOST.match(url) is not None


def _service_waits(events: pl.DataFrame, last_phase: LogLineRef | None) -> tuple[LogLineRef, ...]:
    """The SDK's waits on the service that end a file's events after the log's last phase line (in every file, when
    the log has none): nothing but reports of how it ended follows them."""
    waits: list[LogLineRef] = []
    for (source,), frame in events.group_by("source", maintain_order=True):
        if last_phase is not None and source != last_phase.source:
            continue
        after = frame.filter(pl.col("line") > (last_phase.line or 0)) if last_phase is not None else frame
        trailing: list[LogLineRef] = []
        for row in reversed(list(after.filter(~pl.col("kind").is_in(END_REPORT_KINDS)).iter_rows(named=True))):
            if not _waits_on_service(row):
                break
            trailing.append(_ref(row))
        waits.extend(reversed(trailing))
    return tuple(waits)


def _after_last_phase(events: pl.DataFrame, last_phase: LogLineRef | None) -> tuple[LogLineRef, ...]:
    """Lines of interest after the log's last phase line that are neither errors nor phases (a request
    retry, a warning): the last things the run did."""
    if last_phase is None:
        return ()
    after = events.filter(
        (pl.col("source") == last_phase.source)
        & (pl.col("line") > (last_phase.line or 0))
        & ~pl.col("kind").is_in([*END_REPORT_KINDS, "error", "took", "progress-bar", "completed"])
    )
    return tuple(_ref(row) for row in after.iter_rows(named=True))


def run_end(run: Any) -> RunEnd:
    """Where the last launch of `run` (RunTables) stopped and what was in flight then."""
    every_row = live_training_rows(run.steps)
    rows = _last_segment(every_row)
    # checkpoints.jsonl is appended to by every launch and says which launch wrote a line only by its order:
    # a checkpoint is read against the rows only when the run was launched once.
    one_launch = "segment" not in every_row.columns or every_row.get_column("segment").n_unique() <= 1
    last_step = int(rows["step"].max()) if not rows.is_empty() else None
    segment = int(rows["segment"].max()) if not rows.is_empty() and "segment" in rows.columns else None
    checkpoints = run.checkpoints
    final = False
    if not checkpoints.is_empty():
        named_final = pl.col("name").fill_null("") == "final" if "name" in checkpoints.columns else pl.lit(False)
        flagged = pl.col("final").fill_null(False) if "final" in checkpoints.columns else pl.lit(False)
        final = checkpoints.filter(named_final | flagged).height > 0
    latest_batch = checkpoints.get_column("batch").max() if "batch" in checkpoints.columns else None
    past_rows = (
        int(latest_batch)
        if one_launch and latest_batch is not None and last_step is not None and latest_batch > last_step + 1
        else None
    )
    broken = _broken_traces(run)
    open_spans, unlisted, unlisted_step = _open_spans(run, last_step) if not broken else ((), 0, None)
    events = run.log_events
    if events.is_empty():
        phases, last_phase, silence, errors, exceptions, heartbeats, tail, kills = (), None, None, (), (), (), (), ()
        bar, completed, live, waits, launch = None, None, None, (), None
    else:
        events = _last_launch(events)
        phases, last_phase, silence = _log_phases(events)
        errors, exceptions = _trailing_errors(events)
        heartbeats = _heartbeat_failures(events, last_phase)
        tail = _after_last_phase(events, last_phase)
        kills = _kill_lines(events, last_phase)
        bar = _open_bar(events, last_phase)
        live = _live_stack(events, last_phase)
        waits = _service_waits(events, last_phase)
        started = events.filter(pl.col("kind").is_in(LAUNCH_KINDS)).sort("source", "line")
        launch = _ref(started.row(0, named=True)) if not started.is_empty() else None
        done = events.filter(pl.col("kind") == "completed")
        completed = _ref(done.row(-1, named=True)) if not done.is_empty() else None
    gil = tuple(
        LogLineRef(g.source, g.line, g.message.strip(), dict(g.values)) for g in gil_monitor_lines(run.log_events)
    )
    return RunEnd(
        segment=segment,
        last_step=last_step,
        plan=run_plan(rows, run.meta.config, run.log_events, run.meta.trainer),
        final_checkpoint=final,
        open_spans=open_spans,
        unlisted_open_spans=unlisted,
        unlisted_open_step=unlisted_step,
        checkpoint_past_rows=past_rows,
        open_phases=phases,
        last_phase=last_phase,
        tail_events=tail,
        trailing_errors=errors,
        exceptions=exceptions,
        task_dumps=_task_states(run.task_snapshots),
        stacks=_stack_states(run.stack_snapshots),
        heartbeat_failures=heartbeats,
        # Without a phase line, the warnings cannot be placed after the run's last progress (an outage it
        # recovered from may be among them): no hold is read from them then.
        heartbeat_alive_s=_heartbeat_alive(heartbeats) if last_phase is not None else None,
        gil_monitor=gil,
        log_silence_s=silence,
        watched_stall_s=run.meta.watched_stall_s,
        kill_lines=kills,
        open_bar=bar,
        metrics_cut=_metrics_cut(run),
        completed_line=completed,
        unread_logs=_unread_logs(run),
        broken_traces=broken,
        live_stack=live,
        service_waits=waits,
        launch_line=launch,
    )
