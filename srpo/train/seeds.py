"""Every seed a run derives from its `seed`, in one place.

    seed_everything(cfg.seed)                     # Python, torch, numpy: before any model is built
    random.Random(task_order_seed(cfg.seed, epoch))     # the order of the train tasks in an epoch
    runner.seed = rollout_seed(cfg.seed, step, draw)   # one step's (one draw's) rollouts
    torch.manual_seed(rank_seed(cfg.seed, rank))  # each process's sampling stream (several ranks)

A step's rollout seed depends on the step and the draw only, so resuming at a step needs only
its number; the strides keep the streams of neighbouring seeds, steps, draws and ranks apart.
"""

from __future__ import annotations

import random

import torch

SEED_STRIDE = 1_000_003  # a prime above any step count: seed s's steps never meet seed s+1's
DRAW_STRIDE = 7_919  # a prime: the draws of one step (dynamic sampling) apart from other steps


def seed_everything(seed: int) -> None:
    """Python's, torch's and numpy's global generators, before any model is built."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # numpy is a dependency, but seeding it is only a courtesy
        pass


def task_order_seed(seed: int, epoch: int) -> str:
    """The seed of an epoch's shuffle of the train tasks (a string: random.Random hashes it)."""
    return f"{seed}/tasks/{epoch}"


def rollout_seed(seed: int, step: int, draw: int = 0) -> int:
    """The rollout runner's seed for one draw of one step."""
    return seed * SEED_STRIDE + step + DRAW_STRIDE * draw


def rank_seed(seed: int, rank: int, step: int = 0) -> int:
    """torch's global seed of process `rank` from `step` on (identical replicas, different samples);
    `step` > 0 on a resume: the checkpoint holds rank 0's RNG state only."""
    return seed + SEED_STRIDE * rank + step
