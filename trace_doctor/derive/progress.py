"""How far a run got against its plan: the last training step and the steps it was launched for.

The cookbook says the plan in three places (FORMATS.md 1.3, 3.5). Every row: RL, distillation and
SDFT log `progress/done_frac` = (step + 1) / num_batches; SFT logs `progress` = min((step + 1) / total, 1);
DPO logs `progress` = step / total. The log, once per launch: RL `Will train on N batches` (0.6.1: the
end batch, `max_steps` already applied), SFT and DPO `Training for B batches x E epochs = S steps`
(before `max_steps`). And config.json's `max_steps`, which caps the loop: alone it is only an upper
bound (the dataset may be shorter). A run whose last step reached its plan completed its training
loop; one that did not was cut short or is still going, and which of those the files alone cannot tell.

    >>> import polars as pl
    >>> rows = pl.DataFrame({"step": [0, 1, 2], "progress/done_frac": [1 / 3, 2 / 3, 1.0]})
    >>> progress = run_progress(rows, config={})
    >>> (progress.last_step, progress.planned_steps, progress.completed)
    (2, 3, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from trace_doctor.derive.log_signals import fields_of

DONE_FRAC = "progress/done_frac"  # (step + 1) / num_batches
PROGRESS = "progress"  # SFT: (step + 1) / total, capped at 1; DPO: step / total
PROGRESS_KEYS = (DONE_FRAC, PROGRESS)
# A denominator read from every row agrees within this share when the progress key is a step fraction
# (anything else logged under `progress` disagrees from row to row and is not read as a plan).
PLAN_AGREEMENT = 0.01


@dataclass(frozen=True)
class Plan:
    """How many steps the run was to train, and where that comes from."""

    steps: int | None
    source: str
    # Config `max_steps` alone caps the length (min(num_epochs x batches, max_steps)): only an upper bound.
    upper_bound: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "source": self.source, "upper_bound": self.upper_bound}


@dataclass(frozen=True)
class RunProgress:
    """The last logged training step and the run's plan."""

    last_step: int | None
    plan: Plan

    @property
    def planned_steps(self) -> int | None:
        return self.plan.steps

    @property
    def source(self) -> str:
        return self.plan.source

    @property
    def completed(self) -> bool | None:
        """Whether the training loop reached its planned end: None when the plan is unknown, or only an
        upper bound the run did not reach (its dataset may have been shorter)."""
        if self.last_step is None or self.plan.steps is None:
            return None
        if self.last_step + 1 >= self.plan.steps:
            return True
        return None if self.plan.upper_bound else False


def _fraction_plan(rows: pl.DataFrame, trainer: str | None) -> Plan | None:
    """The denominator every row's progress fraction agrees on (written after the step: (step + 1) / N,
    or before it: step / N, as DPO does). One row agrees with either reading: then only the trainer's
    own is taken."""
    offsets = (0.0, 1.0) if trainer == "dpo" else (1.0, 0.0)
    for key in PROGRESS_KEYS:
        if key not in rows.columns or not rows.schema[key].is_numeric():
            continue
        known = rows.select("step", key).drop_nulls().filter(pl.col(key) > 0)
        if known.is_empty():
            continue
        steps = known["step"].to_numpy().astype(float)
        fractions = known[key].to_numpy().astype(float)
        for offset in offsets if len(steps) > 1 else offsets[:1]:
            with np.errstate(divide="ignore", invalid="ignore"):
                denominators = (steps + offset) / fractions
            denominators = denominators[np.isfinite(denominators) & (denominators > 0)]
            if len(denominators) == 0:
                continue
            middle = float(np.median(denominators))
            if float(np.max(np.abs(denominators - middle))) <= PLAN_AGREEMENT * middle:
                return Plan(int(round(middle)), f"metrics `{key}`")
    return None


