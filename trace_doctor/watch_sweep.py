"""`trace-doctor watch sweep/`: every run under a folder followed at once, each by its own `Watch`.

Each look splits the folder into runs again (runs.py split_runs: a sweep's runs start one after another,
and a run's later files, its log or checkpoints, join it), starts a `Watch` for a run not seen before and
looks at every run still going. A run's watch reads only that run's files (a folder that holds its own
run and others below it is never merged). Every event carries the run's id; the sweep has ended when
every run found so far is done or stopped (a run that has not written its first file is not waited for).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from trace_doctor.errors import RequestError
from trace_doctor.policy.live import WatchPolicy
from trace_doctor.runs import split_runs
from trace_doctor.settings import Settings
from trace_doctor.watch import EXIT_DONE, EXIT_STOPPED, Watch, WatchEvent


class WatchSweep:
    """The runs under one folder, followed a look at a time (see the module docstring)."""

    def __init__(
        self,
        path: str | Path,
        settings: Settings | None = None,
        *,
        policy: WatchPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not Path(path).exists():
            raise RequestError(f"path does not exist: {path}")
        self.path = Path(path)
        self.settings = settings
        self.policy = policy
        self.clock = clock
        self.watches: dict[str, Watch] = {}  # run id -> its watch, in the order the runs were found
        self._files: dict[str, frozenset[str]] = {}  # run id -> its files at the latest split (real paths)
        self.ended: int | None = None
        self.caught_up = True  # every run's last look read its files to their ends

    @property
    def several(self) -> bool:
        """Whether more than one run is followed (the text output then names the run on each line)."""
        return len(self.watches) > 1

    def look(self) -> list[WatchEvent]:
        """Split the folder again, start following new runs, and look at every run still going."""
        for run in split_runs([self.path]).runs:
            self._files[run.run_id] = frozenset(os.path.realpath(f) for f in run.files)
            if run.run_id not in self.watches:
                self.watches[run.run_id] = Watch(
                    run.root, self.settings, policy=self.policy, clock=self.clock, only=self._member(run.run_id)
                )
        events: list[WatchEvent] = []
        for run_id, watch in self.watches.items():
            if watch.ended is not None:
                continue
            for event in watch.look():
                event.data = {"run": run_id, **event.data}
                events.append(event)
        self.caught_up = all(watch.caught_up for watch in self.watches.values())
        codes = [watch.ended for watch in self.watches.values()]
        if codes and all(code is not None for code in codes):
            self.ended = EXIT_STOPPED if EXIT_STOPPED in codes else EXIT_DONE
        return events

    def silences(self) -> dict[str | None, float | None]:
        """Per run still going, the seconds since it last wrote (the terminal's status lines)."""
        now = self.clock()
        return {run_id: w.silent_s(now) for run_id, w in self.watches.items() if w.ended is None}

    def _member(self, run_id: str) -> Callable[[Path], bool]:
        """Whether a file found under the run's folder is the run's own, by the latest split."""
        return lambda path: os.path.realpath(path) in self._files.get(run_id, frozenset())
