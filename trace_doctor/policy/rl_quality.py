"""Thresholds of the RL learning-signal rules: constant-reward groups, entropy collapse, truncation."""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import AT_LEAST_ONE, POSITIVE, SHARE, threshold


@dataclass(frozen=True)
class ConstantRewardGroupsPolicy:
    min_constant_share: float = threshold(
        0.5,
        unit="share of groups in a step",
        why="A group whose samples all get the same reward has zero advantage and adds no gradient (Tinker "
        "notes; cookbook rl/data_processing.py drops them). Past half of the groups, most rollouts of the step "
        "are wasted; healthy runs keep frac_mixed well above 0.5 (FORMATS 1.3 example: 0.69). A step counts "
        "when its share is above this (exactly half is not most: with group_size 2 and p = 0.5 half the groups "
        "are constant by chance).",
        bounds=SHARE,
    )
    min_share_of_steps: float = threshold(
        0.5,
        unit="share of judged steps",
        why="Sustained, not one batch of easy prompts: at least this share of the steps must be above "
        "min_constant_share.",
        bounds=SHARE,
    )
    min_steps: int = threshold(
        5, unit="steps", why="Fewer judged steps cannot show a sustained share.", bounds=AT_LEAST_ONE
    )
    dominant_kind_share: float = threshold(
        0.67,
        unit="share of constant groups",
        why="The constant groups are called all-good (too easy / saturated) or all-bad (too hard / broken "
        "reward) when this share of them is of one kind (cookbook good cut: total reward >= 0.5); the fix differs.",
        bounds=SHARE,
    )
    late_onset_share: float = threshold(
        0.25,
        unit="share of the run",
        why="All-good groups that take over only after this share of the steps, once the reward has risen, are "
        "a learned task saturating (info: stop earlier); from the start, the prompts are too easy (warning).",
        bounds=SHARE,
    )
    min_reward_gain: float = threshold(
        0.2,
        unit="reward (absolute)",
        why="The rise in mean reward from the first step (the starting model) to the onset that makes a saturation a "
        "learned task rather than a task that was always easy.",
        bounds=POSITIVE,
    )
    min_log_lines: int = threshold(
        3,
        unit="log lines",
        why="Without per-group metrics, this many `All rewards are uniform` / `all groups failed or filtered, "
        "skipping batch` warnings (cookbook rl/data_processing.py, rl/train.py) show whole steps without signal.",
        bounds=AT_LEAST_ONE,
    )


