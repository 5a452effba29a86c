"""Parallel solvers + aggregator: k answers read together by one aggregator.

The k solver outputs jointly drive ONE transition (the aggregator reads them all), so they form
one active set of size k; the aggregator's answer is a set of size 1 and is scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from srpo.types import Task
from srpo.workflows.base import EpisodeContext, GenericRoles, Request, WorkflowRun, check_template

SOLVE_PROMPT = "{question}"
AGGREGATE_PROMPT = (
    "Problem: {question}\n\n{solutions}\n\n"
    "The solutions above may disagree. Decide which answer is right and give the final answer "
    "as \\boxed{{answer}}."
)


def numbered(texts: Sequence[str], label: str = "Solution") -> str:
    return "\n\n".join(f"{label} {i + 1}:\n{t}" for i, t in enumerate(texts))


@dataclass
class ParallelAggregate(GenericRoles):
    """k solvers (all `solver`, or the roles listed in `solvers`) then `aggregator`.

    Transitions: "solve" {k solvers}, "aggregate" {aggregator}. Reward: the aggregator's answer.
    """

    k: int = 3
    solver: str = "solver"
    solvers: list[str] | None = None  # distinct roles per slot; overrides k and solver
    aggregator: str = "aggregator"
    solve_prompt: str = SOLVE_PROMPT
    aggregate_prompt: str = AGGREGATE_PROMPT

    name = "parallel"
    description = (
        "k parallel solvers + an aggregator: a set of size k ('solve'), then 1 ('aggregate')"
    )

    def __post_init__(self) -> None:
        if self.solvers is not None:
            if not self.solvers:
                raise ValueError("parallel.solvers must name at least one agent")
            self.solvers = list(self.solvers)
            self.k = len(self.solvers)
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"parallel.k must be an int >= 1, got {self.k!r}")
        check_template(self.solve_prompt, ["question"], where="parallel.solve_prompt")
        check_template(
            self.aggregate_prompt, ["question", "solutions"], where="parallel.aggregate_prompt"
        )

    @property
    def slots(self) -> list[str]:
        return list(self.solvers) if self.solvers is not None else [self.solver] * self.k

    @property
    def agents(self) -> tuple[str, ...]:
        return (*dict.fromkeys(self.slots), self.aggregator)

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        q = task.prompt
        answers = yield [Request(a, self.solve_prompt.format(question=q)) for a in self.slots]
        ctx.transition("solve", answers)
        final = yield Request(
            self.aggregator,
            self.aggregate_prompt.format(question=q, solutions=numbered([a.text for a in answers])),
        )
        ctx.transition("aggregate", [final])
        return ctx.score(final)
