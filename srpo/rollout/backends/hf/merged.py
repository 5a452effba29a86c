"""LoRA merged into a plain copy of the model, for generation (`rollout.hf.merge_lora`).

A peft model computes every adapted linear as base(x) + B(A(x)) * scale: two extra small
matmuls per layer and per generated token. A merged copy (W + scale * B A, one matmul) does
less work per token at the cost of a copy of the base weights per policy and a re-merge after
every optimizer step. The copy follows the policy's weights (their storage and version
counters, as the CTranslate2 sync decides), so it always generates from the policy being
trained, in the same dtype as its base (bfloat16 when the run computes in bf16).

Built once (a deep copy of the peft model, merged and unloaded by peft); after that, when only
the adapters changed (every optimizer step), each merged weight is rewritten in place as
peft's merge computes it, W_base + get_delta_weight(adapter), with no new copy of the model:
measured on SmolLM2-135M in bf16 (LoRA r16, all linears, 2 threads), a re-merge takes
0.09-0.10 s where a rebuild took 0.60 s.
A change to any other weight (a resumed or edited base), or an adapter peft merges another
way (DoRA and the other variants, a LoRA bias), rebuilds the copy instead.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from srpo.rollout.policies import Policy, parameter_version


@dataclass
class _MergedCopy:
    model: Any  # the plain merged model
    adapters_key: tuple  # weights_version of the adapter parameters it was merged from
    base_key: tuple  # ... of every other parameter of the peft model
    # (peft LoRA layer of the live model, the merged copy's linear), when refreshable in place
    pairs: list[tuple[Any, torch.nn.Linear]] | None


def _split_versions(model: Any) -> tuple[tuple, tuple]:
    """(adapter parameters' versions, the other parameters' versions), split from what
    srpo.rollout.policies.weights_version reads."""
    adapters, base = [], []
    for name, p in model.named_parameters():
        (adapters if "lora_" in name else base).append(parameter_version(p))
    return tuple(adapters), tuple(base)


def _refreshable_pairs(policy: Policy, merged: Any) -> list[tuple[Any, torch.nn.Linear]] | None:
    """Each plain-LoRA linear of the policy with its merged counterpart, or None when some
    adapted layer is not one whose merge is W + get_delta_weight (then every refresh rebuilds)."""
    from peft.tuners.lora.layer import Linear as LoraLinear
    from peft.tuners.lora.layer import LoraLayer

    base_model = policy.model.get_base_model()
    pairs = []
    for name, layer in base_model.named_modules():
        if not isinstance(layer, LoraLayer) or policy.adapter not in layer.lora_A:
            continue
        # lora_variant (DoRA, ...) and lora_bias are recent peft attributes: absent means neither
        if (type(layer) is not LoraLinear or policy.adapter in getattr(layer, "lora_variant", {})
                or getattr(layer, "lora_bias", {}).get(policy.adapter, False)
                or getattr(layer, "use_dora", {}).get(policy.adapter, False)):
            return None
        target = merged.get_submodule(name)
        if type(target) is not torch.nn.Linear or target.weight.shape != layer.get_base_layer().weight.shape:
            return None
        pairs.append((layer, target))
    return pairs


class MergedLoraCopies:
    """One merged plain model per LoRA policy, kept equal to the policy's current weights."""

    def __init__(self) -> None:
        self._copies: dict[str, _MergedCopy] = {}
        self.merges = 0  # how many times a copy was (re)built or re-merged
        self.rebuilds = 0  # of those, full rebuilds (a deep copy of the model)

    def model_for(self, policy: Policy) -> Any:
        """The merged copy of `policy` (a LoRA policy: its adapter merged into its base)."""
        adapters_key, base_key = _split_versions(policy.model)
        cached = self._copies.get(policy.name)
        if cached is not None and (cached.adapters_key, cached.base_key) == (adapters_key, base_key):
            return cached.model
        if cached is not None and cached.base_key == base_key and cached.pairs is not None:
            self._remerge(cached.pairs, policy.adapter)
            cached.adapters_key = adapters_key
            self.merges += 1
            return cached.model
        self._copies.pop(policy.name, None)  # free the stale copy before building the next
        peft_copy = copy.deepcopy(policy.model)
        merged = peft_copy.merge_and_unload(adapter_names=[policy.adapter])  # a plain HF model
        merged.eval()
        for p in merged.parameters():
            p.requires_grad_(False)
        self._copies[policy.name] = _MergedCopy(merged, adapters_key, base_key,
                                                _refreshable_pairs(policy, merged))
        self.merges += 1
        self.rebuilds += 1
        return merged

    @staticmethod
    @torch.no_grad()
    def _remerge(pairs: list[tuple[Any, torch.nn.Linear]], adapter: str) -> None:
        """W = W_base + delta in every merged linear, the very operations of peft's merge
        (`base_layer.weight.data += get_delta_weight(adapter)`), so the result is bit-equal to a
        fresh merge."""
        for layer, target in pairs:
            weight = target.weight.data
            weight.copy_(layer.get_base_layer().weight.data)
            weight += layer.get_delta_weight(adapter)
