"""The setwise policy loss as a verl policy loss, and the worker hook that makes it exact.

verl calls a registered policy loss once per micro-batch with padded rows only:
    fn(old_log_prob=[B, T], log_prob=[B, T], advantages=[B, T], response_mask=[B, T],
       loss_agg_mode=str, config=ActorConfig, rollout_is_weights=None|[B, T]) -> (loss, metrics)
and backpropagates each micro-batch's loss separately; gradients are summed over micro-batches
and averaged over data-parallel ranks (FSDP; the Megatron engine rescales to the same
contract). So a micro-batch's loss must be its share of the step's mean, times dp_size.

Exact SRPO (loss modes "srpo", "srpo_pooled", "srpo_member_sum", "srpo_sum": the event
reduction): the micro-batch must hold whole sets, and the loss needs to know which rows form a
set and how many sets its optimizer mini-batch has (N_sets, over all ranks). The srpo_sync
trainer lays rows out so that sets are never split (batching.py) and sends two per-row fields
with the batch; `set_ppo_loss`, the worker's loss function that the trainer installs, reads them
from the micro-batch and makes them visible to the registered loss (`set_batch`) while it runs
verl's own ppo_loss (which adds entropy / KL terms with verl's aggregation and calls the
registered policy loss). The value is srpo.setwise_policy_loss(...) on the real rows with
loss_normalizer = N_sets / dp_size, so the summed, dp-averaged gradient is exactly that of
-(1/N_sets) sum_S J_S over the mini-batch. Without the set fields these modes raise.

Approximation ("srpo_seq", documented in docs/scale-out.md): each member is its own unit with
its set's advantage and a length-normalized sequence ratio (GSPO-style, set-level advantage,
member-level ratio and clip), averaged over the mini-batch's rows. It needs no set layout and
runs under any batching, including verl's own trainer; it is NOT the set loss.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from srpo.integrations.verl import fields
from srpo.integrations.verl.advantage import config_get
from srpo.objective.losses import setwise_policy_loss


@dataclass(frozen=True)
class SetBatch:
    """The set layout of the rows of one micro-batch.

    set_index: [B] long, the row's set in the step (-1: padding row, not in the loss);
    step_sets: [B] float, N_sets of the row's optimizer mini-batch over all dp ranks;
    dp_size: data-parallel ranks (gradients are averaged over them).
    """

    set_index: Tensor
    step_sets: Tensor
    dp_size: int = 1


_SET_BATCH: contextvars.ContextVar[SetBatch | None] = contextvars.ContextVar("srpo_set_batch", default=None)


@contextlib.contextmanager
def set_batch(info: SetBatch) -> Iterator[None]:
    """Makes `info` visible to the registered srpo losses called inside the block."""
    token = _SET_BATCH.set(info)
    try:
        yield
    finally:
        _SET_BATCH.reset(token)


def _clip_range(config: Any) -> tuple[float, float]:
    clip = config_get(config, "clip_ratio", 0.2)
    return float(config_get(config, "clip_ratio_low", clip)), float(config_get(config, "clip_ratio_high", clip))


def _row_values(advantages: Tensor, mask: Tensor) -> Tensor:
    """[B, T] advantages constant on each row's response tokens -> [B] (first response token)."""
    first = mask.to(torch.int64).argmax(dim=-1)  # [B]
    return advantages.gather(1, first.unsqueeze(-1)).squeeze(-1)


def _zero_loss(log_prob: Tensor) -> Tensor:
    """A zero that keeps the graph (every rank must run backward on every micro-batch)."""
    return (torch.where(torch.isfinite(log_prob), log_prob, torch.zeros_like(log_prob)) * 0.0).sum()


def _prefixed(metrics: dict[str, float]) -> dict[str, float]:
    return {f"srpo/{k}": v for k, v in metrics.items()}


