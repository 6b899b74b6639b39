"""TD212 checkpoint-risk: what checkpoints.jsonl says the run can still be sampled, exported or resumed from.

The cookbook's CheckpointManager (checkpoint_utils.py, FORMATS.md 3.4) saves periodic checkpoints
(state + sampler weights) with config `ttl_seconds` (default 604800 s, 7 days), rolling ones (state
only, `"rolling": true`) with `rolling_ttl_seconds` (2 h, deleted as the next one lands), and one
`final` checkpoint, state + sampler, with no TTL, after the training loop ends. Three readings:
no record with sampler weights (nothing to sample or export), a run that completed its planned
steps without a final record, and a run whose every checkpoint is on a TTL (no final yet: it was
cut short, is still going, or never saves one).
"""

from __future__ import annotations

from typing import Any

from trace_doctor.derive.checkpoints import (
    DEFAULT_ROLLING_TTL_S,
    DEFAULT_TTL_S,
    checkpoint_records,
    cite,
    is_final,
    record_ttl,
    step_of,
    ttl_known,
    ttl_setting,
)
from trace_doctor.derive.progress import run_progress
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.humanize import format_seconds
from trace_doctor.model import Finding
from trace_doctor.policy.configuration import CheckpointRiskPolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import found, requires

KEEP_FIX = (
    "keep the one you need: `RestClient.set_checkpoint_ttl_from_tinker_path(path, None)` (tinker SDK) removes its "
    "TTL, or export it (tinker_cookbook.weights) before it expires"
)


def ttl_text(seconds: float) -> str:
    """A TTL for people: days from a day up (the cookbook's default reads "7 days"), else hours/minutes."""
    return f"{seconds / 86400:.3g} days" if seconds >= 86400 else format_seconds(seconds)


def check(ctx: RuleContext[CheckpointRiskPolicy]) -> list[Finding]:
    config = ctx.run.meta.config or {}
    records = checkpoint_records(ctx.run.checkpoints)
    progress = run_progress(
        live_training_rows(ctx.run.steps), config=config, log_events=ctx.run.log_events, trainer=ctx.run.meta.trainer
    )
    if not records and progress.completed is not True:
        raise NotApplicable("checkpoints.jsonl holds no record, and the run did not reach its planned end")
    finals = [r for r in records if is_final(r)]
    samplers = [r for r in records if r.get("sampler_path")]
    plan = (
        f"{progress.last_step + 1} of {progress.planned_steps} planned steps logged, per {progress.source}"
        if progress.planned_steps is not None and progress.last_step is not None
        else f"the planned steps are unknown: {progress.source}"
    )
    evidence: dict[str, Any] = {
        "records": len(records),
        "with_sampler_weights": len(samplers),
        "final": bool(finals),
        "last_step": progress.last_step,
        "planned_steps": progress.planned_steps,
        "completed": progress.completed,
        "plan_source": progress.source,
    }
    findings: list[Finding] = []
    if records and not samplers:
        last = records[-1]
        findings.append(
            ctx.finding(
                severity="warning",
                title="No checkpoint with sampler weights",
                message=(
                    f"None of the {len(records)} record(s) in checkpoints.jsonl has a `sampler_path`: every one "
                    f"is training state only (last: `{last.get('name')}`, line {last.get('line')}). State resumes "
                    "training but cannot be sampled or exported; only a save with sampler weights (the cookbook's "
                    "periodic and final checkpoints) can."
                ),
                fix=(
                    "Resume from the last state and save with sampler weights (save_every > 0, or let the run "
                    "reach its final checkpoint); rolling checkpoints are state only by design."
                ),
                evidence=evidence | {"last_record": cite(last)},
                fingerprint="checkpoint-risk:no-sampler",
                confidence="high",
            )
        )
    if progress.completed and not finals:
        last = records[-1] if records else None
        findings.append(
            ctx.finding(
                severity="warning",
                title="Run completed its steps without a final checkpoint",
                message=(
                    f"The run trained to its planned end ({plan}) but checkpoints.jsonl has no `final` record"
                    + (
                        f"; the last saved is `{last.get('name')}` (line {last.get('line')})"
                        if last
                        else " and no record at all"
                    )
                    + ". The cookbook saves the final checkpoint, state and sampler weights with no TTL, after "
                    "the loop: the process died during that save, or the loop never makes one."
                    + (_expiry_note(last, config) if last else "")
                ),
                fix=(
                    "Relaunch into the same log_path: the cookbook resumes from the last record with a state_path, "
                    "retrains the steps after it and saves the final checkpoint; in a custom loop call "
                    "CheckpointManager.save_final at the end."
                ),
                steps=[progress.last_step] if progress.last_step is not None else [],
                evidence=evidence | ({"last_record": cite(last)} if last else {}),
                fingerprint="checkpoint-risk:no-final",
                confidence="high" if progress.source.startswith("`") else "medium",
            )
        )
    if records and not finals and not progress.completed:
        findings += _expiring(ctx, records, config, plan, evidence)
    if findings:
        return findings
    if finals:
        final = finals[-1]
        kind = "with sampler weights" if final.get("sampler_path") else "state only"
        return ctx.passed(
            f"final checkpoint `{final.get('name')}` ({kind}, kept without TTL) at line {final.get('line')}; "
            f"{len(samplers)} of {len(records)} record(s) carry sampler weights"
        )
    return ctx.passed(f"{len(records)} record(s), none final, none on a TTL; {plan}")


