"""Every shipped preset loads, names agents and policies that exist, and trains one step when
its model is swapped for the tiny random one (the real runs use SmolLM2)."""

from pathlib import Path

import pytest
import torch

from srpo.build import build_agents, build_workflow_from
from srpo.cli.train import DEFAULT_CONFIG
from srpo.config import load_config
from srpo.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
PRESETS = sorted((REPO / "srpo" / "presets").rglob("*.yaml"))
assert DEFAULT_CONFIG in PRESETS
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


@pytest.mark.parametrize("path", sorted((REPO / "srpo" / "presets" / "math").glob("*.yaml"))
                         + [DEFAULT_CONFIG, REPO / "srpo" / "presets" / "search" / "world.yaml"],
                         ids=lambda p: p.stem)
def test_preset_trains_one_step_on_a_tiny_model(path, tmp_path):
    if "search" in path.name:
        pytest.skip("search presets are exercised by tests/search")
    # a preset that starts adapters from a trained stage (math/routed's experts) starts fresh
    # here: those adapters are the real model's, and are made by a run of their own
    fresh = ["policies.lora.init={}"] if load_config(path).policies.lora.init else []
    result = Trainer(load_config(path, [*TINY, *fresh, f"output_dir={tmp_path}"])).train()
    assert result.steps_done == 1 and result.history[0]["loss"] == result.history[0]["loss"]


def test_a_config_may_be_named_by_its_preset():
    from srpo.config.presets import preset_names, preset_path

    assert {"default", "smoke", "math/debate", "testbed/k4", "gpu/math_gsm8k"} <= set(preset_names())
    assert load_config("math/debate").workflow.name == load_config(REPO / "srpo/presets/math/debate.yaml").workflow.name
    assert preset_path("../pyproject") is None and preset_path("math/nothing") is None


def test_a_missing_config_suggests_the_preset_meant(tmp_path, monkeypatch):
    from srpo.config import ConfigError

    monkeypatch.chdir(tmp_path)  # no file of that name here
    with pytest.raises(ConfigError, match=r"'math/debat' does not exist; did you mean the preset math/debate"):
        load_config("math/debat")
    with pytest.raises(ConfigError, match=r"nor a preset: `srpo presets` lists them"):
        load_config("nothing-like-it.yaml")
