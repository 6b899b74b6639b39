"""TD110 inconsistent-step-times: steady step times vary more than periodic evals/checkpoints explain.

A run whose step time settles at a new level mid-run is neither warm-up (the slow part is not a
prefix) nor steady slowness of the whole run; it is reported once here as a regime change, and
spikes and spread are judged against each step's own regime.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from trace_doctor.derive.regimes import regime_levels, steady_regimes
from trace_doctor.derive.robust import median as robust_median
from trace_doctor.derive.robust import robust_cv, robust_sigma
from trace_doctor.derive.stalls import (
    MAIN_TRACK_COLUMNS,
    MAIN_TRACK_SPANS,
    STEP_START_COLUMNS,
    STEPPED_SPANS,
    main_track_gaps,
    step_intervals,
)
from trace_doctor.derive.timekeys import PARENTS
from trace_doctor.humanize import format_seconds
from trace_doctor.knowledge.tinker import PERIODIC_PHASES, RESULT_WAIT_PHASES
from trace_doctor.model import Finding
from trace_doctor.policy.timing import InconsistentStepTimesPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import found, requires, values_in

MAX_LISTED_STEPS = 50


def periodic_seconds(frame: pl.DataFrame) -> pl.Series:
    """Seconds per row in top-level eval/checkpoint phases."""
    top = [n for n in PERIODIC_PHASES if f"phase:{n}" in frame.columns]
    if not top:
        return pl.Series([0.0] * frame.height)
    return frame.select(pl.sum_horizontal([pl.col(f"phase:{n}").fill_null(0.0) for n in top])).to_series()


def innermost_phase(row: dict, phase: str, explained_share: float) -> tuple[str, float]:
    """The timer that holds most of `phase` in this row: a nested timer (`inner:<name>`, e.g. SFT
    `get_batch` inside `submit_batch`) when it holds `explained_share` of it, else the phase itself.
    Naming the wrapper alone sends the user to the wrong code."""
    total = row.get(f"phase:{phase}") or 0.0
    inner = {
        c.split(":", 1)[1]: row[c]
        for c in row
        if c.startswith("inner:") and row[c] is not None and phase in PARENTS.get(c.split(":", 1)[1], ())
    }
    if inner and total > 0:
        name = max(inner, key=inner.get)
        if inner[name] >= explained_share * total:
            return name, float(inner[name])
    return phase, float(total)


def result_wait_spread(
    rows: pl.DataFrame, max_spread: float, spikes: pl.DataFrame, explained_share: float
) -> dict | None:
    """How the steps' spread splits between waiting for results and client work, when the client's
    share is steady: the top-level result-wait phases (`finish_batch`, `step`: awaiting
    forward_backward / optim_step) vary while everything else the step does keeps within
    `max_spread` (its robust CV, and its robust σ as a share of the median step), and every spike's
    excess (`spikes`, with `_excess`) lies at least half in the wait. None when the metrics time no
    result wait or the client work varies as much.

    A step that waits for results its loop submitted promptly varies with when the service returns
    them (a queue delivering results in pairs gives alternating short and long waits): nothing the
    user's code does between the waits explains that spread.
    """
    waits = [f"phase:{n}" for n in RESULT_WAIT_PHASES if f"phase:{n}" in rows.columns]
    if not waits or rows.height == 0:
        return None

    def wait_of(frame: pl.DataFrame) -> pl.Series:
        return frame.select(pl.sum_horizontal([pl.col(c).fill_null(0.0) for c in waits])).to_series()

    wait = wait_of(rows)
    if float(wait.sum()) <= 0:
        return None
    client = rows["total_s"] - wait
    level = robust_median(rows["total_s"])
    if not level:
        return None
    client_spread = robust_sigma(client) / level
    wait_spread = robust_sigma(wait) / level
    # The client's work is steady by the same bar as step times: in itself (its own robust CV) and as
    # a share of a step; and the wait, not the client, holds the spread.
    if robust_cv(client) > max_spread or client_spread > max_spread or wait_spread <= client_spread:
        return None
    if spikes.height:
        spike_client = spikes["total_s"] - wait_of(spikes) - (robust_median(client) or 0.0)
        if bool((spike_client > (1.0 - explained_share) * spikes["_excess"]).any()):
            return None
    return {
        "phases": [c.split(":", 1)[1] for c in waits],
        "client_spread": round(client_spread, 4),
        "wait_spread": round(wait_spread, 4),
        "wait_median_s": robust_median(wait),
        "wait_low_s": float(wait.quantile(0.1) or 0.0),
        "wait_high_s": float(wait.quantile(0.9) or 0.0),
        "client_median_s": robust_median(client),
        "spikes": spikes.height,
        "spike_steps": sorted(int(x) for x in spikes["step"].to_list())[:MAX_LISTED_STEPS],
    }


def median_delta(before: pl.DataFrame, after: pl.DataFrame, column: str) -> float | None:
    a, b = before[column].fill_null(0.0).median(), after[column].fill_null(0.0).median()
    return None if a is None or b is None else float(b) - float(a)


def phase_shift(before: pl.DataFrame, after: pl.DataFrame, explained_share: float) -> tuple[str, float]:
    """The phase (or untimed time) whose typical seconds changed most between two regimes; the
    nested timer inside it (`get_batch` in `submit_batch`) when that one moved by at least half as much."""
    best = ("untimed", 0.0)
    for column in sorted(c for c in before.columns if c.startswith("phase:")) + ["untimed_s"]:
        delta = median_delta(before, after, column)
        if delta is not None and abs(delta) > abs(best[1]):
            best = (column.split(":", 1)[1] if ":" in column else "untimed", delta)
    nested = [
        (name, delta)
        for column in sorted(c for c in before.columns if c.startswith("inner:"))
        if best[0] in PARENTS.get(name := column.split(":", 1)[1], ())
        and (delta := median_delta(before, after, column)) is not None
    ]
    if nested:
        name, delta = max(nested, key=lambda item: abs(item[1]))
        if abs(delta) >= explained_share * abs(best[1]) and delta * best[1] > 0:
            return name, delta
    return best


def regime_findings(
    ctx: RuleContext[InconsistentStepTimesPolicy], steady: pl.DataFrame, regimes: list, wall: float | None
) -> list[Finding]:
    """One finding per change of level between consecutive regimes of a segment."""
    findings: list[Finding] = []
    for before, after in zip(regimes, regimes[1:], strict=False):
        if before.segment != after.segment:
            continue
        early, late = (
            steady.filter((pl.col("segment") == r.segment) & pl.col("step").is_between(r.first_step, r.last_step))
            for r in (before, after)
        )
        slower_later = after.median_s > before.median_s
        slow, fast = (after, before) if slower_later else (before, after)
        slow_rows = late if slower_later else early
        lost = float((slow_rows["total_s"] - fast.median_s).clip(lower_bound=0).sum())
        phase, delta = phase_shift(early, late, ctx.thresholds.explained_share)
        ratio = after.median_s / before.median_s
        where = f" (resumed segment {after.segment})" if after.segment else ""
        if phase != "untimed":
            in_phase = f", mostly in `{phase}` ({delta:+.2f} s per step)"
        elif pl.concat([early["untimed_s"], late["untimed_s"]]).null_count() == early.height + late.height:
            phase, in_phase = (
                "unknown",
                "; the metrics time only whole steps, so the change cannot be placed in a phase",
            )
        else:
            in_phase = f", outside every timed phase ({delta:+.2f} s per step of untimed work)"
        if slower_later:
            title = f"Step time rose to {ratio:.1f}x from step {after.first_step}"
            shape = (
                "Not a warm-up (the slow steps come later) and not slowness of the whole run: something changed "
                "mid-run — longer sequences from that point of the dataset, a slower service or host, growing "
                "client-side state."
            )
        else:
            title = f"Step time fell to {ratio:.2f}x from step {after.first_step}"
            shape = (
                "The slow stretch lasted too long to be a warm-up; it ended by itself or after a change (shorter "
                "sequences, service recovered, a restart)."
            )
        findings.append(
            ctx.finding(
                severity="warning" if slower_later else "info",
                title=title,
                message=(
                    f"Steps {before.first_step}–{before.last_step}{where} took {before.median_s:.2f} s (median), "
                    f"steps {after.first_step}–{after.last_step} took {after.median_s:.2f} s{in_phase}. {shape} "
                    f"The slower stretch cost ~{lost:.0f} s over the faster level."
                ),
                fix=(
                    "Compare the rows around the change step (num_tokens, phase timers) and what changed at that "
                    "time (dataset order, service status, host load); split or resume the run on the faster "
                    "configuration."
                ),
                steps=list(range(slow.first_step, slow.last_step + 1))[:MAX_LISTED_STEPS],
                evidence={
                    "change_step": after.first_step,
                    "segment": after.segment,
                    "before_median_s": before.median_s,
                    "after_median_s": after.median_s,
                    "before_steps": before.steps,
                    "after_steps": after.steps,
                    "ratio": round(ratio, 4),
                    "dominant_phase": phase,
                    "dominant_phase_delta_s": round(delta, 6),
                },
                seconds_lost=round(lost, 6),
                fraction_of_wall=round(lost / wall, 4) if wall else None,
                fingerprint="inconsistent-step-times:regime-change",
                confidence="high"
                if min(before.steps, after.steps) >= ctx.thresholds.high_confidence_regime_steps
                else "medium",
            )
        )
    return findings


def untraced_stalls(
    ctx: RuleContext[InconsistentStepTimesPolicy], level_s: float, reported_steps: set[int], *, step_times: bool = True
) -> Finding | None:
    """Stalls between steps that no step time contains: the main task ran nothing traced for many
    steps' worth of time (a sleep, a blocking call, untraced work). Only the trace shows them: SFT
    steps are timed by their phases, and the stall falls between them. `step_times`: the run's
    metrics time its steps (`level_s` is their steady median; else the median traced interval)."""
    if ctx.run.height("spans") == 0 or level_s <= 0:
        return None
    t = ctx.thresholds
    gaps = main_track_gaps(ctx.spans_where(MAIN_TRACK_SPANS, MAIN_TRACK_COLUMNS), t.spike_ratio * level_s)
    if not gaps:
        return None
    starts = (
        ctx.spans_where(STEPPED_SPANS, STEP_START_COLUMNS)
        .group_by("step")
        .agg(pl.col("start_us").min().alias("start_us"))
        .sort("start_us")
        .drop_nulls("start_us")
    )
    # The first step starting at or after each gap's end (less 1 µs), as a filter of `starts` finds it:
    # one binary search per gap over the sorted starts instead of a filter of every step per gap (NaN
    # sorts last and compares largest in both).
    first_after = np.searchsorted(starts.get_column("start_us").to_numpy(), [b - 1 for _, b in gaps], side="left")
    step_of = starts.get_column("step").to_list()
    rows: list[tuple[list[float], int | None]] = []
    for (a, b), at in zip(gaps, first_after.tolist(), strict=True):
        step = int(step_of[at]) if at < len(step_of) else None
        if step is not None and step in reported_steps:
            continue  # its step time already shows it as a spike
        rows.append(([a, b], step))
    if not rows:
        return None
    seconds = sum((b - a) / 1e6 for (a, b), _ in rows)
    (a, b), step = max(rows, key=lambda r: r[0][1] - r[0][0])
    where = f" before step {step}" if step is not None else ""
    return ctx.finding(
        severity="warning",
        title="Stall between steps, outside every timed phase",
        message=(
            f"The main task ran nothing traced for {(b - a) / 1e6:.1f} s{where} ({(b - a) / 1e6 / level_s:.0f}x the "
            + (
                f"steady step of {level_s:.3g} s); {len(rows)} such stall(s), {seconds:.1f} s in all. No step time "
                "contains them (the step is timed by its phases), so only the trace shows them"
                if step_times
                else f"median traced step interval of {level_s:.3g} s); {len(rows)} such stall(s), {seconds:.1f} s "
                "in all. The run has no step times in metrics, so only the trace shows them"
            )
            + ": a sleep or blocking call on the main thread, untraced work between steps, another thread holding "
            'the GIL (the guide\'s "gaps with no bars at all": gil-stall weighs it with the task dumps), or the '
            "host suspending the process."
        ),
        fix=(
            "Find what runs between steps (logging, checkpoint or eval code outside the cookbook's timers, a "
            "time.sleep, a blocking .result()); trace or time it, and move it off the training loop."
        ),
        steps=sorted({s for _, s in rows if s is not None})[:MAX_LISTED_STEPS],
        time_ranges_us=[r for r, _ in rows],
        evidence={"stalls": [{"start_us": r[0], "end_us": r[1], "before_step": s} for r, s in rows[:20]]},
        seconds_lost=round(seconds, 6),
        fingerprint="inconsistent-step-times:untraced-stall",
        confidence="medium",
    )


def sampling_by_step(ctx) -> dict[tuple[int, int], float]:
    """(segment, step) -> the untimed seconds its sampling accounts for beyond a typical step's: what
    its generated tokens predict above the typical untimed step (derive/loop_phases), when the loop's
    structure names the untimed remainder sampling; empty otherwise."""
    phases = ctx.loop_phases
    if phases is None or phases.untimed_named is None:
        return {}
    typical = float(phases.evidence.get("typical_untimed_s") or 0.0)
    return {
        (int(g), int(s)): max(float(e) - typical, 0.0)
        for g, s, e in phases.per_step.select("segment", "step", "expected_s").iter_rows()
        if e is not None
    }


def spike_cause(
    row: dict, sampling: dict, *, explained_share: float, untimed_spike_share: float
) -> tuple[str, str, str | None]:
    """(cause, note, phase) of one slow step: a phase that ran long, untimed time the generated tokens
    explain (sampling ran long), or an untimed gap beyond them with nothing timed running (the host
    asleep or the process stopped). `explained_share`, `untimed_spike_share`: the rule's thresholds."""
    excess = row["_excess"]
    untimed = row.get("untimed_s")
    phase_cols = {c: row[c] for c in row if c.startswith("phase:") and row[c] is not None}
    biggest = max(phase_cols, key=phase_cols.get) if phase_cols else None
    untimed_share = untimed / row["total_s"] if untimed is not None and row["total_s"] else None
    typical_untimed = row.get("_typical_untimed") or 0.0
    untimed_excess = (untimed or 0.0) - typical_untimed
    if (
        biggest is None
        or (untimed_share is not None and untimed_share >= untimed_spike_share)
        or (untimed_excess >= explained_share * excess)
    ):
        more_sampling = sampling.get((int(row["segment"]), int(row["step"])), 0.0)
        if untimed_excess > 0 and more_sampling >= explained_share * untimed_excess:
            return "sampling", "untimed time the step's sampling explains (it generated more, or slower)", None
        return (
            "host-sleep",
            "almost all of it outside every timed phase, and not the step's generated tokens (no more than "
            "usual): consistent with the host sleeping/suspending, the process being stopped, or a stall",
            None,
        )
    top = biggest.split(":", 1)[1]
    name, seconds = innermost_phase(row, top, explained_share)
    inside = f" inside `{top}`" if name != top else ""
    return "phase", f"mostly in `{name}`{inside} ({format_seconds(seconds)})", name


