"""TD110 inconsistent-step-times: steady step times vary more than periodic evals/checkpoints explain."""

from __future__ import annotations

from math import gcd

import polars as pl

from trace_doctor.derive.step_times import phase_seconds
from trace_doctor.derive.timekeys import PERIODIC_PHASES
from trace_doctor.model import Finding
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register

MAD_TO_SIGMA = 1.4826
# A spike is explained by evals/checkpoints when they account for at least half its excess.
EXPLAINED_SHARE = 0.5
# A spike whose excess lies almost entirely outside every timed phase.
UNTIMED_SPIKE_SHARE = 0.9
# Share of rows that must sit on one step residue to call a series periodic.
CADENCE_SHARE = 0.75


def robust_cv(values: pl.Series) -> float:
    median = float(values.median())
    mad = float((values - median).abs().median())
    return MAD_TO_SIGMA * mad / median if median > 0 else 0.0


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
    for a, b in zip(steps, steps[1:]):
        g = gcd(g, b - a)
    return g if len(steps) >= 3 and g > 1 else None


def cadence(frame: pl.DataFrame) -> tuple[int, int] | None:
    """(period, residue) when most rows recur on one step cadence (a final eval may break it)."""
    if frame.height < 3:
        return None
    diffs: list[int] = []
    for part in frame.partition_by("segment"):
        steps = sorted(int(s) for s in part["step"].to_list())
        diffs += [b - a for a, b in zip(steps, steps[1:])]
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


def check(ctx) -> list[Finding]:
    t = ctx.thresholds
    steady = ctx.warmup.steady.filter(pl.col("total_s").is_not_null() & (pl.col("total_s") > 0)) if "total_s" in ctx.warmup.steady.columns else None
    if steady is None or steady.is_empty():
        raise NotApplicable("no per-step times (no time/total or phase timers in metrics)")
    if steady.height < t["min_steady_steps"]:
        raise NotApplicable(f"only {steady.height} steady steps (need {t['min_steady_steps']})")
    steady = steady.sort(["segment", "step"])
    periodic, periodic_names = periodic_seconds(steady)
    steady = steady.with_columns(periodic.alias("_periodic"))
    median = float(steady["total_s"].median())
    spikes = steady.filter(pl.col("total_s") > t["spike_ratio"] * median).with_columns((pl.col("total_s") - median).alias("_excess"))
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
    cv = robust_cv(rest["total_s"])
    findings: list[Finding] = []

    if explained.height:
        steps = sorted(int(s) for s in explained["step"].to_list())
        phase = max(periodic_names, key=lambda n: float(phase_seconds(explained, n).fill_null(0).sum())) if periodic_names else "evals"
        period = period_of(steps)
        timing_note = "accounts for their excess"
        if on_cadence:
            phase, period = on_cadence
            timing_note = f"runs on the same {period}-step cadence, but their excess is outside its timer (scheduled eval/checkpoint work logged on a neighbouring row)"
        cost = float(explained["_excess"].sum())
        every = f"every {period} steps " if period else ""
        findings.append(Finding(
            rule="", code="", severity="info",
            title=f"Periodic slow steps explained by `{phase}`",
            message=f"{explained.height} step(s) {every}take {float(explained['total_s'].median()) / median:.0f}x the steady median of {median:.1f} s; `{phase}` {timing_note} ({cost:.0f} s in total). This is scheduled work, not instability.",
            fix="Expected: evaluations/checkpoints run on their schedule. To save time, evaluate less often or on fewer samples, or run evals concurrently (async evals).",
            steps=steps, evidence={"phase": phase, "period": period, "steady_median_s": median, "spike_ratio": t["spike_ratio"], "excess_s": round(cost, 6)},
            seconds_lost=round(cost, 6), fingerprint=f"inconsistent-step-times:periodic:{phase}", confidence="medium" if on_cadence else "high",
        ))

    if unexplained.height or cv > t["max_robust_cv"]:
        steps = sorted(int(s) for s in unexplained["step"].to_list())
        details = []
        for row in unexplained.sort("_excess", descending=True).head(5).iter_rows(named=True):
            untimed_share = row["untimed_s"] / row["total_s"] if row.get("untimed_s") is not None else None
            phase_cols = {c: row[c] for c in row if c.startswith("phase:") and row[c] is not None}
            biggest = max(phase_cols, key=phase_cols.get) if phase_cols else None
            note = ""
            if untimed_share is not None and untimed_share >= UNTIMED_SPIKE_SHARE:
                note = " — almost all of it outside every timed phase: consistent with the host sleeping/suspending or the process being stopped"
            elif biggest:
                note = f" — mostly in `{biggest.split(':', 1)[1]}` ({phase_cols[biggest]:.0f} s)"
            details.append({"step": int(row["step"]), "segment": int(row["segment"]), "total_s": row["total_s"], "ratio": round(row["total_s"] / median, 2), "untimed_share": None if untimed_share is None else round(untimed_share, 4), "largest_phase": biggest.split(":", 1)[1] if biggest else None, "note": note.strip(" —")})
        cost = float(unexplained["_excess"].sum()) if unexplained.height else None
        wall = float(ctx.step_times["total_s"].drop_nulls().sum()) or None
        head = details[0] if details else None
        lead = (f"Step {head['step']} took {head['total_s']:.0f} s ({head['ratio']}x the steady median of {median:.1f} s){head['note'] and ' — ' + head['note']}. "
                if head else "")
        findings.append(Finding(
            rule="", code="", severity="warning",
            title="Inconsistent step times",
            message=f"{lead}{unexplained.height} unexplained spike(s) above {t['spike_ratio']}x the median; robust CV of the other steady steps is {cv:.2f} (threshold {t['max_robust_cv']}).",
            fix="Look for work outside the timed phases (host sleep, GIL contention, data loading, network retries); keep the training host awake and the main thread free.",
            steps=steps, evidence={"steady_median_s": median, "robust_cv": round(cv, 4), "spikes": details, "explained_by_periodic": sorted(int(s) for s in explained["step"].to_list())},
            seconds_lost=round(cost, 6) if cost else None, fraction_of_wall=round(cost / wall, 4) if cost and wall else None,
            fingerprint="inconsistent-step-times:unexplained", confidence="medium",
        ))
    if findings:
        return findings
    return ctx.passed(f"robust CV of steady step times {cv:.2f} (≤ {t['max_robust_cv']}), no spike above {t['spike_ratio']}x the median {median:.2f} s")


RULE = register(Rule(
    slug="inconsistent-step-times", code="TD110", title="High unexplained variance of steady step time", severity="warning",
    needs="metrics.jsonl with per-step times",
    docs=RuleDocs(
        what="Steady-state steps whose times vary widely (robust CV) or spike far above the median, after attributing periodic spikes to evals/checkpoints when those phases explain them.",
        why="Unexplained variance points at stalls the loop does not time: GIL contention, data loading, a host going to sleep, retries.",
        evidence="Steady step totals (after the warm-up boundary), the robust CV (1.4826·MAD/median), each spike with its phases and untimed share; spikes whose excess is at least half eval/checkpoint time are reported separately as periodic.",
        fix="Find the work outside the timed phases; keep the host awake; move CPU work off the main thread.",
    ),
    check=check, tags=("timing", "metrics"),
))
