"""CTranslate2 conversion: a live transformers model (or a peft model with one LoRA adapter
merged) -> a CTranslate2 model spec -> a loaded `Generator`, from the weights in memory.

    spec = model_spec(model, tokenizer, adapter="solver")   # no model folder is read
    generator = load_generator(spec, device="cpu", compute_type="float32", intra_threads=2)

LoRA policies are the base weights plus their adapter's delta (W + scaling * B @ A, merged in
new tensors; the torch model is never touched). The engine's vocabulary is the token ids
themselves (`token_name`), so ids never go through token strings. The spec is written to a
RAM-backed temporary directory (/dev/shm where it exists), loaded, and the directory removed.
`weights_key` is what tells the backend that a model's weights changed since a conversion.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import types
from collections.abc import Iterator
from typing import Any

import torch

from srpo.rollout.policies import weights_version

INSTALL_HINT = "pip install 'srpo[ct2]'  (ctranslate2==4.8.0)"


def import_ctranslate2() -> Any:
    """The ctranslate2 module, or an ImportError saying how to install it."""
    try:
        import ctranslate2
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"rollout.backend 'ctranslate2' needs the ctranslate2 package: {INSTALL_HINT}"
        ) from e
    return ctranslate2


class _Stub:
    """A module's parameters and children as plain attributes: what CTranslate2's loaders read.

    Their loaders delete attributes as they go (`delattr(layer, "self_attn")`); they do it here,
    never on the live model."""


def _lora_weight(module: Any, adapter: str, buffers: dict[str, torch.Tensor] | None,
                 name: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of a peft LoRA layer with `adapter` merged (W + scaling * B @ A), in new
    tensors (in `buffers[name]`, reused from the last conversion, when given)."""
    if adapter in getattr(module, "lora_variant", {}) or adapter in (
            getattr(module, "lora_magnitude_vector", None) or {}):
        raise NotImplementedError("rollout.backend 'ctranslate2' merges plain LoRA adapters only "
                                  "(not DoRA or other LoRA variants)")
    base = module.get_base_layer()
    weight = base.weight.detach()
    bias = getattr(base, "bias", None)
    bias = None if bias is None else bias.detach()
    if adapter in getattr(module, "merged_adapters", ()):
        return weight, bias  # peft merged it into the base weight already
    scaling = module.scaling[adapter]
    if (isinstance(base, torch.nn.Linear) and not getattr(module, "fan_in_fan_out", False)
            and weight.dtype == torch.float32 and adapter in module.lora_A):
        a, b = module.lora_A[adapter].weight.detach(), module.lora_B[adapter].weight.detach()
        out = None if buffers is None else buffers.get(name)
        if out is None or out.shape != weight.shape or out.device != weight.device:
            out = torch.empty_like(weight)
            if buffers is not None:
                buffers[name] = out
        merged = torch.addmm(weight, b, a, alpha=scaling, out=out)  # W + scaling * B @ A, one pass
    else:
        delta = module.get_delta_weight(adapter).detach()
        if delta.shape != weight.shape:
            raise ValueError(f"LoRA delta of shape {tuple(delta.shape)} for a weight of "
                             f"{tuple(weight.shape)}")
        merged = weight + delta.to(weight.dtype)
    if getattr(module, "lora_bias", {}).get(adapter):
        bias = bias + module.lora_B[adapter].bias.detach() * scaling
    return merged, bias


def _stub(module: torch.nn.Module, adapter: str | None,
          buffers: dict[str, torch.Tensor] | None = None, prefix: str = "") -> _Stub:
    s = _Stub()
    if adapter is not None and hasattr(module, "lora_A") and hasattr(module, "get_base_layer"):
        s.weight, s.bias = _lora_weight(module, adapter, buffers, prefix)
        return s
    for name, p in module._parameters.items():
        setattr(s, name, None if p is None else p.detach())
    for name, child in module._modules.items():
        if isinstance(child, torch.nn.ModuleList):
            setattr(s, name, [_stub(c, adapter, buffers, f"{prefix}{name}.{i}.")
                              for i, c in enumerate(child)])
        else:
            setattr(s, name, None if child is None
                    else _stub(child, adapter, buffers, f"{prefix}{name}."))
    return s


def _to_cpu(stub: Any, seen: set[int]) -> None:
    """Tensors to CPU (CTranslate2 serializes from host memory)."""
    if id(stub) in seen:
        return
    seen.add(id(stub))
    for name, value in list(vars(stub).items()):
        if isinstance(value, torch.Tensor):
            if value.device.type != "cpu":
                setattr(stub, name, value.cpu())
        elif isinstance(value, _Stub):
            _to_cpu(value, seen)
        elif isinstance(value, list):
            for v in value:
                if isinstance(v, _Stub):
                    _to_cpu(v, seen)


