"""TD115 run-stopped: the run stopped before its planned end, or stopped making progress.

The debug guide's first triage path ("slow steps, hanging sessions"): a user whose run has sat on
`Starting train` for hours asks what it is doing. The rule says where it stopped (step, phase), what
was in flight on each thread (open trace spans, open `timed()` log phases, the last task dump and
stack block), the SDK thread's last sign of life, how long the last state held against the usual step,
how far through the planned steps it got, and what kind of stop it was:

- crashed: a traceback (plain, rich's boxed one, IPython's, loguru's, an exception group's sub-exception) or a
  fatal (non-retryable) error ends the log, decoded when known (its fix is the decoder's; a service-side error
  quotes the session id); a native crash (faulthandler's `Fatal Python error`, with the crashing thread's frames,
  or the shell's `Segmentation fault`) is one too;
- interrupted: KeyboardInterrupt / CancelledError ends it;
- hung on the service: an SDK call in flight for many step times while the SDK thread kept running
  (its loop kept dumping, no heartbeat warning) — escalate with the session id; or the log ends on the SDK's own
  lines of a wait on the service (training or sampling paused by its queue, a Tinker request's retries);
- hung in user code: data loading, the environment or the reward in flight for many step times, the
  SDK thread starved of the GIL or not;
- hung, where unknown: a run `trace-doctor watch` is following wrote nothing for longer than its stall
  bound, and nothing in the files says whether the service or user code holds it;
- a stack dump of the live process after the last phase line (py-spy's, faulthandler's watchdog) is a hang too:
  the process was there; its main thread's innermost own frame says where (the tinker SDK: the service);
- killed: the terminal reports the kill (`Killed`, `Terminated`, the OOM killer, a scheduler's cancel, named by
  its signal or reason), or the metrics row being appended is cut mid-write;
- killed or hung (evidence `kind` "killed", `kill_reported` false: the catalogue's files that end mid-step): the
  files end inside a step (an open span or phase, a console's progress bar left unfinished) and nothing after it
  says what became of the process: killed there (SIGKILL, OOM, a lost node) and a process still sitting there
  (the cookbook logs nothing while a call is in flight; files copied from a live run) read the same, so the
  title and message claim neither; the message names what would tell (the process' state, a stack dump of it,
  the log's modification time against now). A run the watch is following is never this: the watch saw it
  silent while it was still there, so its silence is the hold (`hung`); heartbeat warnings that go on after the
  last phase line are a hold too;
- completed: the planned steps were all logged (and the files do not end inside the wrap-up after them
  with no final checkpoint), a final checkpoint was saved, or the trainer logged its own
  `Training completed successfully`: the rule passes.
"""

from __future__ import annotations

import re

from trace_doctor.derive.run_end import (
    IDLE_LOOP_FUNCTIONS,
    INTERRUPT_TYPES,
    DumpState,
    LogLineRef,
    RunEnd,
    exception_types,
)
from trace_doctor.derive.sessions import session_ids
from trace_doctor.humanize import format_seconds
from trace_doctor.knowledge.errors import SERVICE_SIDE_ERRORS, KnownError, decode_error
from trace_doctor.knowledge.tinker import HEARTBEAT_TASK, SERVICE_WAIT_PHASES, USER_CODE_PHASES
from trace_doctor.model import Finding
from trace_doctor.policy.service import RunStoppedPolicy
from trace_doctor.rules.base import Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext

# A frame (`func (path:line)`) in the interpreter's library (asyncio, threading, selectors), and one in the tinker
# SDK (not the cookbook): where a live stack dump's main thread was.
STDLIB_FRAME = re.compile(
    r"\((?:.*/lib/python3\.\d+/(?!site-packages/))?(?:asyncio|concurrent|threading|selectors)[/.]"
)
TINKER_SDK_FRAME = re.compile(r"\((?:.*/)?tinker/")

EXCEPTION_GROUPS = ("ExceptionGroup", "BaseExceptionGroup")

# Files that end inside a step with nothing after it to say whether the process was killed there or sits there
# still (_kind). Its evidence `kind` is the catalogue's "killed" (files that end mid-step: killed or
# interrupted), with `kill_reported` false; its title and message say it may be a run still stuck there.
STOPPED_OR_HUNG = "stopped or hung"
TITLE_KIND = {STOPPED_OR_HUNG: "killed or hung"}

