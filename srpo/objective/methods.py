"""SRPO and every baseline as settings of the same parts.

A method is a `MethodSpec`: (ratio unit + reduction, clip, advantage unit + grouping + scale,
aggregation). The trainer never branches on a method's name: it asks `get_method(name)` for a
spec and calls the three functions below, which dispatch on the spec's fields through small
tables (RATIO_UNIT_LOSSES, the advantage unit table, the aggregation weights).

    prepare_step(spec, batch, old)       -> advantages, once per rollout batch: per set [S] for
                                            set- and episode-level units, per member [M] else
    with_step_weights(spec, batch, ...)  -> aggregation weights, once per optimizer step:
                                            per member [M] (each token's) and per set [S]
    method_policy_loss(spec, micro_batch, logprobs, ...) -> (loss, metrics)
    method_loss(spec, micro_batch, logprobs, ...) -> (loss, metrics, per set: Lambda_S and the
                                            clipped share, from the loss's own clip flags: what
                                            the episode browser shows)

The table (docs/algorithms.md gives the math and the departures):

    method    ratio/clip unit        clip (low, high)  advantage unit, grouping        aggregation
    srpo      set (event reduction)  per reduction     set, (task) [or (task, event)]  set_mean
                                     (mean: 1e-2, 1.3e-2)
    srpo_mtr  set + member trust     the set's, and    set, (task) [or (task, event)]  set_mean
              region                 the same per member
    grpo      token                  0.2, 0.2          member, (task, agent)           seq_mean_token_mean
    dapo      token                  0.2, 0.28         member, (task, agent)           token_mean
    dr_grpo   token                  0.2, 0.2          member, (task, agent), no std   token_sum_norm
    gspo      sequence               3e-4, 4e-4        member, (task, agent)           member_mean
    magrpo    token                  0.2, 0.2          episode (joint), (task)         agent_seq_mean_token_mean
    at_grpo   token                  0.2, 0.2          member, (task, agent, turn)     token_mean
    dr_mas    token                  0.2, 0.2          member, mean (task, agent),     token_mean
                                                       std per agent
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch
from torch import Tensor

from srpo.batch import FlatBatch
from srpo.objective.advantages import SCALES, group_index_from_keys, relative_advantages
from srpo.objective.aggregation import (
    StepTotals,
    check_aggregation,
    member_token_weights,
    set_weights,
)
from srpo.objective.diagnostics import (
    kl_k3,
    response_length_metrics,
    reward_metrics,
    set_log_ratio_metrics,
    set_metrics,
)
from srpo.objective.losses import (
    RATIO_UNIT_LEVEL,
    RATIO_UNIT_LOSSES,
    UnitLossInputs,
    UnitLossSettings,
    unit_policy_loss,
)
from srpo.objective.member_trust import MemberClip
from srpo.objective.reductions import check_reduction, set_log_ratio
from srpo.objective.tis import tis_metrics, truncated_is_weights
from srpo.objective.validation import check_clip

ADVANTAGE_UNITS: tuple[str, ...] = ("set", "member", "episode")
# Which group-key fields each advantage unit can be grouped by.
# "consumed" is False for the singleton of an output its transition did not read (docs/
# algorithms.md, "Consumed sets"): grouped by it, such singletons are centered among themselves
GROUP_KEYS: dict[str, tuple[str, ...]] = {
    "set": ("task", "event", "turn", "agents", "consumed"),
    "member": ("task", "event", "turn", "agent", "consumed"),
    "episode": ("task",),
}

# Clip defaults of the set ratio per event reduction (eps_low, eps_high), chosen from a
# measurement (benchmarks/measure_set_ratio_scale.py; docs/algorithms.md "Clip defaults"): the
# size of each reduction's Lambda_S one optimizer step after the old policy, so that about a
# quarter of sets fall outside the range (~10-15% clipped, once the advantage's sign is counted).
SET_CLIP_DEFAULTS: dict[str, tuple[float, float]] = {
    "mean": (1e-2, 1.3e-2),
    "pooled": (1e-2, 1.3e-2),
    "member_sum": (3e-2, 4e-2),
    "sum": (0.4, 0.65),
}


@dataclass(frozen=True)
class MethodSpec:
    """One policy-optimization method, as a choice of shared parts."""

    name: str
    description: str
    ratio_unit: str  # "set" | "sequence" | "token"  (the clip unit is the ratio unit)
    clip_low: float  # eps_low
    clip_high: float  # eps_high
    advantage_unit: str  # "set" | "member" | "episode": what one relative advantage belongs to
    group_keys: tuple[str, ...]  # fields whose values define a centering group
    aggregation: str  # see srpo.objective.aggregation
    reduction: str = "mean"  # event reduction (set ratio unit only)
    scale: str = "std"  # "std" | "none"
    scale_keys: tuple[str, ...] | None = None  # scaling groups when they differ from group_keys
    norm_constant: float | None = None  # C of token_sum_norm (None: the step's padded T)
    max_log_ratio: float = 20.0  # clamp of the log-ratio before exp
    # the member trust region of a set ratio (srpo.objective.member_trust): a member whose own
    # sequence ratio is past (1 - low, 1 + high) on its advantage's side gets no gradient; None: off
    member_clip_low: float | None = None
    member_clip_high: float | None = None

    def __post_init__(self) -> None:
        # a YAML config gives lists (method_settings: {group_keys: [task, event]})
        for name in ("group_keys", "scale_keys"):
            value = getattr(self, name)
            if isinstance(value, (list, str)):
                object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        if self.ratio_unit not in RATIO_UNIT_LOSSES:
            raise ValueError(f"{self.name}: unknown ratio unit {self.ratio_unit!r}")
        if self.advantage_unit not in ADVANTAGE_UNITS:
            raise ValueError(f"{self.name}: unknown advantage unit {self.advantage_unit!r}")
        for key in self.group_keys + (self.scale_keys or ()):
            if key not in GROUP_KEYS[self.advantage_unit]:
                raise ValueError(
                    f"{self.name}: advantage unit {self.advantage_unit!r} cannot be grouped by "
                    f"{key!r}; allowed: {list(GROUP_KEYS[self.advantage_unit])}"
                )
        if self.ratio_unit == "set" and self.advantage_unit == "member":
            raise ValueError(f"{self.name}: the set ratio unit needs set- or episode-level advantages")
        if self.scale not in SCALES:
            raise ValueError(f"{self.name}: unknown advantage scale {self.scale!r}")
        check_reduction(self.reduction)
        check_aggregation(self.aggregation)
        check_clip(self.clip_low, self.clip_high)
        if (self.member_clip_low is None) != (self.member_clip_high is None):
            raise ValueError(f"{self.name}: give both member_clip_low and member_clip_high, or neither")
        if self.member_clip is not None:
            if self.ratio_unit != "set":
                raise ValueError(f"{self.name}: the member trust region (member_clip_low/high) bounds the "
                                 f"members of a set ratio; ratio unit {self.ratio_unit!r} has no set ratio")
            try:
                check_clip(self.member_clip_low, self.member_clip_high, name="member_clip")
            except ValueError as err:
                raise ValueError(f"{self.name}: member trust region: {err}") from None

    @property
    def member_clip(self) -> MemberClip | None:
        if self.member_clip_low is None or self.member_clip_high is None:
            return None
        return MemberClip(float(self.member_clip_low), float(self.member_clip_high))

    def with_overrides(self, **overrides: Any) -> MethodSpec:
        """A copy with some fields changed (validated). Changing the reduction of a set method
        without giving clips picks that reduction's clip defaults."""
        unknown = set(overrides) - set(self.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown method setting(s) {sorted(unknown)}")
        if "reduction" in overrides and self.ratio_unit == "set":
            check_reduction(overrides["reduction"])
            low, high = SET_CLIP_DEFAULTS[overrides["reduction"]]
            overrides.setdefault("clip_low", low)
            overrides.setdefault("clip_high", high)
        return replace(self, **overrides)


def _srpo() -> MethodSpec:
    low, high = SET_CLIP_DEFAULTS["mean"]
    return MethodSpec(
        name="srpo",
        description="Setwise Relative Policy Optimization: one ratio, clip and advantage per active set",
        ratio_unit="set", reduction="mean", clip_low=low, clip_high=high,
        advantage_unit="set", group_keys=("task",), aggregation="set_mean",
    )


def _srpo_mtr() -> MethodSpec:
    """SRPO with the member trust region; the member range is the set's own (docs/algorithms.md)."""
    low, high = SET_CLIP_DEFAULTS["mean"]
    return replace(
        _srpo(), name="srpo_mtr",
        description="SRPO with a member trust region: the set's ratio, clip and advantage, and a member "
                    "stops when its own ratio leaves the range on its advantage's side",
        member_clip_low=low, member_clip_high=high,
    )


METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        _srpo(),
        _srpo_mtr(),
        MethodSpec(
            name="grpo", description="GRPO applied to each member independently (token ratio and clip)",
            ratio_unit="token", clip_low=0.2, clip_high=0.2,
            advantage_unit="member", group_keys=("task", "agent"), aggregation="seq_mean_token_mean",
        ),
        MethodSpec(
            name="dapo", description="DAPO: asymmetric token clip (0.2/0.28), token-mean over the batch",
            ratio_unit="token", clip_low=0.2, clip_high=0.28,
            advantage_unit="member", group_keys=("task", "agent"), aggregation="token_mean",
        ),
        MethodSpec(
            name="dr_grpo", description="Dr. GRPO: no std scaling, token-sum over a constant",
            ratio_unit="token", clip_low=0.2, clip_high=0.2, scale="none",
            advantage_unit="member", group_keys=("task", "agent"), aggregation="token_sum_norm",
        ),
        MethodSpec(
            name="gspo", description="GSPO applied to each member independently (sequence ratio and clip)",
            ratio_unit="sequence", clip_low=3e-4, clip_high=4e-4,
            advantage_unit="member", group_keys=("task", "agent"), aggregation="member_mean",
        ),
        MethodSpec(
            name="magrpo",
            description="MAGRPO: joint reward, group-relative over joint rollouts, same value to every agent",
            ratio_unit="token", clip_low=0.2, clip_high=0.2,
            advantage_unit="episode", group_keys=("task",), aggregation="agent_seq_mean_token_mean",
        ),
        MethodSpec(
            name="at_grpo", description="AT-GRPO: groups by (task, agent, turn), token-mean",
            ratio_unit="token", clip_low=0.2, clip_high=0.2,
            advantage_unit="member", group_keys=("task", "agent", "turn"), aggregation="token_mean",
        ),
        MethodSpec(
            name="dr_mas", description="Dr. MAS: agent-wise advantage scale (group mean, per-agent std)",
            ratio_unit="token", clip_low=0.2, clip_high=0.2,
            advantage_unit="member", group_keys=("task", "agent"), scale_keys=("agent",),
            aggregation="token_mean",
        ),
    )
}


