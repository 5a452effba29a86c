"""Drift warnings: a run that drifts says so while it trains, not only at the final evaluation.

Three drifts have made the default recipe worse on tasks it was not tuned on
(docs/benchmarks.md): answers that ramble until the token budget cuts most of them, one
constant answer (the most common gold) that the reward pays without the skill, and answers that
shrink to nothing (the policy says eos at once). Each step's rollout metrics carry all three
(srpo.rollout.runner.rollout_metrics):

    rollout/stop/length         share of the step's outputs cut by the token budget
    rollout/answers/top_share   share of the step's episodes whose final answer is the step's
                                most common one
    rollout/members/empty_share share of the step's outputs that are empty (eos at once)

A warning fires the first step a share reaches its threshold after having started below it
(step 1's value is the run's start: a task where most answers are cut from the first step is
not a drift), once per kind per run:

    CUT_SHARE_WARN = 0.75       three answers in four cut
    TOP_ANSWER_WARN = 0.5       the held-out evaluation's own flag (srpo.record.evaluate)
    EMPTY_SHARE_WARN = 0.25     one output in four empty

The trainer prints each warning as one line on the console (after a resume its watch starts
again at the resumed step); the report recomputes them from the whole metrics.jsonl with the
same function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

CUT_SHARE_WARN = 0.75
TOP_ANSWER_WARN = 0.5
EMPTY_SHARE_WARN = 0.25
WATCHED = (
    ("rollout/stop/length", CUT_SHARE_WARN, ("of the training outputs were cut by the token budget "
     "(sampling.max_new_tokens): answers are rambling; consider train.cut_answers / the budget")),
    ("rollout/answers/top_share", TOP_ANSWER_WARN, ("of the training episodes gave the same final "
     "answer: a near-constant answer the reward may pay without the skill")),
    ("rollout/members/empty_share", EMPTY_SHARE_WARN, ("of the training outputs were empty (eos at "
     "once): the policy is collapsing to saying nothing")),
)


@dataclass(frozen=True)
class DriftWarning:
    step: int
    key: str
    value: float
    start: float
    threshold: float
    text: str

    def line(self) -> str:
        return (f"warning: step {self.step}: {100 * self.value:.0f}% {self.text} (step 1: "
                f"{100 * self.start:.0f}%; warned at {100 * self.threshold:.0f}%)")


def drift_warnings(rows: Iterable[Mapping[str, object]]) -> list[DriftWarning]:
    """The warnings of a run's training rows (metrics.jsonl lines with "loss"), in order."""
    start: dict[str, float] = {}
    fired: set[str] = set()
    out = []
    for row in rows:
        for key, threshold, text in WATCHED:
            value = row.get(key)
            if not isinstance(value, (int, float)) or key in fired:
                continue
            if key not in start:
                start[key] = float(value)
                continue
            if start[key] < threshold <= value:
                fired.add(key)
                out.append(DriftWarning(int(row.get("step", 0)), key, float(value), start[key], threshold, text))
    return out


class DriftWatch:
    """drift_warnings one step at a time: `check(row)` returns the warnings that step fires."""

    def __init__(self) -> None:
        self._rows: list[Mapping[str, object]] = []
        self._seen = 0

    def check(self, row: Mapping[str, object]) -> list[DriftWarning]:
        self._rows.append(row)
        found = drift_warnings(self._rows)
        new, self._seen = found[self._seen:], len(found)
        return new
