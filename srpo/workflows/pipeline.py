"""Sequential pipeline: solver -> verifier -> reviser, three hand-offs of size 1.

Each transition is driven by one output: the solver's draft moves the episode to "verify", the
verifier's review to "revise", the reviser's answer ends it (and is scored). The reviser also
reads the draft, but that output already belongs to the earlier transition: each output is
consumed by exactly one transition, the one it drove.
"""

from __future__ import annotations

from dataclasses import dataclass

from srpo.types import Task
from srpo.workflows.base import EpisodeContext, GenericRoles, Request, WorkflowRun, check_template

SOLVE_PROMPT = "{question}"
VERIFY_PROMPT = (
    "Problem: {question}\n\nProposed solution:\n{draft}\n\n"
    "Check the solution step by step. Say whether the final answer is correct and point out "
    "any mistake."
)
REVISE_PROMPT = (
    "Problem: {question}\n\nDraft solution:\n{draft}\n\nReview:\n{review}\n\n"
    "Write the corrected final solution. Give the final answer as \\boxed{{answer}}."
)


@dataclass
class Pipeline(GenericRoles):
    """Transitions: "solve" {solver}, "verify" {verifier}, "revise" {reviser}.
    Reward: the task reward of the reviser's answer."""

    solver: str = "solver"
    verifier: str = "verifier"
    reviser: str = "reviser"
    solve_prompt: str = SOLVE_PROMPT
    verify_prompt: str = VERIFY_PROMPT
    revise_prompt: str = REVISE_PROMPT

    name = "pipeline"
    description = (
        "solver -> verifier -> reviser: three sets of size 1 ('solve', 'verify', 'revise')"
    )

    def __post_init__(self) -> None:
        check_template(self.solve_prompt, ["question"], where="pipeline.solve_prompt")
        check_template(self.verify_prompt, ["question", "draft"], where="pipeline.verify_prompt")
        check_template(
            self.revise_prompt, ["question", "draft", "review"], where="pipeline.revise_prompt"
        )

    @property
    def agents(self) -> tuple[str, ...]:
        return (self.solver, self.verifier, self.reviser)

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        q = task.prompt
        draft = yield Request(self.solver, self.solve_prompt.format(question=q))
        ctx.transition("solve", [draft])
        review = yield Request(
            self.verifier, self.verify_prompt.format(question=q, draft=draft.text)
        )
        ctx.transition("verify", [review])
        final = yield Request(
            self.reviser,
            self.revise_prompt.format(question=q, draft=draft.text, review=review.text),
        )
        ctx.transition("revise", [final])
        return ctx.score(final)
