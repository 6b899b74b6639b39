"""Link each symptom to the findings that explain it (the debug guide's decision tree).

A cause explains a symptom when the knowledge table says it can (knowledge/triage.SYMPTOMS) and
the two are about the same time: their time ranges or steps meet, or one of them is measured over
the whole run. A pervasive symptom (every step slow) is only explained by a cause present on most
steps or measured over the whole run: three retried requests do not make every step slow. And the
causes must be big enough: together at least half of what the symptom measured.
"""

from __future__ import annotations

import dataclasses

import polars as pl

from trace_doctor.knowledge.triage import SYMPTOMS
from trace_doctor.model import Finding
from trace_doctor.triage.locate import Location, finding_key, locate, step_windows

# A cause is pervasive when it covers at least this share of the run's timed steps.
PERVASIVE_STEP_SHARE = 0.5
# Causes explain a symptom when together they cost at least this share of what the symptom measured:
# thirty seconds of retries do not explain an hour of slow steps.
MIN_COVER = 0.5


def _pervasive(location: Location, timed_steps: int) -> bool:
    if location.run_wide:
        return True
    return timed_steps > 0 and len(location.steps) >= PERVASIVE_STEP_SHARE * timed_steps


def _covers(causes: list[Finding], symptom: Finding) -> bool:
    """Whether the causes are big enough to be what the symptom saw: together they cost at least
    MIN_COVER of the symptom's own estimate (a cause placed at the symptom's steps or time always is)."""
    if not symptom.seconds_lost:
        return True
    if any(c.time_ranges_us or c.steps for c in causes if not c.seconds_lost):
        return True
    return sum(c.seconds_lost or 0.0 for c in causes) >= MIN_COVER * symptom.seconds_lost


def link_findings(
    findings: list[Finding], *, spans: pl.DataFrame | pl.LazyFrame, step_times: pl.DataFrame
) -> list[Finding]:
    """The findings with `explained_by` set (fingerprints of the explaining findings, triage order)."""
    windows = step_windows(spans)
    where = {id(f): locate(f, windows) for f in findings}
    timed_steps = step_times.height
    by_rule: dict[str, list[Finding]] = {}
    for f in findings:
        by_rule.setdefault(f.rule, []).append(f)
    explained: dict[int, list[str]] = {}
    for symptom in SYMPTOMS:
        for s in by_rule.get(symptom.symptom, []) + [f for f in findings if f.fingerprint == symptom.symptom]:
            causes: list[Finding] = []
            for cause_rule in symptom.causes:
                for c in by_rule.get(cause_rule, []):
                    if c is s or not where[id(c)].meets(where[id(s)]):
                        continue
                    if symptom.pervasive and not _pervasive(where[id(c)], timed_steps):
                        continue
                    # A cause with neither a place nor a cost cannot show it is behind the symptom.
                    if where[id(c)].run_wide and not c.seconds_lost:
                        continue
                    causes.append(c)
            if causes and _covers(causes, s):
                explained[id(s)] = [finding_key(c) for c in causes]
    return [dataclasses.replace(f, explained_by=explained.get(id(f), [])) for f in findings]