# What to do about each cause of a slow step.
SPIKE_FIXES = {
    "host-sleep": (
        "Keep the training host awake for the whole run (macOS: `caffeinate -i`; Linux: `systemd-inhibit`), or run "
        "it on a server rather than a laptop; a resumed laptop also loses its connection to the service."
    ),
    "sampling": (
        "These steps sampled longer: cap the rollouts (`max_tokens`), bound what an episode may generate, and "
        "overlap sampling with training (async RL with `max_steps_off_policy`, or `stream_minibatch_config`)."
    ),
    "training": (
        "The service took longer to train on these steps: look for request retries or errors around them in "
        "logs.log, check the Tinker status page, and escalate a recurring slowdown with the session id."
    ),
    "phase": (
        "Look at what the named phase did on these steps (its inputs, retries, I/O); time its parts to find the "
        "slow one."
    ),
    "spread": (
        "Look for work outside the timed phases (host sleep, GIL contention, data loading, network retries); keep "
        "the training host awake and the main thread free."
    ),
}
SPIKE_TITLES = {
    "host-sleep": "Untimed gaps with nothing running (host asleep?)",
    "sampling": "Steps slowed by longer sampling",
    "phase": "A phase ran long on some steps",
    "spread": "Inconsistent step times",
}
# An untimed spike nothing explains keeps the fingerprint the rule has always given its spikes
# (suppressions and baselines name it); the causes it now tells apart get their own.
FINGERPRINTS = {
    "host-sleep": "inconsistent-step-times:unexplained",
    "sampling": "inconsistent-step-times:sampling",
    "phase": "inconsistent-step-times:phase",
}
TRAINING_PHASE_NAMES = ("train", "train_step", "step", "finish_batch", "forward_backward", "optim_step")