def setwise_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    reduction: str,
    config: Any = None,
    rollout_is_weights: Tensor | None = None,
    info: SetBatch | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The exact SRPO loss of one micro-batch of whole sets (see module doc)."""
    info = info if info is not None else _SET_BATCH.get()
    if info is None:
        raise RuntimeError(
            "the srpo set loss needs each row's active set, which a verl policy loss does not "
            "receive: run the srpo_sync trainer (trainer.v1.trainer_mode=srpo_sync), which keeps "
            "sets whole and installs the worker loss hook; or choose the documented approximation "
            "actor.policy_loss.loss_mode=srpo_seq (docs/scale-out.md)"
        )
    if rollout_is_weights is not None:
        raise ValueError(
            "rollout-correction importance weights are per token and have no set-level meaning; "
            "turn algorithm.rollout_correction off for the srpo set loss"
        )
    b = log_prob.shape[0]
    set_index = info.set_index.to(log_prob.device).long()
    if set_index.shape != (b,) or info.step_sets.shape != (b,):
        raise ValueError(
            f"set layout has {tuple(set_index.shape)} / {tuple(info.step_sets.shape)} entries for "
            f"a micro-batch of {b} rows"
        )
    mask = response_mask.to(torch.bool)
    real = set_index >= 0
    if not bool(real.any()):
        return _zero_loss(log_prob), {}
    step_sets = info.step_sets.to(log_prob.device)[real]
    if not bool((step_sets == step_sets[0]).all()) or not float(step_sets[0]) > 0:
        raise ValueError(
            "rows of one micro-batch come from different optimizer mini-batches (or N_sets <= 0): "
            "the batch was not laid out by the set-preserving hook"
        )
    uniq, local = torch.unique(set_index[real], return_inverse=True)
    row_adv = _row_values(advantages[real], mask[real])
    set_adv = torch.zeros(uniq.numel(), dtype=row_adv.dtype, device=row_adv.device).index_copy(0, local, row_adv)
    if not torch.equal(set_adv[local], row_adv):
        raise ValueError("members of one set carry different advantages; a set has one advantage")
    clip_low, clip_high = _clip_range(config)
    loss, metrics = setwise_policy_loss(
        log_prob[real], old_log_prob[real], mask[real], local, set_adv,
        clip_low=clip_low, clip_high=clip_high, reduction=reduction,
        loss_normalizer=float(step_sets[0]) / info.dp_size,
    )
    return loss, _prefixed(metrics)


def member_sequence_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    config: Any = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The documented approximation "srpo_seq": every member its own unit (sequence ratio and
    clip, `mean` reduction over a set of one) with its set's advantage, member-mean over the
    mini-batch (verl's global_batch_size rows, times dp_size, as verl's seq-mean modes)."""
    if rollout_is_weights is not None:
        raise ValueError("srpo_seq does not apply rollout-correction weights; turn them off")
    mask = response_mask.to(torch.bool)
    real = mask.any(dim=-1)  # padding rows have no response token
    if not bool(real.any()):
        return _zero_loss(log_prob), {}
    info = config_get(config, "global_batch_info", {}) or {}
    dp_size = int(info.get("dp_size") or 1)
    global_rows = info.get("global_batch_size")
    normalizer = float(global_rows) / dp_size if global_rows else float(real.sum())
    n = int(real.sum())
    clip_low, clip_high = _clip_range(config)
    loss, metrics = setwise_policy_loss(
        log_prob[real], old_log_prob[real], mask[real], torch.arange(n, device=log_prob.device),
        _row_values(advantages[real], mask[real]), clip_low=clip_low, clip_high=clip_high,
        reduction="mean", loss_normalizer=normalizer,
    )
    return loss, _prefixed(metrics)


def make_set_loss(reduction: str) -> Callable[..., tuple[Tensor, dict[str, float]]]:
    """A function with verl's PolicyLossFn signature running the exact set loss."""

    def srpo_set_policy_loss(
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: Tensor | None = None,
        **unused: Any,
    ) -> tuple[Tensor, dict[str, float]]:
        return setwise_loss(
            old_log_prob, log_prob, advantages, response_mask, reduction=reduction,
            config=config, rollout_is_weights=rollout_is_weights,
        )

    srpo_set_policy_loss.__name__ = f"srpo_set_policy_loss_{reduction}"
    srpo_set_policy_loss.__qualname__ = srpo_set_policy_loss.__name__
    return srpo_set_policy_loss


def srpo_seq_policy_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: Tensor | None = None,
    **unused: Any,
) -> tuple[Tensor, dict[str, float]]:
    """verl PolicyLossFn of the approximation (see member_sequence_loss)."""
    return member_sequence_loss(
        old_log_prob, log_prob, advantages, response_mask, config=config,
        rollout_is_weights=rollout_is_weights,
    )


# loss_mode -> function with verl's signature (plugin.py registers them all)
POLICY_LOSS_FNS: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {
    "srpo": make_set_loss("mean"),
    "srpo_pooled": make_set_loss("pooled"),
    "srpo_member_sum": make_set_loss("member_sum"),
    "srpo_sum": make_set_loss("sum"),
    "srpo_seq": srpo_seq_policy_loss,
}


def set_batch_from(data: Any) -> SetBatch:
    """The set layout a worker micro-batch (a TensorDict from the srpo_sync trainer) carries."""
    keys = set(data.keys())
    missing = [k for k in (fields.SET_INDEX, fields.STEP_SETS) if k not in keys]
    if missing:
        raise RuntimeError(
            f"the micro-batch has no {missing} fields: the batch was not laid out by the srpo_sync "
            f"trainer's set-preserving hook, so the exact set loss cannot be computed"
        )
    dp = data["dp_size"] if "dp_size" in keys else 1
    return SetBatch(
        set_index=data[fields.SET_INDEX].reshape(-1).long(),
        step_sets=data[fields.STEP_SETS].reshape(-1).to(torch.float64),
        dp_size=int(dp),
    )


def set_ppo_loss(config: Any, model_output: Any, data: Any, dp_group: Any = None) -> tuple[Tensor, Any]:
    """The actor worker's loss function on the srpo_sync path (installed with set_loss_fn):
    verl's ppo_loss with the micro-batch's set layout visible to the registered srpo loss."""
    from verl.workers.utils.losses import ppo_loss

    with set_batch(set_batch_from(data)):
        return ppo_loss(config, model_output, data, dp_group)
