"""The preregistered tests of the LLM off-policy study (studies/llm_offpolicy/analysis.py), on
synthetic cells whose answers are computed by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from srpo_lab.study.report import StudyRuns
from studies.llm_offpolicy.analysis import (
    Cells,
    clip_active_share,
    degradation,
    degraded,
    heldout_retrieval,
    l1,
    l2,
    l3,
    l4,
    learning_curves,
    plot_degradation,
    plot_learning_curves,
    retrieval_markdown,
    secondary,
)

SEEDS = (0, 1, 2, 3, 4)
SETTINGS = ("math-mixed", "math-routed", "math-parallel4")
N = 64


def result(setting, method, seed, correct):
    return {"setting": setting, "method": method, "seed": seed, "task_ids": [f"t{i}" for i in range(len(correct))],
            "correct": list(correct), "accuracy": sum(correct) / len(correct)}


def cells_from(accuracy_of, rows_of=lambda *k: [{"loss": 0.1, "reward/mean": 0.5, "grad_norm/shared": 1.0,
                                                   "clip/all/frac": 0.1}],
               settings=SETTINGS, methods=("srpo", "grpo", "gspo", "magrpo"), seeds=SEEDS):
    """Cells whose run (setting, method, seed) got the first round(acc * N) problems right."""
    done = []
    for s in settings:
        for m in (*methods, "base"):
            for seed in seeds:
                right = round(accuracy_of(s, m, seed) * N)
                cell = SimpleNamespace(setting=s, method=None if m == "base" else m, seed=seed)
                done.append((cell, result(s, m, seed, [True] * right + [False] * (N - right)), rows_of(s, m, seed)))
    return Cells(StudyRuns(done, []), [])


def test_degraded_by_definition():
    base = result("s", "base", 0, [True] * 32 + [False] * 32)
    rows = [{"loss": 0.1, "reward/mean": 0.2, "grad_norm/a": 1.0}]
    assert degraded(result("s", "m", 0, [True] * 32 + [False] * 32), rows, base) == (False, "")
    bad, why = degraded(result("s", "m", 0, [True] * 32 + [False] * 32), [{"loss": math.nan}], base)
    assert bad and "non-finite" in why
    bad, _ = degraded(result("s", "m", 0, [True] * 32 + [False] * 32), [{"grad_norm/a": math.inf}], base)
    assert bad
    # 20 fewer right, none gained: McNemar p = 2 * 0.5^20 < 0.05
    bad, why = degraded(result("s", "m", 0, [True] * 12 + [False] * 52), rows, base)
    assert bad and "McNemar" in why
    # a gain is never a degradation
    assert not degraded(result("s", "m", 0, [True] * 60 + [False] * 4), rows, base)[0]
    with pytest.raises(ValueError, match="other problems"):
        degraded(result("s", "m", 0, [True] * 10), rows, base)


def test_l1_supported_refuted_undecided():
    higher = cells_from(lambda s, m, seed: 0.5 if m == "srpo" else 0.3)
    out = l1(higher, SEEDS)
    assert out["verdict"] == "supported"
    for c in out["comparisons"].values():
        assert c["p"] == 2 / 2**15 and c["p_holm"] == pytest.approx(3 * 2 / 2**15)
        assert c["mean_diff"] == pytest.approx(round(0.5 * N) / N - round(0.3 * N) / N)
    lower_vs_gspo = cells_from(lambda s, m, seed: {"srpo": 0.5, "gspo": 0.7}.get(m, 0.3))
    assert l1(lower_vs_gspo, SEEDS)["verdict"] == "refuted"
    tie = cells_from(lambda s, m, seed: 0.4)
    out = l1(tie, SEEDS)
    assert out["verdict"] == "undecided" and all(c["p"] == 1.0 for c in out["comparisons"].values())


def test_l1_waits_for_every_cell():
    partial = cells_from(lambda s, m, seed: 0.4, seeds=(0, 1))
    assert l1(partial, SEEDS) == {"verdict": "not run yet", "cells": "24 of 60 finished"}


def test_l2_counts_degraded_runs_and_tests_them():
    nan_rows = [{"loss": math.nan, "reward/mean": 0.0}]
    ok_rows = [{"loss": 0.1, "reward/mean": 0.5}]
    # every SRPO stress run is non-finite, no baseline run is: SRPO degrades more (supported)
    cells = cells_from(lambda s, m, seed: 0.4, rows_of=lambda s, m, seed: nan_rows if m == "srpo_s" else ok_rows,
                       methods=("srpo_s", "grpo_s", "magrpo_s"))
    out = l2(cells, SEEDS)
    assert out["counts"]["srpo_s"]["degraded"] == 15 and out["counts"]["grpo_s"]["degraded"] == 0
    assert out["verdict"] == "supported"
    cells = cells_from(lambda s, m, seed: 0.4, rows_of=lambda s, m, seed: nan_rows if m == "grpo_s" else ok_rows,
                       methods=("srpo_s", "grpo_s", "magrpo_s"))
    assert l2(cells, SEEDS)["verdict"] == "refuted"
    cells = cells_from(lambda s, m, seed: 0.4, rows_of=lambda s, m, seed: ok_rows,
                       methods=("srpo_s", "grpo_s", "magrpo_s"))
    assert l2(cells, SEEDS)["verdict"] == "undecided"


def test_l3_and_l4():
    seeds = tuple(range(10))
    cells = cells_from(lambda s, m, seed: 0.6 if m == "srpo" else 0.4, settings=("search-credit",),
                       methods=("srpo", "grpo", "magrpo"), seeds=seeds)
    out = l3(cells, seeds)
    assert out["verdict"] == "supported" and out["p"] == 2 / 2**10
    assert out["srpo_higher"] == 10 and out["ties"] == 0
    # at the floor: 3 seeds SRPO one question up, 1 seed down, 6 tied -> undecided; the sign-flip
    # p by hand: |sum| >= 2/64 in 2^10 flips of (+,+,+,-) and 6 zeros: 2^6 x #{signs of 4 with
    # |sum| >= 2} = 2^6 x 10 -> 640 / 1024
    floor = cells_from(lambda s, m, seed: (1 / 64 if (m == "srpo") == (seed < 3) else 0.0) if seed < 4 else 0.0,
                       settings=("search-credit",), methods=("srpo", "magrpo"), seeds=seeds)
    out = l3(floor, seeds)
    assert (out["srpo_higher"], out["ties"], out["verdict"]) == (3, 6, "undecided")
    assert out["p"] == pytest.approx(640 / 1024)
    assert l3(None, seeds)["verdict"] == "not run yet"

    # 4 training steps (a row without a loss is not one): two clipped, one updated without
    # clipping, one updated nothing (every set had zero advantage: no clip fraction logged)
    rows = [{"loss": 0.1, "clip/all/frac": 0.0}, {"loss": 0.1, "clip/all/frac": 0.2},
            {"loss": 0.1, "clip/all/frac": 0.1}, {"loss": 0.0}, {"x": 1}]
    assert clip_active_share(rows) == 2 / 4
    assert clip_active_share(rows, updating_only=True) == 2 / 3
    assert math.isnan(clip_active_share([{"loss": 0.0}], updating_only=True))
    assert clip_active_share([{"loss": 0.0}]) == 0.0
    with pytest.raises(ValueError, match="without training rows"):
        clip_active_share([{"x": 1}])
    spec = SimpleNamespace(settings=[SimpleNamespace(name="search-credit")], seeds=seeds,
                           methods=[SimpleNamespace(name=m) for m in ("srpo", "grpo", "magrpo")])
    out = l4([("search", cells, spec)])
    assert out["verdict"] == "supported" and out["by_study"]["search"]["srpo"]["runs"] == 10
    never = cells_from(lambda s, m, seed: 0.5, rows_of=lambda *k: [{"loss": 0.0, "clip/all/frac": 0.0}],
                       settings=("search-credit",), methods=("srpo", "grpo", "magrpo"), seeds=seeds)
    out = l4([("search", never, spec)])
    assert out["verdict"] == "refuted" and out["median_share"]["srpo"] == 0.0
    # a method whose runs never update: share 0, no share among updating steps; half the runs of
    # another clip on every step: median of [0]*5 + [1]*5 = 0.5
    idle = cells_from(lambda s, m, seed: 0.5,
                      rows_of=lambda s, m, seed: ([{"loss": 0.0}] if m == "magrpo" else
                                                  [{"loss": 0.1, "clip/all/frac": 0.3 if seed % 2 else 0.0}]),
                      settings=("search-credit",), methods=("srpo", "grpo", "magrpo"), seeds=seeds)
    described = l4([("search", idle, spec)])["by_study"]["search"]
    assert described["magrpo"] == {"runs": 10, "median_share": 0.0, "median_share_updating": None}
    assert described["srpo"]["median_share"] == 0.5 and described["srpo"]["median_share_updating"] == 0.5
    partial = cells_from(lambda s, m, seed: 0.5, settings=("search-credit",), methods=("srpo",), seeds=(0,))
    out = l4([("search", partial, spec)])
    assert out["verdict"] == "not run yet" and out["by_study"]["search"]["srpo"]["runs"] == 1


def test_degradation_by_level_counts_runs_by_hand(tmp_path):
    # srpo_s loses 20 problems against base (degraded) in every run; srpo gains 4 (not degraded)
    acc = {"base": 0.5, "srpo": 0.5 + 4 / N, "srpo_s": 0.5 - 20 / N}
    cells = cells_from(lambda s, m, seed: acc[m], methods=("srpo", "srpo_s"))
    spec = SimpleNamespace(methods=[SimpleNamespace(name="srpo"), SimpleNamespace(name="srpo_s")],
                           settings=[SimpleNamespace(name=s) for s in SETTINGS], seeds=SEEDS)
    out = degradation(cells, spec)
    assert set(out) == {"srpo"} and set(out["srpo"]) == {"r4", "s"}
    r4, s = out["srpo"]["r4"], out["srpo"]["s"]
    assert (r4["runs"], r4["degraded"], s["runs"], s["degraded"]) == (15, 0, 15, 15)
    assert r4["heldout_change"] == pytest.approx(4 / N) and s["heldout_change"] == pytest.approx(-20 / N)
    assert r4["heldout_change_sem"] == pytest.approx(0.0) and r4["low"] == 0.0 and s["high"] == 1.0
    # a run without its base cell is not counted
    del cells.results[("math-mixed", "base", 0)]
    assert degradation(cells, spec)["srpo"]["s"]["runs"] == 14
    path = plot_degradation(out, tmp_path / "deg.png")
    assert path.stat().st_size > 1000


def test_learning_curves_mean_and_standard_error_by_hand(tmp_path):
    # reward at step t of seed k: t + k, so the mean over seeds 0-4 is t + 2 and the standard
    # error is stdev(0..4) / sqrt(5) = sqrt(2.5) / sqrt(5)
    def rows(s, m, seed):
        return [{"step": t, "loss": 0.1, "reward/mean": t + seed + (10 if m == "srpo_s" else 0)} for t in (1, 2, 3)]
    cells = cells_from(lambda *k: 0.5, rows_of=rows, methods=("srpo", "srpo_s"))
    spec = SimpleNamespace(methods=[SimpleNamespace(name="srpo"), SimpleNamespace(name="srpo_s")],
                           settings=[SimpleNamespace(name=s) for s in SETTINGS], seeds=SEEDS)
    out = learning_curves(cells, spec)
    assert set(out) == set(SETTINGS) and set(out["math-mixed"]) == {"r4", "s"}
    curve = out["math-mixed"]["r4"]["srpo"]
    assert [p["step"] for p in curve] == [1, 2, 3] and [p["runs"] for p in curve] == [5, 5, 5]
    assert [p["mean"] for p in curve] == pytest.approx([3.0, 4.0, 5.0])
    assert curve[0]["sem"] == pytest.approx(math.sqrt(2.5) / math.sqrt(5))
    assert out["math-mixed"]["s"]["srpo"][0]["mean"] == pytest.approx(13.0)
    # a missing seed lowers the run count at every step; a non-finite value is left out of its step
    del cells.rows[("math-routed", "srpo", 4)]
    cells.rows[("math-routed", "srpo", 3)][1]["reward/mean"] = math.nan
    routed = learning_curves(cells, spec)["math-routed"]["r4"]["srpo"]
    assert [p["runs"] for p in routed] == [4, 3, 4]
    assert plot_learning_curves(out, tmp_path / "curves.png").stat().st_size > 1000


def _search_cells(tmp_path, recalls, seeds):
    """Finished search-credit cells whose held-out episodes have the given (recall, r1, r2) rows;
    round 2 is left out of an episode's metadata when its r2 is None (the round did not run)."""
    from srpo.record.episodes_log import write_records

    done = []
    for (m, seed), eps in recalls.items():
        d = tmp_path / m / f"seed{seed}"
        records = []
        for i, (rec, r1, r2) in enumerate(eps):
            meta = {"recall_at_k": rec, "retrieval_credit_r1": r1}
            if r2 is not None:
                meta["retrieval_credit_r2"] = r2
            records.append({"task_id": f"t{i}", "metadata": meta, "transitions": []})
        write_records(d / "eval" / "after.episodes.jsonl.gz", records)
        cell = SimpleNamespace(setting="search-credit", method=m, seed=seed, directory=lambda out, d=d: d)
        done.append((cell, result("search-credit", m, seed, [False] * len(eps)), []))
    return Cells(StudyRuns(done, []), [], output=tmp_path)


