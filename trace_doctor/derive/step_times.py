"""Per-step wall time and its phase breakdown, from the live training rows of `steps`.

Columns: `step` (Int64), `segment` (Int32), `total_s` (Float64), `total_source`, `untimed_s`,
one `phase:<name>` per top-level phase and one `inner:<name>` per nested timer (seconds of a
timer in rows where a wrapping span was also logged, e.g. SFT `get_batch` inside `submit_batch`).

`total_s` is `time/total` (or `time_total` of recipes/sl_loop); async RL has no `time/total`
and uses `time/training_loop/total`, the training loop's own iteration time; SFT from
2026-03-17 on writes no whole-step timer, so its total is rebuilt as the sum of the row's
top-level phases (`submit_batch` + `finish_batch` + ...): exact for a sequential loop, and in a
pipelined loop the wall time between those phases is nothing but the next step's submission.
Legacy pipelined SFT `time/total` runs from step k's submission to the end of its finish, which
includes step k+1's submission and step k-1's finish, so consecutive totals overlap: when the data
bear that reading out (derive/overlap.py), `total_s` is the step's own timers plus half its untimed
residual, `total_source` says so, and `previous_in_flight` marks steps whose submission-side timers
ran while the previous step was still on the service; the raw window stays in `steps`.
"""

from __future__ import annotations

import weakref

import polars as pl

from trace_doctor.derive.overlap import OverlapFit, OverlapKnobs, deoverlapped, fit_overlap
from trace_doctor.derive.timekeys import PARENTS, phase_sources
from trace_doctor.knowledge.tinker import LEGACY_SFT_FINISH_PHASES, LEGACY_SFT_SUBMIT_PHASES, WHOLE_STEP_KEYS
from trace_doctor.model import RunTables

# Rows with these SFT timers and no whole-step timer get a total rebuilt from phases.
RECONSTRUCTABLE_MARKERS = ("time/submit_batch", "time/finish_batch", "time/step")
# The whole-step timer that legacy pipelined SFT wrote over overlapping windows.
OVERLAPPING_TOTAL_KEY = "time/total"
DEOVERLAPPED_SOURCE = "time/total de-overlapped (legacy pipelined SFT)"

BASE_SCHEMA = {
    "step": pl.Int64,
    "segment": pl.Int32,
    "total_s": pl.Float64,
    "total_source": pl.String,
    "untimed_s": pl.Float64,
}


# live_training_rows by the steps table it was given, for as long as that table lives: a dozen rules and
# derivations ask for the rows of the same table in one analysis.
_LIVE_ROWS: dict[int, pl.DataFrame] = {}


def live_training_rows(steps: pl.DataFrame) -> pl.DataFrame:
    """Rows of training steps that count: not superseded, not eval-only, last per (segment, step)."""
    key = id(steps)
    found = _LIVE_ROWS.get(key)
    if found is None:
        found = _LIVE_ROWS[key] = _live_training_rows(steps)
        weakref.finalize(steps, _LIVE_ROWS.pop, key, None)
    return found


def _live_training_rows(steps: pl.DataFrame) -> pl.DataFrame:
    if steps.is_empty() or "step" not in steps.columns:
        return steps.clear()
    frame = steps.with_row_index("_order")
    keep = pl.col("step").is_not_null()
    if "superseded" in frame.columns:
        keep &= ~pl.col("superseded").fill_null(False)
    if "is_eval_row" in frame.columns:
        keep &= ~pl.col("is_eval_row").fill_null(False)
    frame = frame.filter(keep)
    segment = pl.col("segment") if "segment" in frame.columns else pl.lit(0, dtype=pl.Int32)
    frame = frame.with_columns(segment.cast(pl.Int32).alias("segment"))
    frame = frame.unique(subset=["segment", "step"], keep="last", maintain_order=True)
    return frame.sort(["segment", "step", "_order"]).drop("_order")


def continued_segments(steps: pl.DataFrame, rows: pl.DataFrame) -> set[int]:
    """Segments whose live rows start after rows a later launch rewrote: their first live step is not
    the start of their launch, so it cannot be that launch's warm-up.

    `rows`: the live rows (`step_times(run)` or `live_training_rows(steps)`), not derived again here.
    """
    if rows.is_empty() or "superseded" not in steps.columns:
        return set()
    training = steps.filter(pl.col("step").is_not_null())
    if "is_eval_row" in training.columns:
        training = training.filter(~pl.col("is_eval_row").fill_null(False))
    started = dict(training.group_by("segment", maintain_order=True).agg(pl.col("step").first()).iter_rows())
    live = dict(rows.group_by("segment", maintain_order=True).agg(pl.col("step").first()).iter_rows())
    return {int(seg) for seg, first in live.items() if started.get(seg) is not None and first != started[seg]}


