"""The member trust region of the set surrogate (SRPO-MTR; docs/algorithms.md).

The set clip stops every member of a set together, and only once the set's log-ratio Lambda_S
leaves its range. Inside the range each member m is pushed by w_S A_S r_S c_m, however far its
own ratio has already moved: one member can run while the set mean stays inside. The member
trust region also stops a member whose own sequence log-ratio has left a range in the direction
its set's advantage pushes it:

    lbar_m = (1/L_m) sum_t delta_{m,t}                     member m's sequence log-ratio
    stopped_m = (A_S > 0 and lbar_m > log(1 + eps^m_high))
             or (A_S < 0 and lbar_m < log(1 - eps^m_low))    (S the set of m)

A stopped member's token log-ratios enter Lambda_S detached: the value of Lambda_S, the set
ratio, the set clip and the advantage are unchanged, and only the stopped member's gradient is
zero (the min/clip rule of PPO, applied to one member's contribution to the set's ratio).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class MemberClip(NamedTuple):
    low: float  # eps^m_low: a member with A_S < 0 stops below log(1 - low)
    high: float  # eps^m_high: a member with A_S > 0 stops above log(1 + high)


def member_log_ratios(delta: Tensor, mask: Tensor) -> Tensor:
    """lbar_m, the length-normalized sequence log-ratio of every member.

    delta: [M, T] token log-ratios (padding may hold anything; it is masked); mask: [M, T] bool.
    Returns [M] (differentiable where delta is).
    """
    sums = torch.where(mask, delta, torch.zeros_like(delta)).sum(dim=-1)  # [M]
    return sums / mask.sum(dim=-1).clamp(min=1).to(delta.dtype)


@torch.no_grad()
def members_past_bound(member_lr: Tensor, member_adv: Tensor, low: float, high: float) -> Tensor:
    """[M] bool: members whose own ratio is past the range on the side their advantage pushes.

    member_lr: [M] lbar_m; member_adv: [M] the advantage of each member's set; low, high: the
    range (1 - low, 1 + high) on the ratio, compared in log space.
    """
    up = (member_adv > 0) & (member_lr > torch.log1p(torch.tensor(high, dtype=member_lr.dtype)))
    down = (member_adv < 0) & (member_lr < torch.log1p(torch.tensor(-low, dtype=member_lr.dtype)))
    return up | down


def member_trust_delta(
    delta: Tensor, lbar: Tensor, set_index: Tensor, set_advantages: Tensor, clip: MemberClip
) -> tuple[Tensor, Tensor]:
    """delta with the stopped members' rows detached, and the [M] bool stopped mask.

    delta: [M, T]; lbar: [M] member_log_ratios(delta) (detached); set_index: [M];
    set_advantages: [S]. The returned delta has the same values (so Lambda_S is unchanged); its
    gradient is zero on the stopped rows.
    """
    stopped = members_past_bound(lbar, set_advantages[set_index].to(lbar.dtype), clip.low, clip.high)
    return torch.where(stopped.unsqueeze(-1), delta.detach(), delta), stopped
