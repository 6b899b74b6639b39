"""Keys the console table cut to fit its column (`test/env/all/ob_tokens_per_tu…`) mapped back to full keys.

Rich cuts a key wider than the Metric column to its first width-1 characters and `…`. The full key
is one that starts with that prefix and is too long for the column; it is taken only when the choice
is unambiguous. The candidates are the keys the capture shows whole in any of its tables, the same
keys under an evaluation prefix (RL evaluators log the training keys as `test/<key>`), and the
cookbook's known keys. A table lists its rows sorted by full key, so when several rows of one table
share a prefix (`test/env/all/by_group/frac_al…` for `frac_all_bad` and `frac_all_good`) and exactly
that many candidates fit, they map in sorted order. Anything else is kept as written and reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from trace_doctor.ingest.parsers.console_tables import CUT_MARK, ConsoleTable, is_cut_key
from trace_doctor.knowledge.tinker import COOKBOOK_METRIC_KEYS, EVAL_KEY_PREFIXES

HIDDEN_SUFFIXES = (":total", ":count")  # PrettyPrintLogger never prints these keys


@dataclass
class UnresolvedKey:
    """A cut key left as written: where it was first seen and the candidates that fit it (0 or several)."""

    shown: str
    line: int
    candidates: list[str] = field(default_factory=list)


def candidate_keys(tables: Iterable[ConsoleTable]) -> set[str]:
    """Full keys a cut key may stand for: shown whole in the capture, their eval forms, the known keys."""
    whole = {cell.key for table in tables for cell in table.cells if not is_cut_key(cell.key)}
    evals = {prefix + key for key in whole for prefix in EVAL_KEY_PREFIXES if not key.startswith(EVAL_KEY_PREFIXES)}
    found = whole | evals | set(COOKBOOK_METRIC_KEYS)
    return {key for key in found if not key.endswith(HIDDEN_SUFFIXES)}


def resolve_cut_keys(tables: list[ConsoleTable]) -> list[UnresolvedKey]:
    """Rename the cut keys of every table in place; the ones left as written, first sighting each."""
    candidates = sorted(candidate_keys(tables))
    unresolved: dict[str, UnresolvedKey] = {}
    for table in tables:
        shown_whole = {cell.key for cell in table.cells if not is_cut_key(cell.key)}
        groups: dict[str, list[int]] = {}
        for i, cell in enumerate(table.cells):
            if is_cut_key(cell.key):
                groups.setdefault(cell.key, []).append(i)
        for shown, rows in groups.items():
            prefix = shown[: -len(CUT_MARK)]
            # The full key did not fit the column, which was len(shown) wide.
            fits = [
                key for key in candidates if key.startswith(prefix) and len(key) > len(shown) and key not in shown_whole
            ]
            if len(fits) == len(rows):
                for i, key in zip(rows, fits, strict=True):
                    table.cells[i].key = key
            elif shown not in unresolved:
                unresolved[shown] = UnresolvedKey(shown, table.cells[rows[0]].line, fits)
    return list(unresolved.values())