SEVERITY = {
    "crashed": "error",
    "hung in user code": "error",
    "hung on the service": "warning",
    "hung": "warning",
    "interrupted": "warning",
    "killed": "warning",
    STOPPED_OR_HUNG: "warning",
    "stopped early": "warning",
}
FIX = {
    "crashed": "Fix the error the run ended with (its decoded cause is above), then resume from the last checkpoint.",
    "interrupted": "Nothing failed: the run was stopped on purpose. Resume from the last checkpoint to finish it.",
    "hung on the service": (
        "Nothing in the training loop is waiting on you: check the Tinker status page, then escalate with the "
        "session id and `trace-doctor bundle <log_path> -o escalation.zip`. Resume from the last checkpoint."
    ),
    "hung in user code": (
        "Look at the frame named above: data loading, the environment or the reward never returned. Bound it "
        "(a timeout, a size cap on the input that stalls it), move CPU work off the event loop thread, resume."
    ),
    "hung": (
        "The process is still there: take a stack dump of it now (`py-spy dump --pid PID`), then check the Tinker "
        "status page. Run with the task dump and stack watchdog (skills/debug) so the next hang says where it is."
    ),
    "killed": (
        "Nothing in the files says why: check the machine (dmesg for the OOM killer, the scheduler's logs for a "
        "preemption or time limit). Resume from the last checkpoint; run with the task dump and stack watchdog "
        "(skills/debug) to see a hang next time."
    ),
    STOPPED_OR_HUNG: (
        "Find out whether the process is still there (`ps`, the scheduler's job state). If it is, it is stuck: take "
        "a stack dump of it (`py-spy dump --pid PID`) before you stop it, and run with the task dump and stack "
        "watchdog (skills/debug) so the files say where next time. If it is gone, the machine says why (dmesg for "
        "the OOM killer, the scheduler's logs). Then resume from the last checkpoint."
    ),
    "stopped early": "Check whether the run is still going; if it stopped, the console or the scheduler says why.",
}


# Where a stop with no step is placed when the files record no step at all (a console of the user's own loop: no
# metrics file, no config, no line in the cookbook's record layout): not "before its first step", which they cannot
# say either. A cookbook console with records and no phase line never reached a step: that one is before it.
UNRECORDED_STEP = "at a step the files do not record (no metrics file, config or cookbook log line)"


def _title_where(stopped: int | None, steps_recorded: bool) -> str:
    """Where the run stopped, short, for the title (the message says it whole: _where)."""
    if stopped is not None:
        return f"at step {stopped}"
    return "before its first step" if steps_recorded else UNRECORDED_STEP


def _where(end: RunEnd, steps_recorded: bool = True) -> str:
    """'step 14 of 40 (35%)', with how the plan is known."""
    step = end.stopped_step
    plan = end.plan
    if step is None and plan.steps:
        bound = "at most " if plan.upper_bound else ""
        return (
            f"at step 0 of {bound}{plan.steps} planned, before its first step (from {plan.source}; no metrics row "
            "was written)"
        )
    if step is None:
        return "before its first step" if steps_recorded else UNRECORDED_STEP
    logged = "no metrics row was written" if end.last_step is None else f"the last row logged is step {end.last_step}"
    if plan.steps:
        bound = "at most " if plan.upper_bound else ""
        return (
            f"in step {step} of {bound}{plan.steps} planned ({step / plan.steps:.1%} through, from {plan.source}; "
            f"{logged})"
        )
    return f"in step {step} ({logged}; planned length unknown: {plan.source})"


def _no_shortfall(end: RunEnd) -> str:
    """Why the rows fall short of no plan, for a run that passes."""
    plan = end.plan
    if plan.steps is None:
        return "no planned length to fall short of"
    if end.last_step is None:
        bound = "at most " if plan.upper_bound else ""
        # A log file named alone: no metrics file or config was read to say whether the launch logged a step.
        missing = "no launch in the logs" if end.launch_line is None else "no metrics file or config read"
        return f"no step logged, and {missing} to place a stop in the {bound}{plan.steps} planned ({plan.source})"
    return f"only an upper bound on its length to fall short of ({plan.source}: a shorter dataset ends the loop first)"


def _in_flight(end: RunEnd) -> list[str]:
    """One phrase per source that says what was in flight."""
    out: list[str] = []
    by_track: dict[str, list[str]] = {}
    depth_before: dict[str, int] = {}
    for span in end.open_spans:
        label = span.name + (f" (step {span.step})" if span.step is not None else "")
        unlisted = span.depth - depth_before.get(span.track, span.depth - 1) - 1
        if unlisted > 0 and end.unlisted_open_spans:  # the middle of a stack too deep to list
            by_track[span.track].append(f"… {unlisted:,} more …")
        depth_before[span.track] = span.depth
        by_track.setdefault(span.track, []).append(label)
    stepped_tracks = {span.track for span in end.in_step_spans}
    for track, names in by_track.items():
        if track in stepped_tracks:
            out.append(f"trace [{track}]: inside {' › '.join(names)} (B with no E)")
    loops = sorted({s.name for s in end.open_spans if s.encloses_steps and s.track not in stepped_tracks})
    if loops and not stepped_tracks:
        # Only the loop's own spans are open: the process was between steps (or the trace lost the last E's).
        out.append(f"trace: no step open, only the loop's own span(s) {', '.join(loops)} never ended")
    if end.open_phases:
        first = end.open_phases[0]
        names = " › ".join(str(p.fields.get("name")) for p in end.open_phases)
        out.append(f"log: `Starting {names}` with no `took` ({first.source}:{first.line})")
    elif end.last_phase is not None:
        last = end.last_phase
        out.append(f"log: no phase open, the last phase line is `{last.text[:120]}` ({last.source}:{last.line})")
    if end.open_bar is not None:
        bar = end.open_bar
        out.append(
            f"console: the `{bar.fields.get('desc')}` progress bar stopped at {bar.fields.get('n')}/"
            f"{bar.fields.get('total')} ({bar.source}:{bar.line})"
        )
    if end.service_waits:
        last = end.service_waits[-1]
        waits = len(end.service_waits)
        out.append(
            f"the SDK was waiting on the service when the log ends: {waits} line(s) of it, the last "
            f"`{last.text[:160]}` ({last.source}:{last.line})"
        )
    for ref in end.tail_events[-2:]:
        if ref not in end.service_waits:
            out.append(f"log after it: `{ref.text[:120]}` ({ref.source}:{ref.line})")
    for dump in end.task_dumps:
        requests = [w for w in dump.what if HEARTBEAT_TASK not in w]
        if dump.label != "main" and requests:
            out.append(
                f"task dump [{dump.label}] {dump.at}: {len(requests)} pending "
                f"({', '.join(sorted({w.split(': ', 1)[-1] for w in requests})[:3])})"
            )
    for stack in end.stacks:
        where = "idle in its event loop (awaiting)" if stack.idle else f"in {' → '.join(stack.what)}"
        # A py-spy dump has no time: where it is in the files says which one it was.
        out.append(f"stacks [{stack.label}] {stack.at or f'({stack.source}:{stack.line})'}: {where}")
    if end.live_stack is not None:
        live = end.live_stack
        frames = end.live_main_frames
        where = f"in {' ← '.join(frames[:4])} (innermost first)" if frames else "no main thread's frames read"
        out.append(
            f"{live.fields.get('tool')} dump of the live process, main thread: {where} ({live.source}:{live.line})"
        )
    return out


