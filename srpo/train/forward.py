"""Per-token log-probs of a batch whose members come from several policies.

A set may hold members of different policies (e.g. one debate round between agents with their
own adapters), so the loss needs all members' log-probs in one [M, T] tensor with the graph of
every policy behind it. Each policy runs its own rows (chunked log-probs,
srpo.objective.logprobs) and the pieces are put back in member order.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from srpo.batch import FlatBatch
from srpo.objective.logprobs import response_logprobs
from srpo.rollout.policies import PolicySet


class BatchLogprobs(NamedTuple):
    logprobs: Tensor  # [M, T] log pi(y_{m,t} | ...) of each member under its own policy
    entropy: Tensor | None  # [M, T] next-token entropy, when asked


def _trim_padding(input_ids: Tensor, attention: Tensor, prompt_length: int) -> tuple[Tensor, Tensor, int]:
    """Drops columns that are padding in every row (left of the prompts, right of the responses).

    A sub-batch (one policy's rows of one micro-batch) is usually much narrower than the whole
    step's [P + T] layout (short solver prompts next to long aggregator prompts): the forward cost
    is rows x width, so this is where packing similar lengths together pays off.
    [m, P+T] -> [m, P'+T'], P' = prompt_length - left.
    """
    used = attention.any(dim=0).nonzero().flatten()  # columns some row attends to
    left = min(int(used[0]), prompt_length - 1)  # keep at least one prompt column
    right = max(int(used[-1]) + 1, prompt_length + 1)  # and at least one response column
    return input_ids[:, left:right], attention[:, left:right], prompt_length - left


def _pad_right(values: Tensor, width: int) -> Tensor:
    """[m, T'] -> [m, T] with zeros (masked response positions)."""
    return torch.nn.functional.pad(values, (0, width - values.shape[1]))


def _trainable_flags(policies: PolicySet) -> list[tuple[torch.nn.Parameter, bool]]:
    return [(p, p.requires_grad) for model in policies.models() for p in model.parameters()]


def batch_logprobs(
    policies: PolicySet,
    batch: FlatBatch,
    *,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    with_entropy: bool = False,
    device: torch.device | str = "cpu",
) -> BatchLogprobs:
    """Log-probs (and entropy) of every member's response under the policy that produced it.

    Runs with whatever grad mode the caller set (no_grad for old/ref log-probs). For LoRA
    policies the adapter is switched per policy; peft's set_adapter turns requires_grad off on
    the other adapters, which would stop their gradients from accumulating, so the flags are
    restored after each switch.
    """
    flags = _trainable_flags(policies)
    order: list[Tensor] = []
    pieces: list[Tensor] = []
    ent_pieces: list[Tensor] = []
    names = list(dict.fromkeys(batch.member_policy))  # first-appearance order
    try:
        for name in names:
            policy = policies[name]
            rows = torch.tensor([i for i, p in enumerate(batch.member_policy) if p == name], dtype=torch.long)
            if policy.adapter is not None:
                policy.model.set_adapter(policy.adapter)
                for p, flag in flags:
                    p.requires_grad_(flag)
            input_ids, attention, prompt_length = _trim_padding(
                batch.input_ids[rows], batch.attention_mask[rows], batch.prompt_length
            )
            out = response_logprobs(
                policy.model,
                input_ids.to(device),
                attention.to(device),
                prompt_length,
                chunk_size=chunk_size,
                temperature=temperature,
                with_entropy=with_entropy,
            )
            width = batch.response_mask.shape[1]
            order.append(rows)
            pieces.append(_pad_right(out.logprobs.float(), width))
            if with_entropy:
                ent_pieces.append(_pad_right(out.entropy.float(), width))
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
    inverse = torch.empty(batch.num_members, dtype=torch.long)
    inverse[torch.cat(order)] = torch.arange(batch.num_members)
    inverse = inverse.to(pieces[0].device)
    logprobs = torch.cat(pieces)[inverse]
    entropy = torch.cat(ent_pieces)[inverse] if with_entropy else None
    return BatchLogprobs(logprobs, entropy)
