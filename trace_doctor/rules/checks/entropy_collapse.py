"""TD205 entropy-collapse: `optim/entropy` falling toward zero and staying there (FORMATS.md 1.5).

The inkling skill says to watch `optim/entropy`; a collapse goes with frac_mixed -> 0 (groups whose
samples are all alike). Robust to noise: the early and late windows' medians are compared (an absolute
floor and a relative fall), and most of the late window must sit below the floor.
"""

from __future__ import annotations

from trace_doctor.derive.rl_quality import Windows, median, series, training_column
from trace_doctor.derive.step_times import live_training_rows
from trace_doctor.model import Finding
from trace_doctor.policy.rl_quality import EntropyCollapsePolicy
from trace_doctor.rules.base import NotApplicable, Rule, RuleDocs, register
from trace_doctor.rules.checks.renderer_kl_step0 import run_label
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.requires import requires, values_in

MAX_LISTED_STEPS = 50


def entropy_column(columns: list[str]) -> str | None:
    """The training entropy metric (`optim/entropy`; docs write it bare), never an eval or teacher key."""
    if "optim/entropy" in columns:
        return "optim/entropy"
    return "entropy" if "entropy" in columns else None


def _window_medians(rows, key: str, *, share: float, min_len: int) -> tuple[float, float] | None:
    frame = series(rows, key)
    if frame.height < 2 * min_len:
        return None
    windows = Windows.of(frame, share=share, min_len=min_len, early_len=min_len)
    return median(windows.early), median(windows.late)