def _live_stack_where(frames: tuple[str, ...]) -> str | None:
    """Where a live stack dump's main thread was: 'service' inside the tinker SDK (a call's result awaited),
    'user' in any other code of its own; None when idle in its event loop (awaiting something) or unknown."""
    if not frames or frames[0].split(" (", 1)[0] in IDLE_LOOP_FUNCTIONS:
        return None
    innermost = next((f for f in frames if not STDLIB_FRAME.search(f)), frames[0])
    return "service" if TINKER_SDK_FRAME.search(innermost) else "user"


def _held(dump: DumpState | None) -> float:
    return dump.held_s if dump is not None else 0.0


def _label(states: tuple[DumpState, ...], label: str) -> DumpState | None:
    return next((d for d in states if d.label == label), None)


def _stuck(end: RunEnd) -> tuple[float, list[str], str | None]:
    """(How long the last state held, the readings that say so, where the run was stuck: 'user' | 'service')."""
    readings: list[tuple[float, str, str | None]] = []
    main_stack, main_tasks = _label(end.stacks, "main"), _label(end.task_dumps, "main")
    sdk_tasks = [d for d in end.task_dumps if d.label != "main"]
    if main_stack is not None and not main_stack.idle:
        readings.append(
            (
                main_stack.held_s,
                f"[main]'s stack stayed in {main_stack.what[-1]} for {main_stack.held_s:.0f} s "
                f"({main_stack.held_dumps} blocks)",
                "user",
            )
        )
    for dump in sdk_tasks:
        requests = [w for w in dump.what if HEARTBEAT_TASK not in w]
        if requests:
            readings.append(
                (
                    dump.held_s,
                    f"the same {len(requests)} SDK request(s) stayed pending on [{dump.label}] for "
                    f"{dump.held_s:.0f} s ({dump.held_dumps} dumps)",
                    "service",
                )
            )
        if main_tasks is not None and dump.at > main_tasks.at:
            # The main loop stopped dumping while the SDK loop went on: the main thread was blocked.
            from datetime import datetime

            gap = (datetime.fromisoformat(dump.at) - datetime.fromisoformat(main_tasks.at)).total_seconds()
            readings.append(
                (
                    gap,
                    f"[main]'s task dumps stopped at {main_tasks.at} while [{dump.label}] dumped until {dump.at} "
                    f"({gap:.0f} s): the main thread was blocked",
                    "user",
                )
            )
    if end.log_silence_s is not None:
        readings.append((end.log_silence_s, f"{end.log_silence_s:.0f} s of log after the last phase line", None))
    if end.live_stack is not None:
        # A dump taken of the live process: it was there, stuck where its main thread was. faulthandler's watchdog
        # fires once its timer ran out, so the state held at least that long; py-spy's dump says no duration.
        timer = end.live_stack.fields.get("timer_s")
        readings.append(
            (
                float(timer) if isinstance(timer, int | float) else 0.0,
                f"{end.live_stack.fields.get('tool')} dumped the live process's stacks after the last phase line"
                + (f" (its watchdog's {timer} s timer had run out)" if timer else ""),
                _live_stack_where(end.live_main_frames),
            )
        )
    if end.heartbeat_alive_s is not None:
        # The SDK's heartbeat thread kept logging past the last phase line: the process was there, the
        # phase did not end. Where it was held, the open phase says (_where_stuck).
        readings.append(
            (
                end.heartbeat_alive_s,
                f"the SDK's heartbeat warnings after the last phase line went on for {end.heartbeat_alive_s:.0f} s "
                "(the process was alive and the phase did not end)",
                None,
            )
        )
    # Where: the reading that held longest; a state seen in one dump only (held 0 s) says nothing, and the
    # innermost open span or phase answers instead (_where_stuck).
    held_readings = [r for r in readings if r[0] > 0]
    where = max(held_readings, key=lambda r: (r[0], r[2] is not None))[2] if held_readings else None
    if where is None and end.live_stack is not None:
        where = _live_stack_where(end.live_main_frames)
    if where is None and end.service_waits:
        where = "service"  # the SDK's own lines say what the process waited on when its output ended
    if end.watched_stall_s is not None:
        # The watch's own clock: a hold, not a place (the dumps and the open phases say where).
        readings.append(
            (
                end.watched_stall_s,
                f"`trace-doctor watch` saw nothing written for {format_seconds(end.watched_stall_s)} while it followed "
                "the run",
                None,
            )
        )
    if not readings:
        return 0.0, [], where
    held = max(r[0] for r in readings)
    return held, [r[1] for r in readings if r[0] > 0], where


