"""The mechanism study's driver and analysis: planning, the collapse rule, the preregistered
tests on records with known answers, and one real (short) run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from srpo.study.mechanism import Run, collapse_verdict, execute, load_spec, plan_runs, run_overrides
from srpo.study.mechanism_report import h1, h3, holm, load_records, steps_to_target, write_report

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "benchmarks" / "studies" / "testbed_mechanism.yaml"


def test_the_committed_spec_plans_20_seeds_per_cell_in_priority_order():
    spec = load_spec(SPEC)
    runs = plan_runs(spec)
    assert [b for b in dict.fromkeys(r.block for r in runs)] == list(spec["blocks"])
    cells: dict[tuple, set[int]] = {}
    for r in runs:
        cells.setdefault((r.block, r.preset, r.level, r.method), set()).add(r.seed)
    assert all(seeds == set(range(20)) for seeds in cells.values())
    first = [r for r in runs if r.block == "stress_core"][:15]
    assert {r.seed for r in first} == {0}  # seed-major: every cell of seed 0 first


def test_overrides_apply_common_block_level_method_then_seed():
    spec = load_spec(SPEC)
    config, overrides = run_overrides(spec, Run("sizes", "k16", "r4", "srpo_sum", 7), Path("out"))
    assert config == "srpo/presets/testbed/k16.yaml"
    assert "train.steps=10" in overrides and "train.steps=40" not in overrides  # the block's wins
    assert "train.method_settings={reduction: sum}" in overrides
    assert overrides[-2:] == ["seed=7", "output_dir=out"]


@pytest.mark.parametrize("reward, degenerate, nonfinite, expected", [
    ([0.4] * 3 + [1.0] * 37, [0.0] * 30 + [1.0] * 10, False, (False, None)),  # learned, then no signal: fine
    ([0.4] * 3 + [0.75] * 37, [0.0] * 30 + [0.9] * 10, False, (True, "stuck")),
    ([0.4] * 3 + [0.75] * 37, [0.0] * 30 + [0.5] * 10, False, (False, None)),  # still exploring
    ([0.5] * 3 + [0.3] * 37, [0.0] * 40, False, (True, "degraded")),
    ([0.5] * 3 + [0.46] * 37, [0.0] * 40, False, (False, None)),  # within the 0.05 margin
    ([0.5] * 40, [0.0] * 40, True, (True, "nonfinite")),
])
def test_the_collapse_rule(reward, degenerate, nonfinite, expected):
    v = collapse_verdict(reward, degenerate, nonfinite)
    assert (v["collapsed"], v["reason"]) == expected


def test_steps_to_target_and_holm():
    # updates 10-14 average (0.5 + 4 x 1.0) / 5 = 0.9: the target is reached at update 14
    assert steps_to_target([0.5] * 10 + [1.0] * 10) == 14
    assert steps_to_target([0.0] * 10 + [1.0] * 10) == 15
    assert steps_to_target([0.5] * 20) is None
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def _write(output: Path, run: Run, collapsed: bool, final: float) -> None:
    path = run.record_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run": run.__dict__, "collapsed": collapsed, "reason": "stuck" if collapsed else None,
                                "final": final, "series": {"reward/mean": [0.5] * 5 + [final] * 10,
                                                           "clip/all/frac": [0.1] * 15}}))


def _synthetic_spec(tmp_path: Path) -> dict:
    spec = load_spec(SPEC)
    spec["output"] = str(tmp_path / "study")
    spec["blocks"] = {b: spec["blocks"][b] for b in ("stress_core", "credit")}
    return spec


def test_h1_and_h3_verdicts_on_records_with_a_known_answer(tmp_path):
    spec = _synthetic_spec(tmp_path)
    out = Path(spec["output"])
    rng = random.Random(0)
    for run in plan_runs(spec):
        if run.block == "stress_core":  # SRPO never collapses, the others do half the time
            collapsed = run.method != "srpo_mean" and run.seed % 2 == 0 and run.level != "r1"
            _write(out, run, collapsed, 0.75 if collapsed else 1.0)
        else:  # SRPO ends higher than MAGRPO at both levels
            _write(out, run, False, (0.95 if run.method == "srpo_mean" else 0.8) + 0.01 * rng.random())
    records, planned = load_records(spec)
    r1 = h1(records, planned)
    assert r1["verdict"] == "supported" and r1["srpo_mean"] == [0, 80]
    assert r1["comparisons"]["grpo"]["collapsed"] == [40, 80]
    r3 = h3(records, planned)
    assert r3["verdict"] == "supported" and r3["levels"]["r4"]["p_holm"] < 1e-6
    text = write_report(spec)
    assert "**H1: supported**" in text and "**H3: supported**" in text and "**H2: not run yet**" in text
    assert "**H6: not run yet**" in text  # its block is not in this spec: never tested on nothing
    assert (out / "plots" / "stress_core_curves.png").exists() and (out / "summary.json").exists()

    # the same data with the roles swapped refutes H1; a missing run makes it "not run yet"
    for run in plan_runs(spec):
        if run.block == "stress_core":
            collapsed = run.method == "srpo_mean" and run.level != "r1"
            _write(out, run, collapsed, 0.75 if collapsed else 1.0)
    records, planned = load_records(spec)
    assert h1(records, planned)["verdict"] == "refuted"
    Run("stress_core", "k4", "r16", "grpo", 19).record_path(out).unlink()
    records, planned = load_records(spec)
    assert h1(records, planned)["verdict"] == "not run yet"


def test_one_real_run_gives_a_complete_record(tmp_path):
    spec = load_spec(SPEC)
    spec["blocks"]["credit"]["common"] = {"train.steps": 3}
    record = execute(spec, Run("credit", "rounds", "r4", "magrpo", 0), tmp_path)
    assert record["steps"] == 3 and record["error"] is None and len(record["series"]["reward/mean"]) == 3
    assert set(record["series"]) >= {"reward/mean", "ratio/k4/log_std", "grad_norm/mean", "adv/degenerate_share"}
    assert record["overrides"][-1] == "seed=0" and not any(tmp_path.iterdir())  # the run dir is removed
