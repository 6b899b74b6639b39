"""How a threshold is declared and checked: a typed dataclass field with its unit, its why and its range.

A policy class is a frozen dataclass whose fields are all made by `threshold(...)`. Loading a user's
overrides builds a new instance after checking each value's type and range, so a bad value is a
configuration error naming the key when settings load, never a rule "error" at run time.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any


class PolicyError(ValueError):
    """A configuration names a rule or threshold that does not exist, or a value of the wrong type or range."""


@dataclass(frozen=True)
class Bounds:
    """The range a threshold's value must lie in (each end optional, inclusive unless `open`)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def admits(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def describe(self) -> str:
        low = "" if self.low is None else f"{'>' if self.low_open else '≥'} {self.low:g}"
        high = "" if self.high is None else f"{'<' if self.high_open else '≤'} {self.high:g}"
        return " and ".join(part for part in (low, high) if part)


# Ranges most thresholds fall in.
SHARE = Bounds(0.0, 1.0)
POSITIVE = Bounds(0.0, None, low_open=True)
NON_NEGATIVE = Bounds(0.0, None)
AT_LEAST_ONE = Bounds(1.0, None)


def threshold(default: Any, *, unit: str, why: str, bounds: Bounds = NON_NEGATIVE) -> Any:
    """A policy field: its default, its unit ("s", "share", "steps", ...) and the one-line reason for the default."""
    return field(default=default, metadata={"unit": unit, "why": why, "bounds": bounds})


@dataclass(frozen=True)
class ThresholdInfo:
    """One threshold as `trace-doctor rules SLUG` prints it."""

    name: str
    value: Any
    default: Any
    unit: str
    why: str
    bounds: Bounds


def _allowed_types(policy_cls: type, name: str) -> tuple[type, ...]:
    hint = typing.get_type_hints(policy_cls)[name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(typing.get_args(hint))
    return (hint,)


def _type_name(allowed: tuple[type, ...]) -> str:
    names = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}
    return " or ".join(names.get(t, t.__name__) for t in allowed if t is not type(None))


def check_value(policy_cls: type, name: str, value: Any, where: str) -> Any:
    """The value as the field's type, or PolicyError saying what `where` must be."""
    allowed = _allowed_types(policy_cls, name)
    spec = next(f for f in dataclasses.fields(policy_cls) if f.name == name)
    bounds: Bounds = spec.metadata["bounds"]
    wanted = _type_name(allowed)
    # TOML has no null, and a bool is an int to Python but never a number of seconds or steps.
    ok = (
        (isinstance(value, bool) and bool in allowed)
        or (not isinstance(value, bool) and isinstance(value, int) and (int in allowed or float in allowed))
        or (isinstance(value, float) and float in allowed)
        or (isinstance(value, str) and str in allowed)
    )
    if not ok:
        raise PolicyError(f"{where} must be {wanted}, not {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or not bounds.admits(value):
            raise PolicyError(f"{where} must be {wanted} {bounds.describe()}, not {value!r}")
        if float in allowed and int not in allowed:
            value = float(value)
    return value


def build(policy_cls: type, values: dict[str, Any], where: str) -> Any:
    """An instance of `policy_cls` with `values` checked and applied over its defaults."""
    known = {f.name for f in dataclasses.fields(policy_cls)}
    for key in values:
        if key not in known:
            names = ", ".join(sorted(known)) or "none"
            raise PolicyError(f"{where}: unknown threshold `{key}` (known: {names})")
    checked = {key: check_value(policy_cls, key, value, f"{where} `{key}`") for key, value in values.items()}
    return policy_cls(**checked)


def describe(instance: Any) -> list[ThresholdInfo]:
    """Every threshold of a policy instance with its current value, default, unit and why, in field order."""
    infos = []
    for spec in dataclasses.fields(instance):
        infos.append(
            ThresholdInfo(
                name=spec.name,
                value=getattr(instance, spec.name),
                default=spec.default,
                unit=spec.metadata["unit"],
                why=spec.metadata["why"],
                bounds=spec.metadata["bounds"],
            )
        )
    return infos
