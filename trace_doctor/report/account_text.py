"""The time account's structure items in words, the same in the terminal, the Markdown and the page."""

from __future__ import annotations

from trace_doctor.humanize import format_seconds
from trace_doctor.model import StructureAccount, StructurePart, TimeAccount


def per_step_text(part: StructurePart, structure: StructureAccount) -> str:
    """`4.1 min of 4.7 min per step` for a part in every step, `5.5 min in each of 3 steps` for an
    occasional one."""
    if part.steps > 1 and part.steps >= structure.timed_steps and structure.median_step_s:
        return f"{format_seconds(part.median_step_s)} of {format_seconds(structure.median_step_s)} per step"
    return f"{format_seconds(part.median_step_s)} in each of {part.steps} steps" if part.steps > 1 else "in 1 step"


def structure_items(account: TimeAccount) -> list[tuple[str, float, str]]:
    """(label, seconds, note) of each part of the wall time the loop's structure explains."""
    structure = account.structure
    if structure is None:
        return []
    return [
        (part.part, part.seconds, per_step_text(part, structure) + ("" if part.timed else ", by the loop's structure"))
        for part in structure.parts
    ]


def to_explain_rest(account: TimeAccount) -> str | None:
    """What would explain the unexplained rest, when there is some worth naming."""
    return account.structure.to_explain_rest if account.structure is not None else None


def unexplained_note(account: TimeAccount) -> str:
    """Why the rest is unexplained and what would explain it."""
    rest = to_explain_rest(account)
    return f"no finding or phase accounts for it; {rest}" if rest else "no finding accounts for it"


def shows_account(account: TimeAccount | None) -> bool:
    """Whether there is anything to show beyond "all of it unexplained"."""
    return bool(account and (account.causes or account.structure))
