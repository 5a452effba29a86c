"""The math task pack: reasoning-gym problems or a GSM8K / MATH-500 file, scored by MathReward.

Config (under `task`): source, dataset, difficulty, path, reward (MathSettings below).
"""

from __future__ import annotations

import math
import sys
from typing import Any, Self

from pydantic import Field, model_validator

from srpo.config import ConfigError, Float, InputPath, TaskSettings, one_of
from srpo.packs import TaskPack
from srpo.types import Task


class RewardSettings(TaskSettings):
    """task.reward: the math outcome reward (srpo.tasks.math.MathReward)."""

    correct_weight: Float = 1.0  # weight of the 0/1 correctness component
    format_weight: Float = 0.0  # weight of the 0/1 format component
    format_rule: str = "any"  # "boxed" | "explicit" | "any" | "bare" (srpo.tasks.math.rewards)
    strict: bool = False  # correct only counts when the format is right
    # limit of one symbolic equivalence check, in (0, 3600] seconds (null: none, trusted inputs)
    timeout_s: Float | None = 5.0

    @model_validator(mode="after")
    def _check(self) -> Self:
        from srpo.tasks.math.rewards import FORMAT_RULES, check_timeout  # the reward's own rules
        one_of("task.reward.format_rule", self.format_rule, tuple(FORMAT_RULES))
        try:
            check_timeout(self.timeout_s)
        except ValueError as e:
            raise ConfigError(f"task.reward.{e}") from e
        if not math.isfinite(abs(self.correct_weight) + abs(self.format_weight)):
            raise ConfigError(f"task.reward.correct_weight + task.reward.format_weight must be finite "
                              f"(the largest reward), got {self.correct_weight} + {self.format_weight}")
        return self


class MathSettings(TaskSettings):
    """The math pack's fields under `task`."""

    source: str = "reasoning_gym"  # "reasoning_gym" | "gsm8k" | "math500"
    dataset: str = "basic_arithmetic"  # reasoning_gym: the dataset name
    difficulty: dict[str, Any] = Field(default_factory=dict)  # reasoning_gym: its config knobs
    path: InputPath | None = None  # gsm8k / math500: a local .jsonl or .parquet file
    reward: RewardSettings = Field(default_factory=RewardSettings)  # the outcome reward

    @model_validator(mode="after")
    def _check(self) -> Self:
        one_of("task.source", self.source, ("reasoning_gym", "gsm8k", "math500"))
        if self.source != "reasoning_gym" and not self.path:
            raise ConfigError(f"task.source {self.source!r} needs task.path (a local file)")
        # a number of more digits than Python prints (4300 by default) fails mid-generation with
        # an error naming no setting: refuse a digit count past it here, by its key
        limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
        for key, value in self.difficulty.items():
            if limit and key.endswith("digits") and isinstance(value, int) and value > limit:
                raise ConfigError(f"task.difficulty.{key} must be <= {limit} (the most digits Python "
                                  f"turns a number into text with), got {value}")
        return self

SOLVE = "Solve the math problem. Think briefly, then give the final answer as \\boxed{answer}."

# System prompts of the built-in workflows' roles when they solve math problems.
AGENT_PROMPTS = {
    "solver": SOLVE,
    "verifier": "You check math solutions for mistakes.",
    "reviser": "You fix math solutions using a review.",
    "aggregator": "You compare candidate solutions and pick the right final answer.",
    "debater": SOLVE,
    "planner": "You split math problems into short numbered subtasks.",
    "worker": "You carry out one subtask of a math problem.",
    "router": "You choose which experts should solve a problem.",
    "arithmetic_expert": "You are an arithmetic expert. " + SOLVE,
    "algebra_expert": "You are an algebra expert. " + SOLVE,
    "checker": "You solve problems carefully and double-check. " + SOLVE,
}


def load_tasks(cfg: Any, split: str, size: int) -> list[Task]:
    """The first `size` tasks of `split`. reasoning-gym splits are generated exactly as
    `math_splits` does (train excludes every held-out question), so a prefix here is a prefix
    of the full split; a file's held-out split is its first task.heldout_size records."""
    if cfg.source == "reasoning_gym":
        from srpo.tasks.math import math_splits, reasoning_gym_tasks

        if split == "heldout":
            return reasoning_gym_tasks(cfg.dataset, size=size, seed=cfg.seed, split="heldout",
                                       config=cfg.difficulty)
        train, _ = math_splits(cfg.dataset, train_size=size, heldout_size=cfg.heldout_size,
                               seed=cfg.seed, config=cfg.difficulty)
        return train
    from srpo.tasks.math import load_gsm8k, load_math500

    loader = load_gsm8k if cfg.source == "gsm8k" else load_math500
    tasks = loader(cfg.path)
    # Files have no train/heldout split of their own: held-out = the first heldout_size records.
    tasks = tasks[cfg.heldout_size :] if split == "train" else tasks[: cfg.heldout_size]
    if len(tasks) < size:
        raise ValueError(f"{cfg.path}: only {len(tasks)} {split} tasks, asked for {size}")
    return tasks[:size]


def make_reward(cfg: Any) -> Any:
    from srpo.tasks.math import MathReward

    r = cfg.reward
    return MathReward(correct_weight=r.correct_weight, format_weight=r.format_weight,
                      format_rule=r.format_rule, strict=r.strict, timeout_s=r.timeout_s)


def answer_key(text: str) -> str | None:
    """The extracted final answer, whitespace-normalized; None if absent (majority votes)."""
    from srpo.tasks.math.answers import extract_answer

    found = extract_answer(text)
    return None if found is None else "".join(found.split())


def check_file_split(cfg: Any) -> None:
    """A local GSM8K / MATH-500 file is split by position (held-out = its first
    task.heldout_size records, train = the next task.train_size): refuse a question in both.
    reasoning-gym splits are disjoint by construction (math_splits), so only files are read."""
    if cfg.source == "reasoning_gym":
        return
    from srpo.tasks.math.loaders import check_heldout_overlap

    check_heldout_overlap(load_tasks(cfg, "heldout", cfg.heldout_size),
                          load_tasks(cfg, "train", cfg.train_size), source=str(cfg.path))


PACK = TaskPack(
    name="math",
    description="math problems (reasoning-gym, GSM8K, MATH-500) scored by math-verify",
    load_tasks=load_tasks,
    make_reward=make_reward,
    settings=MathSettings,
    success_component="correct",  # MathReward.success_component
    reward_components=("correct", "format"),  # MathReward's components
    agents={role: {"system_prompt": prompt} for role, prompt in AGENT_PROMPTS.items()},
    answer_key=answer_key,
    check=check_file_split,
)
