import math

import pytest

from srpo_lab.stats import (
    bootstrap_ci,
    bootstrap_diff_ci,
    fisher_one_sided,
    holm,
    log_log_slope_ci,
    mann_whitney_p,
    mean,
    sign_flip_p,
    standard_error,
    t_interval,
)


def test_t_interval_hand_values():
    iv = t_interval([1.0, 2.0, 3.0])
    assert iv.estimate == 2.0 and iv.high - 2.0 == pytest.approx(4.303 * 1.0 / math.sqrt(3))
    assert t_interval([0.4]) == (0.4, 0.4, 0.4)
    with pytest.raises(ValueError):
        t_interval([])


def test_sign_flip_p_by_hand():
    assert sign_flip_p([1, 1, 1, 1, 1]) == 2 / 32  # only all-plus and all-minus reach |sum| 5
    assert sign_flip_p([1, -1]) == 1.0  # observed sum 0: every vector ties or exceeds
    # sums of +-0.5 +-0.25 +-0.25: 1, .5, .5, 0, 0, -.5, -.5, -1; |sum| >= 0.5 in 6 of 8
    assert sign_flip_p([0.5, 0.25, -0.25]) == 6 / 8
    with pytest.raises(ValueError):
        sign_flip_p([])


def test_fisher_one_sided_by_hand():
    # [[3, 0], [0, 3]]: the only table as extreme with these margins: 1 / C(6, 3)
    assert fisher_one_sided(3, 3, 0, 3, a_more=True) == pytest.approx(1 / 20)
    assert fisher_one_sided(3, 3, 0, 3, a_more=False) == pytest.approx(1.0)


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04: 3 x 0.01 = 0.03, max(0.03, 2 x 0.03) = 0.06, max(0.06, 0.04) = 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.6, 0.9]) == [1.0, 1.0]  # capped at 1


def test_mean_and_standard_error_by_hand():
    assert math.isnan(mean([])) and mean([1.0, 2.0, 6.0]) == 3.0
    # sample sd of 1, 2, 6 = sqrt((4 + 1 + 9) / 2) = sqrt(7); s.e. = sqrt(7) / sqrt(3)
    assert standard_error([1.0, 2.0, 6.0]) == pytest.approx(math.sqrt(7) / math.sqrt(3))
    assert standard_error([5.0]) is None


def test_bootstrap_ci_brackets_the_mean_and_is_reproducible():
    xs = [0.1, 0.5, 0.9, 0.4, 0.6]
    low, high = bootstrap_ci(xs)
    assert min(xs) <= low < mean(xs) < high <= max(xs)
    assert bootstrap_ci(xs) == (low, high)  # seeded
    assert bootstrap_ci([0.3] * 4) == (0.3, 0.3)
    assert all(math.isnan(v) for v in bootstrap_ci([]))


def test_log_log_slope_of_a_power_law():
    # y = 2 k^1 and y = 3 k^0, without noise: slope 1 and 0, the bootstrap interval collapses on it
    linear = log_log_slope_ci({k: [2.0 * k, 2.0 * k] for k in (1, 2, 4, 8)})
    flat = log_log_slope_ci({k: [3.0, 3.0] for k in (1, 2, 4, 8)})
    assert linear == pytest.approx((1.0, 1.0, 1.0)) and flat == pytest.approx((0.0, 0.0, 0.0), abs=1e-12)


def test_mann_whitney_separated_samples():
    # 5 vs 5 with no overlap: exact two-sided p = 2 / C(10, 5) = 2 / 252
    assert mann_whitney_p([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == pytest.approx(2 / 252)


def test_bootstrap_diff_ci_brackets_the_difference_and_narrows_with_n():
    a, b = [1.0, 0.9, 0.8, 1.0], [0.5, 0.6, 0.7, 0.5]
    point, lo, hi = bootstrap_diff_ci(a, b)
    assert point == pytest.approx(0.925 - 0.575)
    assert lo <= point <= hi and lo > 0  # every resample of a is above every resample of b
    assert bootstrap_diff_ci([0.5] * 5, [0.5] * 5) == (0.0, 0.0, 0.0)
    wide = bootstrap_diff_ci(a, b, level=0.99)
    assert wide[1] <= lo and wide[2] >= hi
    with pytest.raises(ValueError, match="both samples"):
        bootstrap_diff_ci([], b)