def check(ctx: RuleContext[EntropyCollapsePolicy]) -> list[Finding]:
    if ctx.run.meta.trainer in ("sl", "dpo"):
        raise NotApplicable(f"a {ctx.run.meta.trainer} run samples nothing: no policy entropy")
    t = ctx.thresholds
    rows = live_training_rows(ctx.run.steps)
    column = entropy_column(rows.columns)
    if column is None:
        raise NotApplicable("no optim/entropy in metrics")
    values = series(rows, column)
    if values.height < t.min_steps:
        raise NotApplicable(f"only {values.height} step(s) with {column} (needs {t.min_steps})")
    # The early level is the first few steps: a collapse can take three steps (a task solved at once).
    windows = Windows.of(values, share=t.window_share, min_len=t.min_window, early_len=t.min_window)
    early, late = median(windows.early), median(windows.late)
    below = [v for v in windows.late if v <= t.max_late_entropy]
    summary = (
        f"`{column}` median {early:.3g} over the first {len(windows.early)} steps -> {late:.3g} over the last "
        f"{len(windows.late)}"
    )
    if early < t.min_early_entropy:
        return ctx.passed(f"{summary}: low from the start (below {t.min_early_entropy}), nothing collapsed")
    tail = values.tail(t.tail_steps)
    tail_below = [v for v in tail["value"].to_list() if v <= t.max_late_entropy]
    if late > t.max_late_entropy or late > t.max_late_over_early * early:
        reason = f"{summary}: above the {t.max_late_entropy} floor or not a fall"
    elif len(below) < t.min_late_share_below * len(windows.late):
        reason = f"{summary}: only {len(below)} of {len(windows.late)} late steps below the floor"
    else:
        reason = None
    # A collapse in the last few steps: too short for the late window, judged on the run's tail alone — when it
    # is new there (the steps just before were not low by the same count; else the late window's share decides).
    prior = values.head(max(0, values.height - t.tail_steps)).tail(t.tail_steps)
    prior_below = sum(1 for v in prior["value"].to_list() if v <= t.max_late_entropy)
    short_tail = (
        reason is not None
        and len(tail_below) >= t.tail_min_below
        and values.height > t.tail_steps
        and prior_below < t.tail_min_below
    )
    if reason is not None and not short_tail:
        return ctx.passed(
            f"{reason}; {len(tail_below)} of the last {tail.height} steps below it (a tail collapse needs "
            f"{t.tail_min_below})"
        )
    if short_tail:
        late = median(tail["value"].to_list())
        below, late_len = tail_below, tail.height
        first_low = next(int(st) for st, v in tail.iter_rows() if v <= t.max_late_entropy)
        summary = (
            f"`{column}` median {early:.3g} over the first {len(windows.early)} steps -> {late:.3g} over the last "
            f"{tail.height}, the run's tail"
        )
    else:
        late_len, first_low = len(windows.late), None

    notes, stronger = _context(ctx, rows, t)
    saturated = notes.pop("saturated", False)
    hidden = notes.pop("hidden", None)
    collapse_step = first_low if first_low is not None else _first_sustained_below(values, t.max_late_entropy)
    steps = [int(s) for s in values.filter(values["step"] >= collapse_step)["step"].to_list()]
    if hidden is not None:
        severity, title = "warning", "Policy entropy collapsed behind all-correct groups"
        meaning = (
            f" The groups now read all-correct ({hidden}) without the reward having risen: the sampler emits one "
            "completion per prompt, so every group is constant whatever the prompt's difficulty. The 'too easy' "
            "reading of constant-reward-groups is this collapse's symptom, not (only) easy prompts."
        )
        fix = (
            "Lower the learning rate, add a KL penalty toward the base model (kl_penalty_coef), keep temperature "
            "at 1; read a few groups' transcripts (identical samples confirm it) and resume from a checkpoint "
            f"before step {collapse_step}."
        )
    elif saturated:
        severity, title = "info", "Entropy collapsed after the task saturated"
        meaning = (
            " The reward is at its best and the groups are all-correct: the policy converged on a solved task, so "
            "the collapse is the saturation's symptom (see constant-reward-groups), not a failure to explore."
        )
        fix = "Nothing to rescue in this run: stop at the saturation; for further learning use harder prompts."
    elif ctx.run.meta.trainer == "distillation":
        severity, title = "warning", "Student entropy collapsed toward zero"
        meaning = (
            " The student now samples nearly deterministically; teacher_kl cannot flag a loop the teacher also "
            "predicts once it is in the context."
        )
        fix = (
            "Read a few late transcripts for repetition; lower the learning rate, cap or penalise length, and "
            f"resume from a checkpoint before step {collapse_step}."
        )
    else:
        severity, title = "warning", "Policy entropy collapsed toward zero"
        meaning = (
            " The sampler now emits nearly one completion per prompt: groups stop disagreeing, advantages vanish "
            "and learning stalls (mode collapse)."
        )
        fix = (
            "Lower the learning rate, add a KL penalty toward the base model (kl_penalty_coef), keep temperature "
            "at 1, and check the reward for a shortcut the policy collapsed onto; resume from a checkpoint before "
            f"step {collapse_step}."
        )
    message = (
        f"{summary}: fell to {100 * late / early:.2g}% of its early level and stayed below {t.max_late_entropy} on "
        f"{len(below)} of {late_len} late steps, from step {collapse_step} ({run_label(ctx.run.meta)})."
        f"{meaning}{''.join(str(v) for v in notes.values())}"
    )
    return [
        ctx.finding(
            severity=severity,
            title=title,
            message=message,
            fix=fix,
            steps=steps[:MAX_LISTED_STEPS],
            evidence={
                "metric": column,
                "early_median": early,
                "late_median": late,
                "late_over_early": late / early,
                "late_steps_below": len(below),
                "late_steps": late_len,
                "collapse_step": collapse_step,
                "saturated": saturated,
                "frac_mixed_fell": stronger,
                "short_tail": short_tail,
                "behind_all_good_groups": hidden is not None,
            },
            fingerprint="entropy-collapse:saturated" if saturated and hidden is None else "entropy-collapse",
            confidence="high" if stronger else "medium",
        )
    ]


def _first_sustained_below(values, floor: float) -> int:
    """First step from which every later value stays at or below `floor` (else the last step above it + 1)."""
    steps = values["step"].to_list()
    vals = values["value"].to_list()
    start = len(vals)
    for i in range(len(vals) - 1, -1, -1):
        if vals[i] > floor:
            break
        start = i
    return int(steps[min(start, len(steps) - 1)])


