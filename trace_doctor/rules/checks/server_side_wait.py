"""TD112 server-side-wait: the client did its part, yet results arrive cycles late.

The debug guide's last stage. Only when the client is ruled out — submissions hand off in
milliseconds, the loop pipelines (optim_step right behind forward_backward, the next step submitted
before the results are awaited) — and the results still take several clock cycles is the time on the
service side (queueing, capacity). A pipelined step is served in one or two cycles, so a long cycle
alone is not a server problem: one cycle per step is the optimum. The finding is info: nothing in
the user's code fixes it, but support can, given the session id and a bundle.
"""

from __future__ import annotations

import polars as pl

from trace_doctor.derive.intervals import merge, overlap
from trace_doctor.derive.pipelining import PIPELINING_CALLS, fb_optim_waits, step_transitions
from trace_doctor.derive.sessions import session_ids
from trace_doctor.derive.stalls import MAIN_TRACK_SPANS, main_track_gaps, step_intervals
from trace_doctor.knowledge.tinker import TRAINING_SUBMIT_CALLS
from trace_doctor.model import Finding
from trace_doctor.policy.service import ServerSideWaitPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext

# Trainers whose step the clock-cycle model prices: forward_backward + optim_step.
CYCLE_PRICED_TRAINERS = ("sl", "dpo")
# A pipelined forward_backward + optim_step is served in this many cycles.
CYCLES_NEEDED = 2


def check(ctx: RuleContext[ServerSideWaitPolicy]) -> list[Finding]:
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
    submits = run.spans_where(pl.col("name").is_in(list(TRAINING_SUBMIT_CALLS)) & pl.col("dur_us").is_not_null())
    if submits.is_empty():
        raise NotApplicable("the trace has no forward_backward/optim_step submissions")
    submit_median = float(submits["dur_us"].median()) / 1e6
    if submit_median > t.max_submit_s:
        return ctx.passed(
            f"submissions take {submit_median:.3f} s (median): the client is slow to hand work over "
            "(serialization-stall), so late results are not the service's"
        )
    calls = run.spans_where(pl.col("name").is_in(PIPELINING_CALLS))
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
    intervals = step_intervals(run.spans_where(pl.col("step").is_not_null(), ["segment", "step", "start_us"]))
    if intervals.height < t.min_step_intervals:
        raise NotApplicable(f"fewer than {t.min_step_intervals} traced step intervals")
    # Time the main task ran nothing traced for over a cycle is the client's (a sleep, untraced work:
    # inconsistent-step-times reports it), never the service's: it is taken out of the intervals.
    stalls = merge([(float(a), float(b)) for a, b in main_track_gaps(run.spans_where(MAIN_TRACK_SPANS), cycle.seconds)])
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
        needs="trace_events.jsonl of an SL/DPO run and a confident clock-cycle estimate (or shared clock_cycle_s)",
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
                "Median submit-only span (hand-off) duration, the share of steps pipelined (fb→optim back to back, "
                "next step submitted ahead), the mean step interval in clock cycles, the session ids in the logs."
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
