"""LoRA merged into a plain copy of the model, for generation (`rollout.hf.merge_lora`).

A peft model computes every adapted linear as base(x) + B(A(x)) * scale: two extra small
matmuls per layer and per generated token. A merged copy (W + scale * B A, one matmul) does
less work per token at the cost of a copy of the base weights per policy and a re-merge after
every optimizer step. The copy is rebuilt when the policy's weights change (their storage and
version counters, as the CTranslate2 sync decides), so it always generates from the policy being
trained, in the same dtype as its base (bfloat16 when the run computes in bf16).
"""

from __future__ import annotations

import copy
from typing import Any

from srpo.rollout.policies import Policy, weights_version


class MergedLoraCopies:
    """One merged plain model per LoRA policy, rebuilt when the policy's weights changed."""

    def __init__(self) -> None:
        self._copies: dict[str, tuple[tuple, Any]] = {}  # policy -> (weights version, model)
        self.merges = 0  # how many times a copy was (re)built

    def model_for(self, policy: Policy) -> Any:
        """The merged copy of `policy` (a LoRA policy: its adapter merged into its base)."""
        key = weights_version(policy.model)
        cached = self._copies.get(policy.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        self._copies.pop(policy.name, None)  # free the stale copy before building the next
        peft_copy = copy.deepcopy(policy.model)
        merged = peft_copy.merge_and_unload(adapter_names=[policy.adapter])  # a plain HF model
        merged.eval()
        for p in merged.parameters():
            p.requires_grad_(False)
        self._copies[policy.name] = (key, merged)
        self.merges += 1
        return merged
