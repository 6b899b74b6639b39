"""TD109 profile-without-async-mode: a profile whose waiting all lands in epoll/select, unattributed."""

from __future__ import annotations

from trace_doctor.derive.profile_stats import breakdown
from trace_doctor.model import Finding
from trace_doctor.policy.profiles import ProfileWithoutAsyncModePolicy
from trace_doctor.rules.base import Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, table

FIX = (
    "Profile with the Python API in async mode: `from pyinstrument import Profiler; "
    'profiler = Profiler(async_mode="enabled")`, start it inside the coroutine that runs the '
    "training loop, then `profiler.output_text()` / `Profiler.last_session.save(...)`. The pyinstrument "
    "CLI never uses async mode (`--async-mode` does not exist there; it fails with `no such option`)."
)


def check(ctx: RuleContext[ProfileWithoutAsyncModePolicy]) -> list[Finding]:
    min_idle = float(ctx.thresholds.min_idle_share)
    findings = []
    notes = []
    for item in breakdown(ctx.run.profiles, ctx.run.frames):
        share = item.idle_poll_s / item.wall_s if item.wall_s > 0 else 0.0
        notes.append(f"{item.profile}: {share:.0%} in the event loop's poll, {item.await_frames} [await] frame(s)")
        if item.async_mode == "enabled" or item.await_frames > 0 or share < min_idle:
            continue
        top = item.idle_poll_frames[0]
        findings.append(
            ctx.finding(
                severity="info",
                title="Profile cannot locate async waits",
                message=(
                    f"{item.idle_poll_s:.2f} s of {item.wall_s:.2f} s ({share:.0%}) of profile {item.profile} "
                    f"is the event loop idling in {top.where()} and it has no "
                    "[await] frames: it was recorded without async mode, so it cannot say which coroutine "
                    "was waiting on which API call."
                ),
                fix=FIX,
                evidence={
                    "profile": item.profile,
                    "async_mode": item.async_mode,
                    "wall_s": round(item.wall_s, 6),
                    "idle_poll_s": round(item.idle_poll_s, 6),
                    "share": round(share, 4),
                    "frames": [f.to_dict() for f in item.idle_poll_frames[:5]],
                },
                fraction_of_wall=round(share, 4),
                fingerprint=f"profile-without-async-mode:{ctx.input_key(item.profile)}",
            )
        )
    return findings or ctx.passed("; ".join(notes))


RULE = register(
    Rule(
        slug="profile-without-async-mode",
        code="TD109",
        title="Profile recorded without async mode",
        severity="info",
        needs="a pyinstrument profile",
        docs=RuleDocs(
            what=(
                "A pyinstrument profile dominated by the event loop's selector (`selectors.py select` → "
                "`epoll.poll` / `kqueue.control` / `select`) with no `[await]` frames."
            ),
            why=(
                "Without async mode pyinstrument files every await under the event loop's poll, so the "
                "profile cannot show which API call the training loop was waiting on — the question a "
                "Tinker profile is usually taken to answer."
            ),
            evidence=(
                "Seconds under the outermost selector/poll frames and their share of the profile's wall "
                "time; the count of [await] / [out-of-context] frames; the profile's recorded async_mode."
            ),
            fix=FIX,
        ),
        check=check,
        policy=ProfileWithoutAsyncModePolicy,
        stage="profile",
        requires=(
            requires("no pyinstrument profile (JSON renderer output or .pyisession) among the inputs", table("frames")),
        ),
        tags=("profile",),
    )
)
