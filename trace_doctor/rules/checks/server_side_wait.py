"""TD112 server-side-wait: the client did its part, yet results arrive cycles late.

Three readings, each the guide's: the trace (below), the task dumps (an SDK request pending for a long
time while both event loops keep dumping: both threads ran, the request waited on the service; Steps
6-7), and an async-mode profile mostly awaiting the SDK's result_async (Step 4, option B: waiting for
the server). None of them speaks while the dumps show the SDK loop stopped or the GIL monitor reports
jitter: a starved SDK thread delays results as a queue does (Step 5 comes first).

The debug guide's last stage. Only when the client is ruled out — submissions hand off in
milliseconds, the loop pipelines (optim_step right behind forward_backward, the next step submitted
before the results are awaited) — and the results still take several clock cycles is the time on the
service side (queueing, capacity). A pipelined step is served in one or two cycles, so a long cycle
alone is not a server problem: one cycle per step is the optimum. The finding is info: nothing in
the user's code fixes it, but support can, given the session id and a bundle.
"""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.dump_cadence import Silence, process_silences, sdk_loop_silences, silences
from trace_doctor.derive.intervals import merge, overlap
from trace_doctor.derive.log_signals import call_timing_lines, gil_monitor_lines, round_trip_lines
from trace_doctor.derive.pending_requests import PendingRequest, pending_requests
from trace_doctor.derive.pipelining import PIPELINING_CALLS, PIPELINING_COLUMNS, fb_optim_waits, step_transitions
from trace_doctor.derive.profile_stats import result_wait_s, wall_times
from trace_doctor.derive.sessions import session_ids
from trace_doctor.derive.stalls import (
    MAIN_TRACK_COLUMNS,
    MAIN_TRACK_SPANS,
    STEP_START_COLUMNS,
    STEPPED_SPANS,
    SUBMIT_COLUMNS,
    TRAINING_SUBMITS,
    main_track_gaps,
    step_intervals,
)
from trace_doctor.model import Finding
from trace_doctor.policy.service import ServerSideWaitPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext

# Trainers whose step the clock-cycle model prices: forward_backward + optim_step.
CYCLE_PRICED_TRAINERS = ("sl", "dpo")
# A pipelined forward_backward + optim_step is served in this many cycles.
CYCLES_NEEDED = 2


def check(ctx: RuleContext[ServerSideWaitPolicy]) -> list[Finding]:
    """The trace's reading, then the dumps' and the profile's, each a finding of its own."""
    starved = _sdk_thread_starved(ctx)
    readings = (_pending_finding, _profile_finding, _printed_wait_finding)
    others = [] if starved else [f for f in (read(ctx) for read in readings) if f is not None]
    try:
        traced = _trace_check(ctx)
    except NotApplicable:
        if not others:
            raise
        traced = []
    return traced + others


def _sdk_thread_starved(ctx: RuleContext[ServerSideWaitPolicy]) -> bool:
    """Whether the SDK loop's dumps stopped or the GIL monitor saw jitter: late results are then the GIL's."""
    t = ctx.thresholds
    stopped = sdk_loop_silences(
        ctx.run.task_snapshots, min_intervals=float(t.min_silent_intervals), min_seconds=float(t.min_silence_s)
    )
    return bool(stopped) or bool(gil_monitor_lines(ctx.run.log_events))


def _overlaps(silence: Silence, request: PendingRequest) -> bool:
    end = silence.end if silence.end is not None else request.last_at
    return silence.source == request.source and silence.start < request.last_at and end > request.first_at


