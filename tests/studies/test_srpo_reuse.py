"""The SRPO-under-reuse study (studies/srpo_reuse/): its spec planned by the harness, the
preregistered tests (M1, H7, H8) on records with known answers, and one real short run whose
record carries the member metrics."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from srpo_lab.study.runner import Cell, plan_cells, record_path
from srpo_lab.study.series import run_series_cell
from srpo_lab.study.spec import load_spec
from studies.srpo_reuse.analysis import h7, h8, load_records, m1, write_report

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "studies" / "srpo_reuse" / "spec.yaml"


def test_the_spec_plans_20_seeds_a_cell_and_the_preregistered_blocks():
    spec = load_spec(SPEC)
    runs = plan_cells(spec)
    assert [b.name for b in spec.blocks] == ["reuse_stress", "credit_event", "mtr_elsewhere", "credit_mtr"]
    cells: dict[tuple, set[int]] = {}
    for r in runs:
        cells.setdefault((r.block, r.setting, r.level, r.method), set()).add(r.seed)
    assert all(seeds == set(range(20)) for seeds in cells.values()) and len(runs) == 400
    _, overrides = spec.cell_overrides("rounds", "srpo_event", 3, Path("out"), block="credit_event", level="r4")
    assert "train.method_settings={group_keys: [task, event]}" in overrides


def _write(spec, run: Cell, collapsed: bool, final: float, escaping: float = 0.1) -> None:
    """A record whose series give the verdict `collapsed` by the rule (a final reward of 0.75
    with no degenerate share logged is stuck) and an escaping share over its updates."""
    path = record_path(spec, run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run": dataclasses.asdict(run), "series": {
        "reward/mean": [0.5] * 5 + [final] * 10, "clip/all/frac": [0.1] * 15,
        "members/escaping_share": [escaping] * 15}}))


def _spec(tmp_path: Path, blocks=("reuse_stress", "credit_event")):
    spec = load_spec(SPEC)
    return dataclasses.replace(spec, output=tmp_path / "study",
                               explicit_blocks=tuple(b for b in spec.blocks if b.name in blocks))


def test_the_verdicts_on_records_with_a_known_answer(tmp_path):
    spec = _spec(tmp_path)
    for run in plan_cells(spec):
        if run.block == "reuse_stress":
            # srpo_mean collapses on even seeds, with more escaping members; srpo_mtr never; the
            # per-member methods on seeds divisible by 4 (5 of 20 a level)
            collapsed = {"srpo_mean": run.seed % 2 == 0, "srpo_mtr": False}.get(run.method, run.seed % 4 == 0)
            _write(spec, run, collapsed, 0.75 if collapsed else 1.0,
                   escaping=0.3 + 0.001 * run.seed if collapsed else 0.1 + 0.001 * run.seed)
        else:  # srpo_event 0.01 above grpo at both levels, with little noise
            _write(spec, run, False, (0.95 if run.method == "srpo_event" else 0.94) + 0.001 * (run.seed % 3))
    records, planned = load_records(spec)
    r_m1 = m1(records, planned)
    assert r_m1["verdict"] == "supported" and r_m1["collapsed"]["runs"] == 20 and r_m1["p"] < 1e-6
    r7 = h7(records, planned)
    assert r7["collapsed"]["srpo_mtr"] == [0, 40] and r7["collapsed"]["srpo_mean"] == [20, 40]
    assert r7["verdict"] == "supported" and r7["holm_support"]["fewer_than_srpo_mean"] < 1e-6
    r8 = h8(records, planned)
    assert r8["verdict"] == "supported" and r8["levels"]["r4"]["ci_975"][0] > 0
    text = write_report(spec)
    assert "**M1: supported**" in text and "**H7: supported**" in text and "**H8: supported**" in text

    # srpo_mtr collapsing every time refutes H7; grpo 0.1 above srpo_event refutes H8
    for run in plan_cells(spec):
        if run.method == "srpo_mtr":
            _write(spec, run, True, 0.75)
        if run.method == "grpo" and run.block == "credit_event":
            _write(spec, run, False, 1.0)
    records, planned = load_records(spec)
    assert h7(records, planned)["verdict"] == "refuted" and h8(records, planned)["verdict"] == "refuted"
    # a missing run: not run yet, never a test on part of the seeds
    record_path(spec, Cell("k4", "grpo", 19, "reuse_stress", "r16")).unlink()
    records, planned = load_records(spec)
    assert h7(records, planned)["verdict"] == "not run yet"


def test_h7_is_undecided_when_the_fix_only_ties(tmp_path):
    spec = _spec(tmp_path, blocks=("reuse_stress",))
    for run in plan_cells(spec):
        collapsed = run.seed % 4 == 0  # every method 5 of 20 a level
        _write(spec, run, collapsed, 0.75 if collapsed else 1.0)
    records, planned = load_records(spec)
    assert h7(records, planned)["verdict"] == "undecided"
    assert m1(records, planned)["verdict"] == "undecided"  # equal escaping shares: p = 1


def test_one_real_run_records_the_member_metrics(tmp_path):
    spec = load_spec(SPEC)
    spec = dataclasses.replace(spec, output=tmp_path / "study", explicit_blocks=tuple(
        dataclasses.replace(b, common={"train.steps": 3}) if b.name == "reuse_stress" else b for b in spec.blocks))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    record = run_series_cell(spec, Cell("k4", "srpo_mtr", 0, "reuse_stress", "r16"), scratch)
    assert record["error"] is None and len(record["series"]["reward/mean"]) == 3
    stopped = [v for v in record["series"]["members/stopped_share"] if v is not None]
    escaping = [v for v in record["series"]["members/escaping_share"] if v is not None]
    assert stopped and escaping and all(0.0 <= v <= 1.0 for v in stopped + escaping)


RESULTS = REPO / "results" / "srpo-reuse"


def test_the_committed_archive_reproduces_the_committed_analysis(tmp_path):
    """results/srpo-reuse/runs.jsonl.gz holds all 400 records; the analysis read from it writes
    the committed analysis.md and analysis.json byte for byte."""
    import shutil

    shutil.copy(RESULTS / "runs.jsonl.gz", tmp_path / "runs.jsonl.gz")
    spec = dataclasses.replace(load_spec(SPEC), output=tmp_path)
    text = write_report(spec)
    assert "Runs done: 400 of 400 planned" in text
    for name in ("analysis.md", "analysis.json"):
        assert (tmp_path / name).read_text() == (RESULTS / name).read_text(), name