def spike_details(rows: pl.DataFrame, sampling: dict, t: InconsistentStepTimesPolicy) -> list[dict]:
    details = []
    for row in rows.sort("_excess", descending=True).iter_rows(named=True):
        cause, note, phase = spike_cause(
            row, sampling, explained_share=t.explained_share, untimed_spike_share=t.untimed_spike_share
        )
        untimed_share = row["untimed_s"] / row["total_s"] if row.get("untimed_s") is not None else None
        details.append(
            {
                "step": int(row["step"]),
                "segment": int(row["segment"]),
                "total_s": row["total_s"],
                "excess_s": row["_excess"],
                "ratio": round(row["total_s"] / row["_level"], 2),
                "level_s": row["_level"],
                "untimed_share": None if untimed_share is None else round(untimed_share, 4),
                "cause": cause,
                "phase": phase,
                "note": note,
            }
        )
    return details


def spike_findings(
    ctx, unexplained: pl.DataFrame, *, cv: float, median: float, regimes: int, excluded: list[int]
) -> list[Finding]:
    """One finding per distinct cause of the slow steps (each with its own fix and steps), and one for a
    spread without spikes."""
    t = ctx.thresholds
    within = " within each regime" if regimes > 1 else ""
    typical_untimed = robust_median(ctx.step_times["untimed_s"]) if "untimed_s" in ctx.step_times.columns else None
    rows = unexplained.with_columns(pl.lit(typical_untimed or 0.0, dtype=pl.Float64).alias("_typical_untimed"))
    details = spike_details(rows, sampling_by_step(ctx), t)
    groups: dict[tuple[str, str | None], list[dict]] = {}
    for d in details:
        groups.setdefault((d["cause"], d["phase"]), []).append(d)
    spread_note = f"robust CV of the other steady steps{within} is {cv:.2f} (threshold {t.max_robust_cv})"
    findings = []
    wall = ctx.wall_s
    for (cause, phase), group in groups.items():
        head = group[0]
        cost = sum(d["excess_s"] for d in group)
        steps = sorted(d["step"] for d in group)
        listed = ", ".join(str(s) for s in steps[:MAX_LISTED_STEPS])
        fix_key = "training" if cause == "phase" and phase in TRAINING_PHASE_NAMES else cause
        title = f"`{phase}` ran long on some steps" if cause == "phase" else SPIKE_TITLES[cause]
        findings.append(
            ctx.finding(
                severity="warning",
                title=title,
                message=(
                    f"Step {head['step']} took {format_seconds(head['total_s'])} ({head['ratio']}x the steady median "
                    f"of {format_seconds(head['level_s'])}) — {head['note']}. {len(group)} step(s) above "
                    f"{t.spike_ratio}x the median{within} with this cause (steps {listed}), "
                    f"{format_seconds(cost)} over the median in all; {spread_note}."
                ),
                fix=SPIKE_FIXES[fix_key],
                steps=steps,
                evidence={
                    "steady_median_s": median,
                    "robust_cv": round(cv, 4),
                    "cause": cause,
                    "spikes": group[:MAX_LISTED_STEPS],
                    "explained_by_periodic": excluded,
                },
                seconds_lost=round(cost, 6) if cost else None,
                fraction_of_wall=round(cost / wall, 4) if cost and wall else None,
                fingerprint=FINGERPRINTS[cause] + (f":{phase}" if phase else ""),
                confidence="medium",
            )
        )
    if not findings:
        findings.append(
            ctx.finding(
                severity="warning",
                title=SPIKE_TITLES["spread"],
                message=f"No step spikes above {t.spike_ratio}x the median{within}, but the {spread_note}.",
                fix=SPIKE_FIXES["spread"],
                steps=[],
                evidence={"steady_median_s": median, "robust_cv": round(cv, 4), "explained_by_periodic": excluded},
                fingerprint="inconsistent-step-times:unexplained",
                confidence="medium",
            )
        )
    return findings