def _where_stuck(end: RunEnd, dumps_say: str | None) -> str | None:
    """'user' or 'service': the dumps' answer, else the innermost open span or log phase."""
    if dumps_say is not None:
        return dumps_say
    names = [s.name for s in end.in_step_spans] + [str(p.fields.get("name")) for p in end.open_phases]
    for name in reversed(names):
        if name in USER_CODE_PHASES:
            return "user"
        if name in SERVICE_WAIT_PHASES:
            return "service"
    return None


def _sdk_life(end: RunEnd) -> tuple[str, bool | None]:
    """The SDK thread's last sign of life, as a sentence, and whether it was starved (None: unknown)."""
    parts = []
    starved: bool | None = None
    sdk_dumps = [d for d in end.task_dumps if d.label != "main"]
    if sdk_dumps:
        last = max(d.at for d in sdk_dumps)
        parts.append(f"its loop dumped its tasks until {last}")
        starved = False
    holder = _label(end.stacks, "holder")
    if holder is not None:
        # Its thread's stack (the watchdog's [holder], py-spy's SDK loop thread): alive there, idle or busy.
        doing = "idle in its event loop" if holder.idle else f"in {' → '.join(holder.what)}"
        parts.append(f"its thread's last stack ({holder.at or f'{holder.source}:{holder.line}'}) was {doing}")
    if end.heartbeat_failures:
        # A heartbeat that fails is a GIL-starved SDK thread or the network (FORMATS.md 5.4): which, the
        # warning does not say, so it does not call the thread starved on its own.
        h = end.heartbeat_failures[-1]
        parts.append(
            f"{len(end.heartbeat_failures)} heartbeat warning(s), the last at {h.source}:{h.line} (a GIL-starved "
            "SDK thread or the network to the service)"
        )
    if end.gil_monitor:
        g = end.gil_monitor[-1]
        parts.append(f"{len(end.gil_monitor)} GIL-monitor line(s), the last at {g.source}:{g.line}")
        starved = True
    if not parts:
        return "no record of the SDK thread (no task dump of its loop, no heartbeat or GIL-monitor line)", None
    return "; ".join(parts), starved


def _decoded(end: RunEnd) -> tuple[LogLineRef, KnownError | None]:
    """The error the log ends with (a traceback's last line first) and what it is, if known."""
    # An exception group only wraps what its tasks raised: the sub-exceptions after it are the cause.
    causes = [e for e in end.exceptions if exception_types(e)[-1] not in EXCEPTION_GROUPS]
    errors = causes or list(end.exceptions) or [e for e in end.trailing_errors if decode_error(e.text) is not None]
    if not errors:
        errors = list(end.trailing_errors)
    first = errors[0]
    raised = _raised(first)
    known = decode_error(first.text)
    return first, known if known is not None or raised is None else decode_error(raised)


def _raised(error: LogLineRef) -> str | None:
    """The final line of the traceback an error record owns (`logger.exception(...)`, an ERROR record with the
    traceback after it), when the record's own message is not that line."""
    kind, message, line = (error.fields.get(k) for k in ("exception_type", "exception_message", "exception_line"))
    if not kind or line is None or line == error.line:
        return None
    return f"{kind}: {message}" if message else str(kind)


def _crash_text(error: LogLineRef, known: KnownError | None) -> str:
    """The error a crash ended with, its decoded cause, and the frames of the thread that crashed when a native
    crash's dump names them (faulthandler, innermost first)."""
    text = f" It ended with `{error.text[:200]}` ({error.source}:{error.line})"
    raised = _raised(error)
    if raised is not None:
        text += f", raising `{raised[:200]}` (line {error.fields.get('exception_line')})"
    text += (f": {known.root_cause}" if known is not None else "") + "."
    frames = error.fields.get("frames")
    if isinstance(frames, list) and frames:
        text += f" The thread that crashed was in {' ← '.join(str(f) for f in frames[:4])} (innermost first)."
    return text


