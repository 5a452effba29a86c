"""policies.lora.init: a policy's adapter starts from trained weights (a peft adapter folder,
as a run's export/<policy>/lora holds), and every way that folder can be wrong is an error
that names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import get_peft_model_state_dict
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from srpo.build import build_policies
from srpo.config import ConfigError, load_config
from srpo.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "srpo" / "presets" / "smoke.yaml")
LORA = ["policies.kind=lora", "policies.names=[shared, aggregator]", "agents.aggregator.policy=aggregator",
        "policies.lora.rank=4"]
QUIET = ["checkpoint.plots=false", "checkpoint.tensorboard=false", "eval.size=0"]
IDS = torch.tensor([[5, 17, 42, 7, 99, 3]])


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A 1-step LoRA run of the smoke preset (two adapters), exported."""
    run = tmp_path_factory.mktemp("lora_init") / "run"
    Trainer(load_config(SMOKE, [f"output_dir={run}", "train.steps=1", *LORA, *QUIET])).train()
    return run


def _policies(tmp_path: Path, *extra: str):
    cfg = load_config(SMOKE, [f"output_dir={tmp_path}", *LORA, *QUIET, *extra])
    return build_policies(cfg.model, cfg.policies, cfg.device)


def test_the_export_holds_each_adapter_alone_in_peft_layout(trained):
    for name in ("shared", "aggregator"):
        lora = trained / "export" / name / "lora"
        config = json.loads((lora / "adapter_config.json").read_text())
        assert config["r"] == 4 and config["peft_type"] == "LORA"
        tensors = load_file(str(lora / "adapter_model.safetensors"))
        assert tensors and all("lora_" in k for k in tensors)
        manifest = json.loads((trained / "export" / name / "srpo_export.json").read_text())["files"]
        assert {"lora/adapter_config.json", "lora/adapter_model.safetensors"} <= set(manifest)


def test_an_adapter_started_from_the_export_is_the_trained_policy(trained, tmp_path):
    fresh = _policies(tmp_path / "fresh")
    started = _policies(tmp_path / "started", f"policies.lora.init={{aggregator: {trained}/export/aggregator/lora}}")
    model = started["aggregator"].model
    saved = load_file(str(trained / "export" / "aggregator" / "lora" / "adapter_model.safetensors"))
    now = get_peft_model_state_dict(model, adapter_name="aggregator")
    assert set(now) == set(saved) and all(torch.equal(now[k], saved[k]) for k in saved)
    # the trained adapter moved B away from 0; the other adapter is untouched (B = 0: the base)
    assert any(float(v.abs().max()) > 0 for k, v in saved.items() if "lora_B" in k)
    untouched = get_peft_model_state_dict(model, adapter_name="shared")
    assert all(float(v.abs().max()) == 0 for k, v in untouched.items() if "lora_B" in k)
    # its outputs are the exported (merged) policy's
    merged = AutoModelForCausalLM.from_pretrained(trained / "export" / "aggregator", local_files_only=True)
    with started.activated("aggregator"), torch.no_grad():
        model.eval()
        logits = model(input_ids=IDS).logits
    torch.testing.assert_close(logits, merged(input_ids=IDS).logits, rtol=0, atol=1e-5)
    with fresh.activated("aggregator"), torch.no_grad():
        fresh["aggregator"].model.eval()
        assert not torch.allclose(fresh["aggregator"].model(input_ids=IDS).logits, logits, atol=1e-5)


def test_a_wrong_adapter_folder_is_an_error_that_names_it(trained, tmp_path):
    lora = trained / "export" / "aggregator" / "lora"
    # a missing folder says what it must hold and how a preset's adapters are made
    with pytest.raises(FileNotFoundError, match=r"adapter_config.json does not exist .*Train that adapter first"):
        _policies(tmp_path / "a", f"policies.lora.init={{aggregator: {tmp_path / 'nowhere'}}}")
    with pytest.raises(ValueError, match="has r = 4, policy 'aggregator' has 8"):
        _policies(tmp_path / "b", "policies.lora.rank=8", f"policies.lora.init={{aggregator: {lora}}}")
    with pytest.raises(ValueError, match="does not hold this adapter's weights.*other target modules"):
        _policies(tmp_path / "c", "policies.lora.target_modules=[q_proj]", f"policies.lora.init={{aggregator: {lora}}}")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text((lora / "adapter_config.json").read_text())
    (broken / "adapter_model.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(ValueError, match="is not a valid safetensors file"):
        _policies(tmp_path / "d", f"policies.lora.init={{aggregator: {broken}}}")
    with pytest.raises(ConfigError, match=r"policies.lora.init names \['solver'\], not in policies.names"):
        _policies(tmp_path / "e", f"policies.lora.init={{solver: {lora}}}")
    with pytest.raises(ConfigError, match="only used with policies.kind = 'lora'"):
        load_config(SMOKE, [f"output_dir={tmp_path / 'f'}", f"policies.lora.init={{shared: {lora}}}"])
