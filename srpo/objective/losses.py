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

from srpo.objective.diagnostics import approx_kl_old_new, member_spread_metrics, ratio_clip_metrics
from srpo.objective.member_trust import MemberClip, member_log_ratios, member_trust_delta
from srpo.objective.reductions import check_reduction, set_log_ratio
from srpo.objective.surrogate import DEFAULT_MAX_LOG_RATIO, SurrogateOut, clipped_surrogate
from srpo.objective.validation import (
    check_clip,
    check_finite_vector,
    check_logprob_pair,
    check_set_index,
)


class SetLossOut(NamedTuple):
    loss: Tensor  # scalar -sum_S w_S J_S, differentiable w.r.t. logprobs
    set_log_ratio: Tensor  # [S] Lambda_S (differentiable)
    surrogate: SurrogateOut  # ratio, clip and clamp flags per set
    member_log_ratio: Tensor  # [M] lbar_m, each member's own sequence log-ratio (detached)
    stopped: Tensor | None  # [M] bool, members the member trust region stopped (None: off)


def set_loss_kernel(
    logprobs: Tensor,
    old_logprobs: Tensor,
    mask: Tensor,
    set_index: Tensor,
    set_advantages: Tensor,
    set_weights: Tensor,
    *,
    reduction: str,
    clip_low: float,
    clip_high: float,
    max_log_ratio: float = DEFAULT_MAX_LOG_RATIO,
    member_clip: MemberClip | None = None,
) -> SetLossOut:
    """The one kernel of the setwise loss: loss = -sum_S w_S min(r_S A_S, clip(r_S) A_S).

    logprobs, old_logprobs: [M, T]; mask: [M, T] bool; set_index: [M] long in 0..S-1;
    set_advantages: [S] A_S; set_weights: [S] w_S, fixed for the optimizer step (1/N_sets for
    SRPO's set-mean; a micro-batch passes its slice of the step's weights, which keeps the
    micro-batch split exact). No validation here: callers validate once (the public
    `setwise_policy_loss`, or `unit_policy_loss` for the trainer). Every set loss in srpo (the
    trainer's SRPO, GSPO as singleton sets, the verl plugin) goes through this function.
    member_clip: the member trust region (srpo.objective.member_trust): members whose own
    sequence ratio is past it, on the side their set's advantage pushes, get no gradient.
    """
    num_sets = set_advantages.shape[0]
    delta = logprobs - old_logprobs.detach()  # [M, T]
    lbar = member_log_ratios(delta.detach(), mask)  # [M]
    stopped = None
    if member_clip is not None:
        delta, stopped = member_trust_delta(delta, lbar, set_index, set_advantages, member_clip)
    lam = set_log_ratio(delta, mask, set_index, num_sets, reduction)  # [S]
    out = clipped_surrogate(lam, set_advantages.to(lam.dtype), clip_low, clip_high, max_log_ratio)
    loss = -(set_weights.to(lam.dtype) * out.objective).sum()
    return SetLossOut(loss, lam, out, lbar, stopped)


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
    weights = torch.full((num_sets,), 1.0 / normalizer, dtype=logprobs.dtype, device=logprobs.device)
    out = set_loss_kernel(
        logprobs, old_logprobs, mask, set_index, advantages, weights,
        reduction=reduction, clip_low=clip_low, clip_high=clip_high, max_log_ratio=max_log_ratio,
    )
    set_sizes = torch.bincount(set_index, minlength=num_sets)
    s = out.surrogate
    metrics = ratio_clip_metrics(out.set_log_ratio, s.ratio, s.clipped_low, s.clipped_high, s.clamped, set_sizes)
    metrics["policy/loss"] = float(out.loss.detach())
    return out.loss, metrics


class UnitLossInputs(NamedTuple):
    """What every ratio-unit loss receives (one micro-batch, validated by the caller).

    Step-level quantities (advantages, weights) are computed once (advantages per rollout
    batch, weights per optimizer step) and sliced with the micro-batch's sets, which keeps the
    micro-batch split exact. Their unit follows the ratio unit: per set for the set unit, per
    member for the sequence and token units.
    """

    logprobs: Tensor  # [M, T] log pi_theta, differentiable
    old_logprobs: Tensor  # [M, T] log pi_old (detached)
    mask: Tensor  # [M, T] bool response tokens
    set_index: Tensor  # [M] long, 0..S-1 within this micro-batch
    num_sets: int  # S
    advantages: Tensor  # set unit: [S] A_S; sequence / token unit: [M] A_m
    weights: Tensor  # set unit: [S] w_S; sequence / token unit: [M] w_m, weight of each token of m
    # truncated importance weights (detached), one per ratio unit: set [S], sequence [M],
    # token [M, T]; they multiply each unit's surrogate (srpo.objective.tis). None: all 1
    is_weights: Tensor | None = None