def _context(ctx: RuleContext[EntropyCollapsePolicy], rows, t) -> tuple[dict, bool]:
    """Notes for the message (frac_mixed, reward saturation, completion length), and whether frac_mixed fell."""
    notes: dict = {}
    stronger = False
    mixed_key = training_column(rows.columns, "by_group/frac_mixed")
    mixed = _window_medians(rows, mixed_key, share=t.window_share, min_len=t.min_window) if mixed_key else None
    if mixed is not None and mixed[1] < 0.5 * mixed[0]:
        stronger = True
        notes["mixed"] = f" `{mixed_key}` fell with it ({mixed[0]:.2f} -> {mixed[1]:.2f})."
    reward_key = training_column(rows.columns, "reward/total")
    good_key = training_column(rows.columns, "by_group/frac_all_good")
    if reward_key and good_key:
        reward = series(rows, reward_key)
        good = _window_medians(rows, good_key, share=t.window_share, min_len=t.min_window)
        if reward.height and good is not None:
            best = float(reward["value"].max())
            late_reward = median(Windows.of(reward, share=t.window_share, min_len=t.min_window).late)
            first_reward = float(reward["value"][0])  # the starting model's score
            if best > 0 and late_reward >= t.saturated_reward * best and good[1] >= 0.5:
                if late_reward - first_reward >= t.min_reward_gain:
                    notes["saturated"] = True
                else:
                    notes["hidden"] = (
                        f"`{good_key}` {good[0]:.2f} -> {good[1]:.2f}, reward {first_reward:.2f} at the first step, "
                        f"{late_reward:.2f} late"
                    )
    length_key = training_column(rows.columns, "ac_tokens_per_turn")
    length = _window_medians(rows, length_key, share=t.window_share, min_len=t.min_window) if length_key else None
    if length is not None and length[0] > 0 and length[1] >= t.length_growth * length[0]:
        notes["length"] = (
            f" Completions grew from {length[0]:.0f} to {length[1]:.0f} tokens per turn meanwhile: long, "
            "near-deterministic samples look like a repetition loop (see truncated-samples)."
        )
    return notes, stronger


RULE = register(
    Rule(
        slug="entropy-collapse",
        code="TD205",
        title="Entropy collapse: the policy stopped exploring",
        severity="warning",
        needs="metrics.jsonl with optim/entropy (RL or on-policy distillation)",
        docs=RuleDocs(
            what=(
                "`optim/entropy` (sampled-token NLL, nats/token) falling toward zero: the late window's median "
                "below an absolute floor and a small fraction of the early window's, with most late steps below "
                "the floor (one low step is not a collapse), or most of the run's last few steps below the floor "
                "(a collapse new at the very end). Info when the reward rose and saturated with all-correct groups "
                "(the policy converged on a learned task); warning otherwise (mode collapse), including all-correct "
                "groups without a reward rise: the collapse makes every group constant, which constant-reward-groups "
                "alone reads as 'too easy'."
            ),
            why=(
                "The inkling skill says to watch optim/entropy; a collapsed sampler emits one completion per prompt, "
                "groups stop disagreeing (frac_mixed -> 0), advantages vanish and learning stalls (FORMATS 1.5)."
            ),
            evidence=(
                "Early and late medians of optim/entropy, the late steps below the floor, the step the collapse "
                "began; frac_mixed over the same windows (a fall makes it high confidence), reward saturation, "
                "completion length growth."
            ),
            fix=(
                "Lower the learning rate, add a KL penalty toward the base model, keep temperature 1, check the "
                "reward for a shortcut; resume from a checkpoint before the collapse."
            ),
        ),
        check=check,
        policy=EntropyCollapsePolicy,
        stage="training quality",
        panels=("entropy", "groups"),
        requires=(requires("no optim/entropy in metrics", values_in("steps", "optim/entropy", "entropy")),),
        tags=("training", "rl", "metrics"),
    )
)
