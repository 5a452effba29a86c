"""Every shipped preset loads, names agents and policies that exist, and trains one step when
its model is swapped for the tiny random one (the real runs use SmolLM2)."""

from pathlib import Path

import pytest
import torch

from srpo.cli_train import DEFAULT_CONFIG
from srpo.config import load_config
from srpo.build import build_agents, build_workflow_from
from srpo.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
PRESETS = sorted((REPO / "configs").rglob("*.yaml")) + [DEFAULT_CONFIG]
TINY = ["model.name=tiny", "model.tokenizer=bytes", "sampling.max_new_tokens=8", "train.steps=1",
        "train.tasks_per_step=2", "group_size=2", "task.train_size=16", "task.heldout_size=4",
        "eval.size=0", "checkpoint.plots=false", "checkpoint.export=false", "checkpoint.tensorboard=false"]


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name if p.parent.name != "math" else f"math/{p.name}")
def test_preset_loads_and_its_workflow_has_its_agents(path, monkeypatch):
    # the GPU presets (device cuda) load as on the machine they are for: load_config refuses a
    # cuda device where CUDA is not available
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = load_config(path)
    wf = build_workflow_from(cfg)
    missing = set(wf.agents) - set(build_agents(cfg, wf))
    assert not missing, f"{path.name}: workflow {wf.name} needs agents {missing}"


@pytest.mark.parametrize("path", sorted((REPO / "configs" / "math").glob("*.yaml")) + [DEFAULT_CONFIG],
                         ids=lambda p: p.stem)
def test_preset_trains_one_step_on_a_tiny_model(path, tmp_path):
    if "search" in path.name:
        pytest.skip("search presets are exercised by tests/search")
    result = Trainer(load_config(path, [*TINY, f"output_dir={tmp_path}"])).train()
    assert result.steps_done == 1 and result.history[0]["loss"] == result.history[0]["loss"]
