"""How far a run got against its plan: the last training step and the steps it was launched for.

The cookbook writes the plan into every row (FORMATS.md 1.3): RL, distillation and SDFT log
`progress/done_frac` = (step + 1) / num_batches; SFT logs `progress` = min((step + 1) / total, 1);
DPO logs `progress` = step / total. A `max_steps` in config.json caps the plan (0.6.1: RL's
`done_frac` then never reaches 1). A run whose last step reached its plan completed its training
loop; one that did not was cut short or is still going, and which of those cannot be told from
the files alone.

    >>> import polars as pl
    >>> rows = pl.DataFrame({"step": [0, 1, 2], "progress/done_frac": [1 / 3, 2 / 3, 1.0]})
    >>> plan = run_progress(rows, trainer="rl", config={})
    >>> (plan.last_step, plan.planned_steps, plan.completed)
    (2, 3, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

DONE_FRAC = "progress/done_frac"  # (step + 1) / num_batches
PROGRESS = "progress"  # SFT: (step + 1) / total, capped at 1; DPO: step / total
# A share of the plan this close to 1 is the plan reached (the values are float divisions).
REACHED = 1.0 - 1e-9


@dataclass(frozen=True)
class RunProgress:
    """The last logged training step, the planned number of steps (None when nothing says), and which
    key or setting said it."""

    last_step: int | None
    planned_steps: int | None
    source: str

    @property
    def completed(self) -> bool | None:
        """Whether the training loop reached its planned end: None when the plan is unknown."""
        if self.last_step is None or self.planned_steps is None:
            return None
        return self.last_step + 1 >= self.planned_steps


def _last_value(rows: pl.DataFrame, column: str) -> tuple[int, float] | None:
    """(step, value) of the last row with a finite numeric `column`."""
    if column not in rows.columns or not rows.schema[column].is_numeric():
        return None
    frame = rows.select("step", pl.col(column).cast(pl.Float64).alias("value"))
    frame = frame.filter(pl.col("value").is_not_null() & pl.col("value").is_finite() & (pl.col("value") > 0))
    if frame.is_empty():
        return None
    step, value = frame.sort("step").row(-1)
    return int(step), float(value)


def _planned_from_share(step: int, share: float, offset: int) -> int:
    """The total a share was computed against: share = (step + offset) / total."""
    if share >= REACHED:
        return step + 1  # reached (SFT caps at 1; RL's num_epochs can push it past 1)
    return max(step + 1, math.ceil((step + offset) / share - 1e-6))


def run_progress(rows: pl.DataFrame, *, trainer: str, config: dict[str, Any]) -> RunProgress:
    """Last step and plan of the live training rows (`live_training_rows`), read from the cookbook's
    progress keys and config `max_steps`."""
    if rows.is_empty() or "step" not in rows.columns:
        return RunProgress(None, None, "no training rows")
    last_step = int(rows["step"].max())
    max_steps = config.get("max_steps")
    capped = max_steps if isinstance(max_steps, int) and not isinstance(max_steps, bool) and max_steps > 0 else None
    if (found := _last_value(rows, DONE_FRAC)) is not None:
        planned, source = _planned_from_share(*found, offset=1), f"`{DONE_FRAC}`"
    elif (found := _last_value(rows, PROGRESS)) is not None:
        planned = _planned_from_share(*found, offset=0 if trainer == "dpo" else 1)
        source = f"`{PROGRESS}`"
    else:
        planned, source = None, ""
    if capped is not None and (planned is None or capped < planned):
        planned, source = capped, f"config max_steps {capped}"
    return RunProgress(last_step, planned, source or "no progress key and no max_steps")
