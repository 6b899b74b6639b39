"""One account of time: each lost second given to one cause, and where the run's wall time went.

Rules estimate what their problem cost on their own, so two rules that see the same idle second
both claim it (an unpipelined loop is also "slow every step"). Here each finding's claim is made
non-overlapping, in the debug guide's triage order (knowledge/triage.STAGES, each rule declaring its own):

1. a symptom that other findings explain claims nothing itself: its seconds are its causes'; what
   its causes do not cover stays "unexplained" in the account;
2. a claim with time ranges gives up the part another (earlier) claim's ranges already hold; a
   claim without (a profile's CPU time) is taken as spread evenly over the time it can occur in,
   and gives up the share the earlier claims' ranges cover;
3. the claims together never exceed the wall time less the clock-cycle floor (a loop can not run
   faster than one service cycle per step however much is fixed).

The counterfactual is the wall time less the fixable losses, with a range: the low end assumes
every fix works, including diagnoses of low confidence; the high end counts only the confident
ones (a medium-confidence one by half) and rounds each step up to whole clock cycles, as the service
works in them.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import polars as pl

from trace_doctor.derive.intervals import float_pairs, merged_bounds, overlap, sum_in_order, union_length_columns
from trace_doctor.derive.loop_phases import LoopPhases
from trace_doctor.derive.step_times import phase_seconds
from trace_doctor.derive.wall import TRACE_BASES, step_totals
from trace_doctor.knowledge.tinker import LEGACY_SFT_SUBMIT_PHASES, RESULT_WAIT_PHASES, SAMPLE_CALLS
from trace_doctor.knowledge.triage import BENIGN_TIME, COMPARISON_RULES, SERVICE_TIME, stage_of
from trace_doctor.model import (
    AccountCause,
    Counterfactual,
    Finding,
    StructureAccount,
    StructurePart,
    TimeAccount,
)
from trace_doctor.triage.locate import finding_key

# Trainers whose step is forward-backward + optimizer only: one clock cycle per step is the optimum
# when the loop is pipelined (the guide's clock-cycle model).
CYCLE_FLOOR_TRAINERS = ("sl", "dpo")
# Losses that happen inside the waits for results: the service late by cycles, requests retried
# inside an SDK call. Everything else is client-side time outside the waits.
# Spans that are nothing but waiting for the service: result waits and sample round trips (not
# `train_step`, which also holds the client's own work between calls).
SERVICE_WAIT_SPANS = (*RESULT_WAIT_PHASES, *SAMPLE_CALLS)
# How much of a loss the pessimistic end of the counterfactual assumes a fix wins back: all of a
# confident diagnosis, half of one without a stated or with a medium confidence, none of a guess.
CONFIDENCE_WEIGHT = {"high": 1.0, "medium": 0.5, None: 0.5, "low": 0.0}
# Unexplained time below this share of the wall is rounding, not worth saying how to time it.
UNEXPLAINED_NOTE_SHARE = 0.005
SERVICE_SIDE_RULES = frozenset({*SERVICE_TIME, "request-retries"})
# Losses of client work on the critical path (outside the waits for results). A pipelining gap is
# not among them: the time a request is awaited one by one is partly the service's (the awaited
# result) and partly the client's, so it only has the overall budget; so does a blocking call, which
# is often a synchronous wait for a result the service is still computing.
CLIENT_SIDE_RULES = frozenset(
    {
        "get-batch-bottleneck",
        "serialization-stall",
        "cpu-bound-main-thread",
        "gil-stall",
    }
)


def cycle_floor_s(step_times: pl.DataFrame, trainer: str, clock_cycle) -> float:
    """The fastest the timed steps could run: one cycle each (SL/DPO, a confident cycle), else 0."""
    if clock_cycle is None or clock_cycle.confidence == "low" or trainer not in CYCLE_FLOOR_TRAINERS:
        return 0.0
    return len(step_totals(step_times)) * float(clock_cycle.seconds)


def _order(f: Finding) -> tuple:
    return (bool(f.explained_by), stage_of(f.rule), -(f.seconds_lost or 0.0), f.code, finding_key(f))


def _claims_time(f: Finding) -> bool:
    return f.seconds_lost is not None and math.isfinite(f.seconds_lost) and f.rule not in COMPARISON_RULES


def attribute(
    findings: list[Finding],
    *,
    wall_s: float | None,
    spans: pl.DataFrame | pl.LazyFrame,
    step_times: pl.DataFrame,
    trainer: str,
    clock_cycle,
    service: tuple[float | None, str] | None = None,
) -> tuple[list[Finding], float]:
    """Findings with non-overlapping `seconds_lost` (and `fraction_of_wall` of the one wall time), and
    the clock-cycle floor used. The rule's own estimate stays in `evidence.own_estimate_s` when changed.
    `service` is `service_time_s(spans, step_times)` when the caller already has it."""
    if not wall_s or wall_s <= 0:
        return findings, 0.0
    floor = min(cycle_floor_s(step_times, trainer, clock_cycle), wall_s)
    service_s, _ = service or service_time_s(spans, step_times)
    # Three budgets: every loss together fits in the wall time above the cycle floor; client-side
    # fixes can at best hide client work behind the service's waits, so together they never win back
    # more than the time outside the waits; service-side losses live inside the waits. A loss of
    # unknown place (a symptom no cause explained, warm-up, scheduled work) only has the first.
    waits = min(service_s, wall_s) if service_s is not None else None
    budget = {
        "all": wall_s - floor,
        "client": wall_s - max(floor, waits) if waits is not None else wall_s - floor,
        "service": max(waits - floor, 0.0) if waits is not None else wall_s - floor,
    }
    budget_scope = dict(budget)
    # The merged intervals earlier claims hold, as starts and ends (a trace's findings hold thousands).
    held = merged_bounds(np.array([]), np.array([]))
    given: dict[str, float] = {}
    out: dict[int, Finding] = {}
    for f in sorted(findings, key=_order):
        if not _claims_time(f):
            out[id(f)] = f
            continue
        raw = max(float(f.seconds_lost), 0.0)
        evidence = dict(f.evidence)
        if f.explained_by:
            covered = sum(given.get(k, 0.0) for k in f.explained_by)
            evidence["own_estimate_s"] = round(raw, 6)
            evidence["not_covered_by_causes_s"] = round(max(raw - covered, 0.0), 6)
            out[id(f)] = dataclasses.replace(f, seconds_lost=None, fraction_of_wall=None, evidence=evidence)
            continue
        claim = min(raw, wall_s)
        ranges = merged_bounds(*float_pairs(f.time_ranges_us))
        if len(ranges[0]) and len(held[0]):
            span = bounds_length(ranges)
            shared = overlap(_pairs(ranges), _pairs(held))
            if span > 0 and shared > 0:
                claim *= 1.0 - shared / span
                evidence["overlapping_earlier_causes_s"] = round(raw * shared / span, 6)
        elif len(held[0]) and not len(ranges[0]):
            # A claim measured over the whole run (a profile's CPU time, a log count) has no place on
            # the timeline: it is taken as spread evenly over the time it can occur in (outside the
            # waits for a client-side cause), so the share earlier claims already hold is theirs.
            scope = budget_scope["client"] if f.rule in CLIENT_SIDE_RULES else wall_s
            if scope > 0:
                shared_share = min(bounds_length(held) / 1e6 / scope, 1.0)
                claim *= 1.0 - shared_share
                evidence["overlapping_earlier_causes_s"] = round(raw * shared_share, 6)
        pools = ["all"] + (
            ["client"] if f.rule in CLIENT_SIDE_RULES else ["service"] if f.rule in SERVICE_SIDE_RULES else []
        )
        seconds = max(min(claim, *(budget[p] for p in pools)), 0.0)
        for p in pools:
            budget[p] -= seconds
        held = merged_bounds(np.concatenate((held[0], ranges[0])), np.concatenate((held[1], ranges[1])))
        given[finding_key(f)] = given.get(finding_key(f), 0.0) + seconds
        if abs(seconds - raw) > 1e-6:
            evidence["own_estimate_s"] = round(raw, 6)
        out[id(f)] = dataclasses.replace(
            f, seconds_lost=round(seconds, 6), fraction_of_wall=round(seconds / wall_s, 4), evidence=evidence
        )
    return [out[id(f)] for f in findings], floor


def bounds_length(bounds: tuple[np.ndarray, np.ndarray]) -> float:
    """intervals.length of merged intervals given as (starts, ends): the same lengths added in order."""
    return sum_in_order(bounds[1] - bounds[0])


def _pairs(bounds: tuple[np.ndarray, np.ndarray]) -> list[tuple[float, float]]:
    return list(zip(bounds[0].tolist(), bounds[1].tolist(), strict=True))


# The spans that are result waits (service_time_s): a caller may hand over only these.
SERVICE_WAIT_ROWS = pl.col("name").is_in(sorted(SERVICE_WAIT_SPANS)) & pl.col("closed").fill_null(True)


def wait_union_rows(spans: pl.LazyFrame) -> pl.LazyFrame:
    """The result waits of `spans` (SERVICE_WAIT_ROWS) merged into their union, as wait rows (`name`,
    `closed`, `start_us`, `end_us`): service_time_s of them, or of their concatenation over the parts of
    a table, is service_time_s of the spans. Empty and NaN waits are left out, as the union leaves them."""
    start, end = pl.col("start_us").cast(pl.Float64), pl.col("end_us").cast(pl.Float64)
    waits = spans.filter(SERVICE_WAIT_ROWS).select("name", start, end)
    reach = pl.col("end_us").cum_max()
    return (
        waits.filter(
            (pl.col("end_us") > pl.col("start_us")) & ~pl.col("start_us").is_nan() & ~pl.col("end_us").is_nan()
        )
        .sort("start_us", maintain_order=True)
        .with_columns((pl.col("start_us") > reach.shift(1)).fill_null(True).cum_sum().alias("_union"))
        .group_by("_union", maintain_order=True)
        .agg(pl.col("name").first(), pl.lit(True).alias("closed"), pl.col("start_us").first(), reach.last())
        .drop("_union")
    )


def service_time_s(spans: pl.DataFrame | pl.LazyFrame, step_times: pl.DataFrame) -> tuple[float | None, str]:
    """Time the client waited on the service's results: the union of result-wait spans (trace), else
    the summed `time/step` waits of the metrics. `spans`: the trace's spans, or only their SERVICE_WAIT_ROWS."""
    spans = spans.lazy()
    if spans.select(pl.len()).collect().item():
        waits = spans.filter(SERVICE_WAIT_ROWS).select("start_us", "end_us").collect()
        if waits.height:
            return union_length_columns(
                waits["start_us"], waits["end_us"]
            ) / 1e6, "union of result-wait spans in the trace"
    if step_times.height:
        waits = phase_seconds(step_times, "step").drop_nulls().drop_nans()
        if len(waits):
            if "previous_in_flight" not in step_times.columns:
                return float(waits.sum()), "time/step (result waits) in metrics"
            # Legacy pipelined SFT: while the client submitted step k+1 (get_batch, evals), step k was
            # still on the service whenever a result wait followed; those seconds are the service's too.
            submit = [phase_seconds(step_times, n).fill_null(0.0) for n in LEGACY_SFT_SUBMIT_PHASES]
            in_flight = step_times.select(
                pl.when(pl.col("previous_in_flight")).then(pl.sum_horizontal(submit)).otherwise(0.0)
            ).to_series()
            return (
                float(waits.sum()) + float(in_flight.sum()),
                "time/step (result waits) in metrics, plus the next step's submission while a step was in flight "
                "(legacy pipelined SFT)",
            )
    return None, "no result-wait spans or time/step"


