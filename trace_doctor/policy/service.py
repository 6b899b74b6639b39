"""Thresholds of the rules about the requests a run sends to the Tinker service (request retries)."""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import AT_LEAST_ONE, POSITIVE, SHARE, threshold


@dataclass(frozen=True)
class RequestRetriesPolicy:
    frequent_retries: int = threshold(
        10,
        unit="retries",
        why="The SDK retries 429s, 5xx, timeouts and connection errors silently; a few in a run are normal "
        "service noise (info), this many Tinker retries in one run mean throttling or a degraded service (warning).",
        bounds=AT_LEAST_ONE,
    )
    frequent_retries_per_minute: float = threshold(
        3.0,
        unit="retries per minute",
        why="With timestamped log lines: a burst this dense in one minute is throttling even when the run's "
        "total stays under frequent_retries (the SDK's backoff starts at 0.5 s and caps at 10 s).",
        bounds=POSITIVE,
    )


@dataclass(frozen=True)
class ServerSideWaitPolicy:
    min_cycles_per_step: float = threshold(
        2.5,
        unit="clock cycles",
        why=(
            "A pipelined SL/DPO loop runs one step per clock cycle (the guide's optimum), two when forward_backward "
            "and optim_step land in consecutive cycles; more than that with prompt, pipelined submissions was "
            "spent on the service side."
        ),
        bounds=AT_LEAST_ONE,
    )
    max_submit_s: float = threshold(
        0.05,
        unit="s",
        why="Submissions slower than this are a client-side cause (serialization-stall), not the service's.",
        bounds=POSITIVE,
    )
    min_pipelined_share: float = threshold(
        0.8,
        unit="share of steps",
        why="Only a loop that pipelines nearly every step rules out the client: otherwise it is pipelining-gap.",
        bounds=SHARE,
    )
    min_step_intervals: int = threshold(
        3,
        unit="step intervals",
        why="The mean step interval in clock cycles is judged over at least this many traced steps; fewer are "
        "the warm-up, not the service's pace.",
        bounds=AT_LEAST_ONE,
    )


@dataclass(frozen=True)
class RunStoppedPolicy:
    min_stuck_step_times: float = threshold(
        10.0,
        unit="usual step times",
        why="A run whose last state (the same pending SDK requests, the same user-code frame, a silent event "
        "loop) held this many usual steps was hung, not merely caught mid-step: a slow step or a periodic save "
        "or eval takes a few step times, a hang keeps going.",
        bounds=AT_LEAST_ONE,
    )
    min_stuck_s: float = threshold(
        2.0,
        unit="s",
        why="The least time a state must hold to be called stuck whatever the step time: task dumps and stack "
        "blocks are stamped to the second, so a shorter hold cannot be told from the last dump of a killed run.",
        bounds=POSITIVE,
    )