def token_name(i: int) -> str:
    """The engine's name of token id i: its vocabulary is the ids themselves, so ids never go
    through token strings that could collide or be missing."""
    return str(i)


class _IdVocabulary:
    """What CTranslate2's loaders read of a tokenizer: the vocabulary and special tokens."""

    def __init__(self, tokenizer: Any, size: int):
        self.size = size
        eos = tokenizer.eos_token_id
        bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos
        unk = next(i for i in (tokenizer.unk_token_id, tokenizer.pad_token_id, eos) if i is not None)
        self.eos_token, self.bos_token, self.unk_token = token_name(eos), token_name(bos), token_name(unk)
        self.pad_token = token_name(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos)

    def get_vocab(self) -> dict[str, int]:
        return {token_name(i): i for i in range(self.size)}


_PATCH_LOCK = threading.RLock()  # nested entries restore what they found


@contextlib.contextmanager
def _fast_conversion() -> Iterator[None]:
    """Three shortcuts in CTranslate2's converter code for a model already in memory, for the
    duration:
      - its loaders call gc.collect() after every layer, to free a loaded model as they go
        (SmolLM2's 30 layers: 2.6 s of collections, measured on a busy 2-core machine);
      - `optimize` aliases variables that are element-wise equal, comparing every pair of the
        same shape; here only variables that are the same tensor are aliased (tied embeddings),
        which is all that saves memory (equal but distinct tensors are rare and only cost space);
      - `save` copies each tensor into a bytes object before writing it; here the file is written
        from the tensor's memory."""
    from ctranslate2.converters import transformers as ct2_transformers
    from ctranslate2.specs import model_spec as ct2_spec

    var = ct2_spec.PyTorchVariable

    def same_tensor(self: Any, other: Any) -> bool:
        a, b = self.tensor, other.tensor
        return a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape
                          and a.stride() == b.stride() and a.dtype == b.dtype)

    def tensor_memory(self: Any) -> Any:
        if self.tensor.dtype in (torch.bfloat16,) or not self.tensor.is_contiguous():
            return original_to_bytes(self)
        return memoryview(self.tensor.numpy()).cast("B")

    with _PATCH_LOCK:
        real_gc, original_equal, original_to_bytes = ct2_transformers.gc, var._equal, var.to_bytes
        ct2_transformers.gc = types.SimpleNamespace(collect=lambda *a: 0)
        var._equal, var.to_bytes = same_tensor, tensor_memory
        try:
            yield
        finally:
            ct2_transformers.gc = real_gc
            var._equal, var.to_bytes = original_equal, original_to_bytes


def model_spec(model: Any, tokenizer: Any, adapter: str | None = None,
               buffers: dict[str, torch.Tensor] | None = None) -> Any:
    """The CTranslate2 model spec of a transformers causal LM (or a peft model with `adapter`
    merged), built from the weights in memory. Supported: every architecture CTranslate2's
    transformers converter supports (llama and qwen2 here). buffers: where merged LoRA weights
    are written, reused from one conversion to the next (the caller's dict; empty at first)."""
    import_ctranslate2()
    from ctranslate2.converters import transformers as ct2_transformers

    hf = model.get_base_model() if hasattr(model, "get_base_model") else model
    loader = ct2_transformers._MODEL_LOADERS.get(type(hf.config).__name__)
    if loader is None:
        raise ValueError(
            f"CTranslate2 cannot convert a {type(hf.config).__name__} model; it converts "
            f"{sorted(ct2_transformers._MODEL_LOADERS)}"
        )
    with torch.no_grad():
        stub = _stub(hf, adapter, buffers)
        stub.config = hf.config
        _to_cpu(stub, set())
    vocab = _IdVocabulary(tokenizer, hf.config.vocab_size)
    with _fast_conversion():
        spec = loader(stub, vocab)
        spec.validate()
        spec.optimize(quantization=None)  # aliases tied weights; quantization happens at load
    return spec


def _scratch_root() -> str:
    """A RAM-backed directory for the converted model when there is one (/dev/shm)."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return tempfile.gettempdir()


def load_generator(spec: Any, *, device: str, compute_type: str, intra_threads: int,
                   scratch: str | None = None) -> Any:
    """A CTranslate2 Generator of a model spec: saved to a RAM-backed directory, loaded, and the
    directory removed (the engine holds its own copy of the weights)."""
    ct2 = import_ctranslate2()
    directory = tempfile.mkdtemp(prefix="srpo-ct2-", dir=scratch or _scratch_root())
    try:
        with _fast_conversion():
            spec.save(directory)
        return ct2.Generator(directory, device=device, compute_type=compute_type,
                             intra_threads=intra_threads)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


weights_key = weights_version  # the copy is rebuilt when this changes (srpo.rollout.policies)