def _interrupted(end: RunEnd) -> bool:
    """Ctrl-C stopped it: a KeyboardInterrupt anywhere in the tracebacks the log ends with (what a task raised
    while asyncio cancelled it during the shutdown follows the interrupt, it did not cause it), or nothing but
    cancellations and exits."""
    types = [t for e in end.exceptions for t in exception_types(e)]
    return "KeyboardInterrupt" in types or all(t in INTERRUPT_TYPES for t in types)


def _interrupt_text(end: RunEnd) -> str:
    """Where the interrupt shows, and what else was raised as the run shut down."""
    interrupts = [e for e in end.exceptions if "KeyboardInterrupt" in exception_types(e)]
    first = interrupts[0] if interrupts else end.exceptions[0]
    # The interrupt's own file: another file's traceback (a console capture of an earlier launch) is not
    # part of this shutdown.
    types = [t for e in end.exceptions if e.source == first.source for t in exception_types(e)]
    after = sorted({t for t in types if t not in INTERRUPT_TYPES})
    text = f"It ended with {' → '.join(types)} ({first.source}:{first.line})"
    if after:
        text += (
            f": the {', '.join(after)} came while the interrupted run shut down (asyncio cancels every task, and "
            "one failed on the way out); fix it if it recurs, it did not stop the run"
        )
    return text + "."


def _telling_kill(lines: tuple[LogLineRef, ...]) -> LogLineRef:
    """The kill report that says most: the last one naming why (the OOM killer's line before the scheduler's cancel
    it caused: slurm cancels a job step once its task was OOM-killed), else the last one."""
    said = [line for line in lines if line.fields.get("why")]
    return (said or list(lines))[-1]


def _kill_report(line: LogLineRef) -> tuple[str, str]:
    """What a terminal's kill report says stopped the process, and the fix that follows from it."""
    why, signal = line.fields.get("why"), line.fields.get("signal")
    if signal == "scheduler":
        if why == "time limit":
            return "the scheduler cancelled the job at its time limit", (
                "Ask the scheduler for a longer time limit (or a shorter run), and resume from the last checkpoint."
            )
        cause = f" ({why})" if why else " (scancel, or an administrator)"
        return (
            f"the scheduler cancelled the job{cause}",
            "Check why the job was cancelled, then resume from the last checkpoint.",
        )
    if why == "out of memory":
        return (
            f"a {signal or 'SIGKILL'} from the OOM killer: the machine or the container ran out of memory",
            "Give the process more memory (the container's limit, a bigger machine) or use less of it (smaller "
            "batches held in memory, fewer parallel environments or rollouts), then resume from the last checkpoint.",
        )
    if why == "time limit":
        return f"a {signal or 'SIGTERM'} at the job's time limit (GNU `timeout`, a scheduler's wall-clock limit)", (
            "Give the job a longer time limit (or make the run shorter), and resume from the last checkpoint."
        )
    if signal in ("SIGTERM", "SIGINT"):
        return (
            f"a {signal}: something asked the process to stop (`kill PID`, a scheduler's preemption or limit, a "
            "container or machine shutting down)",
            f"Find what sent the {signal} (the scheduler's or the machine's logs), then resume from the last "
            "checkpoint.",
        )
    return "a SIGKILL, most often the kernel's OOM killer (dmesg) or a scheduler's limit", FIX["killed"]


def _kind(end: RunEnd, stuck_s: float, threshold_s: float, stuck_where: str | None) -> str:
    if end.exceptions:
        return "interrupted" if _interrupted(end) else "crashed"
    if any(decode_error(e.text) is not None or "non-retryable" in e.text for e in end.trailing_errors):
        return "crashed"
    # A run the watch judged stalled held past the watch's own bound while it was still being followed.
    # A stack dump of the live process after the last phase line: someone saw it sitting there and dumped it.
    # The SDK's lines of a wait on the service end the log: it was there, waiting, unless the terminal then
    # reports a kill.
    waiting = bool(end.service_waits) and not end.kill_lines
    alive = end.watched_stall_s is not None or end.live_stack is not None or waiting
    held = stuck_s >= threshold_s or alive
    if held and stuck_where == "service":
        return "hung on the service"
    if held and stuck_where == "user":
        return "hung in user code"
    if alive:
        return "hung"
    if end.kill_lines or end.metrics_cut is not None:
        # The terminal reports the kill, or the row the process was appending is cut mid-write.
        return "killed"
    if end.cut_off:
        return STOPPED_OR_HUNG
    return "stopped early"


