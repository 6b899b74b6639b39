"""Thresholds of the environment rules (dependency versions, decoded errors)."""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import SHARE, threshold


@dataclass(frozen=True)
class KnownBadDependencyPolicy:
    trap_max_sample_share: float = threshold(
        0.01,
        unit="share of policy_sample",
        why="FORMATS.md 1.4 trap: sample_async (a round trip nested in policy_sample) timed at under this "
        "share of policy_sample was recorded as a sync call.",
        bounds=SHARE,
    )
    trap_min_policy_sample_s: float = threshold(
        0.5,
        unit="s",
        why="...provided policy_sample itself is long enough for the comparison to mean something.",
    )


@dataclass(frozen=True)
class DecodedErrorPolicy:
    """Matches known error messages: nothing to tune."""
