"""Tests of srpo.record.checkpoint: round trips, exact continuation, crash safety, loud errors.

Models are the tiny random llama (1 layer, hidden 32: ~20k params), so every test is fast; the
SIGKILL tests run a plain nn.Linear in a subprocess to keep its start-up to the torch import.
"""

from __future__ import annotations

import copy
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from srpo.models import build_tiny_model
from srpo.record.checkpoint import (
    CheckpointMismatchError,
    CorruptCheckpointError,
    TrainState,
    config_fingerprint,
    export_policy,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)

REPO = Path(__file__).resolve().parents[2]
IDS = torch.tensor([[1, 72, 101, 108, 108, 111, 2, 0]])  # "<bos>Hello<eos><pad>" in byte ids


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _make_state(seed: int = 0, fingerprint: str = "cfg-a") -> TrainState:
    model, _ = build_tiny_model(hidden_size=32, num_layers=1, seed=seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return TrainState(
        step=0,
        policies={"actor": model},
        optimizers={"actor": opt},
        schedulers={"actor": sched},
        config_fingerprint=fingerprint,
    )


def _train_step(state: TrainState) -> float:
    """One update on inputs drawn from all three global RNGs (so each must be restored)."""
    model, opt = state.policies["actor"], state.optimizers["actor"]
    sched = state.schedulers["actor"]
    ids = torch.randint(3, 259, (2, 8))
    scale = 1.0 + 0.1 * random.random() + 0.1 * float(np.random.rand())
    loss = model(input_ids=ids, labels=ids).loss * scale
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    state.step += 1
    state.data_state = {"position": state.step * 2}
    return float(loss.detach())


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


# --------------------------------------------------------------------------- round trips


def test_round_trip_weights_optimizer_scheduler_rng(tmp_path):
    _seed_all(0)
    state = _make_state()
    for _ in range(2):
        _train_step(state)
    path = save_checkpoint(tmp_path, state)
    assert path == tmp_path / "checkpoints" / "step-2"
    saved_w = _weights(state.policies["actor"])
    saved_opt = copy.deepcopy(state.optimizers["actor"].state_dict())  # holds live tensors
    draws = (torch.rand(3), random.random(), np.random.rand(2))

    _train_step(state)  # move everything on, then load back
    fresh = _make_state(seed=1)
    fresh.policies["actor"] = state.policies["actor"]
    fresh.optimizers, fresh.schedulers = state.optimizers, state.schedulers
    loaded = load_checkpoint(tmp_path, fresh)

    assert loaded.step == 2 and loaded.data_state == {"position": 4}
    model = loaded.policies["actor"]
    _assert_same(_weights(model), saved_w)
    # tied embeddings are still one tensor after loading
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    opt_state = loaded.optimizers["actor"].state_dict()
    assert opt_state["param_groups"] == saved_opt["param_groups"]
    for pid, s in saved_opt["state"].items():
        for k, v in s.items():
            assert torch.equal(opt_state["state"][pid][k], v), (pid, k)
    assert loaded.schedulers["actor"].last_epoch == 2
    assert loaded.schedulers["actor"].get_last_lr() == pytest.approx([1e-2 / 3])  # lambda(2) = 1/3
    assert torch.equal(torch.rand(3), draws[0])
    assert random.random() == draws[1]
    assert np.array_equal(np.random.rand(2), draws[2])


def test_continuation_equals_uninterrupted_run(tmp_path):
    """4 steps in one go == 2 steps, save, fresh objects + load, 2 more steps."""
    _seed_all(0)
    state = _make_state()
    straight = [_train_step(state) for _ in range(4)]
    straight_w = _weights(state.policies["actor"])

    _seed_all(0)
    first = _make_state()
    resumed = [_train_step(first) for _ in range(2)]
    save_checkpoint(tmp_path, first)
    del first
    _seed_all(123)  # the new process starts from other RNG states and other weights
    second = load_checkpoint(tmp_path, _make_state(seed=7))
    assert second.step == 2
    resumed += [_train_step(second) for _ in range(2)]

    assert np.allclose(resumed, straight, rtol=0, atol=1e-6), (resumed, straight)
    _assert_same(_weights(second.policies["actor"]), straight_w)
    assert second.data_state == {"position": 8}


def _lora_model(seed: int = 0):
    from peft import LoraConfig, get_peft_model

    base, _ = build_tiny_model(hidden_size=32, num_layers=1, seed=0)
    cfg = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    model = get_peft_model(base, cfg, adapter_name="solver")
    model.add_adapter("aggregator", cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:  # lora_B starts at zero; make every adapter non-trivial
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return model


def _lora_state(model, fingerprint="cfg-lora") -> TrainState:
    opts = {}
    for adapter in ("solver", "aggregator"):
        params = [p for n, p in model.named_parameters() if f".{adapter}." in n]
        opts[adapter] = torch.optim.AdamW(params, lr=1e-3)
    return TrainState(step=5, policies={"shared": model}, optimizers=opts,
                      config_fingerprint=fingerprint)


def test_lora_saves_only_adapters_and_restores_them(tmp_path):
    model = _lora_model(seed=0)
    path = save_checkpoint(tmp_path, _lora_state(model))
    with safe_open(str(path / "policy-shared.safetensors"), framework="pt") as f:
        keys = list(f.keys())
    # 1 layer x (q, v) x (A, B) = 4 tensors per adapter, nothing of the base model
    assert len(keys) == 8 and all("lora_" in k for k in keys)
    assert {k.split("::")[0] for k in keys} == {"solver", "aggregator"}

    other = _lora_model(seed=1)
    load_checkpoint(tmp_path, _lora_state(other))
    _assert_same(_weights(other), _weights(model))
    for adapter in ("solver", "aggregator"):  # each adapter, not just the active one, acts alike
        model.set_adapter(adapter)
        other.set_adapter(adapter)
        assert torch.equal(model(input_ids=IDS).logits, other(input_ids=IDS).logits)


def test_lora_adapter_set_mismatch_is_named(tmp_path):
    from peft import LoraConfig, get_peft_model

    save_checkpoint(tmp_path, _lora_state(_lora_model()))
    base, _ = build_tiny_model(hidden_size=32, num_layers=1)
    cfg = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"])
    only_solver = get_peft_model(base, cfg, adapter_name="solver")
    only_solver.add_adapter("critic", cfg)
    dummy = lambda: torch.optim.SGD([torch.zeros(1, requires_grad=True)])
    state = TrainState(step=0, policies={"shared": only_solver},
                       optimizers={"solver": dummy(), "aggregator": dummy()},
                       config_fingerprint="cfg-lora")
    with pytest.raises(CheckpointMismatchError, match=r"not in the checkpoint: \['critic'\]"):
        load_checkpoint(tmp_path, state)


# --------------------------------------------------------------------------- rotation, pointer


def test_keep_last_rotation_pointer_and_debris(tmp_path):
    state = _make_state()
    root = tmp_path / "checkpoints"
    (root / ".tmp-step-9-4242").mkdir(parents=True)  # debris of a killed save
    (root / "step-7").mkdir()  # no marker: never a candidate
    for step in (1, 2, 3, 4):
        state.step = step
        save_checkpoint(tmp_path, state, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-3", "step-4"]
    assert (root / "latest").read_text().strip() == "step-4"
    assert latest_checkpoint(tmp_path) == root / "step-4"
    assert not (root / ".tmp-step-9-4242").exists()

    (root / "latest").unlink()  # without the pointer the highest complete step is the latest
    assert latest_checkpoint(tmp_path) == root / "step-4"

    state.step = 3  # a resumed run redoing step 3 supersedes the old steps 3 and 4
    save_checkpoint(tmp_path, state, keep_last=None)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-3"]
    assert latest_checkpoint(tmp_path) == root / "step-3"


def test_no_checkpoint_and_incomplete_checkpoint(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        load_checkpoint(tmp_path, _make_state())
    (tmp_path / "checkpoints" / "step-3").mkdir(parents=True)
    with pytest.raises(CorruptCheckpointError, match="incomplete checkpoint"):
        load_checkpoint(tmp_path / "checkpoints" / "step-3", _make_state())


# --------------------------------------------------------------------------- loud errors


@pytest.fixture
def saved(tmp_path):
    state = _make_state()
    _train_step(state)
    return save_checkpoint(tmp_path, state)


def test_truncated_file_is_named(saved):
    target = saved / "policy-actor.safetensors"
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptCheckpointError, match="policy-actor.safetensors.*truncated"):
        load_checkpoint(saved, _make_state())


def test_altered_and_missing_files_are_named(saved):
    target = saved / "optim-actor.pt"
    original = target.read_bytes()
    data = bytearray(original)
    data[-10] ^= 0xFF  # one flipped bit-pattern, same size
    target.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="optim-actor.pt"):
        load_checkpoint(saved, _make_state())
    target.write_bytes(original)
    (saved / "rng.pt").unlink()
    with pytest.raises(CorruptCheckpointError, match="missing its file rng.pt"):
        load_checkpoint(saved, _make_state())


def test_corrupt_checkpoint_leaves_objects_untouched(saved):
    (saved / "rng.pt").write_bytes(b"garbage")
    state = _make_state(seed=5)
    before = _weights(state.policies["actor"])
    with pytest.raises(CorruptCheckpointError):
        load_checkpoint(saved, state)
    _assert_same(_weights(state.policies["actor"]), before)


def test_fingerprint_mismatch_says_both_and_how_to_override(saved):
    fp = config_fingerprint({"lr": 1e-5, "group_size": 8})
    with pytest.raises(CheckpointMismatchError) as err:
        load_checkpoint(saved, _make_state(fingerprint=fp))
    assert "'cfg-a'" in str(err.value) and fp in str(err.value)
    assert "allow_config_change=True" in str(err.value)
    assert load_checkpoint(saved, _make_state(fingerprint=fp), allow_config_change=True).step == 1


def test_policy_and_optimizer_name_mismatch_is_named(saved):
    state = _make_state()
    state.policies["critic"] = torch.nn.Linear(2, 2)
    with pytest.raises(CheckpointMismatchError, match=r"policies .*checkpoint: \['critic'\]"):
        load_checkpoint(saved, state)
    state = _make_state()
    state.optimizers["critic"] = state.optimizers.pop("actor")
    state.schedulers = {}
    with pytest.raises(CheckpointMismatchError, match=r"optimizers .*\['critic'\].*\['actor'\]"):
        load_checkpoint(saved, state)


def test_shape_mismatch_is_named(saved):
    model, _ = build_tiny_model(hidden_size=64, num_layers=1)
    state = TrainState(step=0, policies={"actor": model},
                       optimizers={"actor": torch.optim.AdamW(model.parameters())},
                       schedulers={"actor": torch.optim.lr_scheduler.LambdaLR(
                           torch.optim.SGD([torch.zeros(1, requires_grad=True)]), lambda s: 1.0)},
                       config_fingerprint="cfg-a")
    match = r"policy-actor.safetensors does not fit.*saved \(259, 32\), model \(259, 64\)"
    with pytest.raises(CheckpointMismatchError, match=match):
        load_checkpoint(saved, state)


def test_bad_state_is_refused_before_writing(tmp_path):
    state = _make_state()
    state.data_state = {"sampler": object()}
    with pytest.raises(ValueError, match="JSON-able"):
        save_checkpoint(tmp_path, state)
    state = _make_state()
    state.policies = {"../x": state.policies["actor"]}
    with pytest.raises(ValueError, match="file name"):
        save_checkpoint(tmp_path, state)
    assert list_checkpoints(tmp_path) == []


# --------------------------------------------------------------------------- SIGKILL mid-save

KILL_SCRIPT = textwrap.dedent("""
    import sys, time, torch
    import srpo.record.checkpoint as ck

    run, where = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    state = ck.TrainState(step=1, policies={"actor": model}, optimizers={"actor": opt},
                          config_fingerprint="fp")
    ck.save_checkpoint(run, state)

    def stall(original):
        def wrapper(*args, **kwargs):
            if where == "mid-file":  # half of a real file on disk, then stop
                path = args[0]
                original(*args, **kwargs)
                path.write_bytes(path.read_bytes()[:50])
            print("STALLED", flush=True)
            time.sleep(120)
            return original(*args, **kwargs)
        return wrapper

    target = {"mid-file": "_write_policy", "before-rename": "_publish",
              "before-pointer": "_write_pointer"}[where]
    setattr(ck, target, stall(getattr(ck, target)))
    model.weight.data.add_(1.0)
    state.step = 2
    ck.save_checkpoint(run, state)
""")


@pytest.mark.parametrize("where", ["mid-file", "before-rename", "before-pointer"])
def test_sigkill_during_save_keeps_previous_checkpoint(tmp_path, where):
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, str(tmp_path), where],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        line = proc.stdout.readline()
        assert line.strip() == "STALLED", proc.stderr.read()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL

    root = tmp_path / "checkpoints"
    assert latest_checkpoint(tmp_path) == root / "step-1"
    model = torch.nn.Linear(4, 4)
    state = TrainState(step=0, policies={"actor": model},
                       optimizers={"actor": torch.optim.AdamW(model.parameters(), lr=0.1)},
                       config_fingerprint="fp")
    assert load_checkpoint(tmp_path, state).step == 1
    torch.manual_seed(0)
    assert torch.equal(model.weight, torch.nn.Linear(4, 4).weight)  # the step-1 weights

    state.step = 2  # the next save cleans the debris of the killed one
    save_checkpoint(tmp_path, state)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-1", "step-2"]


# --------------------------------------------------------------------------- export


def test_export_full_model_loads_with_same_logits(tmp_path):
    model, tok = build_tiny_model(hidden_size=32, num_layers=1, seed=3)
    out = export_policy(model, tok, tmp_path / "export")
    loaded = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert torch.equal(loaded(input_ids=IDS).logits, model(input_ids=IDS).logits)
    assert (out / "tokenizer.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dir left
    with pytest.raises(FileExistsError, match="overwrite=True"):
        export_policy(model, tok, out)


def test_export_lora_merges_the_chosen_adapter_on_a_copy(tmp_path):
    model = _lora_model()
    model.eval()
    with pytest.raises(ValueError, match="choose one with adapter="):
        export_policy(model, None, tmp_path / "x")
    out = export_policy(model, None, tmp_path / "aggregator", adapter="aggregator")
    loaded = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert type(loaded).__name__ == "LlamaForCausalLM"
    assert not any("lora" in k for k in loaded.state_dict())
    model.set_adapter("aggregator")
    expected = model(input_ids=IDS).logits
    assert torch.allclose(loaded(input_ids=IDS).logits, expected, atol=1e-5)
    assert sorted(model.peft_config) == ["aggregator", "solver"]  # the original keeps both


def test_config_fingerprint_is_order_independent():
    assert config_fingerprint({"a": 1, "b": [1, 2]}) == config_fingerprint({"b": [1, 2], "a": 1})
    assert config_fingerprint({"a": 1}) != config_fingerprint({"a": 2})
