"""What a rule sees: the run's tables, its thresholds, and derived series computed once.

Derived series (per-step times with phases, the warm-up boundary, the clock cycle) are shared by
several rules and by the summary, so they are computed lazily here, once per analysis, from the
shared knobs of the policy.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import polars as pl

from trace_doctor.model import Finding, RunTables
from trace_doctor.policy import Policy, SharedPolicy

if TYPE_CHECKING:
    from trace_doctor.derive.writers import Writer
    from trace_doctor.rules.base import Rule

# Series derived from the tables that a rule may declare as an input, like a table.
DERIVED_TABLES = ("step_times",)

# The policy dataclass of the rule a check is written for: `RuleContext[GilStallPolicy]`.
P = TypeVar("P")


class RuleContext(Generic[P]):
    """One analysis's context, shared by every rule; a check sees it as `RuleContext[ItsPolicy]`, so
    `ctx.thresholds` has the type of the policy its Rule declares."""

    # The baseline's context, in a comparison only (compare.BaselineContext sets it).
    baseline_ctx: RuleContext | None = None

    def __init__(self, run: RunTables, *, policy: Policy | None = None, writer: Writer | None = None):
        self.run = run
        self.policy = policy or Policy()
        # Set when this context is one of several processes that wrote the run at the same time.
        self.writer = writer
        self.current_rule: Rule[Any] | None = None
        # Why a rule that ran passed (e.g. "KL at step 0 is 0.0006, below 0.01"), for reports.
        self.pass_reasons: dict[str, str] = {}
        # The span subsets read so far (spans_where), by query.
        self._spans_read: dict[tuple[bytes, tuple[str, ...] | None], pl.DataFrame] = {}
        # The stretched round trips read so far (stretched_round_trips), by threshold.
        self._stretched: dict[float, pl.DataFrame] = {}

    @property
    def thresholds(self) -> P:
        """Thresholds of the rule being run (its policy dataclass), with user overrides applied."""
        assert self.current_rule is not None
        return cast(P, self.policy.rule(self.current_rule.slug))

    @property
    def shared(self) -> SharedPolicy:
        """The knobs several rules and derived series share (clock cycle, warm-up cap, KL band)."""
        return self.policy.shared

    def table(self, name: str) -> pl.DataFrame:
        """A table of the run, or a derived series (`step_times`), by name."""
        if name in DERIVED_TABLES:
            return getattr(self, name)
        if name not in RunTables.TABLE_NAMES:
            raise KeyError(f"no table {name!r}")
        return getattr(self.run, name)

    def spans_where(self, where: pl.Expr, columns: list[str] | None = None) -> pl.DataFrame:
        """The run's spans matching `where`, with only `columns` if given (run.spans_where), read once
        per analysis: several rules ask for the same subset (the training submits, the main task's spans,
        the stepped spans' starts), and each read scans the whole stored table. The frame is shared:
        a rule derives new frames from it and never changes it in place."""
        # The serialized expression, not its repr: a repr shortens long name lists with "…".
        key = (where.meta.serialize(), None if columns is None else tuple(columns))
        if key not in self._spans_read:
            self._spans_read[key] = self.run.spans_where(where, columns)
        return self._spans_read[key]

    def finding(self, *, title: str, message: str, fix: str, severity: str | None = None, **fields: Any) -> Finding:
        """A finding of the rule being run: rule, code and (unless given) its default severity filled in."""
        rule = self.current_rule
        assert rule is not None, "ctx.finding is only for a rule's check"
        return Finding(
            rule=rule.slug,
            code=rule.code,
            severity=severity or rule.severity,  # type: ignore[arg-type]
            title=title,
            message=message,
            fix=fix,
            **fields,
        )

    def input_key(self, path: str) -> str:
        """An input file's path as the run names it (relative to the run's folder): the same in every copy
        of the run. Fingerprints use it, so a baseline elsewhere on disk has the same finding, not a new one."""
        base = PurePath(self.run.meta.path or "")
        for folder in (base, base.parent):  # a run of loose files is named after its first file
            try:
                relative = PurePath(path).relative_to(folder)
            except ValueError:
                continue
            if relative.parts:
                return relative.as_posix()
        return PurePath(path).name

    def passed(self, reason: str) -> list:
        """Record why the current rule found nothing, and return no findings."""
        if self.current_rule is not None:
            self.pass_reasons[self.current_rule.slug] = reason
        return []

    @cached_property
    def _step_times_and_overlap(self):
        from trace_doctor.derive.overlap import OverlapKnobs
        from trace_doctor.derive.step_times import step_times_and_overlap

        s = self.shared
        knobs = OverlapKnobs(
            min_steps=s.overlap_min_steps,
            min_fit_share=s.overlap_min_fit_share,
            max_spread_ratio=s.overlap_max_spread_ratio,
            tolerance_s=s.overlap_tolerance_s,
        )
        return step_times_and_overlap(self.run, knobs)

    @property
    def step_times(self) -> pl.DataFrame:
        """Per-step wall time and phase breakdown of live training rows (derive.step_times), with
        overlapping legacy SFT totals de-overlapped by the shared knobs."""
        return self._step_times_and_overlap[0]

    @property
    def overlap_fit(self):
        """How the overlapping-window reading fits the run's `time/total` (derive.overlap), None when
        the run has no legacy SFT totals to test."""
        return self._step_times_and_overlap[1]

    @cached_property
    def warmup(self):
        """Warm-up / steady split of the step-time series (derive.warmup), capped by the shared knob."""
        from trace_doctor.derive.step_times import continued_segments
        from trace_doctor.derive.warmup import split_warmup

        return split_warmup(
            self.step_times,
            max_warmup_share=self.shared.max_warmup_share,
            continued=continued_segments(self.run.steps, self.step_times),
        )

    @cached_property
    def loop_phases(self):
        """The steps' time by the loop's structure (derive.loop_phases), None without timed steps."""
        from trace_doctor.derive.loop_phases import loop_phases

        return loop_phases(
            self.step_times,
            self.run.steps,
            self.run.meta.trainer,
            mode=self.run.meta.trainer_mode,
            excess_factor=self.shared.untimed_excess_factor,
        )

    @cached_property
    def writers(self) -> list[tuple[Writer, RuleContext]]:
        """When several processes wrote the metrics at the same time, each one's context over its own
        rows (derive.writers): the engine judges each writer apart. Empty for one writer at a time."""
        from trace_doctor.derive.writers import concurrent_writers, writer_run

        return [
            (w, RuleContext(writer_run(self.run, w), policy=self.policy, writer=w))
            for w in concurrent_writers(self.run.steps)
        ]

    @cached_property
    def wall(self) -> tuple[float | None, str]:
        """(The run's wall time, its basis): one definition for every rule and output (derive.wall)."""
        from trace_doctor.derive.wall import wall_time

        if self.writer is not None:
            # A trace of processes running at once is not split by writer: a writer's wall is its own
            # steps' totals, not the trace all of them wrote into.
            return wall_time(self.run.spans.clear(), self.step_times, concurrent=True)
        return wall_time(self.segment_extents, self.step_times, concurrent=bool(self.writers))

    @cached_property
    def step_extents(self) -> pl.DataFrame:
        """Each step's first span start and last span end (`step`, `start_us`, `end_us`), combined from the
        extents of the spans table's parts: a grown run's earlier parts are not read again."""

        def extent(spans: pl.LazyFrame) -> pl.LazyFrame:
            stepped = spans.filter(pl.col("step").is_not_null())
            return stepped.group_by("step").agg(pl.col("start_us").min(), pl.col("end_us").max())

        return self.run.spans_combined(("extent-by-step",), extent, extent)

    @cached_property
    def service_waits(self) -> pl.DataFrame:
        """The trace's result waits (account.SERVICE_WAIT_ROWS) merged into their union within each part of
        the spans table, as wait rows (`name`, `closed`, `start_us`, `end_us`): their union is the one of
        every wait, and a grown run's earlier parts are not read again. Empty and NaN waits are left out,
        as the union leaves them out."""
        from trace_doctor.triage.account import wait_union_rows as merged

        return self.run.spans_combined(("service-wait-union",), merged, lambda rows: rows)

    @cached_property
    def segment_extents(self) -> pl.DataFrame:
        """Each launch's first span start and last span end (`segment`, `start_us`, `end_us`), combined
        from the extents of the spans table's parts: a grown run's earlier parts are not read again."""

        def extent(spans: pl.LazyFrame) -> pl.LazyFrame:
            return spans.group_by("segment").agg(pl.col("start_us").min(), pl.col("end_us").max())

        return self.run.spans_combined(("extent-by-segment",), extent, extent)

    @property
    def wall_s(self) -> float | None:
        return self.wall[0]

    @cached_property
    def kl_sawtooth(self):
        """(Sawtooth | None, why not) of the sync sampler-vs-trainer KL against the save cadence
        (derive.staleness), for stale-sampler and kl-drift alike, shaped by the shared knobs."""
        from trace_doctor.derive.staleness import run_kl_sawtooth
        from trace_doctor.derive.step_times import live_training_rows
        from trace_doctor.rules.checks.renderer_kl_step0 import kl_columns

        rows = live_training_rows(self.run.steps)
        return run_kl_sawtooth(
            self.run.meta, rows, self.run.checkpoints, kl_columns(rows), min_drop=self.shared.sawtooth_min_drop
        )

    def sawtooth_shown(self) -> bool:
        """Whether the KL follows the save cadence by the shared knobs (see kl_sawtooth)."""
        found, _ = self.kl_sawtooth
        s = self.shared
        return found is not None and found.shows(
            min_periods=s.sawtooth_min_periods,
            min_share=s.sawtooth_min_share,
            min_correlation=s.sawtooth_min_correlation,
        )

    @cached_property
    def round_trip_medians(self):
        """Median duration per round-trip call among the closed spans: gil-stall and
        blocking-call-in-async judge stretched round trips against the same medians."""
        from trace_doctor.derive.stalls import round_trip_medians

        return round_trip_medians(self._round_trip_durations)

    @cached_property
    def _longest_round_trips(self) -> pl.DataFrame:
        """The longest closed round trip of each call (`name`, `dur_us`), combined from each part's."""
        from trace_doctor.derive.stalls import CLOSED_WITH_DURATION, ROUND_TRIP

        def longest(spans: pl.LazyFrame) -> pl.LazyFrame:
            trips = spans.filter(CLOSED_WITH_DURATION & pl.col("name").is_in(sorted(ROUND_TRIP)))
            return trips.group_by("name").agg(pl.col("dur_us").max())

        return self.run.spans_combined(
            ("longest-round-trips",), longest, lambda found: found.group_by("name").agg(pl.col("dur_us").max())
        )

    @cached_property
    def _round_trip_durations(self) -> pl.DataFrame:
        """The closed round trips' names and durations (a stored table's parts read once, part_memo)."""
        from trace_doctor.derive.stalls import CLOSED_WITH_DURATION, ROUND_TRIP

        return self.spans_where(CLOSED_WITH_DURATION & pl.col("name").is_in(sorted(ROUND_TRIP)), ["name", "dur_us"])

    def stretched_round_trips(self, min_excess_s: float) -> pl.DataFrame:
        """The closed round trips stretched past the shared ratio of their median and `min_excess_s`
        beyond it (derive.stalls), read once per threshold: gil-stall and blocking-call-in-async look for
        the same trips (both thresholds are 0.5 s by default), and each read scans the stored table."""
        from trace_doctor.derive.stalls import CLOSED_WITH_DURATION, stretched_round_trips

        key = float(min_excess_s)
        if key not in self._stretched:
            ratio, closed = (
                float(self.shared.round_trip_stretch_ratio),
                self.run.scan("spans").filter(CLOSED_WITH_DURATION),
            )
            # The longest trip of each call says whether any is stretched (the test grows with the duration);
            # only then are the stretched rows read whole (none is the usual case, and a stored table's scan
            # reads every part the run has).
            if stretched_round_trips(self._longest_round_trips, ratio, key, self.round_trip_medians).is_empty():
                closed = closed.head(0)
            self._stretched[key] = stretched_round_trips(closed, ratio, key, self.round_trip_medians)
        return self._stretched[key]

    @cached_property
    def scheduled(self):
        """Evaluations and checkpoint saves on a step cadence (derive.scheduled): scheduled-work reports
        them and inconsistent-step-times leaves the steps they explain out of its judgement."""
        from trace_doctor.derive.scheduled import scheduled_work

        return scheduled_work(self.step_times)

    @cached_property
    def run_end(self):
        """Where the run's last launch stopped and what was in flight then (derive.run_end): run-stopped
        judges the stop, and rules that need whole steps do not read a step the run never finished."""
        from trace_doctor.derive.run_end import run_end

        return run_end(self.run)

    @cached_property
    def clock_cycle(self):
        """Service clock-cycle estimate from the trace, or the configured shared knob (derive.cycles)."""
        from trace_doctor.derive.cycles import estimate_clock_cycle

        return estimate_clock_cycle(self.run, override_s=self.shared.clock_cycle_s)
