"""TD110 inconsistent-step-times: steady step times vary more than periodic evals/checkpoints explain.

A run whose step time settles at a new level mid-run is neither warm-up (the slow part is not a
prefix) nor steady slowness of the whole run; it is reported once here as a regime change, and
spikes and spread are judged against each step's own regime.
"""

from __future__ import annotations

import math
from math import gcd

import polars as pl

from trace_doctor.derive.regimes import regime_levels, steady_regimes
from trace_doctor.derive.robust import robust_cv
from trace_doctor.derive.step_times import phase_seconds
from trace_doctor.knowledge.tinker import PERIODIC_PHASES
from trace_doctor.model import Finding
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.requires import requires, values_in

# A spike is explained by evals/checkpoints when they account for at least half its excess.
EXPLAINED_SHARE = 0.5
# A spike whose excess lies almost entirely outside every timed phase.
UNTIMED_SPIKE_SHARE = 0.9
# Share of rows that must sit on one step residue to call a series periodic.
CADENCE_SHARE = 0.75
MAX_LISTED_STEPS = 50


def periodic_seconds(frame: pl.DataFrame) -> tuple[pl.Series, list[str]]:
    """Seconds per row in eval/checkpoint phases, and which of those phases the run logs."""
    names = [n for n in PERIODIC_PHASES if f"phase:{n}" in frame.columns or f"inner:{n}" in frame.columns]
    top = [n for n in names if f"phase:{n}" in frame.columns]
    if not top:
        return pl.Series([0.0] * frame.height), names
    total = frame.select(pl.sum_horizontal([pl.col(f"phase:{n}").fill_null(0.0) for n in top])).to_series()
    return total, names


def period_of(steps: list[int]) -> int | None:
    g = 0
    for a, b in zip(steps, steps[1:], strict=False):
        g = gcd(g, b - a)
    return g if len(steps) >= 3 and g > 1 else None


def cadence(frame: pl.DataFrame) -> tuple[int, int] | None:
    """(period, residue) when most rows recur on one step cadence (a final eval may break it)."""
    if frame.height < 3:
        return None
    diffs: list[int] = []
    for part in frame.partition_by("segment"):
        steps = sorted(int(s) for s in part["step"].to_list())
        diffs += [b - a for a, b in zip(steps, steps[1:], strict=False)]
    if not diffs:
        return None
    period = max(sorted(set(diffs)), key=diffs.count)
    if period < 2:
        return None
    residues = [int(s) % period for s in frame["step"].to_list()]
    residue = max(sorted(set(residues)), key=residues.count)
    return (period, residue) if residues.count(residue) >= max(3, CADENCE_SHARE * len(residues)) else None


def phase_cadence(times: pl.DataFrame, names: list[str]) -> tuple[str, int] | None:
    """An eval/checkpoint phase that runs on a regular step cadence, with its period."""
    for name in names:
        ran = times.filter(phase_seconds(times, name).fill_null(0.0) > 0)
        found = cadence(ran)
        if found:
            return name, found[0]
    return None


def phase_shift(before: pl.DataFrame, after: pl.DataFrame) -> tuple[str, float]:
    """The phase (or untimed time) whose typical seconds changed most between two regimes."""
    best = ("untimed", 0.0)
    for column in sorted(c for c in before.columns if c.startswith("phase:")) + ["untimed_s"]:
        a, b = before[column].fill_null(0.0).median(), after[column].fill_null(0.0).median()
        if a is None or b is None:
            continue
        delta = float(b) - float(a)
        if abs(delta) > abs(best[1]):
            best = (column.split(":", 1)[1] if ":" in column else "untimed", delta)
    return best


def regime_findings(ctx, steady: pl.DataFrame, regimes: list, wall: float | None) -> list[Finding]:
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
        phase, delta = phase_shift(early, late)
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
                confidence="high" if min(before.steps, after.steps) >= 20 else "medium",
            )
        )
    return findings