def _pending_finding(ctx: RuleContext[ServerSideWaitPolicy]) -> Finding | None:
    """An SDK request pending min_pending_s or more while every event loop kept dumping (no silence meanwhile)."""
    t = ctx.thresholds
    snapshots = ctx.run.task_snapshots
    waited = [r for r in pending_requests(snapshots) if r.pending_s >= float(t.min_pending_s)]
    if not waited:
        return None
    knobs = {"min_intervals": float(t.min_silent_intervals), "min_seconds": float(t.min_silence_s)}
    stops = silences(snapshots, **knobs) + process_silences(snapshots, **knobs)
    alive = [r for r in waited if not any(_overlaps(s, r) for s in stops)]
    if not alive:
        return None
    longest = alive[0]
    sessions = session_ids(ctx.run.log_events, ctx.run.meta.config)
    return ctx.finding(
        severity="info",
        title="An SDK request waited on the service while both threads ran",
        message=(
            f"The task dumps show {len(alive)} SDK request(s) pending for {float(t.min_pending_s):g} s or more "
            f"while [main] and the SDK loop kept dumping: the longest, `{longest.coroutine}` ({longest.task}), for at "
            f"least {longest.pending_s:.0f} s ({longest.source}:{longest.first_line}-{longest.last_line}, "
            f"{longest.dumps} dumps). Both threads were free, so the request was waiting on the service (or the "
            "network to it): the debug guide's Steps 6-7. Time the API round trip (network-latency reads it); if "
            "it is fast, escalate"
            + (f" with session id {', '.join(sessions[:3])}." if sessions else " with the session id.")
        ),
        fix=(
            "Run the guide's network check (`API round-trip`); if it is under 1 s, escalate to Tinker support with "
            "the session id and `trace-doctor bundle <log_path> -o escalation.zip`."
        ),
        evidence={"requests": [r.to_dict() for r in alive[:10]], "count": len(alive), "session_ids": sessions},
        fingerprint="server-side-wait:pending-request",
    )


def _profile_finding(ctx: RuleContext[ServerSideWaitPolicy]) -> Finding | None:
    """An async-mode profile spending min_result_wait_share or more of its time awaiting the SDK's results."""
    frames = ctx.run.frames
    if frames.is_empty():
        return None
    walls = wall_times(ctx.run.profiles, frames)
    share_min = float(ctx.thresholds.min_result_wait_share)
    waits = {
        name: (seconds, walls.get(name, 0.0))
        for name, seconds in result_wait_s(frames).items()
        if walls.get(name, 0.0) > 0 and seconds / walls[name] >= share_min
    }
    if not waits:
        return None
    name, (seconds, wall) = max(waits.items(), key=lambda kv: kv[1][0] / kv[1][1])
    return ctx.finding(
        severity="info",
        title="The profiled thread mostly waits for the server's results",
        message=(
            f"{seconds:.2f} s of {wall:.2f} s ({seconds / wall:.0%}) of {name} is spent awaiting the SDK's "
            "result_async: the debug guide's profile reading for waiting on the server (network or server-side), "
            "with little client work to speed up. Time the API round trip (network-latency reads it) to tell the "
            "network from the service."
        ),
        fix=(
            "Check pipelining first (submit the next step before awaiting); then run the guide's network check; a "
            "fast round trip leaves the service: escalate with the session id and `trace-doctor bundle`."
        ),
        evidence={
            "profile": name,
            "result_wait_s": round(seconds, 6),
            "wall_s": round(wall, 6),
            "share": round(seconds / wall, 4),
            "profiles": {n: round(s / w, 4) for n, (s, w) in sorted(waits.items())},
        },
        fraction_of_wall=round(seconds / wall, 4),
        fingerprint=f"server-side-wait:profile:{ctx.input_key(name)}",
    )


def _printed_wait_finding(ctx: RuleContext[ServerSideWaitPolicy]) -> Finding | None:
    """The guide's printouts: calls that waited long behind a prompt submit, and a round trip fast enough to rule
    the network out (Steps 3, 6 and 7)."""
    t = ctx.thresholds
    trips = round_trip_lines(ctx.run.log_events)
    if not trips or max(line.values["seconds"] for line in trips) >= float(t.max_round_trip_s):
        return None  # no round trip timed, or a slow one: network-latency's to judge
    waits = [
        line
        for line in call_timing_lines(ctx.run.log_events)
        if line.values["wait_s"] >= float(t.min_printed_wait_s) and line.values["submit_s"] < float(t.max_submit_s)
    ]
    if not waits:
        return None
    slowest = max(line.values["seconds"] for line in trips)
    total = sum(line.values["wait_s"] for line in waits)
    sessions = session_ids(ctx.run.log_events, ctx.run.meta.config)
    return ctx.finding(
        severity="info",
        title="Long waits behind prompt submits, with a fast network: the service's time",
        message=(
            f"{len(waits)} timed call(s) submitted in under {float(t.max_submit_s):g} s and then waited "
            f"{float(t.min_printed_wait_s):g} s or more ({total:.1f} s in all, first at {waits[0].source}:"
            f"{waits[0].line}), and the API round trip took {slowest:.2f} s at most: the debug guide rules the "
            "client (fast submit) and the network (round trip under 1 s) out, so the wait is on the service side "
            "(Step 7: escalate"
            + (f" with session id {', '.join(sessions[:3])})." if sessions else " with the session id).")
        ),
        fix=(
            "Escalate to Tinker support with the session id, the step timings and `trace-doctor bundle <log_path> "
            "-o escalation.zip`; check the status page."
        ),
        evidence={
            "waits": [dict(line.cite(), **line.values) for line in waits[:10]],
            "wait_s": round(total, 3),
            "round_trip_s": slowest,
            "session_ids": sessions,
        },
        fingerprint="server-side-wait:printed-timings",
    )


