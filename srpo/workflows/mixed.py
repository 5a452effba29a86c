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
    """components: (weight, workflow) or (weight, workflow, label) tuples; weights > 0,
    normalized. label: the name the component's episodes record (default: the workflow's
    name); labels must be distinct, so one workflow can appear with two parameter sets."""

    components: Sequence[tuple[float, Workflow] | tuple[float, Workflow, str]]

    name = "mixed"
    description = (
        "each task drawn into one of several workflows by weight: mixed set sizes per batch"
    )

    def __post_init__(self) -> None:
        if not self.components:
            raise ValueError("mixed needs at least one component workflow")
        full = [(float(c[0]), c[1], c[2] if len(c) > 2 else c[1].name) for c in self.components]
        for w, _, label in full:
            if not (math.isfinite(w) and w > 0):
                raise ValueError(f"mixed: weight of {label!r} must be finite and > 0, got {w}")
        self.labels = [label for _, _, label in full]
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(
                f"mixed: component workflows must have distinct names, got {self.labels}; give "
                "each a 'label' to use one workflow twice"
            )
        self.components = [(w, wf) for w, wf, _ in full]

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
        return self.components[self._pick_index(task, seed)][1]

    def _pick_index(self, task: Task, seed: int) -> int:
        rng = random.Random(f"{seed}/{task.task_id}/mixed")
        weights = [w for w, _ in self.components]
        return rng.choices(range(len(self.components)), weights=weights)[0]

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        index = self._pick_index(task, ctx.seed)
        chosen = self.components[index][1]
        ctx.workflow_name = self.labels[index]
        ctx.metadata["mixed_from"] = self.name
        return (yield from chosen.run(task, ctx))
