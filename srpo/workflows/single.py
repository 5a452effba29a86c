"""Single agent: one agent answers; one active set of size 1."""

from __future__ import annotations

from dataclasses import dataclass

from srpo.types import Task
from srpo.workflows.base import EpisodeContext, GenericRoles, Request, WorkflowRun, check_template

DEFAULT_PROMPT = "{question}"


@dataclass
class SingleAgent(GenericRoles):
    """agent: the role that answers. prompt: its user turn ({question} = the task prompt).

    Transitions: "answer" {agent}. Reward: the task reward of its answer.
    """

    agent: str = "solver"
    prompt: str = DEFAULT_PROMPT

    name = "single"
    description = "one agent answers the task: one set of size 1 ('answer')"

    def __post_init__(self) -> None:
        check_template(self.prompt, ["question"], where="single.prompt")

    @property
    def agents(self) -> tuple[str, ...]:
        return (self.agent,)

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        out = yield Request(self.agent, self.prompt.format(question=task.prompt))
        ctx.transition("answer", [out])
        return ctx.score(out)