def _confidence(end: RunEnd, kind: str, where_from_dumps: bool = True) -> str:
    """How sure the kind is. A traceback, or the terminal's own kill report, says what happened; a hang is
    sure when dumps or the watch saw the state hold, less when only the log's silence says so; files that
    merely end inside a step may have been copied from a run still going."""
    if kind in ("crashed", "interrupted"):
        # A traceback says it; an exception's name on a line of its own (a bare `KeyboardInterrupt`) less so.
        # The shell's report of a crash signal (`Segmentation fault (core dumped)`) is as sure as a traceback.
        sure = any(e.fields.get("traceback_line") is not None or e.fields.get("signal") for e in end.exceptions)
        return "high" if sure else "medium"
    if kind == "killed":
        return "high" if end.kill_lines else "medium"
    if kind == STOPPED_OR_HUNG:
        # That the files end inside a step is sure; which of the two it is, nothing says.
        return "medium"
    if kind in ("hung on the service", "hung in user code"):
        dumped = any(d.held_dumps > 1 for d in (*end.task_dumps, *end.stacks))
        if not where_from_dumps:
            # Only the open phase's name says where (a dump, a live stack or the SDK's own tasks do not): the
            # watch saw the state hold, not which side held it.
            return "medium"
        return "high" if dumped or end.watched_stall_s is not None else "medium"
    if kind == "hung":
        return "medium"
    # Stopped early: the rows falling short of a known plan is sure (why, and whether the run is still going,
    # is not); with only an upper bound or no plan, the files merely end.
    return "medium" if end.plan.steps is not None and not end.plan.upper_bound else "low"


