"""The committed studies as the harness sees them: every spec under studies/ loads and every one
of its cells builds a valid config (one seed of each); the finished cells of the LLM off-policy study are
recognised as done (a rerun of its command resumes, it retrains nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from srpo_lab.study.runner import iter_results, plan_cells, run_cell
from srpo_lab.study.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted(p for p in (ROOT / "studies").glob("*/*.yaml") if p.parent.name != "configs")


def test_every_study_folder_has_a_spec_and_a_readme():
    folders = [d for d in (ROOT / "studies").iterdir() if d.is_dir() and d.name not in ("configs", "__pycache__")]
    assert {d.name for d in folders} == {"testbed_mechanism", "llm_offpolicy", "cpu_onpolicy", "srpo_reuse",
                                            "search_credit", "search_2hop"}
    screens: set[str] = set()  # screens before a study: a README and their script, no spec yet
    for d in folders:
        assert (d / "README.md").is_file() and (d.name in screens or list(d.glob("*.yaml"))), d


@pytest.mark.parametrize("spec_path", SPECS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_spec_builds_every_cell(spec_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # spec paths are relative to the repository root
    spec = load_spec(spec_path.relative_to(ROOT))
    cells = plan_cells(spec)
    assert cells
    one_seed_each = {cell.parts: cell for cell in cells}.values()  # cells differ by seed only in `seed`
    for cell in one_seed_each:
        spec.cell_config(cell.setting, cell.method, cell.seed, cell.directory(spec.output), **cell.where())


@pytest.mark.parametrize("name, cells", [("math.yaml", 135), ("search.yaml", 30)])
def test_the_finished_llm_cells_are_done_for_the_harness(name, cells, monkeypatch):
    monkeypatch.chdir(ROOT)
    spec = load_spec(Path("studies") / "llm_offpolicy" / name)

    def must_not_run(argv, log):
        raise AssertionError(f"the harness would rerun a finished cell: srpo {' '.join(argv)}")

    finished = [(cell, result) for cell, result in iter_results(spec) if result is not None]
    assert len(finished) == cells
    for cell, result in finished:
        assert run_cell(spec, cell, must_not_run) == result