@dataclass(frozen=True)
class EntropyCollapsePolicy:
    max_late_entropy: float = threshold(
        0.05,
        unit="nats per token",
        why="`optim/entropy` is the sampled-token NLL (FORMATS 1.3); healthy RL runs in the corpus sit at "
        "0.2-0.9. Below this the sampler is nearly deterministic: the inkling skill's collapse toward 0.",
        bounds=POSITIVE,
    )
    max_late_over_early: float = threshold(
        0.25,
        unit="late / early median",
        why="A collapse is a fall: the late median must be at most this fraction of the early one (a run "
        "whose entropy is low from the start, e.g. a one-word-answer task, did not collapse).",
        bounds=SHARE,
    )
    min_early_entropy: float = threshold(
        0.1,
        unit="nats per token",
        why="The early median must be at least this (twice the floor): a series that starts near zero has "
        "nothing to collapse from.",
        bounds=POSITIVE,
    )
    window_share: float = threshold(
        0.2,
        unit="share of steps",
        why="The late window is this share of the steps (at least min_window): a sustained level, robust to a "
        "noisy step. The early level is the median of the first min_window steps (a solved task can collapse "
        "in three steps).",
        bounds=SHARE,
    )
    min_window: int = threshold(
        3,
        unit="steps",
        why="The early window's length and the late window's minimum: the median of three tolerates one outlier.",
        bounds=AT_LEAST_ONE,
    )
    min_steps: int = threshold(10, unit="steps", why="Fewer steps cannot show a sustained fall.", bounds=AT_LEAST_ONE)
    min_late_share_below: float = threshold(
        0.8,
        unit="share of late window",
        why="Sustained, not one low step: this share of the late window must be below max_late_entropy.",
        bounds=SHARE,
    )
    saturated_reward: float = threshold(
        0.95,
        unit="share of the run's best reward",
        why="Late mean reward at or above this fraction of the best step's, with all-good groups, means the "
        "policy converged on a solved task: the collapse is the saturation's symptom (info).",
        bounds=SHARE,
    )
    min_reward_gain: float = threshold(
        0.2,
        unit="reward (absolute)",
        why="A saturation is a learned task: the reward must have risen this much from the first step (the "
        "starting model) to the late window (constant-reward-groups uses the same gain). All-good groups "
        "without that rise are the collapse's symptom — one identical completion per prompt makes every group "
        "constant — not a solved task (warning).",
        bounds=POSITIVE,
    )
    tail_steps: int = threshold(
        4,
        unit="steps",
        why="A collapse in the run's last few steps is too short for the late window (at least min_window steps, "
        "a fifth of the run) to hold mostly below the floor: the last this-many steps are judged on their own.",
        bounds=AT_LEAST_ONE,
    )
    tail_min_below: int = threshold(
        3,
        unit="steps",
        why="Of the last tail_steps steps, at least this many must be below max_late_entropy (three of four: "
        "one noisy step does not hide a collapse, one low step does not make one).",
        bounds=AT_LEAST_ONE,
    )
    length_growth: float = threshold(
        2.0,
        unit="x early completion length",
        why="Completions at least this many times longer late than early, with the entropy gone, look like a "
        "repetition loop rather than a converged answer: the finding says so.",
        bounds=AT_LEAST_ONE,
    )


@dataclass(frozen=True)
class TruncatedSamplesPolicy:
    min_share: float = threshold(
        0.2,
        unit="share of samples",
        why="A sample cut at max_tokens usually has no parsable answer (reward 0 or masked): past a fifth of "
        "the batch, the reward measures the length cap more than the task (cookbook stop/max_tokens, FORMATS 1.3).",
        bounds=SHARE,
    )
    min_steps_above: int = threshold(
        3, unit="steps", why="Sustained: at least this many steps above min_share.", bounds=AT_LEAST_ONE
    )
    late_share: float = threshold(
        0.33,
        unit="share of steps",
        why="Truncation that grows with the completions shows in the last third of the run: judged there "
        "as well as over the whole run.",
        bounds=SHARE,
    )
    mean_near_cap: float = threshold(
        0.9,
        unit="ac_tokens_per_turn / max_tokens",
        why="Weakest source (no stop counts, no rollouts): a mean completion this close to the cap means most "
        "samples are at or near it (if 80% were far below, the mean could not get here).",
        bounds=SHARE,
    )
    short_thinking_max_tokens: int = threshold(
        4096,
        unit="tokens",
        why="A thinking renderer (qwen3 without disable_thinking, ...) with max_tokens at or below this spends "
        "the budget in the reasoning block and never reaches an answer (debug guide renderer table).",
        bounds=AT_LEAST_ONE,
    )


@dataclass(frozen=True)
class ResponseParseErrorsPolicy:
    min_share: float = threshold(
        0.1,
        unit="share of samples in a step",
        why="A parse error is a sample the environment could not read (cookbook StopReason.PARSE_ERROR, "
        "`parse_error_masked`): it earns the failed-parse reward or is masked out of the loss, so it teaches "
        "nothing about the task. An occasional malformed sample is noise; one in ten is a format the parser does "
        "not expect (the debug guide: the renderer's tool-call / answer format is not the model's).",
        bounds=SHARE,
    )
    min_steps_above: int = threshold(
        3,
        unit="steps",
        why="Sustained, not one odd batch: at least this many steps above min_share.",
        bounds=AT_LEAST_ONE,
    )
    min_share_of_steps: float = threshold(
        0.3,
        unit="share of judged steps",
        why="The steps above min_share must also be this share of the steps that logged a parse-error metric: "
        "a format mismatch shows on most steps, a rare bad prompt on a few.",
        bounds=SHARE,
    )