def structure_parts(
    structure: LoopPhases | None, *, wall_s: float, wall_basis: str, room_s: float, service_counted: bool
) -> list[StructurePart]:
    """The time the loop's structure explains, as account items: its parts scaled down together to
    the time no finding and no service wait already holds (a finding's loss lies inside some phase,
    which of them a metrics-only run does not say). A trace's run is left to its spans: they time
    every phase on the wall clock the account uses."""
    if structure is None or wall_basis in TRACE_BASES or room_s <= 0:
        return []
    # The result waits are the service work already in the account.
    chosen = [p for p in structure.parts if not (service_counted and set(p.phases) & set(RESULT_WAIT_PHASES))]
    total = sum(p.seconds for p in chosen)
    if total <= 0:
        return []
    scale = min(1.0, room_s / total)
    return [
        StructurePart(
            part=p.part,
            seconds=round(p.seconds * scale, 6),
            share=round(p.seconds * scale / wall_s, 4),
            timed=p.timed,
            phases=tuple(p.phases),
            steps=p.steps,
            median_step_s=round(p.median_step_s, 6),
        )
        for p in chosen
        if p.seconds * scale > 0
    ]


def structure_account(
    structure: LoopPhases | None, parts: list[StructurePart], *, unexplained_s: float, wall_s: float
) -> StructureAccount | None:
    """The account's structure (only when the loop's structure explains some time): its items, the
    median step they sit in, the remainder's evidence, and what would time what is left."""
    if structure is None or not parts:
        return None
    return StructureAccount(
        parts=tuple(parts),
        basis=(
            "the loop's top-level time/* phases (nested timers not added), and time/total's untimed remainder "
            + (f"named by the loop: {structure.untimed_named}" if structure.untimed_named else "left unnamed")
            + (
                ", scaled with the timed phases to the time no finding holds"
                if sum(p.seconds for p in parts) < sum(p.seconds for p in structure.parts) - 1e-6
                else ""
            )
        ),
        median_step_s=round(structure.median_step_s, 6),
        timed_steps=structure.steps,
        untimed_evidence=structure.evidence,
        to_explain_rest=structure.to_time_rest if unexplained_s >= UNEXPLAINED_NOTE_SHARE * wall_s else None,
    )


