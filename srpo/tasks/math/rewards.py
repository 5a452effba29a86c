"""Outcome reward for math tasks, kept as separate named components.

    reward(task, text) -> RewardResult(total, components={"correct": 0/1, "format": 0/1}, ...)
    total = correct_weight * correct + format_weight * format

"format" says the answer was given in the requested form (configurable `format_rule`):
    "boxed":    a complete \\boxed{...}
    "explicit": a \\boxed{...} or an explicit "the answer is X" / "Answer: X" / "#### X"
    "any":      anything extractable, including a bare last number
    "bare":     the whole response is one number and nothing else ("42", " 42. "): what a
                prompt asking for "only the final integer" requests
A failing computation raises RewardError naming the task, never a silent 0; a check that timed
out is scored incorrect and flagged `timed_out` so it can be counted and logged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from srpo.tasks.math.answers import Extraction, extract, parse_number
from srpo.tasks.math.scoring import DEFAULT_TIMEOUT_S, score_answer
from srpo.types import Task

FORMAT_RULES: Mapping[str, frozenset[str]] = {
    "boxed": frozenset({"boxed"}),
    "explicit": frozenset({"boxed", "answer"}),
    "any": frozenset({"boxed", "answer", "number"}),
    "bare": frozenset({"number"}),  # and the whole text parses as that number (_is_formatted)
}


class RewardError(RuntimeError):
    """A reward could not be computed for a task; the message names the task id."""

    def __init__(self, task_id: str, cause: BaseException):
        super().__init__(
            f"reward for task {task_id!r} failed: {type(cause).__name__}: {cause}"
        )
        self.task_id = task_id


@dataclass(frozen=True)
class RewardResult:
    """One scored response.

    total: the weighted sum, always finite.
    components: unweighted indicators {"correct": 0.0|1.0, "format": 0.0|1.0}.
    weights: the weight of each component; total == sum(weights[k] * components[k]).
    extracted: the answer read from the text, None when nothing was found.
    method: how it was extracted ("boxed" | "answer" | "number") or None.
    timed_out: the equivalence check overran its limit (then components["correct"] == 0).
    """

    total: float
    components: dict[str, float]
    extracted: str | None
    timed_out: bool = False
    method: str | None = None
    weights: dict[str, float] = field(default_factory=dict)

    def weighted_components(self) -> dict[str, float]:
        """Each component times its weight; these sum to `total` (Episode.reward_components)."""
        return {k: self.weights.get(k, 0.0) * v for k, v in self.components.items()}


def _is_formatted(text: str, found: Extraction | None, rule: str) -> bool:
    """The response gives its answer in the form `rule` asks for (module doc)."""
    if found is None or found.method not in FORMAT_RULES[rule]:
        return False
    # "bare": nothing but the number, so rambling that happens to end in a number does not count
    return rule != "bare" or parse_number(text) is not None


MAX_TIMEOUT_S = 3600.0  # the longest limit of one symbolic check (threading's own cap is ~1e9 s)


def check_timeout(timeout_s: float | None) -> float | None:
    """timeout_s in (0, MAX_TIMEOUT_S] seconds, or None (no limit); ValueError naming it otherwise."""
    if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                  or not 0 < timeout_s <= MAX_TIMEOUT_S):
        raise ValueError(f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}] seconds (or null: no limit), "
                         f"got {timeout_s!r}")
    return timeout_s


class MathReward:
    """Correctness (+ optional format bonus) of a response against `task.answer`.

    correct_weight, format_weight: finite weights of the two components.
    format_rule: "boxed" | "explicit" | "any" | "bare" (see module doc).
    strict: when True a correct answer in the wrong format scores correct = 0 (the model must
        answer in the requested format to get credit); when False format only adds its bonus.
    timeout_s: wall-clock limit of one symbolic check (see scoring.score_answer).
    Stateless and thread-safe: call it from several rollout workers at once.
    """

    success_component = "correct"  # what evaluation counts as solved (srpo.record.evaluate)

    def __init__(
        self,
        correct_weight: float = 1.0,
        format_weight: float = 0.0,
        *,
        format_rule: str = "any",
        strict: bool = False,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ):
        for name, w in (("correct_weight", correct_weight), ("format_weight", format_weight)):
            if not math.isfinite(w):
                raise ValueError(f"{name} must be finite, got {w!r}")
        if not math.isfinite(abs(correct_weight) + abs(format_weight)):  # each is 0/1: the sum is
            # the largest reward, which must stay a number (1e308 + 1e308 is inf)
            raise ValueError(f"correct_weight + format_weight must be finite, got {correct_weight!r} + "
                             f"{format_weight!r}: lower them")
        if format_rule not in FORMAT_RULES:
            raise ValueError(
                f"format_rule must be one of {sorted(FORMAT_RULES)}, got {format_rule!r}"
            )
        self.correct_weight = float(correct_weight)
        self.format_weight = float(format_weight)
        self.format_rule = format_rule
        self.strict = strict
        self.timeout_s = check_timeout(timeout_s)

    def __call__(self, task: Task, text: str) -> RewardResult:
        try:
            return self._compute(task, text)
        except Exception as e:  # every failure names the task; KeyboardInterrupt passes through
            raise RewardError(getattr(task, "task_id", repr(task)), e) from e

    def _compute(self, task: Task, text: str) -> RewardResult:
        if task.answer is None:
            raise ValueError("the task has no gold answer to compare with")
        found = extract(text)  # raises TypeError for a non-str text
        formatted = _is_formatted(text, found, self.format_rule)
        score = score_answer(
            task.answer, None if found is None else found.text, timeout_s=self.timeout_s
        )
        correct = score.correct and (formatted or not self.strict)
        components = {"correct": float(correct), "format": float(formatted)}
        weights = {"correct": self.correct_weight, "format": self.format_weight}
        total = sum(weights[k] * components[k] for k in components)
        if not math.isfinite(total):  # finite weights whose sum overflows (1e308 each)
            raise ValueError(f"the weighted components { {k: weights[k] * components[k] for k in components} } "
                             f"sum to {total!r}: lower task.reward.correct_weight / format_weight")
        return RewardResult(
            total=total,
            components=components,
            extracted=None if found is None else found.text,
            timed_out=score.timed_out,
            method=None if found is None else found.method,
            weights=weights,
        )
