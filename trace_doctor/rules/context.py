"""What a rule sees: the run's tables, its thresholds, and derived series computed once.

Derived series (per-step times with phases, the warm-up boundary, the clock cycle) are shared by
several rules and by the summary, so they are computed lazily here, once per analysis.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from trace_doctor.model import RunTables
from trace_doctor.rules.policy import thresholds_for


class RuleContext:
    def __init__(
        self, run: RunTables, *, overrides: dict[str, dict[str, Any]] | None = None, baseline: RunTables | None = None
    ):
        self.run = run
        self.overrides = overrides or {}
        self.baseline = baseline
        self.current_rule: str | None = None
        # Why a rule that ran passed (e.g. "KL at step 0 is 0.0006, below 0.01"), for reports.
        self.pass_reasons: dict[str, str] = {}

    @property
    def thresholds(self) -> dict[str, Any]:
        """Thresholds of the rule being run, with user overrides applied."""
        assert self.current_rule is not None
        return thresholds_for(self.current_rule, self.overrides)

    def passed(self, reason: str) -> list:
        """Record why the current rule found nothing, and return no findings."""
        if self.current_rule:
            self.pass_reasons[self.current_rule] = reason
        return []

    @cached_property
    def step_times(self):
        """Per-step wall time and phase breakdown of live training rows (derive.step_times)."""
        from trace_doctor.derive.step_times import step_times

        return step_times(self.run)

    @cached_property
    def warmup(self):
        """Warm-up / steady split of the step-time series (derive.warmup)."""
        from trace_doctor.derive.warmup import split_warmup

        return split_warmup(self.step_times)

    @cached_property
    def clock_cycle(self):
        """Service clock-cycle estimate from the trace, or the configured override (derive.cycles)."""
        from trace_doctor.derive.cycles import estimate_clock_cycle

        override = thresholds_for("pipelining-gap", self.overrides).get("clock_cycle_s")
        return estimate_clock_cycle(self.run, override_s=override)