def _quantized(seconds: float, steps: int, cycle_s: float | None) -> float:
    if not cycle_s or steps <= 0:
        return seconds
    per_step = seconds / steps
    return steps * math.ceil(per_step / cycle_s - 1e-9) * cycle_s


def time_account(
    findings: list[Finding],
    *,
    wall_s: float | None,
    wall_basis: str,
    spans: pl.DataFrame | pl.LazyFrame,
    step_times: pl.DataFrame,
    clock_cycle,
    floor_s: float,
    service: tuple[float | None, str] | None = None,
    structure: LoopPhases | None = None,
) -> TimeAccount | None:
    """Where the wall time went, and the run time if every fix were applied (None without a wall time).
    `service` is `service_time_s(spans, step_times)` when the caller already has it; `structure` is
    the steps' time by the loop's structure (derive/loop_phases), which explains what no finding holds."""
    if not wall_s or wall_s <= 0:
        return None
    rows: list[AccountCause] = []
    for f in sorted(findings, key=lambda f: (-(f.seconds_lost or 0.0), stage_of(f.rule), finding_key(f))):
        if not _claims_time(f) or f.explained_by or not f.seconds_lost:
            continue
        kind = "benign" if f.rule in BENIGN_TIME else "service" if f.rule in SERVICE_TIME else "loss"
        rows.append(
            AccountCause(
                finding=finding_key(f),
                rule=f.rule,
                title=f.title,
                kind=kind,
                seconds=f.seconds_lost,
                share=f.fraction_of_wall,
                confidence=f.confidence,
            )
        )
    accounted = sum(r.seconds for r in rows)
    service_s, service_basis = service or service_time_s(spans, step_times)
    # Service-side losses (late results, retries inside a call) are inside the waits: the useful part
    # is what is left of the waits once they are taken out.
    inside_waits = sum(r.seconds for r in rows if r.rule in SERVICE_SIDE_RULES)
    useful = None if service_s is None else max(min(service_s - inside_waits, wall_s - accounted), 0.0)
    unexplained = max(wall_s - accounted - (useful or 0.0), 0.0)
    parts = structure_parts(
        structure, wall_s=wall_s, wall_basis=wall_basis, room_s=unexplained, service_counted=useful is not None
    )
    unexplained = max(unexplained - sum(p.seconds for p in parts), 0.0)
    fixable = [r for r in rows if r.kind == "loss"]
    steps = len(step_totals(step_times))
    cycle_s = float(clock_cycle.seconds) if clock_cycle is not None and clock_cycle.confidence != "low" else None
    low = max(wall_s - sum(r.seconds for r in fixable), floor_s)
    confident = sum(r.seconds * CONFIDENCE_WEIGHT.get(r.confidence, 0.5) for r in fixable)
    high = min(max(_quantized(wall_s - confident, steps, cycle_s), low), wall_s)
    return TimeAccount(
        wall_time_s=round(wall_s, 6),
        wall_basis=wall_basis,
        useful_service_s=None if useful is None else round(useful, 6),
        useful_basis=service_basis,
        causes=tuple(rows),
        lost_s=round(sum(r.seconds for r in fixable), 6),
        unexplained_s=round(unexplained, 6),
        counterfactual=Counterfactual(
            seconds=round(low, 6),
            range_s=(round(low, 6), round(high, 6)),
            speedup=round(wall_s / low, 3) if low > 0 else None,
            floor_s=round(floor_s, 6),
            clock_cycle_s=cycle_s,
            note=(
                "low end: every fix works, including diagnoses of low confidence; high end: confident diagnoses "
                "win back all of their loss, medium half, low none"
                + (", each step rounded up to whole clock cycles" if cycle_s else "")
            ),
        ),
        structure=structure_account(structure, parts, unexplained_s=unexplained, wall_s=wall_s),
    )
