"""The testbed task pack: cover tasks played by tiny models (docs/testbed.md).

Config (under `task`): testbed.{set_sizes, rounds, alphabet_factor}. The `cover` workflow scores
each set itself (ctx.score is not used), so the pack's reward is only the episode-level check.
"""

from __future__ import annotations

from typing import Any

from srpo.packs import TaskPack
from srpo.tasks.testbed.tasks import CoverReward, CoverSpec, cover_tasks
from srpo.tasks.testbed.workflow import Cover
from srpo.types import Task


def load_tasks(cfg: Any, split: str, size: int) -> list[Task]:
    t = cfg.testbed
    spec = CoverSpec(tuple(t.set_sizes), t.rounds, t.alphabet_factor)
    return cover_tasks(spec, size, seed=cfg.seed, split=split)


PACK = TaskPack(
    name="testbed",
    description="cover tasks: k players jointly cover a target of k symbols (objective testbed)",
    load_tasks=load_tasks,
    make_reward=lambda cfg: CoverReward(),
    success_component="cover",
    workflows=(Cover,),
)