def test_heldout_retrieval_means_by_hand_and_waits_for_every_seed(tmp_path):
    seeds = (0, 1)
    srpo = [(1.0, 0.5, 0.5), (0.5, 0.5, None)]  # recall 0.75, r1 0.5, r2 0.25 (a round that did not run: 0)
    magrpo = [(0.5, 0.5, 0.0), (0.5, 0.5, 0.0)]  # recall 0.5, r1 0.5, r2 0
    cells = _search_cells(tmp_path, {("srpo", 0): srpo, ("srpo", 1): srpo, ("magrpo", 0): magrpo}, seeds)
    out = heldout_retrieval(cells, seeds)
    assert out["per_run"]["srpo"][0] == {"recall_at_k": 0.75, "retrieval_credit_r1": 0.5, "retrieval_credit_r2": 0.25,
                                         "episodes": 2}
    assert out["per_run"]["magrpo"][0]["recall_at_k"] == 0.5
    assert out["paired_seeds"] == 1 and "diff" not in out  # magrpo seed 1 missing: no test on part of the seeds
    assert "the test waits for all" in "\n".join(retrieval_markdown(out))

    cells = _search_cells(tmp_path, {("srpo", 0): srpo, ("srpo", 1): srpo, ("magrpo", 0): magrpo,
                                     ("magrpo", 1): magrpo, ("base", 1): magrpo}, seeds)
    (tmp_path / "base" / "seed1" / "eval" / "after.episodes.jsonl.gz").rename(
        tmp_path / "base" / "seed1" / "eval" / "base.episodes.jsonl.gz")  # a base cell's file name
    cells.results[("search-credit", "base", 0)] = {}  # a base cell from before episodes were kept
    cells.dirs[("search-credit", "base", 0)] = tmp_path / "base" / "seed0"
    out = heldout_retrieval(cells, seeds)
    assert list(out["per_run"]["base"]) == [1] and out["per_run"]["base"][1]["recall_at_k"] == 0.5
    d = out["diff"]
    assert d["recall_at_k"]["mean_diff"] == pytest.approx(0.25) and d["recall_at_k"]["higher"] == 2
    assert d["recall_at_k"]["p"] == 2 / 4  # 2 pairs, both +0.25: only all-plus and all-minus reach |sum| 0.5
    assert d["retrieval_credit_r1"] == {"mean_diff": 0.0, "p": 1.0, "higher": 0, "ties": 2}
    text = "\n".join(retrieval_markdown(out))
    assert "| srpo | 2 | 0.750 +- 0.000 | 0.500 +- 0.000 | 0.250 +- 0.000 |" in text and "2 pairs" in text


