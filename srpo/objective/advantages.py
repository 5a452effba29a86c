"""Relative advantages: one value per unit (set, member or episode), relative to its group.

    A_u = (R_u - mean_{c(u)} R) / (std_{s(u)} + eps)      scale="std"
    A_u =  R_u - mean_{c(u)} R                           scale="none" (Dr. GRPO style)

c(u) is the centering group and s(u) the scaling group. For every method but Dr. MAS they are
the same group, and std is the unbiased sample std of R in it (torch.std's default). Dr. MAS
keeps the group mean but takes the scale from each agent's own statistics, pooled over the
step: std_{s} = sqrt( sum_{v in s} (R_v - mean_{c(v)} R)^2 / (|s| - 1) ), which equals the
ordinary unbiased std when s = c (see docs/algorithms.md).

A group whose units all have the same reward (this includes a group of one) is *degenerate*:
every unit in it gets A = 0 exactly, and the group is counted. A scale group whose deviations
are all zero likewise yields A = 0.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from srpo.objective.validation import check_finite_vector

SCALES: tuple[str, ...] = ("std", "none")


class AdvantageResult(NamedTuple):
    advantages: Tensor  # [U] one value per unit
    num_groups: int  # centering groups
    degenerate_groups: int  # centering groups with a single unit or zero variance


def group_index_from_keys(keys: Sequence[Hashable]) -> Tensor:
    """Maps hashable group keys to 0..G-1 in order of first appearance. Returns long [len(keys)]."""
    ids: dict[Hashable, int] = {}
    return torch.tensor([ids.setdefault(k, len(ids)) for k in keys], dtype=torch.long)


def _check_group_index(group_index: Tensor, n: int, name: str) -> int:
    if group_index.dim() != 1 or group_index.shape[0] != n:
        raise ValueError(f"{name} must be [{n}], got shape {tuple(group_index.shape)}")
    if group_index.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must be an integer tensor, got {group_index.dtype}")
    if n and bool((group_index < 0).any()):
        raise ValueError(f"{name} has negative entries")
    return int(group_index.max()) + 1 if n else 0


def _group_sum(values: Tensor, index: Tensor, num_groups: int) -> Tensor:
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add(0, index, values)


def relative_advantages(
    rewards: Tensor,
    center_index: Tensor,
    *,
    scale_index: Tensor | None = None,
    scale: str = "std",
    eps: float = 1e-6,
) -> AdvantageResult:
    """General form behind every method's advantage. rewards: [U]; center/scale_index: long [U]."""
    if scale not in SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; choose one of {list(SCALES)}")
    n = rewards.shape[0] if rewards.dim() == 1 else -1
    check_finite_vector(rewards, "rewards")
    num_groups = _check_group_index(center_index, n, "group_index")
    if n == 0:
        return AdvantageResult(rewards.clone(), 0, 0)
    r = rewards.to(torch.float64)  # float64 so that equal rewards give an exactly zero deviation
    counts = torch.bincount(center_index, minlength=num_groups).to(torch.float64)  # [G]
    mean = _group_sum(r, center_index, num_groups) / counts.clamp(min=1)  # [G]
    # Degenerate = all rewards in the group equal (exact test via max == min, not var < tol).
    gmax = torch.full((num_groups,), -torch.inf, dtype=torch.float64).scatter_reduce(
        0, center_index, r, reduce="amax"
    )
    gmin = torch.full((num_groups,), torch.inf, dtype=torch.float64).scatter_reduce(
        0, center_index, r, reduce="amin"
    )
    degenerate = (gmax == gmin) & (counts > 0)  # [G]
    dev = torch.where(degenerate[center_index], torch.zeros_like(r), r - mean[center_index])  # [U]
    if scale == "none":
        adv = dev
    else:
        if scale_index is None:
            scale_index, num_scale = center_index, num_groups
        else:
            num_scale = _check_group_index(scale_index, n, "scale_index")
        sq = _group_sum(dev * dev, scale_index, num_scale)  # [G_s]
        scale_counts = torch.bincount(scale_index, minlength=num_scale).to(torch.float64)
        std = torch.sqrt(sq / (scale_counts - 1).clamp(min=1))  # unbiased; 0 for singletons
        adv = torch.where(sq[scale_index] > 0, dev / (std[scale_index] + eps), torch.zeros_like(dev))
    used = counts > 0
    return AdvantageResult(
        advantages=adv.to(rewards.dtype),
        num_groups=int(used.sum()),
        degenerate_groups=int(degenerate.sum()),
    )


def set_relative_advantages(
    rewards: Tensor, group_index: Tensor, *, scale: str = "std", eps: float = 1e-6
) -> Tensor:
    """A_S = (R_S - mean_{g(S)} R) / (std_{g(S)} R + eps), or R_S - mean for scale="none".

    rewards: float [S], the return credited to each set; group_index: long [S], the set's group
    (by default its task; task+event to refine). std is the unbiased sample std. Groups of one set
    or with zero variance give A_S = 0. Returns float [S].
    """
    return relative_advantages(rewards, group_index, scale=scale, eps=eps).advantages
