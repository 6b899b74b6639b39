"""Numbers for people, the same in every output: the verdict's headline and every renderer use these."""

from __future__ import annotations

from typing import Any

import orjson


def format_seconds(value: float | None) -> str:
    """Seconds for people: ms below 0.1 s, minutes above 2 min, hours above 1 h."""
    if value is None:
        return "–"
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 120:
        return f"{value / 60:.1f} min"
    if value >= 10:
        return f"{value:.0f} s"
    if value >= 0.1:
        return f"{value:.2f} s"
    return f"{value * 1000:.1f} ms"


# A counterfactual range narrower than this share of the wall time reads as one number.
ONE_NUMBER_SHARE = 0.05


def format_range(low: float, high: float, wall: float) -> str:
    """`4.70 s–7.00 s`, or one number when the ends are close (under 5% of `wall` apart) or print alike."""
    first, last = format_seconds(low), format_seconds(high)
    if first == last or abs(high - low) < ONE_NUMBER_SHARE * wall:
        return first
    return f"{first}–{last}"


def launches_line(launches: list) -> str | None:
    """`2 launches: relaunched at step 20 (rewrote 4 steps)`; None for a run written by one process."""
    if len(launches) < 2:
        return None
    if any(launch.interleaved for launch in launches):
        return (
            f"{len(launches)} processes wrote the metrics at the same time (rows interleaved): "
            "each writer's rows are analysed as their own launch"
        )
    resumed = [
        f"at step {launch.resumed_at_step}"
        + (f" (rewrote {launch.rewrote_steps} steps)" if launch.rewrote_steps else "")
        for launch in launches[1:]
    ]
    return f"{len(launches)} launches: relaunched {', '.join(resumed)}; rewritten steps are kept, marked superseded"


def printable(value: Any) -> Any:
    """`value` with every string made valid UTF-8: a file name that is not (Python keeps its bytes as
    lone surrogates) shows its bad bytes as U+FFFD instead of breaking the output."""
    if isinstance(value, str):
        return value if value.isascii() else value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable(v) for v in value]
    return value


def json_dumps(value: Any, option: int = 0, default: Any = None) -> bytes:
    """orjson.dumps, falling back to `printable` strings when input text is not valid UTF-8."""
    try:
        return orjson.dumps(value, option=option, default=default)
    except TypeError:
        return orjson.dumps(printable(value), option=option, default=default)
