"""The testbed task pack: cover tasks played by tiny models (docs/testbed.md).

Config (under `task`): testbed.{set_sizes, rounds, alphabet_factor}. The `cover` workflow scores
each set itself (ctx.score is not used), so the pack's reward is only the episode-level check.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, model_validator

from srpo.config import ConfigError, List, TaskSettings
from srpo.packs import TaskPack
from srpo.tasks.testbed.tasks import CoverReward, CoverSpec, cover_tasks
from srpo.tasks.testbed.workflow import Cover
from srpo.types import Task


class TestbedSection(TaskSettings):
    """task.testbed: the cover tasks (docs/testbed.md)."""

    set_sizes: List[int] = Field(default_factory=lambda: [4])  # k of each task, in turn
    rounds: int = 1  # targets (transitions) per episode
    alphabet_factor: int = 2  # m = alphabet_factor * k symbols per task

    @model_validator(mode="after")
    def _check(self) -> Self:
        try:
            CoverSpec(tuple(self.set_sizes), self.rounds, self.alphabet_factor)
        except ValueError as e:
            raise ConfigError(f"task.testbed: {e}") from e
        return self


class TestbedSettings(TaskSettings):
    """The testbed pack's field under `task`: the `testbed` section."""

    testbed: TestbedSection = Field(default_factory=TestbedSection)


def load_tasks(cfg: Any, split: str, size: int) -> list[Task]:
    t = cfg.testbed
    spec = CoverSpec(tuple(t.set_sizes), t.rounds, t.alphabet_factor)
    return cover_tasks(spec, size, seed=cfg.seed, split=split)


PACK = TaskPack(
    name="testbed",
    description="cover tasks: k players jointly cover a target of k symbols (objective testbed)",
    load_tasks=load_tasks,
    make_reward=lambda cfg: CoverReward(),
    settings=TestbedSettings,
    success_component="cover",
    reward_components=("cover",),  # the cover workflow's episode reward
    workflows=(Cover,),
)
