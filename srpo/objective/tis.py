"""Truncated importance sampling (TIS): correcting for a sampler that is not the trained policy.

The trainer recomputes log pi_old with its own forward, so the PPO ratio pi_theta / pi_old is
exact; but the outputs were drawn by the sampler mu (a bf16 KV-cache decode, a CTranslate2
int8 copy), not by pi_old. The policy gradient of samples from mu is corrected by the
importance weight pi_old / mu, truncated at a cap C so that one output the sampler drew
unusually often cannot dominate the step (Ionides 2008; the "TIS" verl users know):

    w_u = min(exp(Delta_u), C)      Delta_u = the log-ratio log pi_old - log mu of ratio unit u
    loss = -sum_u w_u * W_u * J_u   (J_u the clipped surrogate, W_u its aggregation weight)

The unit is the method's own ratio unit, so the correction is of the same event as the ratio:

    token     Delta_{m,t} = log pi_old(y_mt) - log mu(y_mt)                   one weight a token
    sequence  Delta_m = (1/L_m) sum_t (log pi_old - log mu)                   one weight a member
    set       Delta_S = Lambda_S(log pi_old - log mu), the set's own reduction one weight a set

w is computed from recorded log-probs only and is a constant of the step (no gradient). The KL
and entropy terms are not reweighted. C >= 1; C = 0 in the config turns the correction off.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from srpo.objective.reductions import set_log_ratio


class TISWeights(NamedTuple):
    weights: Tensor  # [S] (set), [M] (sequence) or [M, T] (token): min(exp(Delta_u), cap), detached
    truncated: Tensor  # same shape, bool: exp(Delta_u) > cap
    valid: Tensor  # same shape, bool: the units that exist (all for set/sequence; response tokens)


def truncated_is_weights(
    ratio_unit: str,
    old_logprobs: Tensor,  # [M, T] log pi_old (the trainer's forward)
    sampling_logprobs: Tensor,  # [M, T] log mu (recorded by the sampler)
    mask: Tensor,  # [M, T] bool response tokens
    set_index: Tensor,  # [M] long in 0..S-1
    num_sets: int,
    *,
    cap: float,
    reduction: str = "mean",
) -> TISWeights:
    """The truncated importance weight of every ratio unit (module doc)."""
    if not cap >= 1:
        raise ValueError(f"the TIS cap must be >= 1, got {cap}")
    with torch.no_grad():
        delta = torch.where(mask, old_logprobs.double() - sampling_logprobs.double(),
                            torch.zeros((), dtype=torch.float64, device=mask.device))  # [M, T]
        if ratio_unit == "token":
            log_w, valid = delta, mask
        elif ratio_unit == "sequence":
            log_w = delta.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)  # [M]
            valid = torch.ones_like(log_w, dtype=torch.bool)
        elif ratio_unit == "set":
            log_w = set_log_ratio(delta, mask, set_index, num_sets, reduction)  # [S]
            valid = torch.ones_like(log_w, dtype=torch.bool)
        else:
            raise ValueError(f"unknown ratio unit {ratio_unit!r}")
        log_cap = torch.tensor(cap, dtype=torch.float64).log()
        truncated = (log_w > log_cap) & valid
        weights = torch.where(valid, log_w.clamp(max=float(log_cap)).exp(), torch.zeros_like(log_w))
    return TISWeights(weights.to(old_logprobs.dtype), truncated, valid)


def tis_metrics(w: TISWeights) -> dict[str, float]:
    """mismatch/is_weight: mean truncated weight over units; mismatch/is_truncated: share of units
    whose weight the cap truncated (docs/metrics.md)."""
    n = w.valid.sum().clamp(min=1)
    return {"mismatch/is_weight": float(w.weights.double().sum() / n),
            "mismatch/is_truncated": float(w.truncated.sum() / n)}
