"""What the trace exports are made of: named tracks of slices on one timeline (microseconds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Slice:
    name: str
    start_us: float
    end_us: float
    args: dict[str, Any] = field(default_factory=dict)
    flows_out: list[int] = field(default_factory=list)
    flows_in: list[int] = field(default_factory=list)


@dataclass
class Track:
    """A coroutine track (or a lane of one) inside a thread group."""

    group: str  # thread-level name, e.g. "MainThread (segment 0)"
    name: str
    slices: list[Slice] = field(default_factory=list)
