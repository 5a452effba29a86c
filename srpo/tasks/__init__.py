"""Task sources and their rewards: what agents are asked and how their answers are graded.

Each source yields `srpo.types.Task` records; each reward maps (task, text) to a result with
named components. Math lives in `srpo.tasks.math` (re-exported here for convenience).
"""

from srpo.tasks.math import (
    MathReward,
    RewardError,
    RewardResult,
    extract_answer,
    load_gsm8k,
    load_math500,
    math_splits,
    reasoning_gym_tasks,
    score_answer,
)

__all__ = [
    "MathReward",
    "RewardError",
    "RewardResult",
    "extract_answer",
    "load_gsm8k",
    "load_math500",
    "math_splits",
    "reasoning_gym_tasks",
    "score_answer",
]
