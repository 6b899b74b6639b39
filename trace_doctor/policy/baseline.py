"""Thresholds of the regression rules that compare a run with a baseline."""

from __future__ import annotations

from dataclasses import dataclass

from trace_doctor.policy.schema import AT_LEAST_ONE, POSITIVE, SHARE, Bounds, threshold


@dataclass(frozen=True)
class StepTimeRegressionPolicy:
    min_relative_effect: float = threshold(
        0.10,
        unit="share of the baseline's median",
        why="Below a 10% slower median step a statistically significant change is noise CI should not fail on.",
    )
    alpha: float = threshold(
        0.05,
        unit="p-value",
        why="Significance level of the one-sided Mann-Whitney U test.",
        bounds=Bounds(0.0, 1.0, low_open=True, high_open=True),
    )
    min_steady_steps: int = threshold(
        5,
        unit="steps per run",
        why="With 5 vs 5 the smallest one-sided p is 1/252 = 0.004, so the test can still reach alpha; "
        "fewer gives the verdict inconclusive.",
        bounds=Bounds(2.0, None),
    )


@dataclass(frozen=True)
class NewFindingPolicy:
    """Matches findings by fingerprint only: nothing to tune."""


@dataclass(frozen=True)
class QualityRegressionPolicy:
    """How the final window of each run is cut, and how much worse a quality metric must be.

    The test itself (one-sided Mann-Whitney U at `alpha`, derive/shift.py) is step-time-regression's;
    its significance level is shared with it through this policy's own `alpha` so a user can be
    stricter about quality than about speed.
    """

    final_share: float = threshold(
        0.25,
        unit="share of the matched step horizon",
        why="The comparison is about where training ended, not how it started: the last quarter of the "
        "steps both runs have. Shorter windows hold too few points of a noisy RL reward; longer ones "
        "mix in the learning curve's climb, which is a speed-of-learning difference, not a final one.",
        bounds=Bounds(0.0, 1.0, low_open=True),
    )
    max_window_share: float = threshold(
        0.5,
        unit="share of the matched step horizon",
        why="Evals run every eval_every steps (5-20 in the cookbook's recipes), so a quarter of the "
        "horizon often holds 2-3 eval points; the window widens toward the last half until both runs "
        "have min_points values, and no further: the first half is the learning curve, not its end.",
        bounds=Bounds(0.0, 1.0, low_open=True),
    )
    min_points: int = threshold(
        5,
        unit="values per run in the window",
        why="As for step-time-regression: with 5 vs 5 the smallest one-sided p is 1/252 = 0.004, so the "
        "test can reach alpha; fewer gives 'inconclusive' for that metric (sparse evals usually do).",
        bounds=Bounds(2.0, None),
    )
    alpha: float = threshold(
        0.05,
        unit="p-value",
        why="Significance level of the one-sided Mann-Whitney U test (the same as step-time-regression's).",
        bounds=Bounds(0.0, 1.0, low_open=True, high_open=True),
    )
    min_reward_drop: float = threshold(
        0.10,
        unit="share of the baseline's final median reward",
        why="The same 10% bar as step-time-regression. Runs of one recipe in the corpus differ far less in "
        "final eval reward (sushantmehta logs_v2p7 vs logs_v2p3: 0.634 vs 0.636 over steps 35-55), so a "
        "significant 10% drop is a change, not seed noise.",
        bounds=POSITIVE,
    )
    min_kl_rise: float = threshold(
        0.5,
        unit="share of the baseline's final median KL",
        why="The sampler-vs-trainer KL of healthy runs is tiny and moves a lot between runs of one recipe "
        "(sushantmehta logs_v2p7 vs logs_v2p3: 1.0e-3 vs 1.3e-3, +27% at p = 3e-5), so only a 1.5x rise "
        "counts, and only when the candidate's final KL is above the stable band (max_stable_kl, 'training "
        "is stable when KL < 0.01', cookbook hyperparams.md): a rise inside the band is still stable training.",
        bounds=POSITIVE,
    )
    min_entropy_drop: float = threshold(
        0.5,
        unit="share of the baseline's final median entropy",
        why="Runs of one recipe differ by up to ~15-25% in final optim/entropy (sushantmehta logs_v2 vs "
        "logs_v2p7: 0.54 vs 0.47; joanvelja qwen3-30b think vs instruct: 0.31 vs 0.24), so only half the "
        "baseline's entropy at the same step is a collapse toward 0 (the inkling skill: watch "
        "optim/entropy; collapse goes with frac_mixed -> 0).",
        bounds=SHARE,
    )
    min_loss_rise: float = threshold(
        0.05,
        unit="share of the baseline's final median NLL",
        why="Half the reward bar: a per-token loss (test/nll, train_mean_nll, teacher_kl) averages far "
        "more tokens than a reward averages episodes, so runs on the same data differ less (the chat SFT "
        "sweep's final NLL for Qwen3-8B is ~0.55 test / 0.61 train, FORMATS.md 1.5); 5% higher at the "
        "end of the same recipe and model is a worse fit.",
        bounds=POSITIVE,
    )


@dataclass(frozen=True)
class EnvironmentDiffPolicy:
    """Compares recorded facts (versions, Python, machine), so the one knob is how many the message names."""

    max_named: int = threshold(
        4,
        unit="differences named in the message",
        why="Two pip freezes can differ in dozens of packages; the first few, ranked known-bad, SDK, Python, "
        "hot-path packages, cookbook, machine, others, are the ones to try first; the evidence lists them all.",
        bounds=AT_LEAST_ONE,
    )
