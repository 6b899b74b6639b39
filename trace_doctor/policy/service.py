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
    max_starved_share: float = threshold(
        0.5,
        unit="share of the late seconds",
        why="The guide rules the GIL out before the network and the service (Step 5 before 6-7): when the SDK "
        "loop's task dumps stopped (alone, or with every loop) for at least this share of the time results were "
        "late, a starved SDK thread that could not poll explains them as well as a queue, and the service is not "
        "blamed.",
        bounds=SHARE,
    )
    min_silent_intervals: float = threshold(
        2.5,
        unit="dump intervals",
        why="A loop's dumps missing for this many of their intervals is a stopped loop, not scheduling jitter "
        "(as gil-stall reads them).",
        bounds=POSITIVE,
    )
    min_silence_s: float = threshold(
        0.5, unit="s", why="A shorter dump silence is scheduling noise, not a stopped SDK loop.", bounds=POSITIVE
    )
    min_pending_s: float = threshold(
        60.0,
        unit="s",
        why="The guide's Step 6-7 reading of the task dumps: an SDK request still pending this long while both "
        "event loops keep dumping waited on the service (or the network), not on the client. A Tinker clock "
        "cycle is seconds long and a pipelined request is served within one or two.",
        bounds=POSITIVE,
    )
    min_result_wait_share: float = threshold(
        0.5,
        unit="share of profile time",
        why="The guide's profile reading (Step 4, option B): most of an async-mode profile awaiting the SDK's "
        "result_async is waiting for the server, network or service; less is the ordinary wait of a busy loop.",
        bounds=SHARE,
    )
    min_printed_wait_s: float = threshold(
        5.0,
        unit="s",
        why="The guide's own `submit: Ss, wait: Ws` timing (Step 3): a wait this long behind a prompt submit is "
        "slow for a Tinker clock cycle of a few seconds; with a fast round trip it is the service's (Step 7).",
        bounds=POSITIVE,
    )
    max_round_trip_s: float = threshold(
        1.0,
        unit="s",
        why="The guide's network check (Step 6): an API round trip under 1 s rules the network out, so long waits "
        "behind prompt submits are the service's.",
        bounds=POSITIVE,
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


@dataclass(frozen=True)
class NetworkLatencyPolicy:
    slow_round_trip_s: float = threshold(
        2.0,
        unit="s",
        why="The debug guide's network check (Step 6): a get_server_capabilities() round trip over 2 s suggests "
        "network trouble between the client and the service.",
        bounds=POSITIVE,
    )
    slow_wait_s: float = threshold(
        5.0,
        unit="s",
        why="A call whose `wait` (the guide's submit/wait timing, Step 3) is this long is slow for a Tinker "
        "clock cycle of a few seconds: the time went to the network or the service.",
        bounds=POSITIVE,
    )
    slow_submit_s: float = threshold(
        0.5,
        unit="s",
        why="A `submit` this long is client-side work (serialization, data preparation: Step 4), not the "
        "network: such calls are not counted as waits the network explains.",
        bounds=POSITIVE,
    )
