"""Loss aggregation as per-token weights fixed for the whole optimizer step.

Every aggregation in srpo is a weighted sum  loss = -sum_u w_u J_u  whose weights depend only on
counts over the *optimizer step* (number of sets, members, tokens, per-agent members). Computing
the weights once per step, then slicing them with the rows of each micro-batch, is what makes a
step split into micro-batches (that keep sets whole) give exactly the gradient of one big batch.

Every aggregation gives all response tokens of one member the same weight, w_{m,t} = w_m, so
weights are stored per member: w_m [M], the weight of each of member m's response tokens
(padding has none). The weight of a larger unit is the sum over its tokens: a member's
L_m * w_m, a set's w_S = sum_{m in S} L_m * w_m. The same token weights aggregate the
token-level regularizers (KL, entropy), so they are averaged the way the method averages its
objective.

    name                       w_{m,t}                              unit   used by
    set_mean                   1 / (N_sets * |S(m)| * L_m)          set    SRPO  (w_S = 1/N_sets)
    member_mean                1 / (N_members * L_m)                member GSPO  (w_m = 1/N_members)
    seq_mean_token_mean        1 / (N_members * L_m)                token  GRPO, MAGRPO (per agent)
    token_mean                 1 / N_tokens                         token  DAPO, AT-GRPO, Dr. MAS
    token_sum_norm             1 / (N_members * C)                  token  Dr. GRPO (C = max new tokens)
    agent_seq_mean_token_mean  1 / (N_agent(m) * L_m)               token  MAGRPO: sum over agents of
                                                                           each agent's own seq-mean
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

AGGREGATIONS: tuple[str, ...] = (
    "set_mean",
    "member_mean",
    "seq_mean_token_mean",
    "token_mean",
    "token_sum_norm",
    "agent_seq_mean_token_mean",
)


# train.dynamic_sampling_short_steps: how a step that dynamic sampling could not fill is weighted
SHORT_STEPS: tuple[str, ...] = ("full", "scaled")


def short_step_scale(mode: str, kept_tasks: int, tasks_per_step: int) -> float:
    """The factor on the loss of a step that kept `kept_tasks` informative tasks of the
    `tasks_per_step` planned (dynamic sampling, srpo.train.sampling).

    "full": 1, the loss is the aggregation's mean over the sets kept, so 1 informative task makes
    the update 6 would. "scaled": kept_tasks / tasks_per_step (at most 1), the loss the step would
    have if the missing tasks were kept with advantage 0 (what a step without dynamic sampling
    does: its uninformative tasks count in N_sets and add 0), so the update shrinks with the
    signal. A step with 0 kept tasks trains on a draw whose advantages are all 0: its loss is 0
    either way.
    """
    if mode not in SHORT_STEPS:
        raise ValueError(f"unknown train.dynamic_sampling_short_steps {mode!r}; choose one of {list(SHORT_STEPS)}")
    if tasks_per_step < 1 or kept_tasks < 0:
        raise ValueError(f"kept_tasks must be >= 0 and tasks_per_step >= 1, got {kept_tasks}, {tasks_per_step}")
    if mode == "full":
        return 1.0
    return min(kept_tasks, tasks_per_step) / tasks_per_step


def check_aggregation(name: str) -> None:
    if name not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {name!r}; choose one of {list(AGGREGATIONS)}")


class StepTotals(NamedTuple):
    """Counts of a whole optimizer step when its rows are spread over several processes.

    Each process only sees its own rows; weights that divide by these totals (instead of the
    local counts) make the processes' losses sum to the loss of the whole step.
    agent_members: [num_agents] float, aligned with the caller's agent_index.
    """

    num_sets: int
    num_members: int
    num_tokens: float
    agent_members: Tensor


def member_token_weights(
    aggregation: str,
    lengths: Tensor,
    set_index: Tensor,
    num_sets: int,
    *,
    agent_index: Tensor | None = None,
    norm_constant: float | None = None,
    totals: StepTotals | None = None,
) -> Tensor:
    """w_m, the weight of each response token of member m, for a whole optimizer step.

    lengths: [M] response tokens in the loss (L_m >= 1); set_index: [M] long; agent_index: [M]
    long (agent_seq_mean_token_mean only); norm_constant: C for token_sum_norm (Dr. GRPO divides
    by a constant, the generation budget, not by the realised lengths); totals: the step's
    counts over every process (None: this batch is the whole step). Returns [M] float64 (tiny,
    and the set weights summed from it stay exact; losses cast to their own dtype).
    """
    check_aggregation(aggregation)
    lengths = lengths.to(torch.float64)  # [M]
    n_sets = totals.num_sets if totals else num_sets
    n_members = totals.num_members if totals else lengths.shape[0]
    if aggregation == "set_mean":
        set_sizes = torch.bincount(set_index, minlength=num_sets).to(torch.float64)  # [S]
        return 1.0 / (n_sets * set_sizes[set_index] * lengths)
    if aggregation in ("member_mean", "seq_mean_token_mean"):
        return 1.0 / (n_members * lengths)
    if aggregation == "token_mean":
        n_tokens = totals.num_tokens if totals else float(lengths.sum())
        return torch.full_like(lengths, 1.0 / n_tokens)
    if aggregation == "token_sum_norm":
        if norm_constant is None or norm_constant <= 0:
            raise ValueError("token_sum_norm needs a positive norm_constant (e.g. max new tokens)")
        return torch.full_like(lengths, 1.0 / (n_members * float(norm_constant)))
    # agent_seq_mean_token_mean
    if agent_index is None:
        raise ValueError("agent_seq_mean_token_mean needs agent_index [M]")
    agent_counts = (totals.agent_members.to(lengths.device, torch.float64) if totals
                    else torch.bincount(agent_index).to(torch.float64))
    return 1.0 / (agent_counts[agent_index] * lengths)


def set_weights(member_w: Tensor, lengths: Tensor, set_index: Tensor, num_sets: int) -> Tensor:
    """w_S = sum over the set's tokens of their weights = sum_{m in S} L_m w_m. [M], [M] -> [S]."""
    out = torch.zeros(num_sets, dtype=member_w.dtype, device=member_w.device)
    return out.index_add(0, set_index, member_w * lengths.to(member_w.dtype))
