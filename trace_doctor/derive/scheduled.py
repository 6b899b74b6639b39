"""Scheduled work: evaluations and checkpoint saves that recur on a step cadence, and what they cost.

One entry per kind of periodic work (`eval`, `checkpoint`; names in knowledge.tinker) whose timer
runs on a regular step cadence (period >= 2: the RL sampler-weight sync logged as `save_checkpoint`
on every step is not periodic). Its cost is counted against the typical step (`level`: the median
of the steps where no periodic phase ran), so every second is counted once:

- on the steps that time it, the part of the timer that made the step longer than the level;
- on a neighbouring step, on the same cadence, an excess outside the timer: the eval logged on the
  row next to the one whose window it stretched, and the cookbook's pipelined SFT loop, where the
  checkpoint saved for step N runs inside step N+1's `time/total` window (that step's excess is
  about the checkpoint's time).

The detection has no knobs (it defines what scheduled work is): rules that judge step times
(inconsistent-step-times) exclude these steps whatever thresholds scheduled-work reports with.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import polars as pl

from trace_doctor.derive.step_times import phase_seconds
from trace_doctor.knowledge.tinker import CHECKPOINT_PHASES, EVAL_PHASES

KINDS = (("eval", EVAL_PHASES), ("checkpoint", CHECKPOINT_PHASES))
# Share of the occurrences that must sit on one step residue (and of the neighbours that must be
# slow) to call it a cadence; a final or an extra save may break it.
CADENCE_SHARE = 0.75
# Fewest occurrences that make a cadence.
MIN_OCCURRENCES = 3
# A neighbouring step is slow by the scheduled work when its excess over the level is beyond the
# steps' own noise (robust sigma) and either makes it this many times the level...
NEIGHBOUR_SPIKE_RATIO = 2.0
NOISE_SIGMAS = 3.0
# ...or is about the work's own timed seconds (the pipelined SFT checkpoint landing in the next step).
CARRY_OVER_BAND = (0.5, 2.0)
# A step whose timed periodic seconds are at least this share of its excess is scheduled work.
EXPLAINED_SHARE = 0.5


@dataclass(frozen=True)
class ScheduledPhase:
    kind: str  # "eval" or "checkpoint"
    names: tuple[str, ...]  # timers of this kind the run logs on those steps
    period: int  # steps between occurrences
    steps: tuple[int, ...]  # steps whose row timed the work
    timed_s: float  # the timers' seconds, summed
    in_step_s: float  # the part of it that made those steps longer than the level
    spill_offset: int  # 0, or -1 / +1: the neighbouring step whose window holds untimed scheduled work
    spill_steps: tuple[int, ...]
    spill_s: float  # excess of the neighbouring steps over the level
    # (segment, step) of every step this work explains
    explained: frozenset[tuple[int, int]]

    @property
    def seconds(self) -> float:
        return self.in_step_s + self.spill_s


@dataclass(frozen=True)
class ScheduledWork:
    phases: tuple[ScheduledPhase, ...]
    level_s: float | None  # the typical step the excess is counted against

    @property
    def explained(self) -> frozenset[tuple[int, int]]:
        out: set[tuple[int, int]] = set()
        for phase in self.phases:
            out |= phase.explained
        return frozenset(out)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.phases)


def step_cadence(frame: pl.DataFrame) -> int | None:
    """The period of steps that recur on one step cadence (most common gap within a segment), if any."""
    if frame.height < MIN_OCCURRENCES:
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
    return period if residues.count(residue) >= max(MIN_OCCURRENCES, CADENCE_SHARE * len(residues)) else None


def period_of(steps: list[int]) -> int | None:
    """Greatest common gap of at least three steps, when above 1."""
    g = 0
    for a, b in zip(steps, steps[1:], strict=False):
        g = gcd(g, b - a)
    return g if len(steps) >= 3 and g > 1 else None


def _kind_seconds(times: pl.DataFrame, names: tuple[str, ...]) -> tuple[pl.Series, list[str]]:
    """Seconds of the kind's timers per row (the largest, as they nest: save_checkpoint wraps
    save_checkpoint_async), and which of them the run logs."""
    present = [n for n in names if f"phase:{n}" in times.columns or f"inner:{n}" in times.columns]
    if not present:
        return pl.Series([0.0] * times.height), []
    frame = pl.DataFrame({n: phase_seconds(times, n).fill_null(0.0) for n in present})
    return frame.select(pl.max_horizontal(present)).to_series(), present


def ran_of(frame: pl.DataFrame, kind: str) -> pl.DataFrame:
    return frame.filter(pl.col(f"_k:{kind}") > 0)


def scheduled_work(times: pl.DataFrame) -> ScheduledWork:
    """The periodic evals and checkpoints of a step-time table (derive.step_times), with their cost."""
    if times.is_empty() or "total_s" not in times.columns:
        return ScheduledWork((), None)
    frame = times.filter(pl.col("total_s").is_not_null() & (pl.col("total_s") > 0)).sort(["segment", "step"])
    kinds = []
    for kind, names in KINDS:
        seconds, present = _kind_seconds(frame, names)
        if present:
            kinds.append((kind, seconds, present))
    if not kinds:
        return ScheduledWork((), None)
    frame = frame.with_columns([s.alias(f"_k:{kind}") for kind, s, _ in kinds])
    # Only work on a cadence is scheduled (a timer logged on every step is part of the step).
    kinds = [(kind, present, period) for kind, _, present in kinds if (period := step_cadence(ran_of(frame, kind)))]
    if not kinds:
        return ScheduledWork((), None)
    any_work = pl.any_horizontal([pl.col(f"_k:{kind}") > 0 for kind, _, _ in kinds])
    plain = frame.filter(~any_work)["total_s"]
    if plain.len() < MIN_OCCURRENCES:
        return ScheduledWork((), None)
    level = float(plain.median())
    sigma = 1.4826 * float((plain - level).abs().median())
    floor = max(NOISE_SIGMAS * sigma, 0.0)
    totals = {(int(g), int(s)): float(t) for g, s, t in frame.select("segment", "step", "total_s").iter_rows()}
    phases = []
    for kind, present, period in kinds:
        ran = ran_of(frame, kind)
        timed = {(int(g), int(s)): float(v) for g, s, v in ran.select("segment", "step", f"_k:{kind}").iter_rows()}
        explained = set()
        in_step = 0.0
        for key, seconds in timed.items():
            excess = max(totals[key] - level, 0.0)
            in_step += min(seconds, excess)
            if seconds >= EXPLAINED_SHARE * excess:
                explained.add(key)
        offset, spill = _spill(timed, totals, level, floor)
        if spill:
            # A step that timed the work itself (a final eval) but sits on the beat of the slow
            # neighbours, as slow as they are, carries that untimed work too.
            beat = {s % period for _, s in spill}
            low = min(spill.values())
            for key, seconds in timed.items():
                excess = totals[key] - level
                if key[1] % period in beat and excess - min(seconds, excess) >= CARRY_OVER_BAND[0] * low:
                    spill[key] = excess - min(seconds, excess)
        explained |= set(spill)
        used = [n for n in present if float(phase_seconds(ran, n).fill_null(0.0).sum()) > 0]
        phases.append(
            ScheduledPhase(
                kind=kind,
                names=tuple(used),
                period=period,
                steps=tuple(sorted(s for _, s in timed)),
                timed_s=sum(timed.values()),
                in_step_s=in_step,
                spill_offset=offset,
                spill_steps=tuple(sorted(s for _, s in spill)),
                spill_s=sum(spill.values()),
                explained=frozenset(explained),
            )
        )
    return ScheduledWork(tuple(phases), level)


def _spill(
    timed: dict[tuple[int, int], float], totals: dict[tuple[int, int], float], level: float, floor: float
) -> tuple[int, dict[tuple[int, int], float]]:
    """The neighbouring steps (offset -1 or +1) slow on the work's cadence, outside its timer: offset and
    (segment, step) -> excess seconds; (0, {}) when neither neighbour is."""
    best: tuple[int, dict[tuple[int, int], float]] = (0, {})
    for offset in (-1, 1):
        neighbours = {
            (g, s + offset): seconds
            for (g, s), seconds in timed.items()
            if (g, s + offset) in totals and (g, s + offset) not in timed
        }
        if len(neighbours) < 2:
            continue
        slow = {}
        for key, seconds in neighbours.items():
            excess = totals[key] - level
            if excess <= floor or excess <= 0:
                continue
            low, high = CARRY_OVER_BAND
            if totals[key] >= NEIGHBOUR_SPIKE_RATIO * level or low * seconds <= excess <= high * seconds:
                slow[key] = excess
        if len(slow) >= max(2, CADENCE_SHARE * len(neighbours)) and sum(slow.values()) > sum(best[1].values()):
            best = (offset, slow)
    return best