def test_heldout_retrieval_refuses_episodes_that_are_not_search(tmp_path):
    from srpo.record.episodes_log import write_records

    cells = _search_cells(tmp_path, {("srpo", 0): [(1.0, 1.0, 0.0)]}, (0,))
    write_records(tmp_path / "srpo" / "seed0" / "eval" / "after.episodes.jsonl.gz",
                  [{"task_id": "q7", "metadata": {"score_em": 1.0}, "transitions": []}])
    with pytest.raises(ValueError, match="'q7' has no recall_at_k"):
        heldout_retrieval(cells, (0,))
    (tmp_path / "srpo" / "seed0" / "eval" / "after.episodes.jsonl.gz").unlink()
    with pytest.raises(FileNotFoundError, match="without its held-out episodes"):
        heldout_retrieval(cells, (0,))


def test_secondary_by_hand():
    # srpo: 2 steps, one updated nothing (every set skipped); reward 0.2 then 0.4
    def rows(s, m, seed):
        return [{"loss": 0.0, "reward/mean": 0.2, "update/skipped_set_share": 1.0, "adv/degenerate_share": 1.0},
                {"loss": 0.1, "reward/mean": 0.4, "update/skipped_set_share": 0.5, "adv/degenerate_share": 0.5,
                 "clip/all/frac": 0.25}]
    acc = {"base": 0.5, "srpo": 0.5 + 8 / N}
    cells = cells_from(lambda s, m, seed: acc[m], rows_of=rows, settings=("search-credit",), methods=("srpo",),
                       seeds=(0, 1))
    spec = SimpleNamespace(settings=[SimpleNamespace(name="search-credit")], seeds=(0, 1),
                           methods=[SimpleNamespace(name="srpo")])
    row = secondary(cells, spec)["search-credit"]["srpo"]
    assert row["runs"] == 2 and row["accuracy"] == pytest.approx(0.5 + 8 / N)
    assert row["final_reward"] == pytest.approx(0.3)  # mean of the (up to) last 3 steps
    assert row["clip_frac"] == 0.25  # over the steps that logged one
    assert row["degenerate_share"] == pytest.approx(0.75)
    assert row["updating_steps"] == 0.5
    assert row["vs_base"]["diff"] == pytest.approx(8 / N)  # 8 more right of 64 in both seeds
    assert "updating_steps" not in secondary(cells, spec)["search-credit"]["base"]
