"""`trace-doctor watch`: follow a run as it is written, with progress, findings as they appear and stalls.

A `Watch` takes one look at a time (`look()`, which tests call directly): it reads what the run's files
gained (ingest/live_run.py), turns each new training step into a `progress` event, re-runs the rules
on the tables so far at the policy's cadence, slower as the run grows (the rules' cost is the run's
size, a look's is what the files gained: `finding` events for findings not seen before), and
when nothing has been written for longer than the stall bound (policy/live.py: a multiple of the
steady step time, with a floor) reports a `stalled` event carrying run-stopped's post-mortem (where
it stopped, what is in flight, the session id) while the process can still be looked at. A run that
logged its planned steps is `done`; one whose log ends in a crash or an interrupt is `stopped`.
`follow()` loops over looks, prints each event (text or JSON lines) and returns the exit code.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from trace_doctor.errors import RequestError
from trace_doctor.ingest.live_run import LiveRun
from trace_doctor.policy.live import WatchPolicy
from trace_doctor.settings import Settings

# How a watch ended (documented in the README and `watch --help`; 2 is a usage error, as everywhere).
EXIT_DONE = 0
EXIT_STALLED = 4  # with --exit-on-stall: the run stopped progressing
EXIT_STOPPED = 5  # the run's log ends in a crash or an interrupt (run-stopped judged it stopped)
EXIT_INTERRUPTED = 130  # Ctrl-C
# Step times kept for the steady step time and the rate: the latest ones only (bounded memory).
RECENT_STEPS = 200
# run-stopped kinds after which the process is gone: nothing more will be written.
ENDED_KINDS = ("crashed", "interrupted")
# At its end the watch gives the --on-stall hooks this long, in all, to be handed their event.
HOOK_GRACE_S = 2.0
PROGRESS_KEYS = ("progress/done_frac", "progress")


@dataclass
class WatchEvent:
    """One thing the watch reports: `event` is progress, finding, stalled, stopped or done."""

    event: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.event, **self.data}

    def json(self) -> str:
        return json.dumps(self.to_dict(), default=str)


class Watch:
    """One run followed (see the module docstring)."""

    def __init__(
        self,
        path: str | Path,
        settings: Settings | None = None,
        *,
        policy: WatchPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        only: Callable[[Path], bool] | None = None,
    ) -> None:
        if not Path(path).exists():
            from trace_doctor.did_you_mean import missing_path

            raise RequestError(f"path does not exist: {missing_path(Path(path))}")
        self.live = LiveRun(path, only)
        self.settings = settings or Settings()
        # An explicit policy (tests) wins over the configuration's [tool.trace-doctor.watch].
        self.policy = policy or self.settings.policy.watch
        self.clock = clock
        self.started = clock()
        self.last_step: int | None = None
        self.planned: int | None = None
        self._arrival: tuple[float, int] | None = None  # (clock, step) of the latest row
        self._first_fraction: tuple[int, float] | None = None  # (step, progress fraction) of the first row with one
        self._step_s: deque[float] = deque(maxlen=RECENT_STEPS)  # the analysis' step times
        self._row_step_s: deque[float] = deque(maxlen=RECENT_STEPS)  # step times read off the rows
        self._seen: set[tuple[str, str]] = set()
        self._analysed_at: float | None = None
        self.analysis_s = 0.0  # what the last findings refresh cost (wall seconds)
        self._dirty = False  # steps arrived since the last analysis
        self.stalled = False  # a stall was reported and nothing was written since
        self.stalls = 0
        self.ended: int | None = None  # the exit code once the run is done or stopped
        self.caught_up = True  # the last look read every file to its end

    @property
    def steady_s(self) -> float | None:
        """The median of the recent step times: the analysis' (derive/step_times), else the rows' own timers,
        else the time between rows as they arrived (rows read in one look, a run caught up, are not timed)."""
        readings = self._step_s or self._row_step_s
        return statistics.median(readings) if readings else None

    @property
    def stall_bound_s(self) -> float:
        if self.last_step is None:
            return self.policy.first_step_stall_s
        steady = self.steady_s
        floor = self.policy.min_stall_s
        return max(floor, self.policy.stall_step_times * steady) if steady else floor

    def look(self) -> list[WatchEvent]:
        """Read what the run wrote since the last look; the events it makes."""
        look = self.live.look()
        now = self.clock()
        new = zip(look.new_rows, look.replayed, strict=True)
        rows = [(row, again) for row, again in new if _training_step(row) is not None]
        # What is open after the look is every row's phase in flight: taken once, not once a row (a watch
        # catching up with 3000 rows took 2.3 s of its 6.3 s asking the same spans 3000 times).
        phase = (" › ".join(self.live.in_flight()) or None) if rows else None
        events = [e for e in (self._progress(row, now, phase, replayed=again) for row, again in rows) if e is not None]
        if look.progressed:
            # Anything the run wrote may be how it ends (a traceback after its last row, the trainer's last
            # line): the findings and the end are brought up to date at the next refresh, rows or none.
            self.stalled, self._dirty = False, True
        self.caught_up = look.caught_up
        if not look.caught_up:
            # A large run is caught up with over several looks: what was read so far is not the run. The
            # trace read to its first 16 MB ends inside open spans, and a final checkpoint with rows still
            # unread reads as done: the findings, the stall and the end wait for the files' ends.
            return events
        finished = self.planned is not None and self.last_step is not None and self.last_step + 1 >= self.planned
        if finished and look.progressed:
            # Past its planned steps a run writes its wrap-up (the final eval, the final checkpoint, the
            # trainer's last line), no new step: what it writes then is what may end it.
            self._dirty = True
        # The findings refresh costs what the run's size costs: at most a share of the time it is due in.
        wait = max(self.policy.analysis_interval_s, self.analysis_s / self.policy.max_analysis_share)
        due = self._analysed_at is None or now - self._analysed_at >= wait
        silent = self.silent_s(now)
        stalling = not self.stalled and silent is not None and silent > self.stall_bound_s
        if (self._dirty and (due or finished)) or stalling or (self._analysed_at is None and look.files):
            events += self._analyse(now, stalling=stalling, silent_s=silent)
        return events

    @property
    def several(self) -> bool:
        """One run: the text output does not name it (a WatchSweep's may)."""
        return False

    def silences(self) -> dict[str | None, float | None]:
        """The seconds since the run last wrote (the terminal's status line), keyed like a sweep's."""
        return {None: self.silent_s(self.clock())}

    def silent_s(self, now: float) -> float | None:
        last = self.live.last_progress
        return None if last is None else now - last

    def _progress(self, row: dict[str, Any], now: float, phase: str | None, *, replayed: bool) -> WatchEvent | None:
        """The progress event of a new row; None for a row that says nothing new. A step at or below the last
        one is a copy (a row read again: a resume's rewrite, its backup) or, written now, a relaunch that went
        back (a fresh start at step 0, a resume from a checkpoint): that launch's progress from then on, its
        plan read from its own rows."""
        step = _training_step(row)
        if step is None:
            return None
        if self.last_step is not None and step <= self.last_step:
            if replayed or step == self.last_step:
                return None
            self._first_fraction, self._arrival = None, None
        previous, self._arrival = self._arrival, (now, step)
        self.last_step = step
        for key in PROGRESS_KEYS:
            fraction = row.get(key)
            if isinstance(fraction, (int, float)) and not isinstance(fraction, bool) and fraction > 0:
                self.planned = self._planned(step, float(fraction))
                break
        step_s = row.get("time/total") or row.get("time/step")
        if not isinstance(step_s, (int, float)) and previous is not None and step > previous[1] and now > previous[0]:
            step_s = (now - previous[0]) / (step - previous[1])
        if isinstance(step_s, (int, float)) and step_s > 0:
            self._row_step_s.append(float(step_s))
        steady = self.steady_s
        rate = 1.0 / steady if steady else None
        remaining = self.planned - step - 1 if self.planned is not None else None
        eta = remaining * steady if remaining is not None and steady else None
        return WatchEvent(
            "progress",
            {
                "step": step,
                "planned": self.planned,
                "step_s": _round(step_s),
                "steady_s": _round(steady),
                "rate_steps_per_s": _round(rate),
                "eta_s": _round(eta),
                "phase": phase,
                "since_write_s": _round(self.silent_s(now)),
            },
        )

    def _planned(self, step: int, fraction: float) -> int:
        """The planned steps a row's progress fraction says. Supervised and RL training write (step + 1) / planned
        after the step, DPO step / planned before it (derive/progress.py): two rows' fractions give the plan
        whichever it is (the step difference over the fraction difference); one row is read the first way."""
        first = self._first_fraction
        if first is None or first[0] == step:
            self._first_fraction = (step, fraction)
        elif fraction > first[1]:
            return round((step - first[0]) / (fraction - first[1]))
        return round((step + 1) / fraction)

    def _analyse(self, now: float, *, stalling: bool, silent_s: float | None) -> list[WatchEvent]:
        self._analysed_at, self._dirty = now, False
        started = time.perf_counter()
        try:
            return self._analysis_events(stalling=stalling, silent_s=silent_s)
        finally:
            self.analysis_s = time.perf_counter() - started

    def _analysis_events(self, *, stalling: bool, silent_s: float | None) -> list[WatchEvent]:
        from trace_doctor.api import analyze

        run = self.live.tables()
        if not run.records_read:
            return []
        if stalling:
            # What the watch saw is run-stopped's hold: a followed run is still there, so never "killed".
            run.meta.watched_stall_s = silent_s
        result = analyze(run, settings=self.settings)
        steps = result.derived.get("step_times")
        if steps is not None and steps.height and "total_s" in steps.columns:
            self._step_s.clear()
            self._step_s.extend(float(v) for v in steps["total_s"].drop_nulls().tail(RECENT_STEPS))
        events: list[WatchEvent] = []
        stopped = None
        for finding in result.findings:
            if finding.rule == "run-stopped":
                stopped = finding
                continue
            key = (finding.rule, finding.fingerprint or finding.title)
            if key not in self._seen:
                self._seen.add(key)
                events.append(WatchEvent("finding", _finding_data(finding)))
        from trace_doctor.derive.run_end import run_end

        end = run_end(run)
        if end.ended_normally:
            self.ended = EXIT_DONE
            events.append(WatchEvent("done", {"steps": (end.last_step or 0) + 1, "planned": end.plan.steps}))
            return events
        kind = stopped.evidence.get("kind") if stopped is not None else None
        if kind in ENDED_KINDS:
            self.ended = EXIT_STOPPED
            events.append(WatchEvent("stopped", {"kind": kind, **_finding_data(stopped)}))
            return events
        if stalling:
            self.stalled, self.stalls = True, self.stalls + 1
            events.append(WatchEvent("stalled", self._stall_data(end, stopped, silent_s)))
        return events

    def _stall_data(self, end: Any, stopped: Any, silent_s: float | None) -> dict[str, Any]:
        evidence = stopped.evidence if stopped is not None else {}
        flight = evidence.get("in_flight") or []
        phase = flight[0] if flight else (" › ".join(self.live.in_flight()) or None)
        return {
            "step": end.stopped_step,
            "phase": phase,
            "in_flight": flight,
            "silent_s": _round(silent_s),
            "bound_s": _round(self.stall_bound_s),
            "steady_s": _round(self.steady_s),
            "kind": evidence.get("kind"),
            "session_ids": evidence.get("session_ids", []),
            "message": stopped.message if stopped is not None else "nothing was written for longer than the bound",
            "fix": stopped.fix if stopped is not None else None,
        }


def _training_step(row: dict[str, Any]) -> int | None:
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    return None if any(key.startswith(("test/", "eval/")) for key in row) and "progress" not in row else step


def _finding_data(finding: Any) -> dict[str, Any]:
    return {
        "rule": finding.rule,
        "severity": finding.severity,
        "title": finding.title,
        "message": finding.message,
        "steps": list(finding.steps or [])[:20],
    }


def _round(value: Any) -> float | None:
    return round(float(value), 4) if isinstance(value, (int, float)) and math.isfinite(value) else None


class Hooks:
    """`--on-stall` commands started and not yet seen to end. A hook runs beside the watch: the watch never
    waits for it (a hook that hangs, or never reads its stdin, must not hold the stall reports after it);
    its event is fed to its stdin by a thread of its own, and a hook that fails is told on stderr when it ends."""

    def __init__(self, command: str) -> None:
        self.command = command
        self._running: list[tuple[subprocess.Popen, threading.Thread]] = []

    def start(self, event: WatchEvent) -> None:
        try:
            process = subprocess.Popen(self.command, shell=True, stdin=subprocess.PIPE)
        except OSError as exc:
            print(f"trace-doctor: --on-stall command failed: {exc}", file=sys.stderr)
            return
        feeder = threading.Thread(target=_feed, args=(process, event.json() + "\n"), daemon=True)
        feeder.start()
        self._running.append((process, feeder))

    def reap(self, *, grace_s: float = 0.0) -> None:
        """Tell of the hooks that ended (a non-zero exit on stderr); `grace_s`: wait that long, in all, for them
        to end first (the watch is ending: a hook that does its job in time is not cut short by the exit)."""
        deadline = time.monotonic() + grace_s
        running = []
        for process, feeder in self._running:
            feeder.join(max(0.0, deadline - time.monotonic()))
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
            code = process.poll()
            if code is None:
                running.append((process, feeder))
            elif code != 0:
                print(f"trace-doctor: --on-stall command exited with {code}: {self.command}", file=sys.stderr)
        self._running = running


def _feed(process: subprocess.Popen, text: str) -> None:
    assert process.stdin is not None
    try:
        process.stdin.write(text.encode())
        process.stdin.close()
    except OSError:  # the hook exited without reading its stdin (BrokenPipeError)
        pass


def event_text(event: WatchEvent, *, name_run: bool = False) -> str:
    """One event as a plain line; `name_run`: led by the run's id (a sweep of several runs)."""
    run = event.data.get("run")
    text = _event_text(event)
    return f"[{run}] {text}" if name_run and run is not None else text


def _event_text(event: WatchEvent) -> str:
    d = event.data
    if event.event == "progress":
        of = f"/{d['planned']}" if d.get("planned") else ""
        parts = [f"step {d['step']}{of}"]
        if d.get("step_s") is not None:
            steady = f" (steady {d['steady_s']:.3g} s)" if d.get("steady_s") is not None else ""
            parts.append(f"{d['step_s']:.3g} s/step{steady}")
        if d.get("rate_steps_per_s"):
            parts.append(f"{d['rate_steps_per_s']:.3g} steps/s")
        if d.get("eta_s") is not None:
            parts.append(f"ETA {_duration(d['eta_s'])}")
        if d.get("phase"):
            parts.append(f"in {d['phase']}")
        return "  ".join(parts)
    if event.event == "finding":
        return f"finding [{d['severity']}] {d['rule']}: {d['title']}"
    if event.event == "stalled":
        where = f" in {d['phase']}" if d.get("phase") else ""
        return (
            f"STALLED at step {d['step']}{where}: nothing written for {_duration(d['silent_s'] or 0)} "
            f"(bound {_duration(d['bound_s'] or 0)}). {d['message']}"
        )
    if event.event == "stopped":
        return f"STOPPED ({d['kind']}): {d['message']}"
    return f"done: {d['steps']} step(s)" + (f" of {d['planned']} planned" if d.get("planned") else "")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


class Watcher(Protocol):
    """What `follow` loops over: one run's `Watch` or a folder's `WatchSweep` (watch_sweep.py)."""

    ended: int | None
    caught_up: bool  # the last look read every file to its end

    @property
    def several(self) -> bool: ...

    def look(self) -> list[WatchEvent]: ...

    def silences(self) -> dict[str | None, float | None]: ...


def follow(
    watch: Watcher,
    *,
    fmt: str = "text",
    interval: float = 2.0,
    on_stall: str | None = None,
    exit_on_stall: bool = False,
    out: Any = None,
    live_display: bool | None = None,
    max_looks: int | None = None,
) -> int:
    """Look every `interval` seconds until the run is done or stopped (or stalls, with `exit_on_stall`);
    print each event (`fmt` text or jsonl) and return the exit code. On a terminal the text status
    is redrawn in place (rich Live); anywhere else every event is a line of its own."""
    out = out or sys.stdout
    if live_display is None:
        live_display = fmt == "text" and out.isatty()
    display = _Display(out, fmt, live_display)
    hooks = Hooks(on_stall) if on_stall else None
    looks = 0
    try:
        with display:
            while True:
                for event in watch.look():
                    display.show(event, name_run=watch.several)
                    if event.event == "stalled" and hooks is not None:
                        hooks.start(event)
                    if event.event == "stalled" and exit_on_stall:
                        return EXIT_STALLED
                if watch.ended is not None:
                    return watch.ended
                looks += 1
                if max_looks is not None and looks >= max_looks:
                    return EXIT_DONE
                display.idle(watch)
                if hooks is not None:
                    hooks.reap()
                if watch.caught_up:  # catching up with a large run: the next look reads on at once
                    time.sleep(interval)
    except KeyboardInterrupt:
        print("trace-doctor: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if hooks is not None:
            hooks.reap(grace_s=HOOK_GRACE_S)


class _Display:
    """Where events go: JSON lines, plain lines, or (a terminal) lines above a status redrawn in place,
    one status line per run."""

    def __init__(self, out: Any, fmt: str, live: bool) -> None:
        self.out, self.fmt, self.live = out, fmt, None
        self._status: dict[str | None, str] = {}  # run id (None: the one run) -> its latest progress line
        if live:
            from rich.console import Console
            from rich.live import Live

            self.live = Live("", console=Console(file=out), auto_refresh=False, transient=True)

    def __enter__(self) -> _Display:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)
            for status in self._status.values():
                print(status, file=self.out)

    def show(self, event: WatchEvent, *, name_run: bool = False) -> None:
        if self.fmt == "jsonl":
            print(event.json(), file=self.out, flush=True)
            return
        text = event_text(event, name_run=name_run)
        if self.live is None:
            print(text, file=self.out, flush=True)
        elif event.event == "progress":
            self._status[event.data.get("run")] = text
            self._redraw(list(self._status.values()))
        else:
            self.live.console.print(text, markup=False, highlight=False)

    def idle(self, watch: Watcher) -> None:
        """A terminal's status lines gain the time since each run's last write; plain output prints nothing."""
        if self.live is None or not self._status:
            return
        silences = watch.silences()
        lines = []
        for run, status in self._status.items():
            silent = silences.get(run)
            lines.append(status if silent is None else f"{status}  (last write {_duration(silent)} ago)")
        self._redraw(lines)

    def _redraw(self, lines: list[str]) -> None:
        from rich.text import Text

        # Plain text: a run id in brackets is not rich markup.
        assert self.live is not None
        self.live.update(Text("\n".join(lines)), refresh=True)


def follow_run(
    path: str | Path,
    settings: Settings | None = None,
    *,
    fmt: str = "text",
    interval: float = 2.0,
    on_stall: str | None = None,
    exit_on_stall: bool = False,
) -> int:
    """Watch the run at `path` until it ends (the CLI's `watch`): the exit code (module constants). A folder
    is split into its runs (a sweep: every run followed, each event naming its run); a file is one run."""
    from trace_doctor.watch_sweep import WatchSweep

    watcher: Watcher = WatchSweep(path, settings) if Path(path).is_dir() else Watch(path, settings)
    return follow(watcher, fmt=fmt, interval=interval, on_stall=on_stall, exit_on_stall=exit_on_stall)
