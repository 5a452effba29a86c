"""benchmarks/set_size_stability.py's analysis: the preregistered S1 and S2 (docs/results.md,
"Set size in one batch, on the LLM") on made-up rows whose slopes and differences are known,
and the verdict rule at its edges."""

from __future__ import annotations

import math

import pytest
from benchmark_scripts import load_benchmark

sz = load_benchmark("set_size_stability")


def made_up(reduction: str, seed: int, power: float, clip1: float, clip4: float) -> dict:
    """A run whose spread is 0.05 k^power and whose clip fraction goes clip1 -> clip4."""
    spread = {str(k): 0.05 * k**power for k in sz.SIZES}
    clip = {"1": clip1, "2": (2 * clip1 + clip4) / 3, "3": (clip1 + 2 * clip4) / 3, "4": clip4}
    return {"reduction": reduction, "seed": seed,
            "per_size": {"ratio_spread": spread, "clip_frac": clip}}


def test_the_slope_and_the_difference_are_the_preregistered_statistics():
    r = made_up("mean", 0, -0.5, 0.30, 0.25)
    assert sz.spread_slope(r) == pytest.approx(-0.5)  # spread 0.05 k^-1/2: exactly -0.5 on log k
    assert sz.clip_difference(r) == pytest.approx(-0.05)
    r["per_size"]["ratio_spread"]["3"] = None  # a size never computed: no slope
    assert sz.spread_slope(r) is None
    r["per_size"]["ratio_spread"]["3"] = 0.0  # a zero spread has no log: no slope
    assert sz.spread_slope(r) is None


def test_the_tests_pool_seeds_with_a_t_interval():
    rows = [made_up("mean", s, -0.1 * (s - 2), 0.3, 0.3 + 0.01 * (s - 2)) for s in range(5)]
    rows += [made_up("sum", s, 1.0 + 0.1 * (s - 2), 0.2, 0.4) for s in range(5)]
    tests = sz.study_tests(rows)
    s1 = tests["S1"]
    assert s1["mean"]["mean"] == pytest.approx(0.0) and s1["sum"]["mean"] == pytest.approx(1.0)
    # slopes -0.2..+0.2 (sd 0.158): half-width 2.776 * 0.158 / sqrt(5)
    half = 2.776 * math.sqrt(0.025) / math.sqrt(5)
    assert s1["mean"]["high"] == pytest.approx(half, rel=1e-6)
    assert s1["verdict"] == "supported" and tests["S2"]["verdict"] == "supported"


@pytest.mark.parametrize("mean_ci, sum_ci, expected", [
    ((-0.3, 0.2), (0.5, 1.0), "supported"),
    ((-0.81, -0.42), (0.43, 1.33), "undecided"),  # what the study found: mean straddles -0.6
    ((-0.9, -0.7), (0.5, 1.0), "refuted"),  # mean entirely below the band
    ((-0.3, 0.2), (0.0, 0.2), "refuted"),  # sum entirely below its floor
    ((-0.3, 0.2), (0.2, 0.6), "undecided"),  # sum straddles its floor
])
def test_the_verdict_rule(mean_ci, sum_ci, expected):
    as_ci = lambda lo_hi: {"low": lo_hi[0], "high": lo_hi[1]}
    assert sz.verdict(as_ci(mean_ci), as_ci(sum_ci), sz.MEAN_SLOPE_BAND, sz.SUM_SLOPE_FLOOR) == expected
    assert sz.verdict(None, as_ci(sum_ci), sz.MEAN_SLOPE_BAND, sz.SUM_SLOPE_FLOOR) == "undecided (runs missing)"
