"""The time account's structure items in words, the same in the terminal, the Markdown and the page."""

from __future__ import annotations

from typing import Any

from trace_doctor.humanize import format_seconds


def per_step_text(part: dict[str, Any], account: dict[str, Any]) -> str:
    """`4.1 min of 4.7 min per step` for a part in every step, `5.5 min in 1 step` for an occasional one."""
    step = account.get("median_step_s")
    every = part["steps"] >= (account.get("timed_steps") or 0) and part["steps"] > 1
    if every and step:
        return f"{format_seconds(part['median_step_s'])} of {format_seconds(step)} per step"
    count = part["steps"]
    return f"{format_seconds(part['median_step_s'])} in each of {count} steps" if count > 1 else "in 1 step"


def structure_items(account: dict[str, Any]) -> list[tuple[str, float, str]]:
    """(label, seconds, note) of each part of the wall time the loop's structure explains."""
    return [
        (
            part["part"],
            part["seconds"],
            per_step_text(part, account) + ("" if part["timed"] else ", by the loop's structure"),
        )
        for part in account.get("structure") or []
    ]


def unexplained_note(account: dict[str, Any]) -> str:
    """Why the rest is unexplained and what would explain it."""
    rest = account.get("to_explain_rest")
    return f"no finding or phase accounts for it; {rest}" if rest else "no finding accounts for it"


def shows_account(account: dict[str, Any] | None) -> bool:
    """Whether there is anything to show beyond "all of it unexplained"."""
    return bool(account and (account.get("causes") or account.get("structure")))
