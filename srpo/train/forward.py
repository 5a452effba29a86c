"""Per-token log-probs of a batch whose members come from several policies.

A set may hold members of different policies (e.g. one debate round between agents with their
own adapters), so the loss needs all members' log-probs in one [M, T] tensor with the graph of
every policy behind it. Each policy runs its own rows (chunked log-probs,
srpo.objective.logprobs) and the pieces are put back in member order.

Temperature rule: a member sampled at temperature tau was drawn from softmax(logits / tau), so
its log-probs (old, new and reference), its entropy and every KL are those of that tempered
distribution: the logits are divided by the member's own temperature (as verl and TRL do).
Rows are grouped by (policy, temperature), so agents of one batch may sample at different
temperatures. A greedy member (tau = 0) has no sampling distribution to take a ratio of and is
refused (the trainer refuses greedy, top-k and top-p sampling before any work;
docs/algorithms.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import torch
from torch import Tensor

from srpo.batch import FlatBatch
from srpo.objective.logprobs import response_logprobs
from srpo.rollout.agents import SamplingParams
from srpo.rollout.policies import PolicySet


def check_training_sampling(sampling: Mapping[str, SamplingParams]) -> None:
    """Refuses sampling settings whose outputs the trainer cannot take a ratio of, naming the agent.

    sampling: agent -> its sampling settings (the agents a workflow may ask for).
    - temperature 0 (greedy): the output is a point mass, not a sample of a distribution;
    - top_k > 0 or top_p < 1: tokens are drawn from a truncated, renormalized distribution whose
      support depends on the policy; the trainer's log-probs are of the full tempered softmax,
      so the ratio would be of another distribution than the one sampled (docs/algorithms.md).
    """
    for agent, s in sorted(sampling.items()):
        problems = []
        if s.greedy:
            problems.append("temperature 0 (greedy decoding)")
        if s.top_k > 0:
            problems.append(f"top_k {s.top_k}")
        if s.top_p < 1.0:
            problems.append(f"top_p {s.top_p}")
        if problems:
            raise ValueError(
                f"agent {agent!r} samples with {', '.join(problems)}: training needs the log-probs "
                f"of the distribution each output was sampled from, which the trainer computes as "
                f"softmax(logits / temperature) with temperature > 0 and no top-k / top-p "
                f"truncation. Set sampling (or agents.{agent}.sampling) to temperature > 0, "
                f"top_k 0, top_p 1.0 for training (evaluation decodes greedily on its own)"
            )


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
    with_entropy: bool = False,
    share_prompts: bool = False,
) -> BatchLogprobs:
    """Log-probs (and entropy) of every member's response under the distribution it was sampled
    from: the policy that produced it, at the member's temperature (batch.member_temperature).

    Runs on the batch's device, with whatever grad mode the caller set (no_grad for old/ref
    log-probs), in the policies' compute precision (PolicySet.compute: bf16 autocast, the
    log-probs float32 from the logits). For LoRA
    policies the adapter is switched per policy; peft's set_adapter turns requires_grad off on
    the other adapters, which would stop their gradients from accumulating, so the flags are
    restored after each switch. share_prompts: each distinct prompt of a policy's rows runs once
    (srpo.objective.logprobs.response_logprobs).
    """
    flags = _trainable_flags(policies)
    device = batch.device
    order: list[Tensor] = []
    pieces: list[Tensor] = []
    ent_pieces: list[Tensor] = []
    # (policy, temperature) pairs in first-appearance order; one forward each
    keys = list(dict.fromkeys(zip(batch.member_policy, batch.member_temperature)))
    for name, tau in keys:
        if not tau > 0:
            agents = sorted({a for a, p, t in zip(batch.member_agent, batch.member_policy, batch.member_temperature)
                             if p == name and t == tau})
            raise ValueError(
                f"members of agent(s) {agents} were decoded greedily (temperature 0): a greedy "
                f"output has no sampling distribution to take a policy ratio of; sample those "
                f"agents at a temperature > 0 to train on them"
            )
    try:
        for name, tau in keys:
            policy = policies[name]
            rows = torch.tensor(
                [i for i, key in enumerate(zip(batch.member_policy, batch.member_temperature)) if key == (name, tau)],
                dtype=torch.long, device=device,
            )
            if policy.adapter is not None:
                policy.model.set_adapter(policy.adapter)
                for p, flag in flags:
                    p.requires_grad_(flag)
            input_ids, attention, prompt_length = _trim_padding(
                batch.input_ids[rows], batch.attention_mask[rows], batch.prompt_length
            )
            with policies.compute():  # bf16 autocast when the policies compute in bf16
                out = response_logprobs(
                    policy.model,
                    input_ids,
                    attention,
                    prompt_length,
                    chunk_size=chunk_size,
                    temperature=tau,
                    with_entropy=with_entropy,
                    share_prompts=share_prompts,
                )
            width = batch.response_mask.shape[1]
            order.append(rows)
            pieces.append(_pad_right(out.logprobs.float(), width))
            if with_entropy:
                ent_pieces.append(_pad_right(out.entropy.float(), width))
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
    inverse = torch.empty(batch.num_members, dtype=torch.long, device=device)
    inverse[torch.cat(order)] = torch.arange(batch.num_members, device=device)
    logprobs = torch.cat(pieces)[inverse]
    entropy = torch.cat(ent_pieces)[inverse] if with_entropy else None
    return BatchLogprobs(logprobs, entropy)
