"""benchmarks/debate_credit.py's analysis: the preregistered tests D1-D3 (docs/results.md,
"Credit in debate") on made-up rows whose differences are known, and its run names."""

from __future__ import annotations

import pytest
from benchmark_scripts import load_benchmark

dc = load_benchmark("debate_credit")


def rows(shift: dict[str, float]) -> list[dict]:
    """Every study arm on every (task, seed): change = 10 points + the arm's shift, plus a
    per-pair value shared by all arms (which the paired differences cancel)."""
    out = []
    for ti, task in enumerate(dc.STUDY_TASKS):
        for seed in range(5):
            shared = (ti * 5 + seed) % 7 - 3
            for arm in dc.STUDY_ARMS:
                d = (10 + shift[arm] + shared + (0.5 if seed % 2 else -0.5) * (arm == "srpo_today")) / 100
                out.append({"arm": arm, "task": task, "seed": seed, "heldout": {"diff": d}})
    return out


def test_d1_to_d3_are_the_baseline_minus_each_arm_with_holm():
    tests = dc.study_tests(rows({"srpo_consumed": 2.0, "srpo_today": 0.0, "grpo_own": 2.0, "magrpo": -3.0}))
    d1, d2, d3 = tests["D1"], tests["D2"], tests["D3"]
    assert (d1["minus"], d2["minus"], d3["minus"]) == ("srpo_today", "grpo_own", "magrpo")
    assert all(t["pairs"] == 20 for t in tests.values())
    # D1: 2 - 0.5 on odd seeds (8 pairs), 2 + 0.5 on even ones (12): mean 2.1; every difference
    # > 0, so the only sign vectors as extreme are all + and all -: p = 2 / 2^20
    assert d1["mean"] == pytest.approx(2.1) and d1["p"] == pytest.approx(2 / 2**20)
    # D2: every difference 0: p = 1, undecided; D3: +5 everywhere
    assert d2["mean"] == pytest.approx(0.0, abs=1e-9) and d2["p"] == 1.0 and d2["verdict"] == "undecided"
    assert d3["mean"] == pytest.approx(5.0) and d3["verdict"] == "supported"
    # Holm over three: the two smallest p (equal) times 3 and 2, the running max
    assert d1["holm_p"] == pytest.approx(3 * 2 / 2**20) and d1["verdict"] == "supported"
    assert d3["holm_p"] == pytest.approx(3 * 2 / 2**20)


def test_a_lower_baseline_is_refuted_and_missing_pairs_leave_the_family_incomplete():
    tests = dc.study_tests(rows({"srpo_consumed": -4.0, "srpo_today": 0.0, "grpo_own": 0.0, "magrpo": 0.0}))
    assert tests["D1"]["verdict"] == "refuted" and tests["D1"]["mean"] == pytest.approx(-3.9)
    partial = [r for r in rows(dict.fromkeys(dc.STUDY_ARMS, 0.0)) if not (r["arm"] == "magrpo" and r["seed"] == 4)]
    tests = dc.study_tests(partial)
    assert tests["D3"]["pairs"] == 16 and "verdict" not in tests["D3"]  # no test before all 20


def test_run_names_round_trip():
    for arm in dc.ARMS:
        for task in dc.TASKS:
            assert dc.name_parts(dc.run_name(arm, task, 3)) == (arm, task, 3)
    assert dc.name_parts("default-seed0") is None


def _row(arm, task, seed, diff, p, top=0.3):
    return {"arm": arm, "task": task, "seed": seed, "heldout": {"diff": diff / 100, "p": p},
            "after": {"top_answer_share": top}}


def _all_gain(arm="x", diff=5.0, p=0.01):
    rows = [_row(arm, t, s, diff, p) for t in dc.UNTUNED_TASKS for s in (0, 1, 2)]
    return rows + [_row(arm, "default", s, 20.0, 1e-6) for s in range(5)]


def test_target_rule_met_failed_and_pending():
    met = dc.target_verdict(_all_gain(), "x")
    assert met["met"] is True and met["met_without_one_answer"] is True and met["missing"] == []
    assert met["default_job_mean"] == pytest.approx(20.0)
    # one significant loss on a task outside GAIN_TASKS fails the rule
    rows = [r if (r["task"], r["seed"]) != ("count_primes", 0) else _row("x", "count_primes", 0, -4.0, 0.01)
            for r in _all_gain()]
    v = dc.target_verdict(rows, "x")
    assert (
        v["met"] is False
        and v["significant_losses"] == ["count_primes-seed0"]
        and v["every_gain_task_seed_gains"] is True
    )
    # a gain task's seed that gains without significance fails the gain condition, not the loss one
    rows = [r if (r["task"], r["seed"]) != ("lcm", 1) else _row("x", "lcm", 1, 3.0, 0.2) for r in _all_gain()]
    v = dc.target_verdict(rows, "x")
    assert v["gain_tasks_short"] == ["lcm-seed1"] and v["no_significant_loss"] is True and v["met"] is False
    # a non-significant loss outside GAIN_TASKS is allowed
    rows = [
        r if (r["task"], r["seed"]) != ("number_format", 2) else _row("x", "number_format", 2, -3.0, 0.3)
        for r in _all_gain()
    ]
    assert dc.target_verdict(rows, "x")["met"] is True
    # one-answer gains count by the rule's letter, not in the strict reading
    rows = [
        r if (r["task"], r["seed"]) != ("gcd", 0) else _row("x", "gcd", 0, 9.0, 0.02, top=0.95) for r in _all_gain()
    ]
    v = dc.target_verdict(rows, "x")
    assert v["met"] is True and v["met_without_one_answer"] is False and v["one_answer_gains"] == ["gcd-seed0"]
    # the default job's mean below +19.1 fails; a missing run leaves the verdict pending
    rows = [r if r["task"] != "default" else _row("x", "default", r["seed"], 18.0, 1e-5) for r in _all_gain()]
    assert dc.target_verdict(rows, "x")["default_job_mean_ok"] is False
    v = dc.target_verdict(_all_gain()[1:], "x")
    assert v["met"] is None and v["missing"] == ["chain_sum-seed0"]


def test_arm_difference_pairs_by_task_and_seed():
    rows = [
        _row("a", "lcm", 0, 5.0, 0.01),
        _row("b", "lcm", 0, 2.0, 0.3),
        _row("a", "gcd", 1, 1.0, 0.5),
        _row("b", "gcd", 1, 4.0, 0.1),
        _row("a", "aiw", 0, 9.0, 0.01),
    ]
    d = dc.arm_difference(rows, "a", "b")
    assert d["pairs"] == ["gcd-seed1", "lcm-seed0"] and d["diffs"] == pytest.approx([-3.0, 3.0])
    assert d["mean"] == pytest.approx(0.0) and d["p"] == 1.0
    assert dc.arm_difference(rows, "a", "nobody") is None
