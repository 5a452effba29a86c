"""Set-preserving batching for verl: a row layout in which no active set is ever split.

How verl 0.9.1 cuts a training batch of N rows (sync V1 trainer, engine workers):
  1. dispatch: rank d of dp gets the contiguous rows [d N/dp, (d+1) N/dp);
  2. mini-batches: each rank cuts its rows into contiguous blocks of mini_batch_size/dp rows
     (one optimizer step each; contiguous only with actor.shuffle=False);
  3. micro-batches: each mini-batch block is cut into contiguous chunks of
     ppo_micro_batch_size_per_gpu rows (only with actor.use_dynamic_bsz=False; dynamic batch
     sizing re-partitions rows by token count and would split sets).

`plan_set_layout` orders the rows (and adds padding rows) so that every cut of 1-3 falls between
sets: each micro-batch slot of C rows holds whole sets (first-fit decreasing), a mini-batch is
dp x J such slots (J the same for every mini-batch and rank, as verl needs), and the rows of one
prompt group (the G rollouts of a task) stay in one mini-batch. The layout depends only on the
rows' keys, not on the order they arrive in. The trainer (trainer.py) applies it to the
TransferQueue batch; `layout_dataproto` applies it to a DataProto (tests, custom trainers).

Where a configuration cannot keep sets whole, `check_set_preserving_config` raises (no silent
split): shuffled mini-batches, dynamic batch sizing, a set larger than a micro-batch, fewer
prompt groups than mini-batches.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from srpo.integrations.verl.advantage import config_get

PAD = -1  # a padding slot in SetLayout.order


@dataclass(frozen=True)
class SetLayout:
    """Where every row goes.

    order: the rows in dispatch order; an entry is an input row index or PAD (a padding row).
    set_index: per position, the set's index in the step (PAD on padding positions).
    step_sets: per position, N_sets of its optimizer mini-batch (over all dp ranks).
    mini_batch_rows: rows of one optimizer mini-batch over all ranks (= dp * slots * micro).
    """

    order: list[int]
    set_index: list[int]
    step_sets: list[float]
    dp_size: int
    micro_batch_rows: int
    slots_per_rank: int  # J: micro-batches per rank per mini-batch
    num_mini_batches: int
    num_sets: int

    @property
    def mini_batch_rows(self) -> int:
        return self.dp_size * self.slots_per_rank * self.micro_batch_rows

    @property
    def num_padding(self) -> int:
        return sum(1 for i in self.order if i == PAD)

    def metrics(self) -> dict[str, float]:
        n = len(self.order)
        return {
            "srpo/layout/rows": float(n),
            "srpo/layout/padding_rows": float(self.num_padding),
            "srpo/layout/padding_share": self.num_padding / n if n else 0.0,
            "srpo/layout/sets": float(self.num_sets),
            "srpo/layout/mini_batches": float(self.num_mini_batches),
            "srpo/layout/micro_batches_per_rank": float(self.slots_per_rank),
        }


def _first_fit_decreasing(sizes: dict[Hashable, int], capacity: int) -> list[list[Hashable]]:
    """Bins (lists of set keys) of total size <= capacity; deterministic in the keys."""
    order = sorted(sizes, key=lambda k: (-sizes[k], str(k)))
    bins: list[list[Hashable]] = []
    room: list[int] = []
    for k in order:
        for b, r in enumerate(room):
            if sizes[k] <= r:
                bins[b].append(k)
                room[b] -= sizes[k]
                break
        else:
            bins.append([k])
            room.append(capacity - sizes[k])
    return bins


def plan_set_layout(
    row_sets: Sequence[Hashable | None],
    row_groups: Sequence[Hashable | None],
    row_keys: Sequence[str],
    *,
    dp_size: int,
    micro_batch_rows: int,
    num_mini_batches: int = 1,
) -> SetLayout:
    """The set-preserving layout of one training step (see module doc).

    row_sets: each row's set key (None: a padding row, dropped; padding is re-added as needed);
    row_groups: each row's prompt group (the whole group goes to one mini-batch);
    row_keys: a unique, stable key per row (members are ordered by it, so the layout does not
    depend on the input order); dp_size: data-parallel ranks; micro_batch_rows: rows per
    micro-batch per rank (actor.ppo_micro_batch_size_per_gpu); num_mini_batches: optimizer steps
    per training step (train_batch_size / ppo_mini_batch_size).
    """
    n = len(row_sets)
    if len(row_groups) != n or len(row_keys) != n:
        raise ValueError(f"row_sets, row_groups, row_keys must have one entry per row ({n})")
    if dp_size < 1 or micro_batch_rows < 1 or num_mini_batches < 1:
        raise ValueError(
            f"dp_size ({dp_size}), micro_batch_rows ({micro_batch_rows}) and num_mini_batches "
            f"({num_mini_batches}) must be >= 1"
        )
    members: dict[Hashable, list[int]] = {}
    group_of_set: dict[Hashable, Hashable] = {}
    for i, (s, g) in enumerate(zip(row_sets, row_groups)):
        if s is None:
            continue
        members.setdefault(s, []).append(i)
        if group_of_set.setdefault(s, g) != g:
            raise ValueError(f"set {s!r} has members in two prompt groups ({group_of_set[s]!r}, {g!r})")
    if not members:
        raise ValueError("the batch has no real row (every row is padding)")
    for s, rows in members.items():
        rows.sort(key=lambda i: row_keys[i])
        if len(rows) > micro_batch_rows:
            raise ValueError(
                f"set {s!r} has {len(rows)} members but a micro-batch holds "
                f"{micro_batch_rows} rows: sets cannot be split, raise "
                f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu to at least the largest set"
            )
    # 1. prompt groups -> mini-batches: largest first onto the emptiest (ties: lowest index)
    groups: dict[Hashable, list[Hashable]] = {}
    for s in members:
        groups.setdefault(group_of_set[s], []).append(s)
    if len(groups) < num_mini_batches:
        raise ValueError(
            f"{len(groups)} prompt groups cannot fill {num_mini_batches} mini-batches (sets of a "
            f"group stay together): lower train_batch_size / ppo_mini_batch_size"
        )
    group_rows = {g: sum(len(members[s]) for s in ss) for g, ss in groups.items()}
    load = [0] * num_mini_batches
    mini_sets: list[list[Hashable]] = [[] for _ in range(num_mini_batches)]
    for g in sorted(groups, key=lambda g: (-group_rows[g], str(g))):
        k = min(range(num_mini_batches), key=lambda j: (load[j], j))
        load[k] += group_rows[g]
        mini_sets[k].extend(groups[g])
    # 2. each mini-batch's sets -> micro-batch slots of micro_batch_rows rows, dealt to ranks
    mini_bins = [
        _first_fit_decreasing({s: len(members[s]) for s in ss}, micro_batch_rows) for ss in mini_sets
    ]
    slots = max(math.ceil(len(bins) / dp_size) for bins in mini_bins)
    set_id = {s: i for i, s in enumerate(sorted(members, key=str))}
    order: list[int] = []
    set_index: list[int] = []
    step_sets: list[float] = []
    for d in range(dp_size):
        for k, bins in enumerate(mini_bins):
            n_sets = float(len(mini_sets[k]))
            for j in range(slots):
                b = j * dp_size + d  # bins dealt round-robin over ranks
                rows = [r for s in bins[b] for r in members[s]] if b < len(bins) else []
                sids = [set_id[s] for s in bins[b] for _ in members[s]] if b < len(bins) else []
                pad = micro_batch_rows - len(rows)
                order += rows + [PAD] * pad
                set_index += sids + [PAD] * pad
                step_sets += [n_sets] * micro_batch_rows
    return SetLayout(
        order=order, set_index=set_index, step_sets=step_sets, dp_size=dp_size,
        micro_batch_rows=micro_batch_rows, slots_per_rank=slots,
        num_mini_batches=num_mini_batches, num_sets=len(members),
    )


def check_set_preserving_config(config: Any) -> None:
    """Raise ValueError for settings under which verl would split sets (whole trainer config)."""
    actor = config.actor_rollout_ref.actor
    problems = []
    if bool(config_get(actor, "shuffle", False)):
        problems.append("actor_rollout_ref.actor.shuffle=True reshuffles rows into mini-batches "
                        "(set it to False; the layout already mixes prompt groups)")
    if bool(config_get(actor, "use_dynamic_bsz", False)):
        problems.append("actor_rollout_ref.actor.use_dynamic_bsz=True re-partitions micro-batches "
                        "by token count (set it to False and size ppo_micro_batch_size_per_gpu)")
    if config_get(actor, "ppo_micro_batch_size_per_gpu", None) is None:
        problems.append("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu must be set")
    algo = config.algorithm
    if bool(config_get(algo, "use_kl_in_reward", False)):
        problems.append("algorithm.use_kl_in_reward=True gives per-token rewards; a set has one "
                        "return (use actor.use_kl_loss instead)")
    if config_get(algo, "rollout_correction", None):
        rc = algo.rollout_correction
        if any(config_get(rc, k, None) for k in ("rollout_is", "rollout_rs", "bypass_mode")):
            problems.append("algorithm.rollout_correction: per-token IS/RS weights have no set "
                            "meaning; turn it off")
    if problems:
        raise ValueError("the exact SRPO set loss cannot keep sets whole under this verl config:\n  - "
                         + "\n  - ".join(problems))


def layout_dataproto(data: Any, layout: SetLayout) -> Any:
    """A DataProto laid out as `layout` says: rows reordered, padding rows added (copies of the
    first row with an all-zero response mask), and the per-row fields srpo_set_index /
    srpo_step_sets added to its batch. Used by tests and by trainers that hold a DataProto."""
    import numpy as np
    import torch

    from srpo.integrations.verl import fields

    n_pad = layout.num_padding
    idx = [0 if i == PAD else i for i in layout.order]
    out = data.select_idxs(np.array(idx, dtype=np.int64))
    is_pad = torch.tensor([i == PAD for i in layout.order])
    if n_pad:
        for key in ("response_mask", "loss_mask"):
            if key in out.batch:
                m = out.batch[key].clone()
                m[is_pad] = 0
                out.batch[key] = m
    out.batch[fields.SET_INDEX] = torch.tensor(layout.set_index, dtype=torch.long)
    out.batch[fields.STEP_SETS] = torch.tensor(layout.step_sets, dtype=torch.float64)
    out.non_tensor_batch["srpo_is_padding"] = is_pad.numpy()
    return out