def check(ctx) -> list[Finding]:
    t = ctx.thresholds
    steady = (
        ctx.warmup.steady.filter(pl.col("total_s").is_not_null() & (pl.col("total_s") > 0))
        if "total_s" in ctx.warmup.steady.columns
        else None
    )
    if steady is None or steady.is_empty():
        raise NotApplicable("no per-step times (no time/total or phase timers in metrics)")
    if steady.height < t.min_steady_steps:
        raise NotApplicable(f"only {steady.height} steady steps (need {t.min_steady_steps})")
    steady = steady.sort(["segment", "step"])
    periodic, periodic_names = periodic_seconds(steady)
    min_regime = max(int(t.min_steady_steps), math.ceil(t.min_regime_share * steady.height))
    regimes = steady_regimes(steady, min_steps=min_regime, min_ratio=t.min_regime_ratio)
    # Spikes and spread are judged against the level of each step's own regime.
    steady = steady.with_columns(periodic.alias("_periodic"), regime_levels(steady, regimes).alias("_level"))
    median = float(steady["total_s"].median())
    steady = steady.with_columns(pl.col("_level").fill_null(median))
    spikes = steady.filter(pl.col("total_s") > t.spike_ratio * pl.col("_level")).with_columns(
        (pl.col("total_s") - pl.col("_level")).alias("_excess")
    )
    explained = spikes.filter(pl.col("_periodic") >= EXPLAINED_SHARE * pl.col("_excess"))
    unexplained = spikes.filter(pl.col("_periodic") < EXPLAINED_SHARE * pl.col("_excess"))
    # Spikes on the same cadence as a periodic eval/checkpoint phase, but outside its timer (e.g.
    # an evaluation logged on the next row), are scheduled work too.
    on_cadence = None
    spike_period = cadence(unexplained)
    scheduled = phase_cadence(ctx.step_times, periodic_names) if spike_period else None
    if spike_period and scheduled and spike_period[0] % scheduled[1] == 0:
        on_cadence = (scheduled[0], spike_period[0])
        on_beat = (pl.col("step") % spike_period[0]) == spike_period[1]
        explained = pl.concat([explained, unexplained.filter(on_beat)], how="vertical_relaxed")
        unexplained = unexplained.filter(~on_beat)
    rest = steady.join(explained.select("segment", "step"), on=["segment", "step"], how="anti")
    cv = robust_cv(rest["total_s"] / rest["_level"])
    findings: list[Finding] = regime_findings(
        ctx, steady, regimes, float(ctx.step_times["total_s"].drop_nulls().sum()) or None
    )

    if explained.height:
        steps = sorted(int(s) for s in explained["step"].to_list())
        phase = (
            max(periodic_names, key=lambda n: float(phase_seconds(explained, n).fill_null(0).sum()))
            if periodic_names
            else "evals"
        )
        period = period_of(steps)
        timing_note = "accounts for their excess"
        if on_cadence:
            phase, period = on_cadence
            timing_note = (
                f"runs on the same {period}-step cadence, but their excess is outside its timer (scheduled "
                "eval/checkpoint work logged on a neighbouring row)"
            )
        cost = float(explained["_excess"].sum())
        every = f"every {period} steps " if period else ""
        findings.append(
            ctx.finding(
                severity="info",
                title=f"Periodic slow steps explained by `{phase}`",
                message=(
                    f"{explained.height} step(s) {every}take {float(explained['total_s'].median()) / median:.0f}x "
                    f"the steady median of {median:.1f} s; `{phase}` {timing_note} ({cost:.0f} s in total). This "
                    "is scheduled work, not instability."
                ),
                fix=(
                    "Expected: evaluations/checkpoints run on their schedule. To save time, evaluate less often "
                    "or on fewer samples, or run evals concurrently (async evals)."
                ),
                steps=steps,
                evidence={
                    "phase": phase,
                    "period": period,
                    "steady_median_s": median,
                    "spike_ratio": t.spike_ratio,
                    "excess_s": round(cost, 6),
                },
                seconds_lost=round(cost, 6),
                fingerprint=f"inconsistent-step-times:periodic:{phase}",
                confidence="medium" if on_cadence else "high",
            )
        )

    if unexplained.height or cv > t.max_robust_cv:
        steps = sorted(int(s) for s in unexplained["step"].to_list())
        details = []
        for row in unexplained.sort("_excess", descending=True).head(5).iter_rows(named=True):
            untimed_share = row["untimed_s"] / row["total_s"] if row.get("untimed_s") is not None else None
            phase_cols = {c: row[c] for c in row if c.startswith("phase:") and row[c] is not None}
            biggest = max(phase_cols, key=phase_cols.get) if phase_cols else None
            note = ""
            if untimed_share is not None and untimed_share >= UNTIMED_SPIKE_SHARE:
                note = (
                    " — almost all of it outside every timed phase: consistent with the host sleeping/suspending "
                    "or the process being stopped"
                )
            elif biggest:
                note = f" — mostly in `{biggest.split(':', 1)[1]}` ({phase_cols[biggest]:.0f} s)"
            details.append(
                {
                    "step": int(row["step"]),
                    "segment": int(row["segment"]),
                    "total_s": row["total_s"],
                    "ratio": round(row["total_s"] / row["_level"], 2),
                    "level_s": row["_level"],
                    "untimed_share": None if untimed_share is None else round(untimed_share, 4),
                    "largest_phase": biggest.split(":", 1)[1] if biggest else None,
                    "note": note.strip(" —"),
                }
            )
        cost = float(unexplained["_excess"].sum()) if unexplained.height else None
        wall = float(ctx.step_times["total_s"].drop_nulls().sum()) or None
        head = details[0] if details else None
        lead = (
            f"Step {head['step']} took {head['total_s']:.0f} s ({head['ratio']}x the steady median of "
            f"{head['level_s']:.1f} s){head['note'] and ' — ' + head['note']}. "
            if head
            else ""
        )
        within = " within each regime" if len(regimes) > 1 else ""
        findings.append(
            ctx.finding(
                severity="warning",
                title="Inconsistent step times",
                message=(
                    f"{lead}{unexplained.height} unexplained spike(s) above {t.spike_ratio}x the median{within}; "
                    f"robust CV of the other steady steps{within} is {cv:.2f} (threshold {t.max_robust_cv})."
                ),
                fix=(
                    "Look for work outside the timed phases (host sleep, GIL contention, data loading, network "
                    "retries); keep the training host awake and the main thread free."
                ),
                steps=steps,
                evidence={
                    "steady_median_s": median,
                    "robust_cv": round(cv, 4),
                    "spikes": details,
                    "explained_by_periodic": sorted(int(s) for s in explained["step"].to_list()),
                },
                seconds_lost=round(cost, 6) if cost else None,
                fraction_of_wall=round(cost / wall, 4) if cost and wall else None,
                fingerprint="inconsistent-step-times:unexplained",
                confidence="medium",
            )
        )
    if findings:
        return findings
    return ctx.passed(
        f"robust CV of steady step times {cv:.2f} (≤ {t.max_robust_cv}), no spike above {t.spike_ratio}x the "
        f"median {median:.2f} s"
    )


