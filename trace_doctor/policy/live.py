"""Thresholds of the watch command (trace_doctor/watch.py): when a live run has stopped progressing."""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import AT_LEAST_ONE, POSITIVE, Bounds, threshold


@dataclass(frozen=True)
class WatchPolicy:
    stall_step_times: float = threshold(
        3.0,
        unit="steady step times",
        why="A step a few times slower than the steady one happens (an eval, a save, a slow batch); one that has "
        "written nothing for this many steady steps is stuck, and the user is told while the process is still "
        "there to be looked at (a task dump, the session id). Under five, so a stall is reported within five "
        "step times of the last write.",
        bounds=AT_LEAST_ONE,
    )
    min_stall_s: float = threshold(
        60.0,
        unit="s",
        why="The least silence called a stall whatever the step time: a checkpoint save or a first compile can "
        "write nothing for tens of seconds in a run of one-second steps, and the steady step time is unknown "
        "until a few steps are logged.",
        bounds=POSITIVE,
    )
    first_step_stall_s: float = threshold(
        600.0,
        unit="s",
        why="The silence called a stall before the first step is logged: a launch imports, builds its dataset and "
        "waits for the service to create the model (minutes), with no steady step time to measure it by.",
        bounds=POSITIVE,
    )
    analysis_interval_s: float = threshold(
        10.0,
        unit="s",
        why="How often the findings are brought up to date while steps arrive: the rules re-run on the whole "
        "tables (a second or more on a large run), progress is shown at every look; a stall or the last "
        "planned step brings the analysis up to date at once.",
        bounds=POSITIVE,
    )
    max_analysis_share: float = threshold(
        0.05,
        unit="share of the watch's time",
        why="The rules re-run on the whole tables, so their cost grows with the run while a look's reading "
        "follows only what the files gained: the next findings refresh waits until the last one's cost is "
        "at most this share of the time since (a 2 s analysis of a 600 MB trace: every 40 s at most).",
        bounds=Bounds(0.0, 1.0, low_open=True),
    )
