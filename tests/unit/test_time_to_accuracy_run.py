"""benchmarks/time_to_accuracy.py end to end on srpo's tiny random model (a 2-layer llama with
SmolLM2's tokenizer), one short budget per trainer, so the benchmark cannot rot: `run` of every
arm (the peers in their own environments, skipped with the reason when one is missing), then
`evaluate` of every checkpoint through `srpo eval`, then `analyze`. The model learns nothing in
seconds; what is checked is the chain: checkpoints in peft's layout that srpo loads, records,
scores and the table. Slow: about 3 minutes on one thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark

tta = load_benchmark("time_to_accuracy")
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "time_to_accuracy.py"
# the peers' environments as scripts/peer_envs.sh builds them (or named by these variables)
PEER_PYTHONS = {"trl": os.environ.get("SRPO_TRL_PYTHON", str(ROOT.parent / "trl-venv" / "bin" / "python")),
                "comlrl": os.environ.get("SRPO_COMLRL_PYTHON", str(ROOT.parent / "comlrl-venv" / "bin" / "python"))}
BUDGET, EVERY = "2", "1"  # training seconds; checkpoints at ~1 s and at the budget

pytestmark = pytest.mark.slow


def bench(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(SCRIPT), *args, "--root", str(root)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def peer_args(arm: str) -> list[str]:
    """`--peer-python` for a peer arm (skipped with the reason when its environment is missing)."""
    side = tta.ARMS[arm].side
    if side == "srpo":
        return []
    python = PEER_PYTHONS[side]
    if not Path(python).is_file():
        pytest.skip(f"{arm}: no {side} environment at {python} (build it: bash scripts/peer_envs.sh {side})")
    return ["--peer-python", python]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("time_to_accuracy")


@pytest.mark.parametrize("arm", list(tta.ARMS))
def test_run_and_evaluate_one_arm(root, arm):
    peer = peer_args(arm)
    bench(root, "run", "--arm", arm, "--seed", "0", "--budget", BUDGET, "--every", EVERY, "--threads", "1",
          "--model", "tiny", *peer)
    run = root / arm / "seed0"
    record = json.loads((run / "record.json").read_text())
    assert record["train_seconds"] >= float(BUDGET) and record["startup_seconds"] > 0
    assert record["marks"] and record["marks"][-1]["train_seconds"] >= float(BUDGET)
    assert "commit" in record and record["versions"]["torch"]
    # where the training seconds went: every side times its rollout and its update, and the phases
    # (other included) add up to the training seconds
    phases = record["phases"]
    rollout, update = (sum(phases.get(p, 0.0) for p in tta.PHASE_COLUMNS[c]) for c in ("rollout", "update"))
    assert rollout > 0 and update > 0, phases
    assert sum(phases.values()) == pytest.approx(record["train_seconds"], rel=0.02)
    for mark in record["marks"]:
        for policy in tta.ARMS[arm].policies:
            folder = run / "ckpt" / mark["tag"] / policy
            assert (folder / "adapter_config.json").is_file() and (folder / "adapter_model.safetensors").is_file()
    bench(root, "evaluate", "--threads", "1")
    for mark in record["marks"]:
        result = json.loads((run / "ckpt" / mark["tag"] / "eval.json").read_text())
        assert result["n"] == 8  # the tiny shape's held-out problems, as the base model's
    assert json.loads((tta.base_dir(root, record["eval"]["config"]) / "eval.json").read_text())["n"] == 8


def test_analyze_tables_every_comparison_that_ran(root):
    ran = {p.parent.parent.name for p in root.glob("*/seed0/record.json")}
    if not ran:
        pytest.skip("no arm ran")
    bench(root, "analyze")
    table = (root / "table.md").read_text()
    pairs = [(peer, arm) for peer, arms in tta.COMPARISONS.items() for arm in arms if {peer, arm} <= ran]
    for peer, arm in pairs:
        assert f"| {peer} (1 seeds) |" in table and f"| {arm} (1 seeds) |" in table
    assert len(json.loads((root / "analysis.json").read_text())["comparisons"]) == len(pairs)
    assert (root / "curves.png").is_file()


@pytest.mark.parametrize("arm", ["srpo_single_grpo", "trl_grpo", "comlrl_magrpo"])
def test_before_marks_keep_only_the_marks_each_the_state_before_its_nominal_time(tmp_path, arm):
    """`run --marks before` on each side: every step is saved and all but the marks discarded, so
    the checkpoint folders are exactly the marks'; each mark ended before the nominal time it
    stands for ("at"), the last stands for the budget. A longer budget than the other tests': a
    mark needs a step to have ended before it, and a tiny step on a loaded machine took over 1 s."""
    peer = peer_args(arm)
    bench(tmp_path, "run", "--arm", arm, "--seed", "0", "--budget", "6", "--every", "2", "--threads", "1",
          "--model", "tiny", "--marks", "before", *peer)
    run = tmp_path / arm / "seed0"
    record = json.loads((run / "record.json").read_text())
    assert record["mark_mode"] == "before" and record["marks"]
    assert sorted(p.name for p in (run / "ckpt").iterdir()) == sorted(m["tag"] for m in record["marks"])
    for mark in record["marks"]:
        assert mark["train_seconds"] < mark["at"]
    assert record["marks"][-1]["at"] == 6.0
    assert [m["step"] for m in record["marks"]] == sorted({m["step"] for m in record["marks"]})
