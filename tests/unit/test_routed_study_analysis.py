"""benchmarks/routed_study.py's analysis: the preregistered R1 and R2 (docs/results.md, "Routing:
a router over fixed experts") on made-up run folders whose answers and routes are known, the
route table, and the verdict rules at their edges. The fixed arm is one evaluation (fixed/),
compared with every seed's routed run."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark

rs = load_benchmark("routed_study")

N = 200  # held-out problems: ids p000.., the first half number_sequence, the second aiw


def kind(i: int) -> str:
    return "number_sequence" if i < N // 2 else "aiw"


def write_run(runs_dir: Path, name: str, right: dict[str, set[int]], route: dict[str, callable]) -> None:
    """A finished run: eval/{before,after}.json (task_ids, correct) and its episodes (kind, route);
    only the evaluations named in `right` (the fixed arm: after)."""
    run = runs_dir / name
    (run / "eval").mkdir(parents=True, exist_ok=True)
    ids = [f"p{i:03d}" for i in range(N)]
    for when in right:
        correct = [i in right[when] for i in range(N)]
        (run / "eval" / f"{when}.json").write_text(json.dumps({"task_ids": ids, "correct": correct}))
        with gzip.open(run / "eval" / f"{when}.episodes.jsonl.gz", "wt", encoding="utf-8") as f:
            for i in range(N):
                chosen = route[when](i)
                meta = {"route_invalid": int(chosen is None), "route": [chosen or "sequence_expert"]}
                f.write(json.dumps({"task_id": ids[i], "task_kind": kind(i), "metadata": meta,
                                    "reward_components": {"correct": float(correct[i])}}) + "\n")
    (runs_dir / f"{name}.json").write_text(json.dumps({"commit": "abc", "dirty": False, "wall_seconds": 60.0,
                                                       "peak_rss_gb": 3.0}))


def study(tmp_path: Path, routed_after_extra: list[int], seeds=(0, 1, 2)) -> dict:
    """Fixed arm right on problems 100-149 (aiw) after; the routed arm right on the same plus
    `routed_after_extra`. The routed router sends everything to the first expert before, and by
    kind after, except problem 0 (invalid) and 150 (the wrong expert)."""
    def by_kind(i):
        return None if i == 0 else "sequence_expert" if i == 150 else rs.OWN_EXPERT[kind(i)]

    write_run(tmp_path, "fixed", {"after": set(range(100, 150))}, {"after": lambda i: "word_problem_expert"})
    for seed in seeds:
        routed = {"before": set(range(20)), "after": set(range(100, 150)) | set(routed_after_extra)}
        write_run(tmp_path, f"routed-seed{seed}", routed, {"before": lambda i: "sequence_expert", "after": by_kind})
    return rs.analyze(tmp_path, list(seeds))


def test_r1_is_routed_against_fixed_on_the_same_problems(tmp_path):
    result = study(tmp_path, routed_after_extra=list(range(1, 21)))  # 20 more right, none fewer
    t = result["tests"][0]
    assert (t["a"], t["b"]) == (50 / N, 70 / N)
    assert t["diff"] == pytest.approx(20 / N) and (t["gained"], t["lost"]) == (20, 0)
    assert t["p"] == pytest.approx(2 * 0.5**20)  # exact McNemar: 20 discordant, all one way
    assert result["R1"] == "supported"
    assert result["R2"] == "supported"  # 99% of each kind to its own expert on every seed


def test_the_route_table_counts_each_kind_and_invalid_replies(tmp_path):
    result = study(tmp_path, routed_after_extra=[])
    routed = next(r for r in result["rows"] if r["arm"] == "routed")
    assert routed["routes"]["before"] == {"aiw": {"sequence_expert": 100},
                                          "number_sequence": {"sequence_expert": 100}}
    assert routed["routes"]["after"] == {"aiw": {"sequence_expert": 1, "word_problem_expert": 99},
                                         "number_sequence": {"invalid": 1, "sequence_expert": 99}}
    assert routed["own_expert_share"]["after"] == {"aiw": 0.99, "number_sequence": 0.99}
    assert routed["own_expert_share"]["before"] == {"aiw": 0.0, "number_sequence": 1.0}
    assert routed["by_kind"]["after"] == {"aiw": 0.5, "number_sequence": 0.0}
    fixed = next(r for r in result["rows"] if r["arm"] == "fixed")
    assert fixed["routes"]["after"] == {"aiw": {"word_problem_expert": 100},
                                        "number_sequence": {"word_problem_expert": 100}}
    assert fixed["accuracy"] == 50 / N


@pytest.mark.parametrize(("extra", "p", "verdict"), [
    ([], 1.0, "refuted"),                         # a tie on every seed: routed not ahead on 2 of 3
    (list(range(1, 9)), 2 / 2**8, "supported"),   # ahead by 8 discordant problems: p = 0.0078
    (list(range(1, 7)), 2 / 2**6, "undecided"),   # ahead by 6: p = 0.031, not below 0.01
])
def test_the_verdict_rule_at_its_edges(tmp_path, extra, p, verdict):
    result = study(tmp_path, routed_after_extra=extra)
    assert result["tests"][0]["p"] == pytest.approx(p)
    assert result["R1"] == verdict


def test_fewer_than_three_seeds_is_not_supported(tmp_path):
    assert study(tmp_path, routed_after_extra=list(range(1, 21)), seeds=(0, 1))["R1"] == "undecided"


def test_fixed_significantly_ahead_on_one_seed_refutes(tmp_path):
    study(tmp_path, routed_after_extra=list(range(1, 21)), seeds=(0, 1))
    # seed 2: the routed arm right on 30 of the fixed route's 50 only
    write_run(tmp_path, "routed-seed2", {"before": set(), "after": set(range(120, 150))},
              {"before": lambda i: "sequence_expert", "after": lambda i: rs.OWN_EXPERT[kind(i)]})
    result = rs.analyze(tmp_path, [0, 1, 2])
    assert [t["met"] for t in result["tests"]] == [True, True, False]
    assert result["tests"][2]["fixed_significantly_better"] and result["R1"] == "refuted"


def test_r2_needs_90_percent_of_each_kind_on_its_own_expert_on_every_seed(tmp_path):
    study(tmp_path, routed_after_extra=list(range(1, 21)), seeds=(0, 1))
    # seed 2: aiw problems 100-189 to their expert (90%), 190-199 to the other: met at exactly 90%
    write_run(tmp_path, "routed-seed2", {"before": set(), "after": set(range(1, 21)) | set(range(100, 150))},
              {"before": lambda i: "sequence_expert",
               "after": lambda i: "sequence_expert" if i >= 190 else rs.OWN_EXPERT[kind(i)]})
    assert rs.analyze(tmp_path, [0, 1, 2])["R2"] == "supported"
    write_run(tmp_path, "routed-seed1", {"before": set(), "after": set(range(1, 21)) | set(range(100, 150))},
              {"before": lambda i: "sequence_expert",
               "after": lambda i: "sequence_expert" if i >= 189 else rs.OWN_EXPERT[kind(i)]})  # 89%
    result = rs.analyze(tmp_path, [0, 1, 2])
    assert [t["R2_met"] for t in result["tests"]] == [True, False, True] and result["R2"] == "undecided"
    write_run(tmp_path, "routed-seed0", {"before": set(), "after": set(range(1, 21)) | set(range(100, 150))},
              {"before": lambda i: "sequence_expert", "after": lambda i: "sequence_expert"})  # all to one
    assert rs.analyze(tmp_path, [0, 1, 2])["R2"] == "refuted"


def test_different_problems_in_the_two_arms_is_an_error():
    a = {f"p{i}": True for i in range(3)}
    with pytest.raises(SystemExit, match="different held-out problems"):
        rs.compare(a, {f"q{i}": True for i in range(3)})
