"""Mixed: each task is drawn into one of several workflows by configured weights.

The draw depends only on (seed, task id), so all G rollouts of a task run the same workflow
(their sets stay comparable for group-relative advantages) while a batch of many tasks mixes
workflows, and hence set sizes. The episode records the drawn workflow's name, with
metadata["mixed_from"] = "mixed".
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from srpo.types import Task
from srpo.workflows.base import EpisodeContext, Workflow, WorkflowRun


@dataclass
class Mixed:
    """components: (weight, workflow) pairs; weights > 0, normalized."""

    components: Sequence[tuple[float, Workflow]]

    name = "mixed"
    description = (
        "each task drawn into one of several workflows by weight: mixed set sizes per batch"
    )

    def __post_init__(self) -> None:
        self.components = [(float(w), wf) for w, wf in self.components]
        if not self.components:
            raise ValueError("mixed needs at least one component workflow")
        for w, wf in self.components:
            if not (math.isfinite(w) and w > 0):
                raise ValueError(f"mixed: weight of {wf.name!r} must be finite and > 0, got {w}")
        names = [wf.name for _, wf in self.components]
        if len(set(names)) != len(names):
            raise ValueError(f"mixed: component workflows must have distinct names, got {names}")

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a for _, wf in self.components for a in wf.agents))

    @property
    def default_agents(self) -> dict[str, dict]:
        """The components' role defaults (a role's first component's wins)."""
        out: dict[str, dict] = {}
        for _, wf in self.components:
            for role, fields in (getattr(wf, "default_agents", None) or {}).items():
                out.setdefault(role, fields)
        return out

    def pick(self, task: Task, seed: int) -> Workflow:
        rng = random.Random(f"{seed}/{task.task_id}/mixed")
        weights = [w for w, _ in self.components]
        return rng.choices([wf for _, wf in self.components], weights=weights)[0]

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        chosen = self.pick(task, ctx.seed)
        ctx.workflow_name = chosen.name
        ctx.metadata["mixed_from"] = self.name
        return (yield from chosen.run(task, ctx))
