"""Accuracy on held-out items, and whether it changed: what every evaluation and report prints.

Accuracy on n held-out items is a binomial proportion (Wilson interval); before/after runs on the
SAME items are paired, so their difference is judged with McNemar's exact test on the discordant
items (items right after but wrong before, and the reverse), not by comparing two overlapping
intervals. (The statistics over runs and seeds that studies use live in the repository's research
harness, lab/srpo_lab/stats.py, not in the library.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

Z95 = 1.959963984540054  # two-sided 95% normal quantile


class Interval(NamedTuple):
    estimate: float
    low: float
    high: float


def wilson_interval(successes: int, n: int, z: float = Z95) -> Interval:
    """Wilson score interval of a binomial proportion (well-behaved near 0 and 1)."""
    if n <= 0:
        raise ValueError("wilson_interval needs n > 0")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, center - half)  # exact ends: no rounding residue
    high = 1.0 if successes == n else min(1.0, center + half)
    return Interval(p, low, high)


class PairedComparison(NamedTuple):
    n: int
    before: float  # accuracy before
    after: float  # accuracy after
    diff: Interval  # after - before, with a 95% interval (Wald on paired differences)
    gained: int  # items wrong before, right after
    lost: int  # items right before, wrong after
    p_value: float  # McNemar exact two-sided


def _binom_two_sided(k: int, n: int) -> float:
    """Exact two-sided p-value of k successes in n fair coin flips."""
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_comparison(before: Sequence[bool], after: Sequence[bool], z: float = Z95) -> PairedComparison:
    """Compare two 0/1 score vectors over the same items (same order)."""
    if len(before) != len(after):
        raise ValueError(f"paired scores need equal lengths, got {len(before)} and {len(after)}")
    n = len(before)
    if n == 0:
        raise ValueError("paired_comparison needs at least one item")
    d = [int(bool(a)) - int(bool(b)) for b, a in zip(before, after)]
    gained, lost = d.count(1), d.count(-1)
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1) if n > 1 else 0.0
    half = z * math.sqrt(var / n)
    return PairedComparison(
        n=n,
        before=sum(map(bool, before)) / n,
        after=sum(map(bool, after)) / n,
        diff=Interval(mean, mean - half, mean + half),
        gained=gained,
        lost=lost,
        p_value=_binom_two_sided(min(gained, lost), gained + lost),
    )
