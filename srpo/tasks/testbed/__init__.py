"""The testbed task pack: cover tasks, a controlled multi-agent task for the objective.

Trained by the real trainer and workflows with a tiny random-initialised model, a run takes
seconds; see docs/testbed.md and srpo/presets/testbed/. The pack itself: srpo.tasks.testbed.pack.
"""

from srpo.tasks.testbed.tasks import CoverReward, CoverSpec, cover_tasks, coverage, token_symbol
from srpo.tasks.testbed.workflow import Cover

__all__ = ["Cover", "CoverReward", "CoverSpec", "cover_tasks", "coverage", "token_symbol"]
