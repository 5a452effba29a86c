"""The testbed mechanism study (studies/testbed_mechanism/): its spec planned by the study
harness, the collapse rule, the preregistered tests on records with known answers, and one real
(short) run of the harness's series cells."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from srpo_lab.study.runner import Cell, plan_cells, record_path
from srpo_lab.study.series import run_series_cell
from srpo_lab.study.spec import load_spec
from studies.testbed_mechanism.analysis import (
    collapse_verdict,
    h1,
    h3,
    load_records,
    steps_to_target,
    write_report,
)

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "studies" / "testbed_mechanism" / "spec.yaml"


def test_the_committed_spec_plans_20_seeds_per_cell_in_priority_order():
    spec = load_spec(SPEC)
    runs = plan_cells(spec)
    assert list(dict.fromkeys(r.block for r in runs)) == [b.name for b in spec.blocks]
    cells: dict[tuple, set[int]] = {}
    for r in runs:
        cells.setdefault((r.block, r.setting, r.level, r.method), set()).add(r.seed)
    assert all(seeds == set(range(20)) for seeds in cells.values())
    first = [r for r in runs if r.block == "stress_core"][:15]
    assert {r.seed for r in first} == {0}  # seed-major: every cell of seed 0 first


def test_overrides_apply_common_block_level_method_then_seed():
    spec = load_spec(SPEC)
    config, overrides = spec.cell_overrides("k16", "srpo_sum", 7, Path("out"), block="sizes", level="r4")
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


def test_steps_to_target():
    # updates 10-14 average (0.5 + 4 x 1.0) / 5 = 0.9: the target is reached at update 14
    assert steps_to_target([0.5] * 10 + [1.0] * 10) == 14
    assert steps_to_target([0.0] * 10 + [1.0] * 10) == 15
    assert steps_to_target([0.5] * 20) is None


def _write(spec, run: Cell, collapsed: bool, final: float) -> None:
    """A record whose series give the verdict `collapsed` by the rule (the analysis derives the
    verdict from the series: a final reward of 0.75 with no degenerate share logged is stuck)."""
    path = record_path(spec, run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run": dataclasses.asdict(run), "collapsed": collapsed,
                                "reason": "stuck" if collapsed else None, "final": final,
                                "series": {"reward/mean": [0.5] * 5 + [final] * 10,
                                           "clip/all/frac": [0.1] * 15}}))


def _synthetic_spec(tmp_path: Path):
    spec = load_spec(SPEC)
    return dataclasses.replace(spec, output=tmp_path / "study",
                               explicit_blocks=tuple(b for b in spec.blocks if b.name in ("stress_core", "credit")))


def test_h1_and_h3_verdicts_on_records_with_a_known_answer(tmp_path):
    spec = _synthetic_spec(tmp_path)
    out = spec.output
    rng = random.Random(0)
    for run in plan_cells(spec):
        if run.block == "stress_core":  # SRPO never collapses, the others do half the time
            collapsed = run.method != "srpo_mean" and run.seed % 2 == 0 and run.level != "r1"
            _write(spec, run, collapsed, 0.75 if collapsed else 1.0)
        else:  # SRPO ends higher than MAGRPO at both levels
            _write(spec, run, False, (0.95 if run.method == "srpo_mean" else 0.8) + 0.01 * rng.random())
    records, planned = load_records(spec)
    r1 = h1(records, planned)
    assert r1["verdict"] == "supported" and r1["srpo_mean"] == [0, 80]
    assert r1["comparisons"]["grpo"]["collapsed"] == [40, 80]
    r3 = h3(records, planned)
    assert r3["verdict"] == "supported" and r3["levels"]["r4"]["p_holm"] < 1e-6
    text = write_report(spec)
    assert "**H1: supported**" in text and "**H3: supported**" in text and "**H2: not run yet**" in text
    assert "**H6: not run yet**" in text  # its block is not in this spec: never tested on nothing
    assert (out / "plots" / "stress_core_curves.png").exists() and (out / "analysis.json").exists()

    # the same data with the roles swapped refutes H1; a missing run makes it "not run yet"
    for run in plan_cells(spec):
        if run.block == "stress_core":
            collapsed = run.method == "srpo_mean" and run.level != "r1"
            _write(spec, run, collapsed, 0.75 if collapsed else 1.0)
    records, planned = load_records(spec)
    assert h1(records, planned)["verdict"] == "refuted"
    record_path(spec, Cell("k4", "grpo", 19, "stress_core", "r16")).unlink()
    records, planned = load_records(spec)
    assert h1(records, planned)["verdict"] == "not run yet"


def test_one_real_run_gives_a_complete_record(tmp_path):
    spec = load_spec(SPEC)
    spec = dataclasses.replace(spec, output=tmp_path / "study", explicit_blocks=tuple(
        dataclasses.replace(b, common={"train.steps": 3}) if b.name == "credit" else b for b in spec.blocks))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cell = Cell("rounds", "magrpo", 0, "credit", "r4")
    record = run_series_cell(spec, cell, scratch)
    assert record["steps"] == 3 and record["error"] is None and len(record["series"]["reward/mean"]) == 3
    assert set(record["series"]) >= {"reward/mean", "ratio/k4/log_std", "grad_norm/mean", "adv/degenerate_share"}
    assert record["overrides"][-1] == "seed=0" and not any(scratch.iterdir())  # the run dir is removed
    assert json.loads(record_path(spec, cell).read_text()) == record  # written where the harness looks


RESULTS = REPO / "results" / "testbed-mechanism"


def test_the_committed_archive_reproduces_the_committed_analysis(tmp_path):
    """results/testbed-mechanism/runs.jsonl.gz holds all 2,040 records; the analysis read from
    it writes the committed analysis.md and analysis.json byte for byte."""
    import shutil

    shutil.copy(RESULTS / "runs.jsonl.gz", tmp_path / "runs.jsonl.gz")
    spec = dataclasses.replace(load_spec(SPEC), output=tmp_path)
    write_report(spec)
    for name in ("analysis.md", "analysis.json"):
        assert (tmp_path / name).read_text() == (RESULTS / name).read_text(), name


def test_the_verdict_derived_from_each_archived_series_is_the_one_recorded_when_it_ran():
    from srpo_lab.study.series import read_archive
    from studies.testbed_mechanism.analysis import run_verdict

    records = read_archive(dataclasses.replace(load_spec(SPEC), output=RESULTS))
    assert len(records) == 2040
    for label, record in records.items():
        verdict = run_verdict(record)
        assert {k: record[k] for k in verdict} == verdict, label