def _numeric(frame: pl.DataFrame, column: str) -> pl.Expr:
    """Seconds of a timer column; NaN, infinite and negative values are no measurement (null)."""
    dtype = frame.schema.get(column)
    if dtype is not None and dtype.is_numeric():
        value = pl.col(column).cast(pl.Float64)
        return pl.when(value.is_finite() & (value >= 0)).then(value).otherwise(None)
    # A text timer ("1.5s" in every row) is no measurement; repeat the null to the frame's height.
    return pl.repeat(None, frame.height, dtype=pl.Float64)


def step_times(run: RunTables, overlap: OverlapKnobs | None = None) -> pl.DataFrame:
    """The per-step time table of a run (see module docstring); empty when there are no steps.
    With `overlap` knobs, overlapping legacy SFT totals are de-overlapped (see step_times_and_overlap)."""
    return step_times_and_overlap(run, overlap)[0]


def step_times_and_overlap(
    run: RunTables, overlap: OverlapKnobs | None = None
) -> tuple[pl.DataFrame, OverlapFit | None]:
    """The per-step time table and, when `overlap` knobs are given and the run's `time/total` sits over
    legacy SFT phase timers, how well the overlapping-window reading fits (None: not tested)."""
    rows = live_training_rows(run.steps)
    if rows.is_empty():
        return pl.DataFrame(schema=BASE_SCHEMA), None
    # The schema once: `rows.schema` builds all of it on every call (quadratic in a 20,000-key row).
    schema = rows.schema
    numeric_columns = [c for c, dtype in schema.items() if dtype.is_numeric()]
    sources = phase_sources(numeric_columns)

    seconds = {
        name: pl.coalesce(_numeric(rows, single), _numeric(rows, total) if total else pl.lit(None, dtype=pl.Float64))
        for name, (single, total) in sources.items()
    }
    nested_flags: dict[str, pl.Expr] = {}
    for name in sources:
        parents = [p for p in PARENTS.get(name, ()) if p in seconds and p != name]
        nested_flags[name] = (
            pl.any_horizontal([seconds[p].is_not_null() for p in parents]) if parents else pl.lit(False)
        )

    parts = rows.select(
        pl.col("step").cast(pl.Int64),
        pl.col("segment").cast(pl.Int32),
        *[seconds[name].alias(f"_s:{name}") for name in sources],
        *[nested_flags[name].alias(f"_n:{name}") for name in sources],
    )
    top_level = [n for n in sources if not parts[f"_n:{n}"].all()]
    nested = [n for n in sources if parts[f"_n:{n}"].any()]
    phase_cols = {f"phase:{n}": pl.when(~pl.col(f"_n:{n}")).then(pl.col(f"_s:{n}")).otherwise(None) for n in top_level}
    inner_cols = {f"inner:{n}": pl.when(pl.col(f"_n:{n}")).then(pl.col(f"_s:{n}")).otherwise(None) for n in nested}
    parts = parts.with_columns(**phase_cols, **inner_cols)

    timed_sum = pl.sum_horizontal([pl.col(c) for c in phase_cols]) if phase_cols else pl.lit(None, dtype=pl.Float64)
    any_phase = pl.any_horizontal([pl.col(c).is_not_null() for c in phase_cols]) if phase_cols else pl.lit(False)

    whole = [(_numeric(rows, key), key) for key in WHOLE_STEP_KEYS if key in schema]
    markers = [m for m in RECONSTRUCTABLE_MARKERS if m in schema and schema[m].is_numeric()]
    if markers:
        parts = parts.with_columns(
            rows.select(pl.any_horizontal([pl.col(m).is_not_null() for m in markers]).alias("_rebuild")).to_series()
        )
    else:
        parts = parts.with_columns(pl.lit(False).alias("_rebuild"))
    rebuildable = pl.col("_rebuild")
    parts = parts.with_columns([rows.select(expr.alias(f"_w:{label}")).to_series() for expr, label in whole])

    total_expr = pl.lit(None, dtype=pl.Float64)
    source_expr = pl.lit(None, dtype=pl.String)
    # Later whens are overridden by earlier ones: build from the weakest source up.
    total_expr = pl.when(rebuildable & any_phase).then(timed_sum).otherwise(total_expr)
    source_expr = pl.when(rebuildable & any_phase).then(pl.lit("sum of top-level phases")).otherwise(source_expr)
    for _, label in reversed(whole):
        total_expr = pl.when(pl.col(f"_w:{label}").is_not_null()).then(pl.col(f"_w:{label}")).otherwise(total_expr)
        source_expr = pl.when(pl.col(f"_w:{label}").is_not_null()).then(pl.lit(label)).otherwise(source_expr)

    parts = parts.with_columns(total_expr.alias("total_s"), source_expr.alias("total_source"))
    untimed = (
        pl.when(pl.col("total_s").is_not_null() & any_phase).then(pl.col("total_s") - timed_sum).otherwise(None)
        if phase_cols
        else pl.lit(None, dtype=pl.Float64)
    )
    parts = parts.with_columns(untimed.cast(pl.Float64).alias("untimed_s"))
    fit = None
    if overlap is not None:
        parts, fit = _deoverlap(parts, phase_cols, overlap)

    extra = ["previous_in_flight"] if "previous_in_flight" in parts.columns else []
    out = parts.select(
        "step", "segment", "total_s", "total_source", "untimed_s", *extra, *sorted(phase_cols), *sorted(inner_cols)
    )
    return out.with_columns(pl.col("total_s").cast(pl.Float64), pl.col("untimed_s").cast(pl.Float64)), fit


