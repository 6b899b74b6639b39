"""Thresholds of the rules that read pyinstrument profiles and thread-stack dumps."""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import AT_LEAST_ONE, POSITIVE, SHARE, threshold


@dataclass(frozen=True)
class SerializationStallPolicy:
    min_share: float = threshold(
        0.1,
        unit="share of profile wall time",
        why="Payload serialization (pydantic model_dump) above this share is a stall the client pays every call.",
        bounds=SHARE,
    )
    min_seconds: float = threshold(0.2, unit="s", why="Less in absolute terms is not worth a finding.")
    max_submit_median_s: float = threshold(
        0.05,
        unit="s",
        why=(
            "forward_backward/optim_step only build the request and hand it to the SDK thread (milliseconds); "
            "a median this long on every call is the payload being built and serialized on the caller."
        ),
        bounds=POSITIVE,
    )
    min_submits: int = threshold(
        3,
        unit="calls",
        why="A submission call's median duration is judged over at least this many of its spans: one or two "
        "slow first calls are warm-up, not payload building on every call.",
        bounds=AT_LEAST_ONE,
    )


@dataclass(frozen=True)
class CpuBoundMainThreadPolicy:
    min_share: float = threshold(
        0.25,
        unit="share of profile time (or of stack blocks)",
        why="Self time in CPU-heavy libraries above this share keeps the main thread from submitting.",
        bounds=SHARE,
    )
    min_seconds: float = threshold(0.2, unit="s", why="Less in absolute terms is not worth a finding.")
    min_stack_blocks: int = threshold(
        2,
        unit="stack-watchdog blocks",
        why="Without a profile, the main thread caught in CPU-library code in one watchdog block is a moment; "
        "in this many (and min_share of them) it is where the thread spends its time.",
        bounds=AT_LEAST_ONE,
    )
    min_consecutive_blocks: int = threshold(
        3,
        unit="consecutive stack-watchdog blocks",
        why="[main] in CPU code this many watchdog blocks in a row (seconds at the watchdog's 1 s cadence) is "
        "one long hold of the event loop, worth naming even when it is a small share of a long run's samples; "
        "BLAS and other C code that releases the GIL leave the SDK thread running meanwhile.",
        bounds=AT_LEAST_ONE,
    )


@dataclass(frozen=True)
class ProfileWithoutAsyncModePolicy:
    min_idle_share: float = threshold(
        0.3,
        unit="share of profile time",
        why="A profile spending this share in select/epoll/poll/kqueue with no [await] frame was taken "
        "without async mode: its time is not attributed to what was awaited.",
        bounds=SHARE,
    )