def _expiry_note(record: dict[str, Any], config: dict[str, Any]) -> str:
    """When a record's checkpoint expires, for a message (empty when it has no TTL)."""
    ttl = record_ttl(record, config) if ttl_known(record, config) else None
    return f" `{record.get('name')}` itself expires {ttl_text(ttl)} after it was saved." if ttl is not None else ""


def _expiring(
    ctx: RuleContext, records: list[dict[str, Any]], config: dict[str, Any], plan: str, evidence: dict[str, Any]
) -> list[Finding]:
    """No final checkpoint: every record on a TTL (periodic: ttl_seconds, rolling: rolling_ttl_seconds)."""
    periodic_ttl = ttl_setting(config, "ttl_seconds", DEFAULT_TTL_S)
    rolling_ttl = ttl_setting(config, "rolling_ttl_seconds", DEFAULT_ROLLING_TTL_S)
    # A config without the key may predate TTLs (older cookbooks saved without one): no guess.
    if not all(ttl_known(r, config) for r in records):
        return []
    ttls = [record_ttl(r, config) for r in records]
    if any(ttl is None for ttl in ttls):
        return []
    last = records[-1]
    last_ttl = float(ttls[-1])
    newest_sampler = next((r for r in reversed(records) if r.get("sampler_path")), None)
    short = last_ttl < ctx.thresholds.min_safe_ttl_s
    set_where = "rolling_ttl_seconds" if last.get("rolling") else "ttl_seconds"
    step = step_of(last)
    message = (
        f"No `final` checkpoint ({plan}), and every one of the {len(records)} saved is on a TTL: the newest, "
        f"`{last.get('name')}`, expires {ttl_text(last_ttl)} after it was saved ({set_where} "
        f"{last_ttl:g} s)."
    )
    if newest_sampler is not None and newest_sampler is not last:
        message += f" The newest with sampler weights is `{newest_sampler.get('name')}`."
    message += (
        " Only the final checkpoint is saved without a TTL; a run cut short or still going keeps nothing past that."
    )
    return [
        ctx.finding(
            severity="warning" if short else "info",
            title="Every checkpoint expires: no final checkpoint yet",
            message=message,
            fix=(
                f"If the run is over, {KEEP_FIX}; resume before then to continue. For long runs set ttl_seconds "
                "to cover how long you may need the checkpoints (None keeps them)."
            ),
            steps=[step] if step is not None else [],
            evidence=evidence
            | {
                "ttl_seconds": periodic_ttl,
                "rolling_ttl_seconds": rolling_ttl,
                "newest_record": cite(last),
                "newest_ttl_s": last_ttl,
            },
            fingerprint="checkpoint-risk:expiring",
            confidence="medium",
        )
    ]


RULE = register(
    Rule(
        slug="checkpoint-risk",
        code="TD212",
        title="Checkpoints that cannot be sampled, or will not last",
        severity="warning",
        needs="checkpoints.jsonl (and config.json's ttl_seconds, metrics' progress keys)",
        docs=RuleDocs(
            what=(
                "From checkpoints.jsonl: no record with a `sampler_path` (state only: nothing to sample or export; "
                "warning); a run that reached its planned steps (`progress/done_frac` or SFT `progress` at 1, "
                "or config max_steps) without a `final` record (warning); no final record and every checkpoint "
                "on a TTL — periodic ones on ttl_seconds, rolling ones on rolling_ttl_seconds (info; warning "
                "when the TTL is under a day). A run cut short or still going is never called 'completed'."
            ),
            why=(
                "Only a checkpoint with sampler weights can be sampled, evaluated or exported; the cookbook keeps "
                "only the final one forever (CheckpointManager saves it with ttl_seconds=None) and lets periodic "
                "(7 days by default) and rolling (2 hours) ones expire. A run that lost its final save, or stopped "
                "early, loses its weights when the TTL runs out."
            ),
            evidence=(
                "The checkpoints.jsonl records (name, line, state_path, sampler_path, rolling), config.json's "
                "ttl_seconds / rolling_ttl_seconds (cookbook defaults when absent), the last logged step against "
                "the planned steps read from the progress keys or max_steps."
            ),
            fix=(
                "Save with sampler weights (save_every > 0, the final checkpoint); for a run that stopped early, "
                "remove the TTL of the checkpoint you need (RestClient.set_checkpoint_ttl_from_tinker_path(path, "
                "None)) or export it before it expires; set ttl_seconds to cover how long you need them."
            ),
        ),
        check=check,
        policy=CheckpointRiskPolicy,
        stage="checkpoints",
        requires=(requires("no checkpoints.jsonl", found("checkpoints")),),
        tags=("training", "checkpoints"),
    )
)