def _deoverlap(parts: pl.DataFrame, phase_cols: dict, knobs: OverlapKnobs) -> tuple[pl.DataFrame, OverlapFit | None]:
    """Rows whose total is `time/total` over legacy SFT phases, tested for overlapping windows and
    rebuilt when the reading holds (derive/overlap.py); other rows untouched."""
    label = f"_w:{OVERLAPPING_TOTAL_KEY}"
    submit = [f"phase:{n}" for n in LEGACY_SFT_SUBMIT_PHASES if f"phase:{n}" in phase_cols]
    finish = [f"phase:{n}" for n in LEGACY_SFT_FINISH_PHASES if f"phase:{n}" in phase_cols]
    # Only the legacy shape: a result wait and a submission-side timer, all phases top-level (a
    # row with submit_batch/finish_batch is the newer loop, whose totals are rebuilt from them).
    legacy = set(phase_cols) <= {f"phase:{n}" for n in (*LEGACY_SFT_SUBMIT_PHASES, *LEGACY_SFT_FINISH_PHASES)}
    if label not in parts.columns or "phase:step" not in phase_cols or not submit or not legacy:
        return parts, None

    def seconds(columns: list[str]) -> pl.Expr:
        return pl.sum_horizontal([pl.col(c).fill_null(0.0) for c in columns])

    candidates = parts.filter(pl.col("total_source") == OVERLAPPING_TOTAL_KEY).select(
        "segment",
        "step",
        pl.col("total_s").alias("total"),
        seconds([*submit, *finish]).alias("own"),
        seconds(submit).alias("submit"),
        seconds(finish).alias("finish"),
        pl.col("phase:step").alias("wait"),
    )
    fit = fit_overlap(candidates, knobs)
    if fit is None or not fit.overlapped:
        return parts, fit
    rebuilt = deoverlapped(candidates, tolerance_s=knobs.tolerance_s).rename(
        {"total_s": "_d_total", "untimed_s": "_d_untimed"}
    )
    parts = parts.join(rebuilt, on=["segment", "step"], how="left")
    redo = pl.col("_d_total").is_not_null()
    return (
        parts.with_columns(
            pl.when(redo).then(pl.col("_d_total")).otherwise(pl.col("total_s")).alias("total_s"),
            pl.when(redo).then(pl.lit(DEOVERLAPPED_SOURCE)).otherwise(pl.col("total_source")).alias("total_source"),
            pl.when(redo).then(pl.col("_d_untimed")).otherwise(pl.col("untimed_s")).alias("untimed_s"),
            pl.col("previous_in_flight").fill_null(False),
        ).drop("_d_total", "_d_untimed"),
        fit,
    )


def phase_seconds(times: pl.DataFrame, name: str) -> pl.Series:
    """Seconds of phase `name` per row, whether it ran top-level or nested (null when absent)."""
    candidates = [c for c in (f"phase:{name}", f"inner:{name}") if c in times.columns]
    if not candidates:
        return pl.Series(name, [None] * times.height, dtype=pl.Float64)
    return times.select(pl.coalesce([pl.col(c) for c in candidates]).alias(name)).to_series()


def phase_names(times: pl.DataFrame) -> list[str]:
    """Top-level phase names present in a step-time table, sorted."""
    return sorted(c.split(":", 1)[1] for c in times.columns if c.startswith("phase:"))
