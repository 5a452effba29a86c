"""The set-relative advantage as a verl advantage estimator (no verl import here; plugin.py
registers it as "srpo" and "srpo_event" with verl.trainer.ppo.core_algos.register_adv_est).

verl calls an estimator with per-row tensors only:
    fn(token_level_rewards=[M, T], response_mask=[M, T], config=algorithm config, index=uid [M])
A row is one member; SRPO needs one advantage per *set*, relative to the other sets of its group
(srpo.md: A_S = (R_S - mean_g R) / (std_g R + eps)). Rows alone cannot give that (a set of 3
members would be counted three times in its group's mean and std), so the estimator also needs
each row's set. It takes it from keyword arguments (set_ids, set_rewards, events) or, on the
trainer path, from `row_sets(...)`, a context the srpo_sync trainer opens around verl's own
advantage step (trainer.py). Without either it raises: there is no silent member-level fallback.

The value itself is computed by srpo.set_relative_advantages, srpo's public function.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from srpo.objective.advantages import group_index_from_keys, set_relative_advantages


@dataclass(frozen=True)
class RowSets:
    """Set information of the rows an estimator is about to see, in their order.

    set_ids: the row's set key (any hashable); None for padding rows (advantage 0).
    set_rewards: R_S per row (None entries, or None for all: the row's summed token reward).
    events: the set's event key per row (needed for grouping by (task, event)).
    """

    set_ids: Sequence[Hashable | None]
    set_rewards: Sequence[float | None] | None = None
    events: Sequence[str | None] | None = None


_ROW_SETS: contextvars.ContextVar[RowSets | None] = contextvars.ContextVar("srpo_row_sets", default=None)


@contextlib.contextmanager
def row_sets(info: RowSets) -> Iterator[None]:
    """Makes `info` visible to the estimator called inside the block (same thread)."""
    token = _ROW_SETS.set(info)
    try:
        yield
    finally:
        _ROW_SETS.reset(token)


def config_get(config: Any, key: str, default: Any) -> Any:
    """A key of a verl config (DictConfig, BaseConfig dataclass, dict) or the default."""
    if config is None:
        return default
    getter = getattr(config, "get", None)
    if callable(getter):
        value = getter(key, default)
        return default if value is None else value
    return getattr(config, key, default)


def _as_list(values: Any, n: int, name: str) -> list:
    out = list(values.tolist() if hasattr(values, "tolist") else values)
    if len(out) != n:
        raise ValueError(f"{name} has {len(out)} entries but the batch has {n} rows")
    return out


def set_relative_advantage(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Sequence[Hashable] | None = None,
    config: Any = None,
    *,
    set_ids: Sequence[Hashable | None] | None = None,
    set_rewards: Sequence[float | None] | None = None,
    events: Sequence[str | None] | None = None,
    group_by_event: bool = False,
    eps: float = 1e-6,
    **unused: Any,
) -> tuple[Tensor, Tensor]:
    """Per-row advantages [M, T] (A_S of the row's set on its response tokens) and returns.

    index: the row's prompt uid (verl's grouping key: the G = rollout.n rollouts of one task);
    set_ids / set_rewards / events: see RowSets (taken from `row_sets` when set_ids is None).
    Scale: "std" unless config.norm_adv_by_std_in_grpo is False ("none", Dr. GRPO style).
    """
    if set_ids is None:
        ctx = _ROW_SETS.get()
        if ctx is None:
            raise ValueError(
                "the srpo advantage needs each row's active set, which verl's advantage call does "
                "not pass: run the srpo_sync trainer (trainer.v1.trainer_mode=srpo_sync) with the "
                "srpo_workflow agent loop, or call it with set_ids=... (docs/scale-out.md)"
            )
        set_ids, set_rewards, events = ctx.set_ids, ctx.set_rewards, ctx.events
    m = token_level_rewards.shape[0]
    if token_level_rewards.dim() != 2 or response_mask.shape != token_level_rewards.shape:
        raise ValueError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must both be [M, T]"
        )
    set_ids = _as_list(set_ids, m, "set_ids")
    if index is None:
        raise ValueError("the srpo advantage needs index (the prompt uid of every row) for grouping")
    index = _as_list(index, m, "index")
    rewards = _as_list(set_rewards, m, "set_rewards") if set_rewards is not None else [None] * m
    if group_by_event:
        if events is None:
            raise ValueError("srpo_event groups by (task, event) but no event keys were given")
        events = _as_list(events, m, "events")
    scale = "std" if bool(config_get(config, "norm_adv_by_std_in_grpo", True)) else "none"

    token_sums = token_level_rewards.detach().sum(dim=-1).tolist()
    set_of_row: list[int] = []
    set_reward: list[float] = []
    set_group: list[tuple] = []
    seen: dict[Hashable, int] = {}
    for i, key in enumerate(set_ids):
        if key is None:
            set_of_row.append(-1)
            continue
        r = float(token_sums[i] if rewards[i] is None else rewards[i])
        g = (index[i], events[i]) if group_by_event else (index[i],)
        s = seen.get(key)
        if s is None:
            s = seen[key] = len(set_reward)
            set_reward.append(r)
            set_group.append(g)
        elif set_reward[s] != r or set_group[s] != g:
            raise ValueError(
                f"members of set {key!r} disagree on their set's return or group "
                f"({set_reward[s]!r}, {set_group[s]!r}) vs ({r!r}, {g!r}); a set is one action "
                f"with one return"
            )
        set_of_row.append(s)
    adv_rows = torch.zeros(m, dtype=torch.float32)
    if set_reward:
        adv_sets = set_relative_advantages(
            torch.tensor(set_reward, dtype=torch.float64), group_index_from_keys(set_group),
            scale=scale, eps=eps,
        ).to(torch.float32)
        rows = torch.tensor(set_of_row)
        real = rows >= 0
        adv_rows[real] = adv_sets[rows[real]]
    adv = adv_rows.to(token_level_rewards.device).unsqueeze(-1) * response_mask.to(torch.float32)
    return adv, adv


def set_relative_advantage_by_event(*args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
    """As set_relative_advantage, grouping sets by (task, event) instead of task."""
    kwargs["group_by_event"] = True
    return set_relative_advantage(*args, **kwargs)