class UnitLossSettings(NamedTuple):
    clip_low: float
    clip_high: float
    reduction: str = "mean"  # set unit only
    max_log_ratio: float = DEFAULT_MAX_LOG_RATIO
    member_clip: MemberClip | None = None  # set unit only: the member trust region (None: off)


class SetClip(NamedTuple):
    """What the clip did to each active set of the micro-batch, from the loss's own surrogate
    (the episode log shows it per set; sum(clipped * units) / sum(units) is `clip/all/frac`)."""

    clipped: Tensor  # [S] share of the set's ratio units the clip stopped (the set unit: 0 or 1)
    units: Tensor  # [S] ratio units of the set: 1 (set unit), members (sequence), tokens (token)
    mean_log_ratio: Tensor | None  # [S] Lambda_S under `mean` (detached), when the loss computed it


class UnitLossOut(NamedTuple):
    loss: Tensor  # scalar
    metrics: dict[str, float]
    sets: SetClip


def _clipped_share_per_set(clipped_units: Tensor, units: Tensor, set_index: Tensor, num_sets: int) -> SetClip:
    """Per-member clipped units and units [M] -> per-set share and units [S] (no log-ratio)."""
    zeros = torch.zeros(num_sets, dtype=units.dtype, device=units.device)
    set_units = zeros.index_add(0, set_index, units)  # [S]
    share = zeros.index_add(0, set_index, clipped_units) / set_units.clamp(min=1)
    return SetClip(share, set_units, None)


def set_unit_loss(x: UnitLossInputs, cfg: UnitLossSettings) -> UnitLossOut:
    """SRPO: one ratio, one clip, one advantage per active set; J_S weighted by w_S (times the
    set's importance weight, when given)."""
    weights = x.weights if x.is_weights is None else x.weights * x.is_weights  # [S]
    out = set_loss_kernel(
        x.logprobs, x.old_logprobs, x.mask, x.set_index, x.advantages, weights,
        reduction=cfg.reduction, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
        max_log_ratio=cfg.max_log_ratio, member_clip=cfg.member_clip,
    )
    set_sizes = torch.bincount(x.set_index, minlength=x.num_sets)
    s = out.surrogate
    metrics = ratio_clip_metrics(out.set_log_ratio, s.ratio, s.clipped_low, s.clipped_high, s.clamped, set_sizes)
    set_clipped = s.clipped_low | s.clipped_high  # [S]
    metrics.update(member_spread_metrics(
        out.member_log_ratio, x.set_index, x.num_sets, set_clipped, x.advantages,
        cfg.clip_low, cfg.clip_high, stopped=out.stopped,
    ))
    lam = out.set_log_ratio.detach() if cfg.reduction == "mean" else None
    flags = set_clipped.to(x.logprobs.dtype)  # [S]
    return UnitLossOut(out.loss, metrics, SetClip(flags, torch.ones_like(flags), lam))


def sequence_unit_loss(x: UnitLossInputs, cfg: UnitLossSettings) -> UnitLossOut:
    """GSPO (independent): each member its own unit, length-normalized sequence ratio.

    The set kernel with singleton sets and the `mean` reduction, each member weighted by the
    sum of its tokens' weights; the diagnostics still report each member under the size of the
    active set it came from.
    """
    m = x.logprobs.shape[0]
    singleton = torch.arange(m, device=x.set_index.device)
    member_w = x.weights * x.mask.sum(dim=-1)  # [M] L_m w_m
    if x.is_weights is not None:
        member_w = member_w * x.is_weights  # [M] times the member's importance weight
    out = set_loss_kernel(
        x.logprobs, x.old_logprobs, x.mask, singleton, x.advantages, member_w,
        reduction="mean", clip_low=cfg.clip_low, clip_high=cfg.clip_high, max_log_ratio=cfg.max_log_ratio,
    )
    member_set_size = torch.bincount(x.set_index, minlength=x.num_sets)[x.set_index]  # [M]
    s = out.surrogate
    metrics = ratio_clip_metrics(out.set_log_ratio, s.ratio, s.clipped_low, s.clipped_high, s.clamped, member_set_size)
    per_member = (s.clipped_low | s.clipped_high).to(x.logprobs.dtype)  # [M]
    sets = _clipped_share_per_set(per_member, torch.ones_like(per_member), x.set_index, x.num_sets)
    return UnitLossOut(out.loss, metrics, sets)