def _trace_check(ctx: RuleContext[ServerSideWaitPolicy]) -> list[Finding]:
    """The trace's reading: prompt, pipelined submissions, and still more than min_cycles_per_step a step."""
    run, t = ctx.run, ctx.thresholds
    if run.meta.trainer not in CYCLE_PRICED_TRAINERS:
        raise NotApplicable(
            f"trainer {run.meta.trainer}: the clock-cycle price of a step is known for SL/DPO steps "
            "(forward_backward + optim_step); an RL step's sampling has no fixed price"
        )
    if run.height("spans") == 0:
        raise NotApplicable("no trace: whether submissions were prompt and pipelined cannot be seen")
    end = ctx.run_end
    if end.left_open and not end.reached_plan:
        # A killed or hung run's last step never finished: its results are late because the run stopped,
        # and a short cut run's waits mislead the cycle estimate. run-stopped says where it stopped.
        raise NotApplicable(
            f"the run stopped inside step {end.stopped_step} (the trace ends with spans open): a cut-off run's "
            "late results are not evidence of a service queue (see run-stopped)"
        )
    cycle = ctx.clock_cycle
    if cycle is None or cycle.confidence == "low":
        raise NotApplicable(
            "no confident clock-cycle estimate (waits do not cluster at several multiples of one period): "
            "set the shared clock_cycle_s to judge results against the cycle"
        )
    submits = ctx.spans_where(TRAINING_SUBMITS, SUBMIT_COLUMNS).filter(pl.col("dur_us").is_not_null())
    if submits.is_empty():
        raise NotApplicable("the trace has no forward_backward/optim_step submissions")
    submit_median = float(submits["dur_us"].median()) / 1e6
    if submit_median > t.max_submit_s:
        return ctx.passed(
            f"submissions take {submit_median:.3f} s (median): the client is slow to hand work over "
            "(serialization-stall), so late results are not the service's"
        )
    calls = ctx.spans_where(pl.col("name").is_in(PIPELINING_CALLS), PIPELINING_COLUMNS)
    handoffs = fb_optim_waits(calls, ctx.shared.fb_optim_handoff_s)
    transitions = step_transitions(calls)
    pipelined = [
        float((~frame["sequential"]).mean())
        for frame in (handoffs, transitions)
        if frame.height and "sequential" in frame
    ]
    if not pipelined:
        raise NotApplicable("no forward_backward → optim_step pairs or step transitions to judge pipelining by")
    share = min(pipelined)
    if share < t.min_pipelined_share:
        return ctx.passed(
            f"only {share:.0%} of steps are pipelined: awaited calls (pipelining-gap) explain late results first"
        )
    intervals = step_intervals(ctx.spans_where(STEPPED_SPANS, STEP_START_COLUMNS))
    if intervals.height < t.min_step_intervals:
        raise NotApplicable(f"fewer than {t.min_step_intervals} traced step intervals")
    # Time the main task ran nothing traced for over a cycle is the client's (a sleep, untraced work:
    # inconsistent-step-times reports it), never the service's: it is taken out of the intervals.
    stalls = merge(
        [
            (float(a), float(b))
            for a, b in main_track_gaps(ctx.spans_where(MAIN_TRACK_SPANS, MAIN_TRACK_COLUMNS), cycle.seconds)
        ]
    )
    if stalls:
        client = [overlap([(a, b)], stalls) / 1e6 for a, b in intervals.select("start_us", "end_us").iter_rows()]
        intervals = intervals.with_columns(pl.col("interval_s") - pl.Series(client, dtype=pl.Float64))
    mean_interval = float(intervals["interval_s"].mean())
    cycles = mean_interval / cycle.seconds
    if cycles < t.min_cycles_per_step:
        return ctx.passed(
            f"a step every {cycles:.1f} clock cycles (mean {mean_interval:.3g} s) with prompt, pipelined submissions: "
            f"within what the service needs (one per step is the optimum, {CYCLES_NEEDED} tolerable)"
        )
    late = intervals.filter(pl.col("interval_s") > cycle.seconds)
    seconds = float((late["interval_s"] - cycle.seconds).sum())
    starved = sdk_loop_silences(
        run.task_snapshots, min_intervals=float(t.min_silent_intervals), min_seconds=float(t.min_silence_s)
    )
    starved_s = sum(s.lower_bound_s for s in starved)
    if starved and starved_s >= t.max_starved_share * seconds:
        return ctx.passed(
            f"results arrived late ({seconds:.1f} s over one cycle per step), but the SDK loop's task dumps stopped "
            f"{len(starved)} time(s) for at least {starved_s:.1f} s: a starved SDK thread cannot poll its results "
            "(gil-stall), and the guide rules the GIL out before blaming the service (Step 5 before Steps 6-7)"
        )
    sessions = session_ids(run.log_events, run.meta.config)
    escalate = (
        f"session id{'s' if len(sessions) > 1 else ''} {', '.join(sessions[:5])}"
        if sessions
        else "no session id was found in the logs (it is printed as `ServiceClient initialized for session ...`)"
    )
    return [
        ctx.finding(
            severity="info",
            title="Results arrive cycles late although the client is prompt (service side)",
            message=(
                f"Submissions hand off in {submit_median * 1e3:.0f} ms (median) and {share:.0%} of steps are "
                f"pipelined, yet a step takes {cycles:.1f} clock cycles of {cycle.seconds:.3g} s (mean interval "
                f"{mean_interval:.3g} s; a pipelined step needs one, {CYCLES_NEEDED} at most). About {seconds:.1f} s "
                f"over {late.height} step(s), the time above one cycle per step, were spent waiting on the service "
                f"side (queueing or capacity), not in your code. For an escalation: {escalate}; "
                "`trace-doctor bundle <log_path> -o escalation.zip` packs this evidence."
            ),
            fix=(
                "Nothing to change in the training loop. Check the Tinker status page; if it persists, escalate to "
                "support with the session id and the bundle (`trace-doctor bundle`)."
            ),
            steps=sorted(int(s) for s in late["step"].to_list()),
            time_ranges_us=[[a, b] for a, b in late.sort("start_us").select("start_us", "end_us").iter_rows()],
            evidence={
                "clock_cycle": cycle.to_dict(),
                "mean_step_interval_s": round(mean_interval, 6),
                "cycles_per_step": round(cycles, 3),
                "submit_median_s": round(submit_median, 6),
                "pipelined_share": round(share, 4),
                "session_ids": sessions,
            },
            seconds_lost=round(seconds, 6),
            confidence=cycle.confidence,
            fingerprint="server-side-wait",
        )
    ]