def dominant_steps(ctx, steady: pl.DataFrame) -> list[Finding]:
    """Too few steady steps to judge variance, but a step (or a run of consecutive ones) far above the
    others that holds a large share of the wall time: reported with its cause whatever the step count."""
    t = ctx.thresholds
    wall = ctx.wall_s
    if not wall or steady.height < 2:
        return []
    level = float(steady["total_s"].median())
    slow = steady.sort(["segment", "step"]).with_columns(
        (pl.col("total_s") > t.spike_ratio * level).alias("_slow"), pl.lit(level).alias("_level")
    )
    # Consecutive slow steps of a segment form one block; a block counts by its whole share.
    block = (pl.col("_slow") != pl.col("_slow").shift(1)) | (pl.col("segment") != pl.col("segment").shift(1))
    slow = slow.with_columns(block.fill_null(True).cum_sum().alias("_block"))
    held = (
        slow.filter("_slow")
        .group_by("_block")
        .agg(pl.col("total_s").sum().alias("_held"))
        .filter(pl.col("_held") >= t.min_wall_share_alone * wall)
    )
    rows = slow.join(held, on="_block", how="semi").with_columns(
        (pl.col("total_s") - pl.col("_level")).alias("_excess")
    )
    if rows.is_empty():
        return []
    return spike_findings(ctx, rows, cv=robust_cv(steady["total_s"] / level), median=level, regimes=1, excluded=[])