def _logged_plan(log_events: pl.DataFrame | None) -> tuple[Plan, bool] | None:
    """The last launch's `Will train on N batches` / `Training for ... = S steps` line, and whether
    `max_steps` was applied before it was logged."""
    if log_events is None or log_events.is_empty() or "kind" not in log_events.columns:
        return None
    lines = log_events.filter(pl.col("kind") == "plan")
    if lines.is_empty():
        return None
    row = lines.row(-1, named=True)
    values = fields_of(row.get("fields"))
    steps = values.get("steps")
    if not isinstance(steps, int | float) or steps <= 0:
        return None
    where = f"{row.get('source')}:{row.get('line')}" if row.get("line") is not None else str(row.get("source"))
    return Plan(int(steps), f"the log's `{str(row.get('message', '')).strip()}` ({where})"), bool(values.get("capped"))


def _config_plan(config: dict[str, Any]) -> Plan | None:
    """`dataset_builder.n_batches` x `num_epochs`: the builders that take their length as a setting (math_rl's
    arithmetic, rl_numerics_check) return it from `__len__`, and rl/train.py trains num_epochs passes over it
    (`_resolve_end_batch`). On-policy distillation (FORMATS.md 3.3) has one builder per `dataset_configs`
    entry and trains as many batches as the shortest dataset has (its CompositeDataset): known when every
    entry's builder states its n_batches."""
    builder = config.get("dataset_builder")
    batches = builder.get("n_batches") if isinstance(builder, dict) else None
    key = "dataset_builder.n_batches"
    if batches is None and (lengths := _distillation_batches(config.get("dataset_configs"))):
        batches = min(lengths)
        key = "dataset_configs[].dataset_builder.n_batches" + (" (the shortest)" if len(lengths) > 1 else "")
    epochs = config.get("num_epochs", 1)
    if not (_positive_int(batches) and _positive_int(epochs)):
        return None
    source = f"config {key} {batches}" + (f" x num_epochs {epochs}" if epochs != 1 else "")
    return Plan(batches * epochs, source)


def _distillation_batches(entries: Any) -> list[int]:
    """Each `dataset_configs` entry's `dataset_builder.n_batches`; [] unless every entry states one."""
    if not isinstance(entries, list) or not entries:
        return []
    lengths = [
        entry["dataset_builder"].get("n_batches")
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("dataset_builder"), dict)
    ]
    return lengths if len(lengths) == len(entries) and all(_positive_int(n) for n in lengths) else []


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def run_plan(
    rows: pl.DataFrame,
    config: dict[str, Any] | None,
    log_events: pl.DataFrame | None = None,
    trainer: str | None = None,
) -> Plan:
    """The planned length of the run: the log's plan line, else the metrics' progress fractions, else the
    config's `dataset_builder.n_batches` x `num_epochs`, each capped by config `max_steps`; `max_steps` alone
    is an upper bound; else unknown."""
    max_steps = (config or {}).get("max_steps")
    cap = max_steps if isinstance(max_steps, int) and not isinstance(max_steps, bool) and max_steps > 0 else None
    logged = _logged_plan(log_events)
    if logged is not None:
        plan, capped = logged
    else:
        plan, capped = _fraction_plan(rows, trainer) or _config_plan(config or {}), False
    if plan is not None:
        if cap is not None and not capped and cap < (plan.steps or 0):
            return Plan(cap, f"config max_steps {cap} (below the {plan.steps} of {plan.source})")
        return plan
    if cap is not None:
        return Plan(cap, f"config max_steps {cap}", upper_bound=True)
    return Plan(
        None, "no plan line in the log, no progress fraction in the metrics, no n_batches or max_steps in the config"
    )


def run_progress(
    rows: pl.DataFrame,
    *,
    config: dict[str, Any] | None,
    log_events: pl.DataFrame | None = None,
    trainer: str | None = None,
) -> RunProgress:
    """Last step and plan of the live training rows (`live_training_rows`)."""
    last_step = int(rows["step"].max()) if not rows.is_empty() and "step" in rows.columns else None
    return RunProgress(last_step, run_plan(rows, config, log_events, trainer))
