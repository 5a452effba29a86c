"""srpo: Setwise Relative Policy Optimization for multi-agent LLM systems.

The active set (the outputs one transition consumed) is the unit of update: one
cardinality-normalized set ratio, one relative advantage, one setwise clip.
"""

from srpo.objective.advantages import set_relative_advantages
from srpo.objective.losses import setwise_policy_loss

__version__ = "0.1.0"
__all__ = ["set_relative_advantages", "setwise_policy_loss", "__version__"]