def share_text(share: float) -> str:
    """A share for people: "<1%" rather than a misleading "0%"."""
    return "<1%" if share < 0.005 else f"{share:.0%}"


def result_wait_finding(ctx: RuleContext[InconsistentStepTimesPolicy], spread: dict, cv: float) -> Finding:
    """The spread is in the wait for results while the client's work is steady: info, not the user's code."""
    t = ctx.thresholds
    phases = ", ".join(f"`{p}`" for p in spread["phases"])
    spikes = (
        f"; {spread['spikes']} step(s) above {t.spike_ratio}x the median, steps {spread['spike_steps'][:8]}"
        if spread["spikes"]
        else ""
    )
    return ctx.finding(
        severity="info",
        title="Step times vary in the wait for results, not in your code",
        message=(
            f"Steady step times vary (robust CV {cv:.2f}, threshold {t.max_robust_cv}{spikes}), but the work the "
            f"client does in a step is steady ({format_seconds(spread['client_median_s'])} median, varying by "
            f"{share_text(spread['client_spread'])} of a step): the spread is in {phases}, the wait for "
            f"forward_backward / optim_step results ({format_seconds(spread['wait_low_s'])} to "
            f"{format_seconds(spread['wait_high_s'])}, "
            f"median {format_seconds(spread['wait_median_s'])}). When the service returns results is its own: "
            "queueing or capacity delivers them unevenly. If pipelining-gap does not fire (submissions ahead "
            "of the waits), this is service-side; server-side-wait judges it with a trace and a clock cycle."
        ),
        fix=(
            "Nothing in the loop's own work to change. Make sure the next step is submitted before awaiting "
            "results (pipelining-gap); if it is, check the Tinker status page and escalate a persistent slowdown "
            "with the session id (`trace-doctor bundle`)."
        ),
        steps=spread["spike_steps"],
        evidence={"robust_cv": round(cv, 4), "result_wait": spread},
        fingerprint="inconsistent-step-times:result-wait",
        confidence="medium",
    )


