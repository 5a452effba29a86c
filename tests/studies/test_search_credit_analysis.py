"""The search credit study's preregistered tests (studies/search_credit/analysis.py), on synthetic
cells whose answers are computed by hand or by a plain reference."""

from __future__ import annotations

import gzip
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from srpo_lab.study.report import StudyRuns
from studies.llm_offpolicy.analysis import Cells
from studies.search_credit.analysis import (
    SETTING,
    credit_tests,
    markdown,
    paired_t_p,
    per_method,
    question_sign_flip_p,
)

SEEDS = (3, 4, 5, 6, 7)
N = 256
DRAWS = 2000  # the secondary test's sign vectors here (the study uses 100,000)


def _t_two_sided_reference(t: float, df: int) -> float:
    """2 * P(T > |t|) by integrating Student's t density (trapezoid rule on a fine grid)."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    x = np.linspace(abs(t), abs(t) + 2000.0, 4_000_001)
    y = c * (1 + x**2 / df) ** (-(df + 1) / 2)
    return float(2 * np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)))


def test_paired_t_p_against_the_density():
    diffs = [1.0, 2.0, 3.0, 4.0, 5.0]  # mean 3, sd sqrt(2.5), t = 3 / (sqrt(2.5) / sqrt(5)) = 4.2426
    t = 3 / (math.sqrt(2.5) / math.sqrt(5))
    assert paired_t_p(diffs) == pytest.approx(_t_two_sided_reference(t, 4), rel=1e-4)
    assert paired_t_p([0.01, -0.01, 0.02, -0.02, 0.0]) == pytest.approx(1.0)
    assert paired_t_p([0.0] * 5) == 1.0 and paired_t_p([0.1] * 5) == 0.0
    with pytest.raises(ValueError, match="at least 2"):
        paired_t_p([0.1])


def test_question_sign_flip_p():
    # exact over the 8 sign vectors of (3, 1, 1): |sum| >= 5 for (+,+,+) and (-,-,-) only: 0.25
    assert question_sign_flip_p([3.0, 1.0, 1.0], draws=100_000) == pytest.approx(0.25, abs=0.005)
    assert question_sign_flip_p([0.0] * 10) == 1.0
    # 256 questions all +1: no random sign vector reaches the observed sum
    assert question_sign_flip_p([1.0] * 256, draws=1000) == pytest.approx(1 / 1001)
    with pytest.raises(ValueError):
        question_sign_flip_p([])


def result(method, seed, correct):
    return {"setting": SETTING, "method": method, "seed": seed, "task_ids": [f"q{i}" for i in range(len(correct))],
            "correct": list(correct), "accuracy": sum(correct) / len(correct), "episodes": 72.0,
            "episodes_dropped": 24.0}


def cells_from(right_of, methods=("srpo", "magrpo", "grpo", "base"), output=None):
    """Cells whose run (method, seed) got the first right_of(method, seed) questions right."""
    done = []
    for m in methods:
        for seed in SEEDS:
            right = right_of(m, seed)
            cell = SimpleNamespace(setting=SETTING, method=None if m == "base" else m, seed=seed,
                                   directory=lambda out, m=m, seed=seed: out / m / f"seed{seed}")
            rows = [{"loss": 0.1, "reward/mean": r, "grad_norm/searcher": 1.0} for r in (0.2, 0.4, 0.6, 0.8)]
            done.append((cell, result(m, seed, [True] * right + [False] * (N - right)), rows))
    return Cells(StudyRuns(done, []), [], output)


def test_supported_refuted_undecided():
    # SRPO higher by 20-24 questions on every seed (varying, so the t statistic is finite)
    higher = cells_from(lambda m, s: {"srpo": 150 + s, "base": 130}.get(m, 130))
    out = credit_tests(higher, SEEDS, DRAWS)
    for name in ("C1", "C2"):
        c = out[name]
        assert c["verdict"] == "supported"
        assert c["mean_diff"] == pytest.approx(sum(20 + s for s in SEEDS) / 5 / N)
        assert c["ci"][0] > 0 and c["p_holm"] < 0.05
        assert c["secondary_question_sign_flip_p"] < 0.001
    lower = cells_from(lambda m, s: {"srpo": 110 - s, "magrpo": 130}.get(m, 110 - s))
    out = credit_tests(lower, SEEDS, DRAWS)
    assert out["C1"]["verdict"] == "refuted" and out["C2"]["verdict"] == "undecided"  # C2: a tie
    assert out["C2"]["p"] == 1.0 and out["C2"]["mean_diff"] == 0.0
    noisy = cells_from(lambda m, s: {"srpo": 130 + (4 if s % 2 else -4)}.get(m, 130))
    assert credit_tests(noisy, SEEDS, DRAWS)["C1"]["verdict"] == "undecided"


def test_holm_over_the_two():
    # C1's raw p below 0.05 but above 0.025, C2's p = 1: Holm lifts C1 to 2p > 0.05
    diffs_c1 = [1, 2, 5, 1, 4]  # questions gained by SRPO over MAGRPO per seed
    cells = cells_from(lambda m, s: {"srpo": 130 + diffs_c1[s - 3], "magrpo": 130}.get(m, 130 + diffs_c1[s - 3]))
    out = credit_tests(cells, SEEDS, DRAWS)
    p = paired_t_p([d / N for d in diffs_c1])
    assert 0.025 < p < 0.05
    assert out["C1"]["p"] == pytest.approx(p) and out["C1"]["p_holm"] == pytest.approx(2 * p)
    assert out["C1"]["verdict"] == "undecided"


def test_not_run_yet_until_every_cell_is_finished():
    part = cells_from(lambda m, s: 130, methods=("srpo", "magrpo", "base"))
    out = credit_tests(part, SEEDS, DRAWS)
    assert out == {"verdict": "not run yet", "cells": "10 of 15 finished"}
    assert "Not run yet" in markdown({"spec": "s", "seeds": list(SEEDS), "missing": [], "tests": out,
                                      "per_method": per_method(part, SEEDS)})


def test_per_method_reads_gain_degradation_and_episodes(tmp_path):
    cells = cells_from(lambda m, s: {"srpo": 200, "magrpo": 100, "grpo": 130, "base": 130}[m], output=tmp_path)
    # one run's held-out episodes, with the metadata a search episode records
    d = cells.dirs[(SETTING, "srpo", 3)] / "eval"
    d.mkdir(parents=True)
    with gzip.open(d / "after.episodes.jsonl.gz", "wt") as f:
        for f1, rounds in ((1.0, 1), (0.5, 2)):
            f.write(json.dumps({"task_id": "q", "transitions": [], "metadata": {"score_f1": f1, "recall_at_k": 1.0,
                                                            "score_format": 1.0, "search_rounds": rounds}}) + "\n")
    out = per_method(cells, SEEDS)
    srpo, magrpo = out["srpo"], out["magrpo"]
    assert srpo["runs"][3]["token_f1"] == 0.75 and srpo["runs"][3]["rounds"] == 1.5
    assert "token_f1" not in srpo["runs"][4]  # no episodes file for that run: not invented
    assert srpo["means"]["gain"]["mean"] == pytest.approx(70 / N) and srpo["degraded"] == 0
    assert magrpo["degraded"] == 5 and magrpo["runs"][3]["gain"] == pytest.approx(-30 / N)
    assert srpo["runs"][3]["final_reward"] == pytest.approx((0.4 + 0.6 + 0.8) / 3)
    # `episodes` (72) already counts the 24 that dynamic sampling dropped
    assert srpo["runs"][3]["episodes_generated"] == 72.0 and srpo["runs"][3]["episodes_trained"] == 48.0
    assert "base" in out and "gain" not in out["base"]["runs"][3]
    text = markdown({"spec": "s", "seeds": list(SEEDS), "missing": [], "tests": credit_tests(cells, SEEDS, DRAWS),
                     "per_method": out})
    assert "| C1 | magrpo |" in text and "| srpo | 5 |" in text


def test_the_2hop_study_reuses_the_tests_on_its_own_setting_and_hop_metrics(tmp_path):
    """studies/search_2hop/analysis.py: the same tests on a spec whose one setting has another
    name, and E3 with the 2-hop episodes' hop recalls as percent columns."""
    from studies.search_2hop.analysis import HOP_METRICS
    from studies.search_credit.analysis import EPISODE_METRICS

    setting = "search-world-2hop"
    done = []
    for m in ("srpo", "magrpo", "grpo", "base"):
        for seed in SEEDS:
            right = {"srpo": 60 + seed}.get(m, 40)
            cell = SimpleNamespace(setting=setting, method=None if m == "base" else m, seed=seed,
                                   directory=lambda out, m=m, seed=seed: out / m / f"seed{seed}")
            res = result(m, seed, [True] * right + [False] * (N - right)) | {"setting": setting}
            done.append((cell, res, [{"loss": 0.1, "reward/mean": 0.5, "grad_norm/searcher": 1.0}]))
    cells = Cells(StudyRuns(done, []), [], tmp_path)
    # under the 1-hop study's setting name none of these cells is found
    assert credit_tests(cells, SEEDS, DRAWS) == {"verdict": "not run yet", "cells": "0 of 15 finished"}
    tests = credit_tests(cells, SEEDS, DRAWS, setting=setting)
    assert tests["C1"]["mean_diff"] == pytest.approx(sum(20 + s for s in SEEDS) / 5 / N)
    d = cells.dirs[(setting, "srpo", 3)] / "eval"
    d.mkdir(parents=True)
    with gzip.open(d / "after.episodes.jsonl.gz", "wt") as f:
        for hop2 in (1.0, 0.0, 0.0, 1.0):
            meta = {"score_f1": 1.0, "recall_at_k": 0.5, "score_format": 1.0, "search_rounds": 2,
                    "recall_hop1": 1.0, "recall_hop2": hop2, "first_step_recall": 0.5}
            f.write(json.dumps({"task_id": "q", "transitions": [], "metadata": meta}) + "\n")
    out = per_method(cells, SEEDS, setting, {**EPISODE_METRICS, **HOP_METRICS})
    assert out["srpo"]["runs"][3]["recall_hop2"] == 0.5 and out["srpo"]["runs"][3]["recall_hop1"] == 1.0
    text = markdown({"spec": "s", "seeds": list(SEEDS), "missing": [], "tests": tests, "per_method": out},
                    "2-hop search credit study", extra_columns=list(HOP_METRICS.values()))
    assert text.startswith("# 2-hop search credit study") and "recall_hop2" in text
    srpo_row = next(line for line in text.splitlines() if line.startswith("| srpo |"))
    assert "50.0 (50.0-50.0)" in srpo_row  # recall_hop2 as percent, one run
