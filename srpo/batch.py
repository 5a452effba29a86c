"""The flat, padded batch every method trains on, built once per optimizer step.

Layout (the same as verl's): each member's prompt is LEFT-padded to P and its response
RIGHT-padded to T, so response token t of every member sits at column P + t and log-probs come
out as one [M, T] tensor aligned with `response_mask`. A member->set index ties members to their
active sets; per-set and per-episode fields carry everything advantage grouping needs (task,
event, turn, return), so no method has to look back at the episodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from srpo.types import Episode

# Tensor fields indexed by member (first dim M) and by set (first dim S): what select_sets slices.
_MEMBER_TENSORS = ("input_ids", "attention_mask", "response_mask", "sampling_logprobs", "old_logprobs",
                   "ref_logprobs", "member_advantages", "member_weights")
_SET_TENSORS = ("set_turn", "set_episode", "set_reward", "set_advantages", "set_weights")


@dataclass
class FlatBatch:
    input_ids: Tensor  # [M, P+T] long: prompt left-padded to P, response right-padded to T
    attention_mask: Tensor  # [M, P+T] long: 1 on real tokens
    response_mask: Tensor  # [M, T] bool: response tokens in the loss (generated, not observations)
    prompt_length: int  # P
    set_index: Tensor  # [M] long: member -> set, 0..S-1
    member_agent: tuple[str, ...]  # [M] role that produced the member
    member_policy: tuple[str, ...]  # [M] policy that produced the member
    member_temperature: tuple[float, ...]  # [M] temperature it was sampled at (0 = greedy)
    set_task: tuple[str, ...]  # [S] task id (default advantage group)
    set_event: tuple[str, ...]  # [S] event key of the transition
    set_turn: Tensor  # [S] long: transition index within its episode
    set_episode: Tensor  # [S] long: episode of the set, 0..E-1
    set_reward: Tensor  # [S] float: R_S, the return credited to the set
    episode_task: tuple[str, ...]  # [E] task id of each episode
    episode_reward: Tensor  # [E] float: outcome reward
    sampling_logprobs: Tensor | None = None  # [M, T] log-probs recorded at sampling time
    # [S] False for the singleton of an output its transition did not read (ActiveSet.consumed);
    # None: every set was consumed (the advantage group key "consumed" reads it)
    set_consumed: tuple[bool, ...] | None = None
    # Filled by the training step. Advantages once per rollout batch (prepare_step); weights
    # once per optimizer step (with_step_weights); select_sets slices them, never recomputes:
    old_logprobs: Tensor | None = None  # [M, T] log pi_old, recomputed before the update
    ref_logprobs: Tensor | None = None  # [M, T] log pi_ref (only when a KL penalty is on)
    set_advantages: Tensor | None = None  # [S] A_S (set- and episode-level advantage units)
    member_advantages: Tensor | None = None  # [M] A_m (member-level advantage units only)
    member_weights: Tensor | None = None  # [M] weight of each of member m's response tokens
    set_weights: Tensor | None = None  # [S] w_S = sum over the set's tokens of their weights

    @property
    def num_members(self) -> int:
        return int(self.set_index.shape[0])

    @property
    def num_sets(self) -> int:
        return len(self.set_task)

    @property
    def set_sizes(self) -> Tensor:  # [S] long
        return torch.bincount(self.set_index, minlength=self.num_sets)

    @property
    def response_lengths(self) -> Tensor:  # [M] long: trained tokens per member
        return self.response_mask.sum(dim=-1)

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    def advantages_per_member(self) -> Tensor:
        """[M] the advantage each member's loss term uses (a set's value for each of its members)."""
        if self.member_advantages is not None:
            return self.member_advantages
        if self.set_advantages is None:
            raise ValueError("the batch has no advantages: fill it with prepare_step first")
        return self.set_advantages[self.set_index]

    def to(self, device: torch.device | str) -> FlatBatch:
        """The batch with every tensor on `device` (once per step: the update never moves it)."""
        moved = {
            f.name: getattr(self, f.name).to(device)
            for f in fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        return replace(self, **moved)

    def select_sets(self, set_ids: Sequence[int] | Tensor) -> FlatBatch:
        """The sub-batch holding exactly the given sets (whole), with sets renumbered 0..len-1.

        Step-level fields (advantages, weights, old log-probs) are sliced, never recomputed, so
        a loss over the sub-batches sums to the loss over the whole batch. Episode-level fields
        are kept whole (set_episode keeps pointing into them).
        """
        set_ids, new_id = self._renumber(set_ids)
        rows = (new_id[self.set_index] >= 0).nonzero().flatten()  # members kept, original order
        ids = set_ids.tolist()
        member_fields = {
            name: getattr(self, name)[rows]
            for name in _MEMBER_TENSORS
            if getattr(self, name) is not None
        }
        set_fields = {
            name: getattr(self, name)[set_ids]
            for name in _SET_TENSORS
            if getattr(self, name) is not None
        }
        rows_list = rows.tolist()
        return replace(
            self,
            **member_fields,
            **set_fields,
            set_index=new_id[self.set_index[rows]],
            member_agent=tuple(self.member_agent[i] for i in rows_list),
            member_policy=tuple(self.member_policy[i] for i in rows_list),
            member_temperature=tuple(self.member_temperature[i] for i in rows_list),
            set_task=tuple(self.set_task[i] for i in ids),
            set_event=tuple(self.set_event[i] for i in ids),
            set_consumed=None if self.set_consumed is None else tuple(self.set_consumed[i] for i in ids),
        )

    def member_rows(self, set_ids: Sequence[int] | Tensor) -> Tensor:
        """[m] long: the rows of the given sets' members, in batch order (the rows `select_sets`
        keeps, so a sub-batch's [m, T] values go back with `full[rows] = values`)."""
        _, new_id = self._renumber(set_ids)
        return (new_id[self.set_index] >= 0).nonzero().flatten()

    def _renumber(self, set_ids: Sequence[int] | Tensor) -> tuple[Tensor, Tensor]:
        """(set ids as a tensor, [S] new id of each set: 0..len-1 for the given ones, else -1)."""
        dev = self.set_index.device
        set_ids = torch.as_tensor(set_ids, dtype=torch.long).to(dev)
        if set_ids.numel() == 0:
            raise ValueError("select_sets needs at least one set")
        if bool((set_ids < 0).any()) or bool((set_ids >= self.num_sets).any()):
            raise ValueError(f"set ids out of range for a batch of {self.num_sets} sets")
        new_id = torch.full((self.num_sets,), -1, dtype=torch.long, device=dev)
        new_id[set_ids] = torch.arange(set_ids.numel(), device=dev)
        return set_ids, new_id


