"""The sampling-time log-probs of what CTranslate2 samples, where its own per-step score is not
that log-prob (a temperature other than 0 or 1, top-k, top-p): computed from each step's logits
under the engine's processing."""

from __future__ import annotations

import torch

from srpo.rollout.agents import SamplingParams


def processed_logprobs(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """[N, V] log-softmax of the distribution CTranslate2 samples from for these logits: top-k,
    then temperature, then top-p (keep a token while the mass of the more likely ones is < p),
    the processing of HF's warpers in the same order. Greedy: raw logits (temperature 1)."""
    z = logits.float()
    if sampling.greedy:
        return z.log_softmax(-1)
    if sampling.top_k and sampling.top_k < z.shape[-1]:
        kth = z.topk(sampling.top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    z = z / sampling.temperature
    if sampling.top_p < 1.0:
        probs, order = z.softmax(-1).sort(dim=-1, descending=True)
        before = probs.cumsum(-1) - probs  # mass of the more likely tokens
        drop = before >= sampling.top_p
        drop[:, 0] = False
        z = z.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return z.log_softmax(-1)


def needs_logits(sampling: SamplingParams) -> bool:
    """The engine's own per-step score is the log-prob we need only at temperature 1 (or greedy)
    without top-k / top-p."""
    return not sampling.greedy and (
        sampling.temperature != 1.0 or sampling.top_k > 0 or sampling.top_p < 1.0
    )
