"""Redaction of the model: a run's tables and metadata, an analysis, the runs of a fleet.

`redact_run` is the pass the CLI applies (`bundle` always, `analyze --redact`) between ingest and
the rules; `redact_analysis` is the after-the-fact pass for an analysis of a run that was not
redacted first (the Python API handing one to `write_bundle`).
"""

from __future__ import annotations

import copy
from dataclasses import fields, replace
from typing import Any

import polars as pl

from trace_doctor.model import Analysis, IngestWarning, PassedOver, RunTables, WandbMetadata
from trace_doctor.redact.frames import redact_frame
from trace_doctor.redact.stored import RedactedTable
from trace_doctor.redact.text import redact_argv, redact_text, redact_value
from trace_doctor.runs import UNSAFE_ID


def redact_run(run: RunTables) -> RunTables:
    """A copy of the run with credentials removed from every string that came from its files.

    Tables (values and metric names), config.json and the fields read from it, the paths and notes
    of the inputs, launches, passed-over files and ingest warnings. Numbers are left as they are.
    """
    if run.redacted:
        return run
    clean = copy.copy(run)
    clean.meta = replace(
        run.meta,
        path=redact_text(run.meta.path),
        model_name=_text(run.meta.model_name),
        renderer_name=_text(run.meta.renderer_name),
        trainer_mode=_text(run.meta.trainer_mode),
        config=redact_value(run.meta.config),
        wandb=[_wandb(w) for w in run.meta.wandb],
    )
    for name in run.TABLE_NAMES:
        held = run._raw(name) if name in run.STORED_TABLES else getattr(run, name)
        # A table left on disk stays there: it is redacted as it is read (its first read finds what
        # to replace), so a table no reader asks for (the step spans) is never read at all.
        setattr(clean, name, redact_frame(held) if isinstance(held, pl.DataFrame) else RedactedTable(held))
    clean.inputs = [replace(i, path=redact_text(i.path), note=redact_text(i.note)) for i in run.inputs]
    clean.launches = [_launch(launch) for launch in run.launches]
    clean.passed_over = redact_passed_over(run.passed_over)
    clean.warnings = [IngestWarning(redact_text(w.path), w.line, redact_text(w.problem)) for w in run.warnings]
    clean.redacted = True
    return clean


def _text(value: str | None) -> str | None:
    return redact_text(value) if isinstance(value, str) else value


def _wandb(meta: WandbMetadata) -> WandbMetadata:
    """Every string W&B recorded, the command line read flag by flag (`--api-key <value>`)."""
    strings = {f.name: redact_text(v) for f in fields(meta) if isinstance(v := getattr(meta, f.name), str)}
    return replace(meta, args=redact_argv(meta.args), **strings)


def _launch(launch: Any) -> Any:
    source = getattr(launch, "source", None)
    return replace(launch, source=redact_text(source)) if isinstance(source, str) else launch


def redact_passed_over(items: list[PassedOver] | tuple[PassedOver, ...]) -> list[PassedOver]:
    return [PassedOver(redact_text(p.path), redact_text(p.reason)) for p in items]


def redact_analysis(result: Analysis) -> Analysis:
    """An analysis with credentials removed from everything in it that came from input.

    For an analysis of a redacted run this only checks the findings again. Otherwise it is the
    best that can be done after the fact: rules may have normalised a quoted line (digits blanked
    when grouping errors) so that a token no longer has its shape — analyse `redact_run(run)`
    instead wherever the run is at hand, as the CLI does.
    """
    from trace_doctor.decision import decide

    findings = []
    for finding in result.findings:
        clean = copy.copy(finding)
        clean.title, clean.message, clean.fix = (
            redact_text(finding.title),
            redact_text(finding.message),
            redact_text(finding.fix),
        )
        clean.evidence = redact_value(finding.evidence)
        clean.fingerprint = _text(finding.fingerprint)
        findings.append(clean)
    derived = dict(result.derived or {})
    if isinstance(derived.get("step_times"), pl.DataFrame):
        derived["step_times"] = redact_frame(derived["step_times"])
    clean = Analysis(
        run=redact_run(result.run),
        findings=findings,
        outcomes=[replace(o, reason=redact_text(o.reason)) for o in result.outcomes],
        summary=redact_value(result.summary),
        baseline=redact_value(result.baseline) if result.baseline is not None else None,
        derived=derived,
        policy=result.policy,
    )
    # The same decisions, over the redacted findings (their titles make the verdict's headline).
    gate = result.gate
    if gate is None:
        return decide(clean)
    return decide(clean, fail_on=gate.fail_on, fail_on_inconclusive=gate.fail_on_inconclusive)


def redact_split(split: Any) -> Any:
    """Runs as a fleet shows them (run id, label, path: folder names are input too), files not
    belonging to any run. Where each run's files are (`root`, `files`) is kept: workers read them."""
    runs = []
    taken = {source.run_id for source in split.runs}
    for source in split.runs:
        run_id = redact_text(source.run_id)
        if run_id != source.run_id:
            # Still file-name safe (it names a report file and a partition) and still unique.
            base = run_id = UNSAFE_ID.sub("_", run_id)
            count = 1
            while run_id in taken:
                count += 1
                run_id = f"{base}-{count}"
            taken.add(run_id)
        runs.append(
            replace(
                source,
                run_id=run_id,
                label=redact_text(source.label),
                path=redact_text(source.path),
                passed_over=tuple(redact_passed_over(source.passed_over)),
            )
        )
    return replace(split, runs=runs, passed_over=redact_passed_over(split.passed_over))
