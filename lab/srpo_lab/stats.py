"""The studies' statistics, small and exact: over runs and seeds, t-intervals, standard errors,
bootstrap intervals and slopes, Holm's adjustment, exact sign-flip, Fisher and Mann-Whitney
tests. The evaluation's own (the Wilson interval of an accuracy, the paired McNemar test of
before/after on the same items) is the library's: srpo.record.accuracy, re-exported here.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Sequence

from srpo.record.accuracy import Z95, Interval, PairedComparison, paired_comparison, wilson_interval

__all__ = ["Z95", "Interval", "PairedComparison", "bootstrap_ci", "bootstrap_diff_ci", "fisher_one_sided", "holm",
           "log_log_slope_ci", "mann_whitney_p", "mean", "paired_comparison", "sign_flip_p", "slope",
           "standard_error", "t_interval", "wilson_interval"]

# two-sided 95% quantiles of Student's t by degrees of freedom (1..30); normal beyond
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)

BOOTSTRAP_DRAWS = 2000


def t_interval(values: Sequence[float]) -> Interval:
    """Mean with a 95% t-interval; one value gives a zero-width interval (reported as n=1)."""
    n = len(values)
    if n == 0:
        raise ValueError("t_interval needs at least one value")
    mean = sum(values) / n
    if n == 1:
        return Interval(mean, mean, mean)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    half = t * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half)


def mean(xs: Sequence[float]) -> float:
    """Arithmetic mean; NaN for no values (a cell with no runs yet shows as '-', not an error)."""
    return sum(xs) / len(xs) if xs else float("nan")


def standard_error(xs: Sequence[float]) -> float | None:
    """Standard error of the mean (sample stdev / sqrt(n)); None for fewer than two values.
    The one band of a mean over runs: +- one s.e., or +- 1.96 s.e. for a normal 95% band."""
    if len(xs) < 2:
        return None
    return statistics.stdev(xs) / math.sqrt(len(xs))


def bootstrap_ci(xs: Sequence[float], draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean (NaN, NaN for no values)."""
    if not xs:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    means = sorted(mean([rng.choice(xs) for _ in xs]) for _ in range(draws))
    return means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def bootstrap_diff_ci(a: Sequence[float], b: Sequence[float], level: float = 0.95,
                      draws: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its percentile bootstrap interval at `level` (two independent
    samples, each resampled within itself): (point, low, high)."""
    if not a or not b:
        raise ValueError("bootstrap_diff_ci needs values in both samples")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = random.Random(seed)
    diffs = sorted(mean([rng.choice(a) for _ in a]) - mean([rng.choice(b) for _ in b]) for _ in range(draws))
    tail = (1 - level) / 2
    return mean(a) - mean(b), diffs[int(tail * draws)], diffs[int((1 - tail) * draws) - 1]


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys on xs."""
    mx, my = mean(xs), mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def log_log_slope_ci(per_x: dict[int, list[float]], seed: int = 0,
                     draws: int = BOOTSTRAP_DRAWS) -> tuple[float, float, float]:
    """Slope of log(mean value) on log(x), and its 95% bootstrap CI (values resampled within
    each x): how a quantity scales with, e.g., the set size (slope 0: flat, 1: linear)."""
    ks = sorted(per_x)
    xs = [math.log(k) for k in ks]
    point = slope(xs, [math.log(mean(per_x[k])) for k in ks])
    rng = random.Random(seed)
    drawn = sorted(slope(xs, [math.log(mean([rng.choice(per_x[k]) for _ in per_x[k]])) for k in ks])
                   for _ in range(draws))
    return point, drawn[int(0.025 * draws)], drawn[int(0.975 * draws) - 1]


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (same order as given)."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted = [0.0] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def sign_flip_p(diffs: Sequence[float]) -> float:
    """Exact two-sided sign-flip permutation p-value of mean(diffs) against 0: the share of the
    2^n sign vectors whose |mean| is at least the observed |mean| (ties count, 1e-12)."""
    n = len(diffs)
    if n == 0:
        raise ValueError("sign_flip_p needs at least one difference")
    if n > 20:
        raise ValueError(f"exact sign-flip test over 2^{n} vectors: too many ({n} > 20)")
    observed = abs(sum(diffs))
    hits = sum(1 for signs in itertools.product((1, -1), repeat=n)
               if abs(sum(s * d for s, d in zip(signs, diffs))) >= observed - 1e-12)
    return hits / 2**n


def fisher_one_sided(a_bad: int, a_n: int, b_bad: int, b_n: int, *, a_more: bool) -> float:
    """One-sided Fisher exact p of a 2x2 table of runs: A has more (a_more) / fewer bad runs
    than B (scipy, imported here only: the training path never needs it)."""
    from scipy.stats import fisher_exact

    table = [[a_bad, a_n - a_bad], [b_bad, b_n - b_bad]]
    return float(fisher_exact(table, alternative="greater" if a_more else "less")[1])


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value of two independent samples (scipy)."""
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