def build_flat_batch(episodes: Sequence[Episode], pad_token_id: int) -> FlatBatch:
    """Flattens episodes -> members in (episode, transition, member) order."""
    if not episodes:
        raise ValueError("build_flat_batch needs at least one episode")
    prompts: list[list[int]] = []
    responses: list[list[int]] = []
    masks: list[list[int]] = []
    sampling: list[list[float] | None] = []
    member_agent: list[str] = []
    member_policy: list[str] = []
    member_temperature: list[float] = []
    set_index: list[int] = []
    set_task: list[str] = []
    set_event: list[str] = []
    set_consumed: list[bool] = []
    set_turn: list[int] = []
    set_episode: list[int] = []
    set_reward: list[float] = []
    for e, ep in enumerate(episodes):
        if not ep.transitions:
            raise ValueError(f"episode {e} (task {ep.task.task_id!r}) has no transition")
        for aset, ret in zip(ep.transitions, ep.set_returns()):
            s = len(set_task)
            for m in aset.members:
                if m.num_trained_tokens == 0:
                    raise ValueError(
                        f"member of agent {m.agent!r} in task {aset.task_id!r}, event "
                        f"{aset.event!r} has no generated token (empty generation)"
                    )
                prompts.append(m.prompt_ids)
                responses.append(m.response_ids)
                masks.append(m.loss_mask)
                sampling.append(m.sampling_logprobs)
                member_agent.append(m.agent)
                member_policy.append(m.policy)
                member_temperature.append(float(m.temperature))
                set_index.append(s)
            set_task.append(aset.task_id)
            set_event.append(aset.event)
            set_consumed.append(aset.consumed)
            set_turn.append(aset.turn)
            set_episode.append(e)
            set_reward.append(ret)
    m_count = len(prompts)
    p_len = max(len(p) for p in prompts)
    t_len = max(len(r) for r in responses)
    input_ids = torch.full((m_count, p_len + t_len), pad_token_id, dtype=torch.long)
    attention = torch.zeros((m_count, p_len + t_len), dtype=torch.long)
    response_mask = torch.zeros((m_count, t_len), dtype=torch.bool)
    has_sampling = all(s is not None for s in sampling)
    sampling_lp = torch.zeros((m_count, t_len), dtype=torch.float32) if has_sampling else None
    for i, (p, r, mk) in enumerate(zip(prompts, responses, masks)):
        input_ids[i, p_len - len(p) : p_len] = torch.tensor(p, dtype=torch.long)
        input_ids[i, p_len : p_len + len(r)] = torch.tensor(r, dtype=torch.long)
        attention[i, p_len - len(p) : p_len + len(r)] = 1
        response_mask[i, : len(r)] = torch.tensor(mk, dtype=torch.bool)
        if sampling_lp is not None:
            sampling_lp[i, : len(r)] = torch.tensor(sampling[i], dtype=torch.float32)
    return FlatBatch(
        input_ids=input_ids,
        attention_mask=attention,
        response_mask=response_mask,
        prompt_length=p_len,
        set_index=torch.tensor(set_index, dtype=torch.long),
        member_agent=tuple(member_agent),
        member_policy=tuple(member_policy),
        member_temperature=tuple(member_temperature),
        set_task=tuple(set_task),
        set_event=tuple(set_event),
        set_consumed=None if all(set_consumed) else tuple(set_consumed),
        set_turn=torch.tensor(set_turn, dtype=torch.long),
        set_episode=torch.tensor(set_episode, dtype=torch.long),
        set_reward=torch.tensor(set_reward, dtype=torch.float32),
        episode_task=tuple(ep.task.task_id for ep in episodes),
        episode_reward=torch.tensor([ep.reward for ep in episodes], dtype=torch.float32),
        sampling_logprobs=sampling_lp,
    )


