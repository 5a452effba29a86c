"""Policy losses for the three ratio units: set (SRPO), sequence (GSPO), token (GRPO family).

    loss = -sum_u w_u * J_u       J_u = min(r_u A_u, clip(r_u, 1-eps_low, 1+eps_high) A_u)

The ratio unit decides what r_u is (srpo.objective.reductions for sets, a member's
length-normalized log-ratio for sequences, each token's own ratio for tokens); the weights w_u
come from srpo.objective.aggregation and are fixed for the optimizer step. `RATIO_UNIT_LOSSES`
is the single dispatch point the methods table (srpo.objective.methods) uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from srpo.objective.aggregation import set_weights
from srpo.objective.diagnostics import approx_kl_old_new, ratio_clip_metrics
from srpo.objective.reductions import check_reduction, set_log_ratio
from srpo.objective.surrogate import DEFAULT_MAX_LOG_RATIO, SurrogateOut, clipped_surrogate
from srpo.objective.validation import (
    check_clip,
    check_finite_vector,
    check_logprob_pair,
    check_set_index,
)


def _set_objective(
    logprobs: Tensor,
    old_logprobs: Tensor,
    mask: Tensor,
    set_index: Tensor,
    num_sets: int,
    set_advantages: Tensor,
    reduction: str,
    clip_low: float,
    clip_high: float,
    max_log_ratio: float,
) -> tuple[Tensor, SurrogateOut]:
    """Lambda_S [S] and the setwise clipped objective J_S [S]."""
    delta = logprobs - old_logprobs.detach()  # [M, T]
    lam = set_log_ratio(delta, mask, set_index, num_sets, reduction)  # [S]
    return lam, clipped_surrogate(lam, set_advantages, clip_low, clip_high, max_log_ratio)


def setwise_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    mask: Tensor,
    set_index: Tensor,
    advantages: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    reduction: str = "mean",
    max_log_ratio: float = DEFAULT_MAX_LOG_RATIO,
    loss_normalizer: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The SRPO loss: -(1/N_sets) sum_S min(r_S A_S, clip(r_S, 1-clip_low, 1+clip_high) A_S).

    logprobs, old_logprobs: float [M, T] per-token log-probs of M members (padded);
    mask: [M, T] bool or 0/1, response tokens; set_index: long [M] in 0..S-1, every set non-empty;
    advantages: float [S]; clip_low/clip_high: eps_low/eps_high; reduction: the event reduction
    (mean | pooled | member_sum | sum) giving Lambda_S; r_S = exp(clamp(Lambda_S, +-max_log_ratio)).
    loss_normalizer: N_sets of the whole optimizer step when this call sees one micro-batch of it
    (default: S of this call), so that micro-batches keeping sets whole sum to the full-batch loss.

    Returns (loss, metrics): loss is a scalar differentiable w.r.t. logprobs; metrics are floats
    (see docs/metrics.md). Raises ValueError on malformed input; never returns NaN silently.
    """
    mask = check_logprob_pair(logprobs, old_logprobs, mask)
    num_sets = check_set_index(set_index, logprobs.shape[0])
    check_finite_vector(advantages, "advantages", num_sets)
    check_reduction(reduction)
    check_clip(clip_low, clip_high)
    normalizer = float(num_sets if loss_normalizer is None else loss_normalizer)
    if not normalizer > 0:
        raise ValueError(f"loss_normalizer must be > 0, got {loss_normalizer}")
    lam, out = _set_objective(
        logprobs, old_logprobs, mask, set_index, num_sets, advantages.to(logprobs.dtype),
        reduction, clip_low, clip_high, max_log_ratio,
    )
    loss = -out.objective.sum() / normalizer
    set_sizes = torch.bincount(set_index, minlength=num_sets)
    metrics = ratio_clip_metrics(lam, out.ratio, out.clipped_low, out.clipped_high, out.clamped, set_sizes)
    metrics["policy/loss"] = float(loss.detach())
    return loss, metrics


class UnitLossInputs(NamedTuple):
    """What every ratio-unit loss receives (one micro-batch, validated by the caller).

    Step-level quantities (advantages, weights) are computed once for the optimizer step and
    sliced with the micro-batch's rows, which keeps the micro-batch split exact.
    """

    logprobs: Tensor  # [M, T] log pi_theta, differentiable
    old_logprobs: Tensor  # [M, T] log pi_old (detached)
    mask: Tensor  # [M, T] bool response tokens
    set_index: Tensor  # [M] long, 0..S-1 within this micro-batch
    num_sets: int  # S
    member_advantages: Tensor  # [M] advantage of each member (set methods: equal within a set)
    token_weights: Tensor  # [M, T] step-level aggregation weights (srpo.objective.aggregation)


class UnitLossSettings(NamedTuple):
    clip_low: float
    clip_high: float
    reduction: str = "mean"  # set unit only
    max_log_ratio: float = DEFAULT_MAX_LOG_RATIO