def trace_only(ctx: RuleContext[InconsistentStepTimesPolicy]) -> list[Finding]:
    """Without per-step times (a run with only a trace) the trace still shows stalls between steps,
    judged against the median traced step interval; spread and spikes need the metrics' step times."""
    t = ctx.thresholds
    if ctx.run.height("spans") == 0:
        raise NotApplicable("no per-step times (no time/total or phase timers in metrics)")
    intervals = step_intervals(ctx.spans_where(STEPPED_SPANS, STEP_START_COLUMNS))
    if intervals.height < t.min_steady_steps:
        raise NotApplicable(
            f"no per-step times in metrics, and {intervals.height} traced step interval(s) "
            f"(need {t.min_steady_steps} to judge stalls against)"
        )
    level = float(intervals["interval_s"].median())
    stall = untraced_stalls(ctx, level, set(), step_times=False)
    if stall is not None:
        return [stall]
    return ctx.passed(
        f"no per-step times in metrics (spread and spikes not judged); the trace has no stall between steps "
        f"above {t.spike_ratio}x the median traced step interval ({format_seconds(level)})"
    )


def check(ctx: RuleContext[InconsistentStepTimesPolicy]) -> list[Finding]:
    t = ctx.thresholds
    steady = (
        ctx.warmup.steady.filter(pl.col("total_s").is_not_null() & (pl.col("total_s") > 0))
        if "total_s" in ctx.warmup.steady.columns
        else None
    )
    if steady is None or steady.is_empty():
        return trace_only(ctx)
    if steady.height < t.min_steady_steps:
        dominant = dominant_steps(ctx, steady)
        if dominant:
            return dominant
        raise NotApplicable(
            f"only {steady.height} steady steps (need {t.min_steady_steps} to judge variance), and no step holds "
            f"{t.min_wall_share_alone:.0%} of the wall time"
        )
    steady = steady.sort(["segment", "step"])
    periodic = periodic_seconds(steady)
    min_regime = max(int(t.min_steady_steps), math.ceil(t.min_regime_share * steady.height))
    regimes = steady_regimes(steady, min_steps=min_regime, min_ratio=t.min_regime_ratio)
    # Spikes and spread are judged against the level of each step's own regime.
    steady = steady.with_columns(periodic.alias("_periodic"), regime_levels(steady, regimes).alias("_level"))
    median = float(steady["total_s"].median())
    steady = steady.with_columns(pl.col("_level").fill_null(median))
    # Scheduled work (evals and checkpoints on their cadence, also where they land outside their timer
    # on a neighbouring step) is judged by scheduled-work, never as inconsistency.
    scheduled = ctx.scheduled.explained
    on_schedule = pl.Series(
        [(int(g), int(s)) in scheduled for g, s in steady.select("segment", "step").iter_rows()], dtype=pl.Boolean
    )
    spikes = steady.filter(pl.col("total_s") > t.spike_ratio * pl.col("_level")).with_columns(
        (pl.col("total_s") - pl.col("_level")).alias("_excess")
    )
    # A spike its own eval/checkpoint timer accounts for is scheduled work too (e.g. a one-off final eval).
    explained = spikes.filter(pl.col("_periodic") >= t.explained_share * pl.col("_excess"))
    excluded = pl.concat(
        [steady.filter(on_schedule).select("segment", "step"), explained.select("segment", "step")]
    ).unique()
    unexplained = spikes.join(excluded, on=["segment", "step"], how="anti")
    rest = steady.join(excluded, on=["segment", "step"], how="anti")
    cv = robust_cv(rest["total_s"] / rest["_level"])
    findings: list[Finding] = regime_findings(
        ctx, steady, regimes, float(ctx.step_times["total_s"].drop_nulls().sum()) or None
    )
    excluded_steps = sorted(int(s) for s in excluded["step"].to_list())
    stall = untraced_stalls(
        ctx, median, {int(s) for s in spikes["step"].to_list()} | {int(s) for s in excluded["step"].to_list()}
    )
    if stall is not None:
        findings.append(stall)

    # Long waits on a few steps are stalls for the stall rules; on many, how the service returns results.
    wait_pattern = cv > t.max_robust_cv or unexplained.height >= t.min_wait_spike_share * rest.height
    in_wait = result_wait_spread(rest, t.max_robust_cv, unexplained, t.explained_share) if wait_pattern else None
    if in_wait is not None:
        findings.append(result_wait_finding(ctx, in_wait, cv))
    elif unexplained.height or cv > t.max_robust_cv:
        findings += spike_findings(
            ctx, unexplained, cv=cv, median=median, regimes=len(regimes), excluded=excluded_steps
        )
    if findings:
        return findings
    scheduled_note = (
        f"; {len(excluded_steps)} step(s) are scheduled work (evals/checkpoints, see scheduled-work)"
        if excluded_steps
        else ""
    )
    return ctx.passed(
        f"robust CV of steady step times {cv:.2f} (≤ {t.max_robust_cv}), no spike above {t.spike_ratio}x the "
        f"median {median:.2f} s{scheduled_note}"
    )


