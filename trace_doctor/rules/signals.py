"""One independent reading of a stall, shared by the rules that weigh several (gil-stall, blocking-call-in-async)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Signal:
    """One independent piece of evidence, its weight, and what it lets us estimate."""

    kind: str
    strength: float
    summary: str
    evidence: dict[str, Any]
    seconds: float | None = None
    time_ranges_us: list[list[float]] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
