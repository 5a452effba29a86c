"""model.dtype: auto | float32 | bfloat16 (srpo.models.precision).

Each choice is forced here whatever this machine has (has_bf16_units is replaced), the bf16
update's gradients are compared with the float32 path's, and the tiny model and the testbed
train in bf16. Values compared exactly run in float32 (the config default).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from srpo.build import build_policies
from srpo.config import ConfigError, load_config
from srpo.config.schema import ModelConfig, PoliciesConfig
from srpo.models import precision
from srpo.models.precision import compute_context, resolve_dtype
from srpo.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "srpo" / "presets" / "smoke.yaml")
K2 = str(REPO / "srpo" / "presets" / "testbed" / "k2.yaml")


@pytest.mark.parametrize("has_units, expected", [(True, "bfloat16"), (False, "float32")])
def test_auto_follows_the_hardware(monkeypatch, has_units, expected):
    monkeypatch.setattr(precision, "has_bf16_units", lambda device="cpu": has_units)
    assert resolve_dtype("auto", "cpu") == expected
    assert resolve_dtype("float32", "cpu") == "float32"  # an explicit choice is kept either way
    assert resolve_dtype("bfloat16", "cpu") == "bfloat16"


def test_detection_asks_torch_not_proc():
    # the answer is oneDNN's; on a machine with AVX-512 BF16 / AMX it is True, elsewhere False
    assert precision.has_bf16_units("cpu") == bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert precision.has_bf16_units("meta") is False


def test_unknown_dtype_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"model.dtype must be one of \['auto', 'float32', 'bfloat16'\]"):
        load_config(SMOKE, ["model.dtype=float16"])
    with pytest.raises(ValueError, match="model.dtype must be one of"):
        resolve_dtype("half")


def test_compute_context_autocasts_only_in_bf16():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with compute_context("bfloat16", "cpu"):
        assert (a @ b).dtype == torch.bfloat16
    with compute_context("float32", "cpu"):
        assert (a @ b).dtype == torch.float32
    with pytest.raises(ValueError, match="compute dtype"), compute_context("float16"):
        pass


@pytest.mark.parametrize("has_units", [True, False])
def test_lora_policies_store_the_frozen_base_in_bf16_and_train_float32(monkeypatch, has_units):
    monkeypatch.setattr(precision, "has_bf16_units", lambda device="cpu": has_units)
    policies = build_policies(ModelConfig(dtype="auto"), PoliciesConfig(kind="lora", names=["solver", "judge"]))
    model = policies.models()[0]
    trainable = {p.dtype for p in model.parameters() if p.requires_grad}
    frozen = {p.dtype for n, p in model.named_parameters() if "lora_" not in n}
    assert trainable == {torch.float32}
    assert frozen == ({torch.bfloat16} if has_units else {torch.float32})
    assert policies.compute_dtype == ("bfloat16" if has_units else "float32")


def test_full_fine_tuning_keeps_float32_weights_in_bf16():
    policies = build_policies(ModelConfig(dtype="bfloat16"), PoliciesConfig(kind="shared"))
    assert {p.dtype for p in policies.models()[0].parameters()} == {torch.float32}
    assert policies.compute_dtype == "bfloat16"


def _lora_grads(dtype: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    from srpo.objective.logprobs import response_logprobs

    torch.manual_seed(0)
    policies = build_policies(ModelConfig(dtype=dtype, hidden_size=64, num_layers=2),
                              PoliciesConfig(kind="lora", names=["solver"]))
    model = policies.models()[0]
    for n, p in model.named_parameters():  # B = 0 at init gives A no gradient: make both live
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.02, generator=torch.Generator().manual_seed(1))
    ids = torch.randint(3, 200, (3, 24), generator=torch.Generator().manual_seed(2))
    attention = torch.ones_like(ids)
    with policies.compute():
        out = response_logprobs(model, ids, attention, 8, chunk_size=16, temperature=1.0)
    assert out.logprobs.dtype == torch.float32  # log-probs are float32 in either precision
    out.logprobs.sum().backward()
    return out.logprobs.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_bf16_update_gradients_match_float32_within_tolerance():
    """The bf16 path's log-probs and LoRA gradients against the float32 path's (same weights up
    to the base's bf16 rounding). bf16 keeps 8 bits of mantissa (~0.4% a product); measured
    when written: log-probs within 0.002, gradients 0.8% apart (relative L2). The bounds leave
    ~4x of that; a sign or scale error would be O(1)."""
    lp32, g32 = _lora_grads("float32")
    lp16, g16 = _lora_grads("bfloat16")
    assert (lp16 - lp32).abs().max() < 0.01
    assert g32.keys() == g16.keys() and len(g32) > 0
    num = torch.sqrt(sum(((g16[n] - g32[n]) ** 2).sum() for n in g32))
    den = torch.sqrt(sum((g32[n] ** 2).sum() for n in g32))
    assert float(num / den) < 0.03, float(num / den)
    cos = sum((g16[n] * g32[n]).sum() for n in g32) / (den * torch.sqrt(sum((g16[n] ** 2).sum() for n in g16)))
    assert float(cos) > 0.99


@pytest.mark.parametrize("layout", [
    [],  # shared model (full fine-tune: float32 weights, bf16 autocast), hf engine
    ["policies.kind=lora", "policies.names=[shared]", "rollout.hf.merge_lora=true"],
    ["policies.kind=lora", "policies.names=[shared]", "rollout.backend=ctranslate2"],  # bf16 base -> ct2 float32
], ids=["shared-hf", "lora-hf-merged", "lora-ct2"])
def test_the_tiny_model_trains_in_bf16(tmp_path, layout):
    cfg = load_config(SMOKE, [f"output_dir={tmp_path / 'run'}", "model.dtype=bfloat16", "train.steps=2",
                              "checkpoint.report=false", "train.threads=1", *layout])
    trainer = Trainer(cfg)
    assert trainer.policies.compute_dtype == "bfloat16"
    history = trainer.train().history
    assert len(history) == 2 and all(torch.isfinite(torch.tensor(h["loss"])) for h in history)
    informative = [h for h in history if "mismatch/kl" in h]
    assert informative  # the smoke's format reward makes sets informative
    # a bf16 (or CTranslate2 float32) sampler is not bit-equal to the bf16 training forward
    assert all(0 < h["mismatch/kl"] < 0.1 for h in informative), [h["mismatch/kl"] for h in informative]


def test_the_testbed_learns_in_bf16(tmp_path):
    cfg = load_config(K2, [f"output_dir={tmp_path / 'run'}", "model.dtype=bfloat16", "train.lr=2e-2",
                           "train.steps=30", "seed=0", "checkpoint.report=false",
                           "checkpoint.episodes_per_step=0"])
    rewards = [h["reward/mean"] for h in Trainer(cfg).train().history]
    assert sum(rewards[:3]) / 3 < 0.7, rewards
    assert sum(rewards[-5:]) / 5 >= 0.9, rewards


def test_lora_inputs_stay_bf16_under_autocast_with_the_same_values_and_gradients():
    """PolicySet.compute leaves peft's cast of each adapter input to float32 off (the cast is
    undone by autocast before the matmul): log-probs and LoRA gradients are bit-identical to
    peft's own path, and peft's flags are restored after the context."""
    from srpo.objective.logprobs import response_logprobs

    policies = build_policies(ModelConfig(dtype="bfloat16", hidden_size=64, num_layers=2),
                              PoliciesConfig(kind="lora", names=["solver"]))
    model = policies.models()[0]
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.02, generator=torch.Generator().manual_seed(1))
    layers = [m for m in model.modules() if hasattr(m, "cast_input_dtype_enabled")]
    assert layers and all(m.cast_input_dtype_enabled for m in layers)
    ids = torch.randint(3, 200, (3, 24), generator=torch.Generator().manual_seed(2))

    def run(context) -> tuple[torch.Tensor, list[torch.Tensor], list[bool]]:
        model.zero_grad()
        with context():
            flags = [m.cast_input_dtype_enabled for m in layers]
            out = response_logprobs(model, ids, torch.ones_like(ids), 8, chunk_size=16)
        out.logprobs.sum().backward()
        return out.logprobs.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad], flags

    def peft_default():  # autocast alone: peft casts every adapter input to float32
        return compute_context("bfloat16")

    lp_peft, g_peft, flags_peft = run(peft_default)
    lp_ours, g_ours, flags_ours = run(policies.compute)
    assert all(flags_peft) and not any(flags_ours)  # the cast was really off in our forward
    assert torch.equal(lp_peft, lp_ours)
    assert all(torch.equal(a, b) for a, b in zip(g_peft, g_ours)) and len(g_ours) > 0
    assert all(m.cast_input_dtype_enabled for m in layers)  # restored


def test_float32_policies_keep_peft_input_casts():
    policies = build_policies(ModelConfig(dtype="float32", hidden_size=64, num_layers=2),
                              PoliciesConfig(kind="lora", names=["solver"]))
    layers = [m for m in policies.models()[0].modules() if hasattr(m, "cast_input_dtype_enabled")]
    with policies.compute():
        assert layers and all(m.cast_input_dtype_enabled for m in layers)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_attn_implementation_is_applied_and_gives_the_same_logprobs(impl):
    """model.attn_implementation picks transformers' attention kernel; eager and sdpa compute the
    same attention, so float32 log-probs agree to rounding (left padding and shared prompts
    included)."""
    from srpo.objective.logprobs import response_logprobs

    def logprobs(setting: str) -> torch.Tensor:
        policies = build_policies(ModelConfig(attn_implementation=setting, hidden_size=64, num_layers=2),
                                  PoliciesConfig(kind="shared", names=["shared"]))
        model = policies.models()[0]
        if setting != "auto":
            assert model.config._attn_implementation == setting
        ids = torch.randint(3, 200, (4, 20), generator=torch.Generator().manual_seed(3))
        ids[2:, :10] = ids[0, :10]  # rows 2-3 repeat row 0's prompt
        mask = torch.ones_like(ids)
        mask[1, :4] = 0  # a left-padded prompt
        with torch.no_grad():
            return response_logprobs(model, ids, mask, 10, share_prompts=True).logprobs

    torch.testing.assert_close(logprobs(impl), logprobs("auto"), rtol=0, atol=1e-5)


def test_an_unknown_or_unavailable_attn_implementation_names_the_key():
    with pytest.raises(ConfigError, match="model.attn_implementation"):
        ModelConfig(attn_implementation="fast")
    if importlib.util.find_spec("flash_attn") is None:
        with pytest.raises(ConfigError, match="model.attn_implementation 'flash_attention_2'"):
            build_policies(ModelConfig(attn_implementation="flash_attention_2"),
                           PoliciesConfig(kind="shared", names=["shared"]))