def pack_sets(batch: FlatBatch, max_tokens: int) -> list[list[int]]:
    """Packs whole sets into micro-batches of at most `max_tokens` padded tokens.

    A set is never split; a set larger than the budget gets a micro-batch of its own. Sets are
    taken shortest first, so each micro-batch holds members of similar length: the forward pass
    trims each micro-batch to its own longest member (srpo.train.forward), so the cost of a
    micro-batch is rows * its longest member, which is what the budget bounds.
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be > 0, got {max_tokens}")
    member_len = batch.attention_mask.sum(dim=-1)  # [M] real tokens
    set_len = torch.zeros(batch.num_sets, dtype=member_len.dtype, device=member_len.device).scatter_reduce(
        0, batch.set_index, member_len, reduce="amax"
    )  # [S] longest member of each set
    sizes = batch.set_sizes.tolist()
    order = sorted(range(batch.num_sets), key=lambda s: (int(set_len[s]), s))
    groups: list[list[int]] = []
    current: list[int] = []
    rows = 0
    for s in order:
        width = int(set_len[s])  # non-decreasing along `order`
        if current and (rows + sizes[s]) * width > max_tokens:
            groups.append(current)
            current, rows = [], 0
        current.append(s)
        rows += sizes[s]
    if current:
        groups.append(current)
    return groups


def split_sets(batch: FlatBatch, parts: int, generator: torch.Generator | None = None) -> list[list[int]]:
    """Exactly `parts` minibatches (optimizer steps) of whole sets, random and balanced by tokens.

    The sets are shuffled (with `generator`; the global RNG when None), then the shuffled
    sequence is cut into `parts` consecutive runs: a set goes to run k while the middle of its
    tokens lies below (k + 1) / parts of the step's tokens, and a run is closed early only when
    the sets left are just enough to give every later run one. So each run is non-empty and
    holds about 1/parts of the tokens (off by at most about one set's tokens). A set's tokens
    are its members' real (prompt + response) tokens: what its forward and backward cost.

    Raises ValueError when `parts` exceeds the number of sets: minibatches of whole sets cannot
    be met. (The trainer rules that out for every rank before any work.)
    Returns `parts` lists of set ids of `batch`.
    """
    n = batch.num_sets
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    if parts > n:
        raise ValueError(
            f"train.minibatches ({parts}) exceeds the {n} active sets of the step: a minibatch "
            f"holds whole sets, so there cannot be more minibatches than sets"
        )
    if parts == 1:
        return [list(range(n))]
    order = torch.randperm(n, generator=generator).tolist()
    member_tokens = batch.attention_mask.sum(dim=-1).double().cpu()  # [M]
    set_tokens = torch.zeros(n, dtype=torch.float64).index_add_(
        0, batch.set_index.cpu(), member_tokens
    ).tolist()  # [S]
    total = sum(set_tokens)
    runs: list[list[int]] = [[]]
    done = 0.0  # tokens placed so far
    for i, s in enumerate(order):
        k = len(runs) - 1
        later = parts - 1 - k  # runs after the current one, all still empty
        must_close = n - i == later  # the sets left are exactly enough for one per later run
        past_quota = done + set_tokens[s] / 2 > (k + 1) * total / parts
        if runs[-1] and later > 0 and (must_close or past_quota):
            runs.append([])
        runs[-1].append(s)
        done += set_tokens[s]
    assert len(runs) == parts and all(runs), (len(runs), parts)
    return runs
