"""srpo.record.accuracy: the evaluation's Wilson interval and paired McNemar test, by hand."""

import math

import pytest

from srpo.record.accuracy import paired_comparison, wilson_interval


def test_wilson_hand_value():
    # p = 0.5, n = 100, z = 1.96: center 0.5, half = 1.96 * sqrt(0.0025 + 1.96^2/40000) / (1 + 1.96^2/100)
    iv = wilson_interval(50, 100)
    z = 1.959963984540054
    half = z * math.sqrt(0.0025 + z * z / 40000) / (1 + z * z / 100)
    assert iv.estimate == 0.5
    assert iv.low == pytest.approx(0.5 - half) and iv.high == pytest.approx(0.5 + half)
    assert iv.low == pytest.approx(0.4038, abs=1e-4)


def test_wilson_edges():
    assert wilson_interval(0, 10).low == 0.0
    assert wilson_interval(10, 10).high == 1.0
    with pytest.raises(ValueError):
        wilson_interval(3, 0)
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def test_paired_mcnemar_hand_value():
    # 10 items: 6 gained, 1 lost, 3 unchanged. Discordant = 7, k = min(6, 1) = 1:
    # p = 2 * (C(7,0) + C(7,1)) / 2^7 = 2 * 8 / 128 = 0.125
    before = [0] * 6 + [1] + [1, 0, 1]
    after = [1] * 6 + [0] + [1, 0, 1]
    c = paired_comparison(before, after)
    assert (c.gained, c.lost) == (6, 1)
    assert c.p_value == pytest.approx(0.125)
    assert c.diff.estimate == pytest.approx(0.5)
    assert c.before == pytest.approx(0.3) and c.after == pytest.approx(0.8)


def test_paired_identical_is_p_one():
    c = paired_comparison([1, 0, 1], [1, 0, 1])
    assert c.p_value == 1.0 and c.diff.estimate == 0.0


def test_paired_length_mismatch():
    with pytest.raises(ValueError, match="equal lengths"):
        paired_comparison([1, 0], [1])