def get_method(name: str, **overrides: Any) -> MethodSpec:
    """The named preset, optionally with fields overridden (e.g. reduction="pooled")."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose one of {sorted(METHODS)}")
    spec = METHODS[name]
    return spec.with_overrides(**overrides) if overrides else spec


# ---------------------------------------------------------------- advantages


def _unit_rewards_and_keys(spec: MethodSpec, batch: FlatBatch, keys: tuple[str, ...]) -> tuple[Tensor, list]:
    """Values R_u and group keys of each advantage unit. Returns ([U], [U] key tuples)."""
    if spec.advantage_unit == "episode":
        fields = {"task": batch.episode_task}
        return batch.episode_reward, list(zip(*(fields[k] for k in keys)))
    consumed = batch.set_consumed or (True,) * batch.num_sets
    if spec.advantage_unit == "set":
        set_agents = [[] for _ in range(batch.num_sets)]
        for m, s in enumerate(batch.set_index.tolist()):
            set_agents[s].append(batch.member_agent[m])
        fields = {
            "task": batch.set_task,
            "event": batch.set_event,
            "turn": batch.set_turn.tolist(),
            "agents": [tuple(sorted(a)) for a in set_agents],
            "consumed": consumed,
        }
        return batch.set_reward, list(zip(*(fields[k] for k in keys)))
    sidx = batch.set_index.tolist()
    fields = {
        "task": [batch.set_task[s] for s in sidx],
        "event": [batch.set_event[s] for s in sidx],
        "turn": batch.set_turn[batch.set_index].tolist(),
        "agent": batch.member_agent,
        "consumed": [consumed[s] for s in sidx],
    }
    return batch.set_reward[batch.set_index], list(zip(*(fields[k] for k in keys)))


class StepAdvantages(NamedTuple):
    """Relative advantages of a rollout batch, kept at the level they belong to."""

    set: Tensor | None  # [S] A_S for set- and episode-level units (an episode's value per set)
    member: Tensor | None  # [M] A_m for member-level units
    unit: Tensor  # [U] one per advantage unit
    num_groups: int
    degenerate_groups: int


def step_advantages(spec: MethodSpec, batch: FlatBatch, eps: float = 1e-6) -> StepAdvantages:
    """Relative advantages of the whole rollout batch (they do not change between its epochs)."""
    rewards, center_keys = _unit_rewards_and_keys(spec, batch, spec.group_keys)
    scale_index = None
    if spec.scale_keys is not None:
        _, scale_keys = _unit_rewards_and_keys(spec, batch, spec.scale_keys)
        scale_index = group_index_from_keys(scale_keys)
    res = relative_advantages(  # on the CPU: [U] values, and the group indices are CPU tensors
        rewards.cpu(), group_index_from_keys(center_keys), scale_index=scale_index, scale=spec.scale, eps=eps
    )
    adv = res.advantages.to(batch.device)
    if spec.advantage_unit == "episode":
        per_set, per_member = adv[batch.set_episode], None
    elif spec.advantage_unit == "set":
        per_set, per_member = adv, None
    else:
        per_set, per_member = None, adv
    return StepAdvantages(per_set, per_member, adv, res.num_groups, res.degenerate_groups)


class StepWeights(NamedTuple):
    member: Tensor  # [M] w_m, the weight of each response token of member m
    set: Tensor  # [S] w_S = sum_{m in S} L_m w_m


def step_weights(spec: MethodSpec, batch: FlatBatch, *, totals: Mapping[str, Any] | None = None) -> StepWeights:
    """Aggregation weights of one optimizer step (see srpo.objective.aggregation).

    totals: when the step's rows are spread over several processes, the step's counts over all
    of them, as `step_counts` returns them summed (srpo.train.distributed); None: this batch is
    the whole step.
    """
    agents = list(dict.fromkeys(batch.member_agent))
    agent_index = group_index_from_keys(batch.member_agent).to(batch.device)
    width = totals["response_width"] if totals else batch.response_mask.shape[1]
    constant = spec.norm_constant if spec.norm_constant is not None else float(width)
    step_totals = None
    if totals:
        step_totals = StepTotals(
            num_sets=int(totals["sets"]),
            num_members=int(totals["members"]),
            num_tokens=float(totals["tokens"]),
            agent_members=torch.tensor([float(totals["agents"][a]) for a in agents]),
        )
    lengths = batch.response_lengths  # [M]
    member_w = member_token_weights(
        spec.aggregation, lengths, batch.set_index, batch.num_sets,
        agent_index=agent_index, norm_constant=constant, totals=step_totals,
    )
    return StepWeights(member_w, set_weights(member_w, lengths, batch.set_index, batch.num_sets))


def with_step_weights(spec: MethodSpec, batch: FlatBatch, *, totals: Mapping[str, Any] | None = None) -> FlatBatch:
    """`batch` (one optimizer step) with its aggregation weights filled in."""
    w = step_weights(spec, batch, totals=totals)
    return replace(batch, member_weights=w.member, set_weights=w.set)


def step_counts(batch: FlatBatch) -> dict[str, Any]:
    """The counts aggregation weights depend on, for summing over processes."""
    return {
        "sets": batch.num_sets,
        "members": batch.num_members,
        "tokens": float(batch.response_mask.sum()),
        "agents": dict(Counter(batch.member_agent)),
        "response_width": batch.response_mask.shape[1],  # max over processes, not a sum
    }


def informative_sets(batch: FlatBatch) -> Tensor:
    """[S] bool: sets whose own advantage (set-level units), or some member's (member-level
    units), is non-zero.

    Every objective here is a weighted sum of min(r A, clip(r) A): a unit with A = 0 contributes
    exactly 0 to the loss and to every gradient, whatever r is. So with no KL and no entropy term
    the other sets can be left out of the forward and backward passes without changing the loss
    or the gradient, as long as the weights (N_sets, members, tokens) are the full step's.
    """
    if batch.set_advantages is not None:
        return batch.set_advantages != 0
    if batch.member_advantages is None:
        raise ValueError("informative_sets needs a batch filled by prepare_step")
    nonzero = (batch.member_advantages != 0).to(torch.float32)
    per_set = torch.zeros(batch.num_sets, device=batch.device).index_add(0, batch.set_index, nonzero)
    return per_set > 0


def prepare_step(
    spec: MethodSpec, batch: FlatBatch, old_logprobs: Tensor | None
) -> tuple[FlatBatch, dict[str, float]]:
    """Fills the rollout-batch fields of the batch (old log-probs, advantages).

    Advantages stay at their own level: per set ([S], set- and episode-level units) or per
    member ([M]). Aggregation weights depend on the optimizer step, so they are filled per
    step by `with_step_weights`. old_logprobs may be None for a strictly on-policy update (one
    epoch, one minibatch): then pi_old is the current policy and the caller fills each
    micro-batch's old log-probs with its own detached forward (see Trainer.update), saving one
    forward pass per step. Returns the filled batch and the advantage metrics of the step.
    """
    adv = step_advantages(spec, batch)
    filled = replace(
        batch,
        old_logprobs=None if old_logprobs is None else old_logprobs.detach(),
        set_advantages=adv.set,
        member_advantages=adv.member,
    )
    if adv.set is not None:
        set_adv = adv.set
    else:  # a member-level method: the mean of its members' advantages per set, for the diagnostics
        set_adv = torch.zeros(batch.num_sets, device=batch.device).index_add(0, batch.set_index, adv.member)
        set_adv = set_adv / batch.set_sizes
    metrics = set_metrics(batch.set_sizes, set_adv)
    metrics["adv/num_groups"] = float(adv.num_groups)
    metrics["adv/degenerate_groups"] = float(adv.degenerate_groups)
    metrics["adv/degenerate_share"] = adv.degenerate_groups / max(adv.num_groups, 1)
    metrics.update(reward_metrics(batch.episode_reward.cpu()))
    metrics.update(response_length_metrics(batch.response_lengths.cpu(), batch.member_agent))
    return filled, metrics


# ---------------------------------------------------------------- loss


class SetUpdateState(NamedTuple):
    """What the update did to each active set of a micro-batch (diagnostics, not the loss): the
    loss kernel's own ratio and clip flags, per set."""

    log_ratio: Tensor  # [S] Lambda_S under the `mean` reduction (every method: comparable)
    clipped: Tensor  # [S] share of the set's ratio units the clip stopped (the set unit: 0 or 1)
    units: Tensor  # [S] ratio units of the set: 1 (set unit), members (sequence), tokens (token)