def _per_set_advantages(member_adv: Tensor, set_index: Tensor, num_sets: int) -> Tensor:
    """[M] -> [S], requiring equal values inside each set (the set is one action)."""
    set_adv = torch.zeros(num_sets, dtype=member_adv.dtype, device=member_adv.device)
    set_adv = set_adv.index_copy(0, set_index, member_adv)
    if not torch.equal(set_adv[set_index], member_adv):
        raise ValueError(
            "the set ratio unit needs one advantage per set, but members of a set have "
            "different advantages (use a set-level advantage unit)"
        )
    return set_adv


def set_unit_loss(x: UnitLossInputs, cfg: UnitLossSettings) -> tuple[Tensor, dict[str, float]]:
    """SRPO: one ratio, one clip, one advantage per active set; J_S weighted by w_S."""
    set_adv = _per_set_advantages(x.member_advantages, x.set_index, x.num_sets)
    lam, out = _set_objective(
        x.logprobs, x.old_logprobs, x.mask, x.set_index, x.num_sets, set_adv.to(x.logprobs.dtype),
        cfg.reduction, cfg.clip_low, cfg.clip_high, cfg.max_log_ratio,
    )
    w = set_weights(x.token_weights, x.set_index, x.num_sets)  # [S]
    loss = -(w * out.objective).sum()
    set_sizes = torch.bincount(x.set_index, minlength=x.num_sets)
    return loss, ratio_clip_metrics(lam, out.ratio, out.clipped_low, out.clipped_high, out.clamped, set_sizes)


def sequence_unit_loss(x: UnitLossInputs, cfg: UnitLossSettings) -> tuple[Tensor, dict[str, float]]:
    """GSPO (independent): each member its own unit, length-normalized sequence ratio.

    Exactly the set machinery with singleton sets and the `mean` reduction; the diagnostics
    still report each member under the size of the active set it came from.
    """
    m = x.logprobs.shape[0]
    singleton = torch.arange(m, device=x.set_index.device)
    lam, out = _set_objective(
        x.logprobs, x.old_logprobs, x.mask, singleton, m, x.member_advantages.to(x.logprobs.dtype),
        "mean", cfg.clip_low, cfg.clip_high, cfg.max_log_ratio,
    )
    w = x.token_weights.sum(dim=-1)  # [M]
    loss = -(w * out.objective).sum()
    member_set_size = torch.bincount(x.set_index, minlength=x.num_sets)[x.set_index]  # [M]
    return loss, ratio_clip_metrics(lam, out.ratio, out.clipped_low, out.clipped_high, out.clamped, member_set_size)


def token_unit_loss(x: UnitLossInputs, cfg: UnitLossSettings) -> tuple[Tensor, dict[str, float]]:
    """GRPO family: every response token has its own ratio and clip; weights w_{m,t}."""
    delta = x.logprobs - x.old_logprobs.detach()  # [M, T]
    delta = torch.where(x.mask, delta, torch.zeros_like(delta))  # padding never reaches exp
    adv = x.member_advantages.to(x.logprobs.dtype).unsqueeze(-1)  # [M, 1]
    out = clipped_surrogate(delta, adv, cfg.clip_low, cfg.clip_high, cfg.max_log_ratio)
    loss = -torch.where(x.mask, x.token_weights * out.objective, torch.zeros_like(delta)).sum()
    member_set_size = torch.bincount(x.set_index, minlength=x.num_sets)[x.set_index]  # [M]
    return loss, ratio_clip_metrics(
        delta, out.ratio, out.clipped_low.expand_as(delta), out.clipped_high.expand_as(delta),
        out.clamped, member_set_size.unsqueeze(-1), valid=x.mask,
    )


UnitLoss = Callable[[UnitLossInputs, UnitLossSettings], tuple[Tensor, dict[str, float]]]

# The one dispatch point from a method's ratio unit to its loss.
RATIO_UNIT_LOSSES: dict[str, UnitLoss] = {
    "set": set_unit_loss,
    "sequence": sequence_unit_loss,
    "token": token_unit_loss,
}


def unit_policy_loss(
    ratio_unit: str, x: UnitLossInputs, cfg: UnitLossSettings
) -> tuple[Tensor, dict[str, float]]:
    """Validates a micro-batch and runs the loss of `ratio_unit`; adds policy/loss and approx_kl."""
    if ratio_unit not in RATIO_UNIT_LOSSES:
        raise ValueError(f"unknown ratio unit {ratio_unit!r}; choose one of {list(RATIO_UNIT_LOSSES)}")
    mask = check_logprob_pair(x.logprobs, x.old_logprobs, x.mask)
    num_sets = check_set_index(x.set_index, x.logprobs.shape[0], x.num_sets)
    check_finite_vector(x.member_advantages, "member_advantages", x.logprobs.shape[0])
    if x.token_weights.shape != x.logprobs.shape:
        raise ValueError(
            f"token_weights has shape {tuple(x.token_weights.shape)} but logprobs has {tuple(x.logprobs.shape)}"
        )
    check_reduction(cfg.reduction)
    check_clip(cfg.clip_low, cfg.clip_high)
    x = x._replace(mask=mask, num_sets=num_sets)
    loss, metrics = RATIO_UNIT_LOSSES[ratio_unit](x, cfg)
    metrics["policy/loss"] = float(loss.detach())
    metrics["approx_kl"] = approx_kl_old_new(x.old_logprobs, x.logprobs, mask)
    return loss, metrics
