"""Math tasks: procedural reasoning-gym problems, GSM8K / MATH-500 loaders, answer extraction,
math-verify scoring and the math outcome reward.

    train, heldout = math_splits("basic_arithmetic", train_size=500, heldout_size=200, seed=0,
                                 config={"min_terms": 2, "max_terms": 2,
                                         "min_digits": 1, "max_digits": 1})
    reward = MathReward(correct_weight=1.0, format_weight=0.1, format_rule="boxed")
    result = reward(train[0], "... so the answer is \\boxed{7}")

Heavy dependencies (reasoning-gym, math-verify, datasets) are imported on first use.
"""

from srpo.tasks.math.answers import Extraction, extract, extract_answer, parse_number
from srpo.tasks.math.loaders import gsm8k_final_answer, load_gsm8k, load_math500, read_records
from srpo.tasks.math.reasoning_gym_tasks import (
    available_reasoning_gym_names,
    math_splits,
    normalize_question,
    reasoning_gym_score,
    reasoning_gym_tasks,
    split_seed,
)
from srpo.tasks.math.rewards import FORMAT_RULES, MathReward, RewardError, RewardResult
from srpo.tasks.math.scoring import (
    ScoreResult,
    reset_scoring_stats,
    score_answer,
    scoring_stats,
)

__all__ = [
    "Extraction",
    "FORMAT_RULES",
    "MathReward",
    "RewardError",
    "RewardResult",
    "ScoreResult",
    "available_reasoning_gym_names",
    "extract",
    "extract_answer",
    "gsm8k_final_answer",
    "load_gsm8k",
    "load_math500",
    "math_splits",
    "normalize_question",
    "parse_number",
    "read_records",
    "reasoning_gym_score",
    "reasoning_gym_tasks",
    "reset_scoring_stats",
    "score_answer",
    "scoring_stats",
    "split_seed",
]
