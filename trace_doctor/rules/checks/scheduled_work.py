"""TD114 scheduled-work: periodic evaluations and checkpoint saves, their cadence and share of wall time.

Scheduled work is a cost the user chose (and can choose to reduce), never instability: the steps it
explains (derive.scheduled) are excluded from inconsistent-step-times' judgement.
"""

from __future__ import annotations

from trace_doctor.derive.scheduled import ScheduledPhase
from trace_doctor.knowledge.tinker import PERIODIC_PHASES
from trace_doctor.model import Finding
from trace_doctor.policy.timing import ScheduledWorkPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, values_in

FIX = {
    "eval": (
        "Expected: evaluations run on their schedule. To spend less time on them, evaluate less often "
        "(a larger eval_every) or on fewer samples, or run them concurrently with training (async evals)."
    ),
    "checkpoint": (
        "Expected: checkpoints are saved on their schedule. To spend less time on them, save less often "
        "(a larger save_every) or save asynchronously without awaiting the save on the training path."
    ),
}


def _where(phase: ScheduledPhase) -> str:
    if not phase.spill_steps:
        return ""
    side = "after" if phase.spill_offset > 0 else "before"
    shown = ", ".join(str(s) for s in phase.spill_steps[:8]) + (", ..." if len(phase.spill_steps) > 8 else "")
    inside = (
        "the work for step N runs inside step N+1's timing window (the pipelined loop)"
        if phase.spill_offset > 0
        else "the work is timed on the next row but stretched this one"
    )
    return (
        f" Outside its timer, the step {side} each one is slow on the same cadence (steps {shown}: "
        f"{phase.spill_s:.0f} s over the typical step): {inside}."
    )


def check(ctx: RuleContext[ScheduledWorkPolicy]) -> list[Finding]:
    t = ctx.thresholds
    work = ctx.scheduled
    if not work.phases:
        raise NotApplicable("no evaluation or checkpoint timer runs on a step cadence")
    wall = ctx.wall_s or 0.0
    findings: list[Finding] = []
    quiet = []
    for phase in work.phases:
        seconds = phase.seconds
        share = seconds / wall if wall > 0 else 0.0
        label = "/".join(f"`{n}`" for n in phase.names)
        if share < t.min_share_of_wall or seconds < t.min_seconds:
            quiet.append(
                f"{phase.kind} ({label}) every {phase.period} steps: {seconds:.1f} s, {share:.1%} of wall time"
            )
            continue
        what = "Evaluations" if phase.kind == "eval" else "Checkpoint saves"
        steps = sorted(set(phase.steps) | set(phase.spill_steps))
        findings.append(
            ctx.finding(
                severity="info",
                title=f"{what} every {phase.period} steps take {share:.0%} of wall time",
                message=(
                    f"{label} ran on {len(phase.steps)} step(s), every {phase.period} steps, and cost {seconds:.0f} s "
                    f"of the run's {wall:.0f} s ({share:.0%}) over the typical step of {work.level_s:.1f} s; its "
                    f"timer logged {phase.timed_s:.0f} s.{_where(phase)} This is scheduled work, not instability."
                ),
                fix=FIX[phase.kind],
                steps=steps,
                evidence={
                    "kind": phase.kind,
                    "phases": list(phase.names),
                    "period": phase.period,
                    "steps": list(phase.steps),
                    "occurrences": len(phase.steps),
                    "timed_s": round(phase.timed_s, 6),
                    "in_step_s": round(phase.in_step_s, 6),
                    "outside_timer_steps": list(phase.spill_steps),
                    "outside_timer_offset": phase.spill_offset,
                    "outside_timer_s": round(phase.spill_s, 6),
                    "seconds": round(seconds, 6),
                    "typical_step_s": round(work.level_s or 0.0, 6),
                    "wall_time_s": round(wall, 6),
                    "share_of_wall": round(share, 4),
                },
                seconds_lost=round(seconds, 6),
                fraction_of_wall=round(share, 4),
                fingerprint=f"scheduled-work:{phase.kind}",
                confidence="high" if not phase.spill_steps else "medium",
            )
        )
    if findings:
        return findings
    return ctx.passed(
        f"scheduled work below {t.min_share_of_wall:.0%} of wall time or {t.min_seconds:g} s: " + "; ".join(quiet)
    )


RULE = register(
    Rule(
        slug="scheduled-work",
        code="TD114",
        title="Periodic evaluations and checkpoints: cadence and share of wall time",
        severity="info",
        needs="metrics.jsonl with per-step times and eval/checkpoint timers",
        docs=RuleDocs(
            what=(
                "Evaluations (run_evals, evals, infrequent_evals, ...) and checkpoint saves (save_checkpoint, "
                "save_checkpoint_async) that run on a step cadence: their period, how many steps ran them, "
                "their seconds and share of the run's wall time — including work that lands outside its timer "
                "on a neighbouring step of the same cadence (an eval logged on the next row; the pipelined SFT "
                "loop, where the checkpoint saved for step N runs inside step N+1's window)."
            ),
            why=(
                "Scheduled work is a cost the user chose, not instability: it is reported here, with what it "
                "costs, and never as inconsistent step times. When it is a large share of the run it is worth "
                "tuning."
            ),
            evidence=(
                "Per-step eval/checkpoint timers of the live training rows; a cadence is the most common gap "
                "between the steps that ran them (at least 3 occurrences, 2 steps apart or more); the cost is "
                "counted against the typical step (median of the steps without that work): the part of the "
                "timer that made its step longer, plus the excess of neighbouring steps slow on the same "
                "cadence (at least twice the typical step, or about the work's own seconds, beyond 3 robust "
                "sigmas of noise). Share of wall time against the run's wall time (trace extent, else the sum "
                "of step totals)."
            ),
            fix=(
                "Evaluate less often or on fewer samples, or run evals asynchronously; save checkpoints less "
                "often or without awaiting them on the training path."
            ),
        ),
        check=check,
        policy=ScheduledWorkPolicy,
        stage="timing breakdown",
        requires=(
            requires(
                "no per-step times (no time/total or phase timers in metrics)", values_in("step_times", "total_s")
            ),
            requires(
                "no evaluation or checkpoint timer in metrics",
                values_in(
                    "step_times",
                    *(f"{where}:{name}" for name in PERIODIC_PHASES for where in ("phase", "inner")),
                ),
            ),
        ),
        tags=("timing", "metrics"),
    )
)
