"""Step attribution by containment, for spans whose own E event carries no `step`.

A span's `step` is the `step` attribute of its E event when present (`step_source` = "args");
otherwise the step of the innermost enclosing stepped span on the same pid and segment
(`step_source` = "containment"; the stepped spans are the cookbook's train-step, submit/finish
batch and evaluator spans). Spans outside every stepped span keep a null step: the cookbook gives
no reliable way to attribute them (e.g. sync RL samples before its train step).
"""

from __future__ import annotations

import polars as pl


class StepCovers:
    """The stepped spans of a whole file, ready to attribute any part of its spans (a window of
    them sorted by start gets the steps it would get in the whole table)."""

    def __init__(self, cover: pl.DataFrame | None, containers: pl.DataFrame | None, by: list[str]) -> None:
        self._cover = cover
        self._containers = containers
        self._by = by

    @classmethod
    def of(cls, stepped: pl.DataFrame, *, total: int, by: list[str]) -> StepCovers:
        """`stepped`: the file's closed spans with a step from their args, in table order; `total`:
        the file's span count; `by`: the columns among (segment, pid) that vary in the file."""
        if stepped.height == 0 or stepped.height == total:
            return cls(None, None, by)
        stepped = stepped.with_row_index("_container")
        cover, parent = _innermost_cover(stepped)
        containers = stepped.select(
            "_container",
            pl.col("start_us").alias("_c_start"),
            pl.col("end_us").alias("_c_end"),
            pl.col("step").alias("_c_step"),
        ).join(parent, on="_container", how="left")
        return cls(cover, containers, by)

    def attribute(self, spans: pl.DataFrame) -> pl.DataFrame:
        """`spans` (sorted by start within each segment) with steps attributed by containment."""
        if self._cover is None or self._containers is None or spans.height == 0:
            return spans
        cover, containers, by = self._cover, self._containers, self._by
        lookup = (
            spans.with_row_index("_span")
            .filter(pl.col("step").is_null())
            .select("_span", *by, "start_us", pl.coalesce("end_us", "start_us").alias("_end"))
        )
        if not lookup.get_column("start_us").is_sorted():  # spans come sorted unless a run was resumed
            lookup = lookup.sort("start_us")
        found = lookup.join_asof(
            cover, left_on="start_us", right_on="_t", by=by or None, strategy="backward", check_sortedness=False
        )
        found = found.select("_span", "start_us", "_end", "_container")
        resolved: list[pl.DataFrame] = []
        # Climb from the innermost cover at the span's start to the first container that also covers
        # its end; stepped spans nest only a few levels deep.
        for _ in range(16):
            found = found.join(containers, on="_container", how="left")
            ok = found.filter(pl.col("_container").is_null() | (pl.col("_c_end") >= pl.col("_end")))
            resolved.append(ok.select("_span", "_c_step"))
            found = found.filter(pl.col("_container").is_not_null() & (pl.col("_c_end") < pl.col("_end"))).select(
                "_span", "start_us", "_end", pl.col("_parent").alias("_container")
            )
            if found.height == 0:
                break
        steps = pl.concat(resolved).filter(pl.col("_c_step").is_not_null())
        # Scattered into place rather than joined: a join would gather every (wide) span column again.
        found_step = (
            pl.Series("_c_step", [None], dtype=pl.Int64)
            .extend_constant(None, spans.height - 1)
            .scatter(steps.get_column("_span"), steps.get_column("_c_step"))
        )
        return (
            spans.with_columns(found_step)
            .with_columns(
                pl.coalesce("step", "_c_step").alias("step"),
                pl.when(pl.col("step").is_null() & pl.col("_c_step").is_not_null())
                .then(pl.lit("containment"))
                .otherwise(pl.col("step_source"))
                .alias("step_source"),
            )
            .drop("_c_step")
        )


def _innermost_cover(stepped: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Sweep the (few) stepped spans: which one is innermost from each boundary on, and each one's parent.

    The innermost of a set is the one that starts last, the shortest of those, the first added of
    equals. Spans are added in (start, longest first, row) order and only removed, so the open list
    stays in that order: the innermost is the first of its last run of equal (start, end), found from
    the list's end rather than by comparing every open span."""
    cover_rows: list[tuple[int, int, float, int | None]] = []
    parents: list[tuple[int, int | None]] = []
    for (segment, pid), group in stepped.group_by(["segment", "pid"], maintain_order=True):
        spans = sorted(group.select("_container", "start_us", "end_us").iter_rows(), key=_sweep_order)
        points = sorted({t for _, s, e in spans for t in (s, e)})
        active: list[tuple[int, float, float]] = []
        pending = 0
        for t in points:
            active = [a for a in active if a[2] > t]
            while pending < len(spans) and spans[pending][1] <= t:
                container, start, end = spans[pending]
                parents.append((container, _last_first(active, end)))
                active.append((container, start, end))
                pending += 1
            cover_rows.append((segment, pid, t, _last_first(active, None)))
    cover = pl.DataFrame(
        cover_rows,
        schema={"segment": pl.Int32, "pid": pl.Int64, "_t": pl.Float64, "_container": pl.UInt32},
        orient="row",
    ).sort("_t")
    parent = pl.DataFrame(parents, schema={"_container": pl.UInt32, "_parent": pl.UInt32}, orient="row")
    return cover, parent


def _sweep_order(span: tuple[int, float, float]) -> tuple[float, float, int]:
    container, start, end = span
    return start, -end, container


def _last_first(active: list[tuple[int, float, float]], reaching: float | None) -> int | None:
    """The innermost of the open spans (those that end at or after `reaching`, when given): the first of
    the last run of equal (start, end) among them, `active` being in (start, longest first) order."""
    at = len(active) - 1
    if reaching is not None:
        while at >= 0 and not active[at][2] >= reaching:
            at -= 1
    if at < 0:
        return None
    _, start, end = active[at]
    while at > 0 and active[at - 1][1] == start and active[at - 1][2] == end:
        at -= 1
    return active[at][0]