RULE = register(
    Rule(
        slug="inconsistent-step-times",
        code="TD110",
        title="High unexplained variance of steady step time",
        severity="warning",
        needs="metrics.jsonl with per-step times (or, for stalls between steps only, trace_events.jsonl)",
        docs=RuleDocs(
            what=(
                "Steady-state steps whose times vary widely (robust CV) or spike far above the median, leaving "
                "out scheduled work (evals/checkpoints, reported by scheduled-work); a mid-run "
                "change of level (e.g. every step 3x slower from step 1000 on) is reported once as a regime "
                "change, and spikes are judged within each regime."
            ),
            why=(
                "Unexplained variance points at stalls the loop does not time: GIL contention, data loading, a "
                "host going to sleep, retries."
            ),
            evidence=(
                "Steady step totals (after the warm-up boundary), the robust CV (1.4826·MAD/median), each spike "
                "with its phases and untimed share; steps of scheduled work (on an eval/checkpoint cadence, also "
                "outside the timer on a neighbouring step) and spikes whose excess is at least half eval/checkpoint "
                "time are left out (never inconsistency); regimes from change points of log step time (levels at least "
                "min_regime_ratio apart, lasting min_regime_share of the steps) with the phase that moved."
            ),
            fix="Find the work outside the timed phases; keep the host awake; move CPU work off the main thread.",
        ),
        check=check,
        policy=InconsistentStepTimesPolicy,
        stage="symptoms",
        shared=("max_warmup_share",),
        requires=(
            requires(
                "no per-step times (no time/total or phase timers in metrics) and no trace",
                values_in("step_times", "total_s"),
                found("trace"),
            ),
        ),
        tags=("timing", "metrics"),
    )
)
