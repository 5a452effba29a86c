"""The testbed task pack: cover tasks, a controlled multi-agent task for the objective.

Trained by the real trainer and workflows with a tiny random-initialised model, a run takes
seconds; see docs/testbed.md and configs/testbed/.
"""

from typing import Any

from srpo.tasks.testbed.tasks import CoverReward, CoverSpec, cover_tasks, coverage, token_symbol

__all__ = ["Cover", "CoverReward", "CoverSpec", "cover_tasks", "coverage", "token_symbol"]


def __getattr__(name: str) -> Any:
    # the workflow is imported on first use: srpo.config imports this package (task.testbed's
    # checks) and srpo.workflows imports the workflow, so an eager import here would be a cycle
    if name == "Cover":
        from srpo.tasks.testbed.workflow import Cover

        return Cover
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