def token_unit_loss(x: UnitLossInputs, cfg: UnitLossSettings) -> UnitLossOut:
    """GRPO family: every response token has its own ratio and clip; weight w_m per token."""
    delta = x.logprobs - x.old_logprobs.detach()  # [M, T]
    delta = torch.where(x.mask, delta, torch.zeros_like(delta))  # padding never reaches exp
    adv = x.advantages.to(x.logprobs.dtype).unsqueeze(-1)  # [M, 1]
    out = clipped_surrogate(delta, adv, cfg.clip_low, cfg.clip_high, cfg.max_log_ratio)
    weighted = x.weights.to(x.logprobs.dtype).unsqueeze(-1) * out.objective  # [M, T]
    if x.is_weights is not None:
        weighted = weighted * x.is_weights  # [M, T] times each token's importance weight
    loss = -torch.where(x.mask, weighted, torch.zeros_like(delta)).sum()
    member_set_size = torch.bincount(x.set_index, minlength=x.num_sets)[x.set_index]  # [M]
    metrics = ratio_clip_metrics(
        delta, out.ratio, out.clipped_low.expand_as(delta), out.clipped_high.expand_as(delta),
        out.clamped, member_set_size.unsqueeze(-1), valid=x.mask,
    )
    dtype = x.logprobs.dtype
    per_member = ((out.clipped_low | out.clipped_high) & x.mask).sum(dim=-1).to(dtype)  # [M] clipped tokens
    sets = _clipped_share_per_set(per_member, x.mask.sum(dim=-1).to(dtype), x.set_index, x.num_sets)
    return UnitLossOut(loss, metrics, sets)


UnitLoss = Callable[[UnitLossInputs, UnitLossSettings], UnitLossOut]

# The one dispatch point from a method's ratio unit to its loss, and the unit its advantages
# and weights come in (srpo.objective.methods fills UnitLossInputs accordingly).
RATIO_UNIT_LOSSES: dict[str, UnitLoss] = {
    "set": set_unit_loss,
    "sequence": sequence_unit_loss,
    "token": token_unit_loss,
}
RATIO_UNIT_LEVEL: dict[str, str] = {"set": "set", "sequence": "member", "token": "member"}


def unit_policy_loss(ratio_unit: str, x: UnitLossInputs, cfg: UnitLossSettings) -> UnitLossOut:
    """Validates a micro-batch and runs the loss of `ratio_unit`; adds policy/loss and approx_kl."""
    if ratio_unit not in RATIO_UNIT_LOSSES:
        raise ValueError(f"unknown ratio unit {ratio_unit!r}; choose one of {list(RATIO_UNIT_LOSSES)}")
    mask = check_logprob_pair(x.logprobs, x.old_logprobs, x.mask)
    num_sets = check_set_index(x.set_index, x.logprobs.shape[0], x.num_sets)
    per_set = RATIO_UNIT_LEVEL[ratio_unit] == "set"
    n_units, unit = (num_sets, "set") if per_set else (x.logprobs.shape[0], "member")
    check_finite_vector(x.advantages, f"advantages (one per {unit})", n_units)
    check_finite_vector(x.weights, f"weights (one per {unit})", n_units)
    if x.is_weights is not None:
        expected = tuple(x.logprobs.shape) if ratio_unit == "token" else (n_units,)
        if tuple(x.is_weights.shape) != expected or not torch.isfinite(x.is_weights).all():
            raise ValueError(f"is_weights must be finite with shape {expected} (one per {ratio_unit} "
                             f"unit), got shape {tuple(x.is_weights.shape)}")
    check_reduction(cfg.reduction)
    check_clip(cfg.clip_low, cfg.clip_high)
    x = x._replace(mask=mask, num_sets=num_sets)
    out = RATIO_UNIT_LOSSES[ratio_unit](x, cfg)
    out.metrics["policy/loss"] = float(out.loss.detach())
    out.metrics["approx_kl"] = approx_kl_old_new(x.old_logprobs, x.logprobs, mask)
    return out