def check(ctx: RuleContext[RunStoppedPolicy]) -> list[Finding]:
    t = ctx.thresholds
    end: RunEnd = ctx.run_end
    in_wrap_up = end.in_wrap_up
    if end.reached_plan and not in_wrap_up:
        return ctx.passed(f"all {end.plan.steps} planned steps were logged ({end.plan.source})")
    if end.completed_line is not None and not end.exceptions:
        done = end.completed_line
        return ctx.passed(f"the trainer logged `{done.text[:120]}` ({done.source}:{done.line}): it ended on its own")
    if end.final_checkpoint and not end.left_open:
        return ctx.passed("the run saved its final checkpoint and left nothing in flight")
    stopped_short = end.plan.steps is not None and not end.plan.upper_bound and end.last_step is not None
    # Phases ran (the log says so) yet no step was ever logged: it stopped inside its first step. Only
    # in a run folder (config or metrics read): a log file named alone says nothing about the metrics.
    run_folder = ctx.run.has_input("config") or ctx.run.has_input("metrics")
    never_logged = end.last_step is None and end.last_phase is not None and run_folder
    # Launched (its start-up lines logged) with a planned length, and not one step logged: it stopped at step 0
    # of that plan, or was still starting up when the files were copied (the message says both). Even a plan
    # that is only an upper bound (config max_steps) is fallen short of: no dataset is shorter than one step.
    unstarted = end.last_step is None and end.launch_line is not None and end.plan.steps is not None and run_folder
    if not (end.cut_off or end.exceptions or stopped_short or never_logged or unstarted or end.service_waits):
        return ctx.passed(
            f"nothing says the run stopped early: {_no_shortfall(end)}, no span or log phase left open, no error "
            "at the end of the log"
        )
    steps = ctx.step_times
    # A console timeline's step has phase times but no total: no usual step time then.
    median = steps["total_s"].drop_nulls().median() if steps.height and "total_s" in steps.columns else None
    usual = float(median) if median is not None else None
    threshold_s = max(t.min_stuck_s, t.min_stuck_step_times * usual) if usual else t.min_stuck_s
    stuck_s, stuck_readings, dumps_say = _stuck(end)
    where_stuck = _where_stuck(end, dumps_say)
    kind = _kind(end, stuck_s, threshold_s, where_stuck)
    sdk_text, starved = _sdk_life(end)
    flight = _in_flight(end)
    usual_text = f"the usual step takes {usual:.3g} s" if usual else "no usual step time is known"
    # Only a trace, dumps or timestamped log lines say how long the last state held; a console capture with
    # none of them says nothing about it, not that it was short.
    recorded = bool(ctx.run.height("spans") or end.task_dumps or end.stacks)
    timed = recorded or end.log_silence_s is not None
    if kind in ("killed", STOPPED_OR_HUNG) and stuck_s < threshold_s and timed and not recorded:
        # Only the log's own times: they end at its last line, and the cookbook logs nothing while a call is in
        # flight, so a process still sitting there would read the same.
        silence = (
            f"Nothing was logged after it: the log's times end {stuck_s:.0f} s after its last phase line "
            f"({usual_text}); how long the process sat there after its last line, the log cannot say."
        )
    elif kind in ("killed", STOPPED_OR_HUNG) and stuck_s < threshold_s and timed:
        silence = (
            f"Nothing kept going after it: every record ends within {stuck_s:.0f} s of the others ({usual_text}), "
            "too short a hold to call a hang."
        )
    elif stuck_readings:
        silence = (
            f"The last state held at least {stuck_s:.0f} s ({usual_text}"
            + (f"; {stuck_s / usual:.0f}x" if usual else "")
            + f"): {'; '.join(stuck_readings)}."
        )
    else:
        silence = (
            f"How long it sat there is not recorded ({usual_text}): the trace ends at its last event, the logs carry "
            "no times, and a file's modification time is not kept when a run is copied."
        )
    lead = {
        "crashed": "The run crashed",
        "interrupted": "The run was interrupted",
        "hung on the service": "The run hung waiting on the service",
        "hung in user code": "The run hung in user code",
        "hung": "The run stopped making progress (still running; where it is stuck, the files do not say)",
        "killed": "The run ended mid-step with no error (killed)",
        STOPPED_OR_HUNG: "The run's output ends mid-step with no error (stopped there, or still running and stuck)",
        "stopped early": "The run stopped before its planned end",
    }[kind]
    if kind == "killed" and end.stopped_step is None:
        lead = "The run ended with no error (killed)"  # no step had begun: not mid-step
    if kind == STOPPED_OR_HUNG and end.stopped_step is None:
        lead = "The run's output ends with no error (stopped there, or still running and stuck)"
    events = ctx.run.log_events
    cookbook_log = not events.is_empty() and events.get_column("logger").is_not_null().any()
    steps_recorded = run_folder or cookbook_log
    message = f"{lead} {_where(end, steps_recorded)}."
    if in_wrap_up:
        message = (
            f"The run stopped after its training steps, before it finished: all {end.plan.steps} planned training "
            f"steps were logged ({end.plan.source}), then the files end inside the wrap-up that follows them (the "
            "final eval, the final checkpoint) with no final checkpoint saved."
        )
    fix = FIX[kind]
    evidence = {
        "kind": "killed" if kind == STOPPED_OR_HUNG else kind,
        "run_end": end.to_dict(),
        "in_flight": flight,
        "usual_step_s": usual,
    }
    if kind in ("killed", STOPPED_OR_HUNG):
        evidence["kill_reported"] = bool(end.kill_lines)
    evidence["stuck_s"] = round(stuck_s, 3)
    evidence["sdk_thread"] = sdk_text
    if kind == "crashed":
        error, known = _decoded(end)
        message += _crash_text(error, known)
        evidence["error_cause"] = known.root_cause if known is not None else None
        if known is not None:
            # The decoder's fix as written (it may start with a command: `pip install ...`).
            fix = f"To fix it: {known.fix}. Then resume from the last checkpoint."
        if known is not None and known.id in SERVICE_SIDE_ERRORS:
            sessions = session_ids(ctx.run.log_events, ctx.run.meta.config)
            evidence["session_ids"] = sessions
            if sessions:
                ids = ", ".join(sessions[:3])
                message += f" The service or the way to it failed: quote session id {ids} when you report it."
    if kind == "crashed" and not end.exceptions and not end.kill_lines:
        # An error record with no traceback after it: logged (the SDK's retry handler giving up on one request),
        # not raised out of the run; a loop still awaiting the failed request's task hangs on with it.
        message += (
            " No traceback follows it: the error was logged, not raised out of the run, so whether the process then "
            "exited or hung on, awaiting the request that failed, the files cannot say (if it is still running, "
            "stop it before you resume)."
        )
    if kind == "interrupted":
        message += " " + _interrupt_text(end)
        evidence["error_cause"] = None
    if flight:
        message += " In flight: " + "; ".join(flight) + "."
    if kind in ("hung on the service", "hung in user code", "hung", "killed", STOPPED_OR_HUNG):
        message += " " + silence
        message += f" SDK thread: {sdk_text}" + (" (starved of the GIL)" if starved else "") + "."
    if kind in ("hung on the service", "hung in user code", "hung"):
        sessions = session_ids(ctx.run.log_events, ctx.run.meta.config)
        evidence["session_ids"] = sessions
        ids = f"session id{'s' if len(sessions) > 1 else ''} {', '.join(sessions[:3])}"
        if not sessions:
            message += " No session id is in the logs (`ServiceClient initialized for session ...`)."
        elif kind == "hung in user code":
            message += f" The service side is not at fault; if you ask for help, quote {ids}."
        else:
            message += f" Escalate with {ids}."
    if kind == "killed" and end.kill_lines:
        last = _telling_kill(end.kill_lines)
        said, fix = _kill_report(last)
        message += f" The terminal says so: `{last.text[:160]}` ({last.source}:{last.line}) — {said}."
    elif kind == "killed":
        message += " Whether it was killed or was still running when these files were copied, the files cannot say."
    if kind == STOPPED_OR_HUNG:
        message += (
            " Whether it was killed there or is still running, stuck, the files cannot say: no kill is reported after "
            "its last line (a shell's `Killed`, the OOM killer, a scheduler's cancel) and nothing shows the process "
            "alive after it. What would tell: whether the process is still there (`ps`, the scheduler's job state); "
            "a stack dump of it (`py-spy dump --pid PID`) or the task dump and stack watchdog (skills/debug), which "
            "say where it sits; the log file's modification time against now (a copy does not keep it), which says "
            "how long it has been silent."
        )
    if kind == "stopped early" and not end.unread_logs:
        message += (
            " The files end there with no error and nothing left open: the run stopped, or was still running when "
            "they were copied."
        )
    if end.unread_logs:
        message += (
            f" {end.unread_logs[0]} has no line in the cookbook's layout (`logger:line [LEVEL] message`) or Python's "
            "default one (`LEVEL:logger:message`), a format of its own: the phase, plan and errors in it were not "
            "read, so what was in flight there is unknown."
        )
    if end.broken_traces:
        message += (
            f" {end.broken_traces[0]}'s gzip stream breaks before its end: the spans it leaves open are where the "
            "copy broke, not what the run was inside, so none is read as in flight (a whole copy of the trace would "
            "say)."
        )
    if end.metrics_cut is not None:
        cut = end.metrics_cut
        message += (
            f" The metrics file's last line is cut mid-write ({cut.source}:{cut.line}, no newline): the process "
            f"stopped while it appended step {end.stopped_step}'s row, or the file was copied mid-write."
        )
    if end.checkpoint_past_rows is not None and kind == "stopped early" and not end.left_open:
        message += (
            f" A checkpoint was saved at batch {end.checkpoint_past_rows}, past the last row logged (step "
            f"{end.last_step}): the run got at least that far, and the metrics file ends before the run did "
            "(copied while it ran, or its last rows lost); where it went after that checkpoint, the files cannot say."
        )
    stopped = end.stopped_step
    return [
        ctx.finding(
            severity=SEVERITY[kind],
            title=f"Run {TITLE_KIND.get(kind, kind)} {_title_where(stopped, steps_recorded)}",
            message=message,
            fix=fix,
            steps=[stopped] if stopped is not None else [],
            evidence=evidence,
            fingerprint=f"run-stopped:{kind}",
            confidence=_confidence(end, kind, where_from_dumps=dumps_say is not None),
        )
    ]


