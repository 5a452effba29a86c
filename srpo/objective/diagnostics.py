"""Diagnostics as pure functions: tensors in, a flat dict of floats out.

Formulas are in docs/metrics.md; key names there match the keys produced here. Everything runs
under no_grad and never changes the loss. Per-set-size keys use `k{size}`, overall keys `all`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from srpo.objective.member_trust import members_past_bound


def _moments(x: Tensor) -> tuple[float, float]:
    """Mean and unbiased std (0 for fewer than 2 values)."""
    if x.numel() == 0:
        return 0.0, 0.0
    mean = float(x.mean())
    std = float(x.std()) if x.numel() > 1 else 0.0
    return mean, std


def _grouped_sums(group: Tensor, num_groups: int, *values: Tensor) -> list[Tensor]:
    """Per-group sums of each 1-D value tensor (float64), as one bincount each: O(N), no copies
    per group, so per-token diagnostics over [M, T] stay cheap next to the loss itself."""
    return [torch.bincount(group, weights=v.double(), minlength=num_groups) for v in values]


@torch.no_grad()
def ratio_clip_metrics(
    log_ratio: Tensor,
    ratio: Tensor,
    clipped_low: Tensor,
    clipped_high: Tensor,
    clamped: Tensor,
    unit_set_size: Tensor,
    valid: Tensor | None = None,
) -> dict[str, float]:
    """Ratio and clip statistics of the method's own ratio unit, per set size and overall.

    All tensors share one shape: [S] for the set unit, [M] for the sequence unit, [M, T] for the
    token unit (then `valid` is the response mask). unit_set_size: size of the active set the unit
    belongs to (broadcastable to that shape).

    ratio/{k}/log_mean, ratio/{k}/log_std: mean and unbiased std of the log-ratio (Lambda_S for sets)
    ratio/{k}/mean: mean of r = exp(clamped log-ratio)
    clip/{k}/frac, clip/{k}/frac_low, clip/{k}/frac_high: share of units clipped (both, by side)
    ratio/clamp_count: units whose |log-ratio| exceeded the clamp
    """
    sizes = torch.broadcast_to(unit_set_size, log_ratio.shape).reshape(-1)
    w = (torch.ones(sizes.shape, dtype=torch.float64, device=sizes.device) if valid is None
         else valid.reshape(-1).double())  # on the units' device (a CPU `w` fails on CUDA)
    # Set sizes are small integers: use the size itself as the bin (torch.unique's sort would
    # cost more than the loss on [M, T] token units).
    k = int(sizes.max()) + 1 if sizes.numel() else 1
    group = sizes.long()
    lr = torch.where(w > 0, log_ratio.detach().reshape(-1).double(), 0.0)
    r = torch.where(w > 0, ratio.reshape(-1).double(), 0.0)
    n, s1, s2, sr, lo, hi, cl = _grouped_sums(
        group, k, w, lr, lr * lr, r, clipped_low.reshape(-1) * w, clipped_high.reshape(-1) * w,
        clamped.reshape(-1) * w,
    )
    out: dict[str, float] = {"ratio/clamp_count": float(cl.sum())}
    present = (n > 0).nonzero().flatten().tolist()
    keyed = [("all", slice(None))] + [(f"k{size}", slice(size, size + 1)) for size in present]
    for key, sel in keyed:
        cnt, t1, t2 = float(n[sel].sum()), float(s1[sel].sum()), float(s2[sel].sum())
        if cnt == 0:
            continue
        mean = t1 / cnt
        var = max(t2 - cnt * mean * mean, 0.0) / (cnt - 1) if cnt > 1 else 0.0
        out[f"ratio/{key}/log_mean"] = mean
        out[f"ratio/{key}/log_std"] = var**0.5
        out[f"ratio/{key}/mean"] = float(sr[sel].sum()) / cnt
        n_lo, n_hi = float(lo[sel].sum()), float(hi[sel].sum())
        out[f"clip/{key}/frac_low"] = n_lo / cnt
        out[f"clip/{key}/frac_high"] = n_hi / cnt
        out[f"clip/{key}/frac"] = (n_lo + n_hi) / cnt
    return out


@torch.no_grad()
def member_spread_metrics(
    member_log_ratio: Tensor,
    set_index: Tensor,
    num_sets: int,
    set_clipped: Tensor,
    set_advantages: Tensor,
    clip_low: float,
    clip_high: float,
    stopped: Tensor | None = None,
) -> dict[str, float]:
    """How far members move inside their set, over the sets of >= 2 members (set ratio unit).

    member_log_ratio: [M] lbar_m = (1/L_m) sum_t delta_{m,t}; set_index: [M]; set_clipped: [S]
    bool, the set clip stopped the set; set_advantages: [S]; clip_low, clip_high: the set's clip
    range, here read as a range on each member's own ratio exp(lbar_m); stopped: [M] bool, the
    members the member trust region stopped (None: it is off).

    members/spread/inside, members/spread/clipped: mean over unclipped (clipped) sets of the RMS
        deviation of lbar_m from the set's mean sqrt(mean_{m in S} (lbar_m - mean_S lbar)^2)
    members/outside_share: among the members of unclipped sets, the share with exp(lbar_m)
        outside [1 - eps_low, 1 + eps_high]
    members/escaping_share: among them, the share outside on the side their set's advantage
        pushes: still pushed further by the set surrogate, where a per-member clip would stop them
    members/stopped_share: among them, the share the member trust region stopped
    Keys with no set to average over are left out (combine() then averages the parts that have them).
    """
    lbar = member_log_ratio.detach().double()
    size = torch.bincount(set_index, minlength=num_sets)  # [S]
    multi = size >= 2  # [S]
    if not bool(multi.any()):
        return {}
    set_mean = torch.zeros(num_sets, dtype=torch.float64, device=lbar.device).index_add(0, set_index, lbar)
    set_mean = set_mean / size.clamp(min=1)
    sq = torch.zeros_like(set_mean).index_add(0, set_index, (lbar - set_mean[set_index]) ** 2)
    spread = (sq / size.clamp(min=1)).sqrt()  # [S]
    out: dict[str, float] = {}
    for key, sel in (("inside", multi & ~set_clipped), ("clipped", multi & set_clipped)):
        if bool(sel.any()):
            out[f"members/spread/{key}"] = float(spread[sel].mean())
    inside_members = (multi & ~set_clipped)[set_index]  # [M]
    n = int(inside_members.sum())
    if n == 0:
        return out
    outside = (lbar > math.log1p(clip_high)) | (lbar < math.log1p(-clip_low))
    escaping = members_past_bound(lbar, set_advantages.detach()[set_index].double(), clip_low, clip_high)
    out["members/outside_share"] = float((outside & inside_members).sum()) / n
    out["members/escaping_share"] = float((escaping & inside_members).sum()) / n
    if stopped is not None:
        out["members/stopped_share"] = float((stopped & inside_members).sum()) / n
    return out


@torch.no_grad()
def set_metrics(set_sizes: Tensor, set_advantages: Tensor) -> dict[str, float]:
    """sets/{k}/count and adv/{k}/abs_mean (mean |A_S|) per set size and overall.

    set_sizes: [S] long; set_advantages: [S] (for member-level methods, the mean of the members'
    advantages of each set).
    """
    out: dict[str, float] = {}
    groups: list[tuple[str, Tensor]] = [("all", torch.ones_like(set_sizes, dtype=torch.bool))]
    groups += [(f"k{int(k)}", set_sizes == k) for k in torch.unique(set_sizes).tolist()]
    for key, sel in groups:
        out[f"sets/{key}/count"] = float(sel.sum())
        out[f"adv/{key}/abs_mean"] = float(set_advantages[sel].abs().mean()) if bool(sel.any()) else 0.0
    return out


@torch.no_grad()
def set_log_ratio_metrics(set_log_ratio: Tensor, set_sizes: Tensor, prefix: str = "set_ratio") -> dict[str, float]:
    """Method-independent view: mean/std of Lambda_S (event reduction `mean`) per set size.

    Lets the stability study compare token-level baselines and SRPO on the same statistic.
    """
    out: dict[str, float] = {}
    groups: list[tuple[str, Tensor]] = [("all", torch.ones_like(set_sizes, dtype=torch.bool))]
    groups += [(f"k{int(k)}", set_sizes == k) for k in torch.unique(set_sizes).tolist()]
    for key, sel in groups:
        mean, std = _moments(set_log_ratio.detach()[sel].float())
        out[f"{prefix}/{key}/log_mean"] = mean
        out[f"{prefix}/{key}/log_std"] = std
    return out


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(p || q) from samples of p, with log-ratio d = log q - log p:

        k3 = exp(d) - d - 1   (>= 0, unbiased for KL(p||q))

    For the KL penalty p = pi_theta, q = pi_ref: kl_k3(logprobs, ref_logprobs).
    For the old->new diagnostic p = pi_old, q = pi_theta: kl_k3(old_logprobs, logprobs).
    Shapes [M, T] -> [M, T]. The log-ratio is clamped to [-20, 20] so exp stays finite.
    """
    d = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return torch.exp(d) - d - 1.0


