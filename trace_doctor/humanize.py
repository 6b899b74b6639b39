"""Numbers for people, the same in every output: the verdict's headline and every renderer use these."""

from __future__ import annotations


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