RULE = register(
    Rule(
        slug="run-stopped",
        code="TD115",
        title="Run stopped before its planned end (crashed, killed, hung)",
        severity="warning",
        needs="metrics.jsonl and/or the trace, logs, task dumps, stack watchdog blocks (whichever the run has)",
        docs=RuleDocs(
            what=(
                "The run stopped before its planned steps were done, or stopped making progress: the step and phase "
                "it stopped in, what was in flight on each thread, the SDK thread's last sign of life, and the kind "
                "of stop — crashed, interrupted, hung on the service, hung in user code, or killed: a kill reported, "
                "or files that end mid-step with nothing to say whether it was killed there or is stuck there (titled "
                "'killed or hung', `kill_reported` false; a run `trace-doctor watch` is following is never that: "
                "hung, where the files do not say where)."
            ),
            why=(
                "A stuck run shows nothing in its metrics: the last row just stays the last. Findings about the "
                "steps that did run (entropy, config) miss the one thing the user asks: why did it stop, and where?"
            ),
            evidence=(
                "The planned length (metrics `progress/done_frac` or `progress`: the denominator every row agrees "
                "on; config `max_steps` as an upper bound), the last step logged, trace spans with a B and no E, "
                "`Starting X` log lines with no `X took`, errors and tracebacks after the log's last phase line "
                "(decoded; a KeyboardInterrupt anywhere in a chained traceback is an interrupt, what a task raised "
                "while the loop shut down is not the cause), a terminal's `Killed` / OOM-killer / scheduler-cancel "
                "line (`Terminated`, `zsh: killed`, a slurm TIME LIMIT cancel, a cgroup OOM kill, a container's "
                "`OOMKilled` or `exit code 137`, GNU timeout's signal, named as such), a native crash "
                "(faulthandler's `Fatal Python error` with the crashing thread's frames, the shell's `Segmentation "
                "fault`), a py-spy or faulthandler-watchdog dump of the live process (a hang, where its main "
                "thread was), a console's "
                "progress bar left short of its total, metrics.jsonl's last line cut mid-write, the trainer's "
                "`Training completed successfully`, the last asyncio task dump and stack block of each thread and "
                "how long each stayed the same, heartbeat warnings (their growth past the last phase line is a "
                "hold) and GIL-monitor lines, the SDK's own lines of a wait on the service that end the log (training "
                "or sampling paused by the service's queue, the client retrying a Tinker request: hung on the "
                "service), a collector's time before each line (`kubectl logs --timestamps`, a log viewer's copy, "
                "moreutils `ts`) as the line's time, the hold measured to the log's last timed line; records in "
                "Python's default layout (`LEVEL:logger:message`) and logs pasted into GitHub markdown (`> ` quotes, "
                "``` fences) read as the cookbook's; for a run `trace-doctor watch` follows, the "
                "silence it saw (past its own stall bound) is the hold. The loop's own spans (open since before "
                "step 0 ended) and spans of steps whose row was written (E events the trace writer lost at exit) "
                "are not a step in flight. Confidence: high for a traceback, a kill report or a hold seen in "
                "dumps; medium for files that end mid-step with no kill reported (killed or hung: they may be a "
                "copy of a live run) or short of a known plan; low with no plan. A run that logged every planned "
                "step, or saved its final checkpoint with nothing left open, passes."
            ),
            fix=(
                "By kind: fix the decoded error; escalate a service hang with the session id and a bundle; bound "
                "the user code that never returned; check the machine (OOM killer, preemption) for a kill. Resume "
                "from the last checkpoint."
            ),
        ),
        check=check,
        policy=RunStoppedPolicy,
        stage="progress",
        tags=("progress", "logs", "trace", "dumps"),
    )
)