RULE = register(
    Rule(
        slug="inconsistent-step-times",
        code="TD110",
        title="High unexplained variance of steady step time",
        severity="warning",
        needs="metrics.jsonl with per-step times",
        docs=RuleDocs(
            what=(
                "Steady-state steps whose times vary widely (robust CV) or spike far above the median, after "
                "attributing periodic spikes to evals/checkpoints when those phases explain them; a mid-run "
                "change of level (e.g. every step 3x slower from step 1000 on) is reported once as a regime "
                "change, and spikes are judged within each regime."
            ),
            why=(
                "Unexplained variance points at stalls the loop does not time: GIL contention, data loading, a "
                "host going to sleep, retries."
            ),
            evidence=(
                "Steady step totals (after the warm-up boundary), the robust CV (1.4826·MAD/median), each spike "
                "with its phases and untimed share; spikes whose excess is at least half eval/checkpoint time are "
                "reported separately as periodic; regimes from change points of log step time (levels at least "
                "min_regime_ratio apart, lasting min_regime_share of the steps) with the phase that moved."
            ),
            fix="Find the work outside the timed phases; keep the host awake; move CPU work off the main thread.",
        ),
        check=check,
        shared=("max_warmup_share",),
        requires=(
            requires(
                "no per-step times (no time/total or phase timers in metrics)", values_in("step_times", "total_s")
            ),
        ),
        tags=("timing", "metrics"),
    )
)