class MethodLoss(NamedTuple):
    loss: Tensor  # scalar, differentiable w.r.t. logprobs
    metrics: dict[str, float]  # see docs/metrics.md
    sets: SetUpdateState  # per set of the micro-batch (the episode log's)


def method_policy_loss(
    spec: MethodSpec,
    batch: FlatBatch,
    logprobs: Tensor,
    *,
    entropy: Tensor | None = None,
    kl_beta: float = 0.0,
    entropy_alpha: float = 0.0,
    tis_cap: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """(loss, metrics) of `method_loss` (which also returns the per-set state)."""
    out = method_loss(spec, batch, logprobs, entropy=entropy, kl_beta=kl_beta, entropy_alpha=entropy_alpha,
                      tis_cap=tis_cap)
    return out.loss, out.metrics


def method_loss(
    spec: MethodSpec,
    batch: FlatBatch,
    logprobs: Tensor,
    *,
    entropy: Tensor | None = None,
    kl_beta: float = 0.0,
    entropy_alpha: float = 0.0,
    tis_cap: float = 0.0,
) -> MethodLoss:
    """loss = policy loss + beta * KL(pi_theta || pi_ref) - alpha * entropy, for one micro-batch.

    tis_cap > 0: each ratio unit's surrogate is weighted by its truncated importance weight
    min(pi_old / mu, tis_cap) against the sampler's recorded log-probs (batch.sampling_logprobs;
    srpo.objective.tis), at the method's ratio unit.

    `batch` must come from `prepare_step` then `with_step_weights` (possibly sliced with
    select_sets: a micro-batch of the optimizer step); logprobs: [M, T]
    log pi_theta of its members; entropy: [M, T] (needed when entropy_alpha > 0). KL and entropy
    are aggregated with the method's own token weights. Also returns, per set, Lambda_S under
    `mean` and the share of its ratio units the loss's clip stopped (SetUpdateState: the episode
    log's).
    """
    if batch.old_logprobs is None or batch.member_weights is None or batch.set_weights is None:
        raise ValueError("method_policy_loss needs a batch filled by prepare_step and with_step_weights")
    if batch.set_advantages is None and batch.member_advantages is None:
        raise ValueError("method_policy_loss needs a batch filled by prepare_step (no advantages)")
    if RATIO_UNIT_LEVEL[spec.ratio_unit] == "set":
        if batch.set_advantages is None:
            raise ValueError(f"{spec.name}: the set ratio unit needs one advantage per set")
        advantages, weights = batch.set_advantages, batch.set_weights
    else:
        advantages, weights = batch.advantages_per_member(), batch.member_weights
    x = UnitLossInputs(
        logprobs=logprobs,
        old_logprobs=batch.old_logprobs,
        mask=batch.response_mask,
        set_index=batch.set_index,
        num_sets=batch.num_sets,
        advantages=advantages,
        weights=weights,
    )
    tis = None
    if tis_cap > 0:
        if batch.sampling_logprobs is None:
            raise ValueError("tis_cap > 0 needs the sampler's log-probs (rollout.record_logprobs)")
        tis = truncated_is_weights(spec.ratio_unit, batch.old_logprobs, batch.sampling_logprobs,
                                   batch.response_mask, batch.set_index, batch.num_sets,
                                   cap=tis_cap, reduction=spec.reduction)
        x = x._replace(is_weights=tis.weights)
    cfg = UnitLossSettings(spec.clip_low, spec.clip_high, spec.reduction, spec.max_log_ratio, spec.member_clip)
    out = unit_policy_loss(spec.ratio_unit, x, cfg)
    loss, metrics = out.loss, out.metrics
    if tis is not None:
        metrics.update(tis_metrics(tis))
    mask = batch.response_mask
    w = batch.member_weights.to(logprobs.dtype).unsqueeze(-1)  # [M, 1] weight of each token
    # one statistic every method shares, whatever its ratio unit: Lambda_S under `mean`
    lam = out.sets.mean_log_ratio
    if lam is None:
        with torch.no_grad():
            lam = set_log_ratio(logprobs.detach() - batch.old_logprobs, mask, batch.set_index, batch.num_sets)
    metrics.update(set_log_ratio_metrics(lam, batch.set_sizes))
    zeros = torch.zeros_like(logprobs)
    if kl_beta > 0:
        if batch.ref_logprobs is None:
            raise ValueError("kl_beta > 0 needs ref_logprobs in the batch")
        kl = torch.where(mask, kl_k3(logprobs, batch.ref_logprobs), zeros)  # [M, T]
        kl_term = (w * kl).sum()
        loss = loss + kl_beta * kl_term
        metrics["kl_ref"] = float(kl_term.detach())
    if entropy_alpha > 0:
        if entropy is None:
            raise ValueError("entropy_alpha > 0 needs the entropy tensor")
        ent_term = (w * torch.where(mask, entropy, zeros)).sum()
        loss = loss - entropy_alpha * ent_term
        metrics["entropy_bonus"] = float(ent_term.detach())
    metrics["loss"] = float(loss.detach())
    return MethodLoss(loss, metrics, SetUpdateState(lam, out.sets.clipped, out.sets.units))
