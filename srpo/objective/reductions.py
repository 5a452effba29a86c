"""Event reductions: members' token log-ratios -> one set log-ratio Lambda_S.

With delta_{m,t} = log pi_theta(y_{m,t}|.) - log pi_old(y_{m,t}|.) and L_m the member's number of
response tokens:

    mean        Lambda_S = (1/|S|) sum_m (1/L_m) sum_t delta_{m,t}     (default)
    pooled      Lambda_S = sum_m sum_t delta_{m,t} / sum_m L_m
    member_sum  Lambda_S = sum_m (1/L_m) sum_t delta_{m,t}             (ablation: no 1/|S|)
    sum         Lambda_S = sum_m sum_t delta_{m,t}                     (ablation: joint likelihood ratio)

All four are linear in delta, so each is a weighted sum  Lambda_S = sum_{m in S} sum_t c_{m} delta_{m,t}
with a per-member coefficient c_m; `member_coefficients` returns c and the reduction is one
scatter-add. Writing it that way keeps the four definitions in one place and the backward cheap.
"""

from __future__ import annotations

import torch
from torch import Tensor

REDUCTIONS: tuple[str, ...] = ("mean", "pooled", "member_sum", "sum")


def check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown event reduction {reduction!r}; choose one of {list(REDUCTIONS)}")


def member_coefficients(
    lengths: Tensor, set_index: Tensor, num_sets: int, reduction: str
) -> Tensor:
    """c_m such that Lambda_S = sum_{m in S} c_m * sum_t delta_{m,t}.

    lengths: [M] response tokens per member (L_m, float); set_index: [M] in 0..S-1.
    Returns [M] float.
    """
    check_reduction(reduction)
    if reduction == "sum":
        return torch.ones_like(lengths)
    if reduction == "member_sum":
        return 1.0 / lengths
    if reduction == "mean":
        set_sizes = torch.bincount(set_index, minlength=num_sets).to(lengths.dtype)  # [S]
        return 1.0 / (lengths * set_sizes[set_index])
    # pooled: every member's tokens share the set's total token count as denominator.
    set_tokens = torch.zeros(num_sets, dtype=lengths.dtype, device=lengths.device)
    set_tokens.index_add_(0, set_index, lengths)  # [S]
    return 1.0 / set_tokens[set_index]


def set_log_ratio(
    delta: Tensor, mask: Tensor, set_index: Tensor, num_sets: int, reduction: str = "mean"
) -> Tensor:
    """Lambda_S for every set.

    delta: [M, T] token log-ratios (padding may hold anything finite or not: it is masked with
        torch.where so it never reaches the result or the gradient);
    mask: [M, T] bool, response tokens; set_index: [M] long.
    Returns [S].
    """
    member_sums = torch.where(mask, delta, torch.zeros_like(delta)).sum(dim=-1)  # [M]
    lengths = mask.sum(dim=-1).to(delta.dtype)  # [M]
    coeff = member_coefficients(lengths, set_index, num_sets, reduction)  # [M]
    out = torch.zeros(num_sets, dtype=delta.dtype, device=delta.device)
    return out.index_add(0, set_index, coeff * member_sums)  # [S]
