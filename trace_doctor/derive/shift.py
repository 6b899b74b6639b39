"""Is the candidate worse than the baseline? The noise-aware test every baseline comparison uses.

One definition for step time (TD401) and training quality (TD403): a one-sided Mann-Whitney U
test on the two samples (no normality assumption; a few outlier steps cannot carry it) *and* a
minimum relative effect on the medians, so a significant-but-tiny or a large-but-noisy change is
not a regression. "Worse" has a direction: slower steps and higher KL are worse when higher,
reward and entropy when lower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trace_doctor.derive.robust import median

WORSE = ("higher", "lower")


@dataclass(frozen=True)
class Shift:
    """The comparison of two samples in the direction that is worse."""

    worse: str  # "higher" | "lower"
    n_baseline: int
    n_candidate: int
    median_baseline: float | None
    median_candidate: float | None
    u: float | None
    p: float | None
    # Change of the median as a share of the baseline's, signed so that > 0 is worse; None when
    # the baseline's median is 0 (a relative change is undefined).
    effect: float | None

    def regressed(self, alpha: float, min_effect: float) -> bool:
        return self.significant(alpha) and self.large(min_effect)

    def significant(self, alpha: float) -> bool:
        return self.p is not None and self.p < alpha

    def large(self, min_effect: float) -> bool:
        return self.effect is not None and self.effect >= min_effect


def worse_effect(baseline: float | None, candidate: float | None, worse: str) -> float | None:
    """(candidate − baseline) / |baseline|, negated when lower is worse: > 0 always means worse."""
    if baseline is None or candidate is None or baseline == 0:
        return None
    change = (candidate - baseline) / abs(baseline)
    return change if worse == "higher" else -change


def compare_samples(candidate: list[float], baseline: list[float], *, worse: str, min_n: int) -> Shift:
    """Medians, the one-sided U test and the worse-signed relative effect; no test when either sample
    has fewer than `min_n` values (u and p stay None: the caller says "inconclusive")."""
    if worse not in WORSE:
        raise ValueError(f"worse must be one of {WORSE}, not {worse!r}")
    before, after = median(baseline), median(candidate)
    u = p = None
    if len(candidate) >= min_n and len(baseline) >= min_n:
        # scipy.stats takes seconds to import cold; only a baseline comparison needs it.
        from scipy.stats import mannwhitneyu

        test = mannwhitneyu(candidate, baseline, alternative="greater" if worse == "higher" else "less")
        u, p = float(test.statistic), float(test.pvalue)
        if not math.isfinite(p):  # all values tied: no evidence of a shift
            p = 1.0
    return Shift(worse, len(baseline), len(candidate), before, after, u, p, worse_effect(before, after, worse))
