"""Compute precision: float32 everywhere, or bfloat16 matrix products where the hardware has
bfloat16 units (a CPU's AMX / AVX-512 BF16, a CUDA device with bf16).

`model.dtype` (srpo.config) is one of

    auto       bfloat16 where `has_bf16_units(device)`, float32 elsewhere (a laptop without
               those units keeps the float32 path)
    float32    everything in float32 (the config default: exact, reproducible values)
    bfloat16   bfloat16 compute, asked for explicitly

What bfloat16 changes (docs/training.md, "Precision"):
- the forward of the update, of the old/reference log-prob passes and of generation runs under
  `torch.autocast(device, torch.bfloat16)` (`compute_context`): matrix products in bf16;
- a LoRA run's frozen base weights are stored in bf16 (half the memory, no per-step cast);
- trainable parameters (LoRA adapters, or every weight of a full fine-tune), their gradients
  and AdamW's moments stay float32; log-probs, entropy, ratios, advantages and the loss are
  float32, computed from the logits (the chunked log-prob path upcasts each chunk).

Under bf16 autocast, peft's LoRA layers would cast each input to their float32 adapter's dtype
before autocast casts it straight back to bf16 for the matmul: two copies of every adapted
activation that change no value (bf16 -> float32 -> bf16 is exact). `PolicySet.compute` turns
that cast off for the duration (`adapter_inputs_uncast`); measured on SmolLM2-135M with LoRA r16,
72 rows, bit-identical log-probs and gradients, forward + backward 1.1-1.35x faster.

Detection asks torch: on CPU, oneDNN's own test of bf16 support
(`torch.ops.mkldnn._is_mkldnn_bf16_supported`, true with AVX-512 BF16 or AMX), never /proc.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch

DTYPE_SETTINGS = ("auto", "float32", "bfloat16")
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def has_bf16_units(device: str = "cpu") -> bool:
    """Whether `device` computes bfloat16 matrix products natively (module doc)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if kind == "cpu":
        try:
            return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):  # a torch build without oneDNN
            return False
    return False


def resolve_dtype(setting: str, device: str = "cpu") -> str:
    """"float32" or "bfloat16" for a `model.dtype` setting on `device` ("auto": by the hardware)."""
    if setting not in DTYPE_SETTINGS:
        raise ValueError(f"model.dtype must be one of {list(DTYPE_SETTINGS)}, got {setting!r}")
    if setting == "auto":
        return "bfloat16" if has_bf16_units(device) else "float32"
    return setting


@contextlib.contextmanager
def compute_context(dtype: str, device: str | torch.device = "cpu") -> Iterator[None]:
    """bfloat16: autocast on `device` (matrix products in bf16, reductions as torch decides);
    float32: nothing."""
    if dtype == "float32":
        yield
        return
    if dtype != "bfloat16":
        raise ValueError(f"compute dtype must be 'float32' or 'bfloat16', got {dtype!r}")
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
        yield


@contextlib.contextmanager
def adapter_inputs_uncast(models: Iterable[torch.nn.Module]) -> Iterator[None]:
    """For the duration, peft's adapter layers in `models` leave their input in the dtype it
    arrives in (peft's `cast_input_dtype_enabled`; what `peft.helpers.disable_input_dtype_casting`
    does, for several models and with the flags restored as they were).

    Only for use under bf16 autocast (module doc): there a float32 adapter's matmul runs in bf16
    whatever its input's dtype, so the cast is a copy that changes nothing. Outside autocast a
    bf16 input would meet the float32 adapter and torch raises a dtype error, never a silent
    change."""
    layers = [m for model in models for m in model.modules() if hasattr(m, "cast_input_dtype_enabled")]
    saved = [m.cast_input_dtype_enabled for m in layers]
    for m in layers:
        m.cast_input_dtype_enabled = False
    try:
        yield
    finally:
        for m, flag in zip(layers, saved):
            m.cast_input_dtype_enabled = flag