@torch.no_grad()
def masked_token_mean(values: Tensor, mask: Tensor) -> float:
    """Mean over response tokens: sum(values * mask) / sum(mask)."""
    mask = mask.bool()
    return float(torch.where(mask, values, torch.zeros_like(values)).sum() / mask.sum().clamp(min=1))


@torch.no_grad()
def approx_kl_old_new(old_logprobs: Tensor, logprobs: Tensor, mask: Tensor) -> float:
    """approx_kl: token-mean of k3 for KL(pi_old || pi_theta).

    In float64: k3 ~ d^2 / 2, so log-ratios of 1e-4 give 5e-9, below float32's resolution
    of exp(d) - d - 1 around 1 (the diagnostic would read exactly 0)."""
    return masked_token_mean(kl_k3(old_logprobs.detach().double(), logprobs.detach().double()), mask)


def reward_metrics(rewards: Sequence[float] | Tensor, prefix: str = "reward") -> dict[str, float]:
    """reward/mean and reward/std (unbiased) over episodes."""
    t = torch.as_tensor(rewards, dtype=torch.float64)
    mean, std = _moments(t)
    return {f"{prefix}/mean": mean, f"{prefix}/std": std}


def response_length_metrics(lengths: Sequence[int] | Tensor, agents: Sequence[str]) -> dict[str, float]:
    """length/{agent}/mean and /max: response tokens per member, per agent and overall."""
    t = torch.as_tensor(lengths, dtype=torch.float64)
    if t.numel() != len(agents):
        raise ValueError(f"{t.numel()} lengths but {len(agents)} agents")
    out: dict[str, float] = {}
    if t.numel() == 0:
        return out
    out["length/all/mean"] = float(t.mean())
    out["length/all/max"] = float(t.max())
    for agent in sorted(set(agents)):
        sel = torch.tensor([a == agent for a in agents])
        out[f"length/{agent}/mean"] = float(t[sel].mean())
        out[f"length/{agent}/max"] = float(t[sel].max())
    return out