RULE = register(
    Rule(
        slug="server-side-wait",
        code="TD112",
        title="Results late on the service side (client prompt and pipelined)",
        severity="info",
        needs=(
            "trace_events.jsonl of an SL/DPO run and a confident clock-cycle estimate (or shared clock_cycle_s); "
            "or asyncio task dumps; or an async-mode pyinstrument profile"
        ),
        docs=RuleDocs(
            what=(
                "Submissions prompt and pipelined, no client-side cause, yet results arrive several clock cycles "
                "after submission: the time is spent on the service side."
            ),
            why=(
                "Once the client is ruled out, the only lever is the service: say so plainly instead of sending the "
                "user hunting in their code, and hand them what an escalation needs."
            ),
            evidence=(
                "Trace: median submit-only span (hand-off) duration, the share of steps pipelined (fb→optim back to "
                "back, next step submitted ahead), the mean step interval in clock cycles, the session ids in the "
                "logs. Task dumps: an SDK request pending min_pending_s or more while both loops kept dumping. "
                "Profile: the share of an async-mode profile under the SDK's result_async. The guide's printouts: "
                "`submit: Ss, wait: Ws` waits behind prompt submits with an `API round-trip` under 1 s. Silent "
                "while the task "
                "dumps show the SDK loop stopped (for the trace, half the late time or more) or the GIL monitor "
                "reports jitter: a starved SDK thread (gil-stall) delays results as a queue does, and the guide "
                "rules it out first."
            ),
            fix="Escalate with the session id and `trace-doctor bundle`; check the status page.",
        ),
        check=check,
        policy=ServerSideWaitPolicy,
        stage="network and service",
        shared=("clock_cycle_s", "fb_optim_handoff_s"),
        tags=("timing", "trace", "service"),
    )
)
