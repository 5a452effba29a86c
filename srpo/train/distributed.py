"""Data-parallel training over processes (`torchrun` or `accelerate launch`), exact.

    accelerate launch --num_processes 4 -m srpo.cli train CONFIG ...     # or torchrun --nproc-per-node 4

Every process holds a full replica of the policies and owns whole tasks of each step (task j of
the step goes to rank j mod world), so each advantage group and each active set lives on one
rank and advantages need no communication. What does cross ranks:

  * the step's counts (sets, members, tokens, per-agent members): the aggregation weights divide
    by the step's totals, not the rank's, so the ranks' losses sum to the loss of the whole step;
  * gradients: summed (not averaged: the weights already carry the global normalization), then
    clipped and applied identically on every rank, so the replicas stay equal.

Logging, evaluation, checkpoints and exports happen on rank 0; the others wait at a barrier.
One process (WORLD_SIZE unset or 1) is the plain single-process path.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    # whether init_distributed created the process group (then close_distributed destroys it;
    # a group the caller made, e.g. under accelerate, stays the caller's)
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


def init_distributed(device: str) -> DistContext:
    """Joins the process group the launcher described in the environment (WORLD_SIZE, RANK, ...)."""
    world = _env_int("WORLD_SIZE", "1")
    if world <= 1:
        return DistContext()
    local_rank = _env_int("LOCAL_RANK", "0")
    owns_group = not dist.is_initialized()
    if owns_group:
        if device.startswith("cuda"):
            # each rank on its own GPU before NCCL starts: otherwise every rank's collectives
            # (barriers, object broadcasts) run on GPU 0
            torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return DistContext(dist.get_rank(), dist.get_world_size(), local_rank, owns_group=owns_group)


def _env_int(name: str, default: str) -> int:
    """A launcher's environment variable (WORLD_SIZE, LOCAL_RANK) as a number >= 0; anything else
    is a ValueError naming the variable (the command's one line, exit status 2)."""
    raw = os.environ.get(name, default)
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"the environment variable {name} must be a whole number >= 0 (set by a "
                         f"launcher such as torchrun or accelerate), got {raw!r}")
    return value


def close_distributed(ctx: DistContext) -> None:
    """Destroys the process group init_distributed created, while Python is still running.

    Why it is not left to exit: gloo's worker threads free finished collectives (and the tensors
    they hold, which takes the GIL). A rank that leaves main() while a worker is still freeing one
    (the last barrier's) meets the interpreter's finalization, and the worker thread is ended
    inside a C++ destructor: std::terminate, "terminate called without an active exception",
    SIGABRT, after all of its work was done. Seen in about 1 of 13 plain 2-process gloo programs
    on a 2-core machine; destroying the group first joins those threads."""
    if ctx.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def check_data_parallel(spec: Any) -> None:
    """Ranks own whole tasks, so a method's advantage groups must not span tasks: every centering
    and scaling group key must include the task (Dr. MAS's step-wide per-agent scale does not)."""
    for what, keys in (("group_keys", spec.group_keys), ("scale_keys", spec.scale_keys)):
        if keys is not None and "task" not in keys:
            raise ValueError(
                f"method {spec.name!r}: its {what} {tuple(keys)} pool rewards across tasks, which "
                "data-parallel training (ranks own whole tasks) cannot compute exactly; run it in "
                "one process or add 'task' to the keys"
            )


def sum_counts(ctx: DistContext, counts: Mapping[str, Any]) -> dict[str, Any]:
    """Step counts summed over ranks (per-agent counts by name; the response width is a max)."""
    gathered: list[Any] = [None] * ctx.world
    dist.all_gather_object(gathered, dict(counts))
    agents: dict[str, int] = {}
    for c in gathered:
        for name, n in c["agents"].items():
            agents[name] = agents.get(name, 0) + n
    return {
        "sets": sum(c["sets"] for c in gathered),
        "members": sum(c["members"] for c in gathered),
        "tokens": sum(c["tokens"] for c in gathered),
        "agents": agents,
        "response_width": max(c["response_width"] for c in gathered),
    }


def all_reduce_gradients(ctx: DistContext, params: Iterable[torch.nn.Parameter]) -> None:
    """Sums every parameter's gradient over ranks (a missing gradient counts as zero)."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)


def broadcast_from_main(ctx: DistContext, value: Any) -> Any:
    """Rank 0's value on every rank (e.g. a run directory named after the start time)."""
    if not ctx.active:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(ctx: DistContext) -> None:
    if ctx.active:
        dist.barrier()
