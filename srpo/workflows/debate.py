"""Debate: n agents answer, then revise r-1 times after reading each other.

All n answers of round j are read together by every debater of round j+1 (or by the final vote
after the last round): they drive one transition, so each round is one active set of size n.
The final answer is the majority answer of the last round (ties: the first debater's); the
output carrying it is scored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from srpo.types import Task
from srpo.workflows.base import GenericRoles, EpisodeContext, Request, WorkflowRun, check_template
from srpo.workflows.voting import majority

FIRST_PROMPT = "{question}"
DEBATE_PROMPT = (
    "Problem: {question}\n\nYour previous answer:\n{own}\n\nThe other agents answered:\n{others}"
    "\n\nConsider their reasoning, then give your updated solution with the final answer as "
    "\\boxed{{answer}}."
)


@dataclass
class Debate(GenericRoles):
    """Transitions: "round-1" ... "round-r", each {n debaters}. Reward: the majority answer.

    debaters: the role of each debater slot (n = len(debaters); a role may repeat).
    """

    debaters: list[str] = field(default_factory=lambda: ["debater", "debater"])
    rounds: int = 2
    first_prompt: str = FIRST_PROMPT
    debate_prompt: str = DEBATE_PROMPT

    name = "debate"
    description = "n debaters x r rounds, majority vote: one set of size n per round ('round-j')"

    def __post_init__(self) -> None:
        self.debaters = list(self.debaters)
        if not self.debaters:
            raise ValueError("debate.debaters must name at least one agent")
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise ValueError(f"debate.rounds must be an int >= 1, got {self.rounds!r}")
        check_template(self.first_prompt, ["question"], where="debate.first_prompt")
        check_template(
            self.debate_prompt, ["question", "own", "others"], where="debate.debate_prompt"
        )

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.debaters))

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        q = task.prompt
        answers = yield [Request(a, self.first_prompt.format(question=q)) for a in self.debaters]
        for r in range(2, self.rounds + 1):
            ctx.transition(f"round-{r - 1}", answers)
            requests = []
            for i, agent in enumerate(self.debaters):
                others = "\n\n".join(
                    f"Agent {j + 1}:\n{a.text}" for j, a in enumerate(answers) if j != i
                )
                prompt = self.debate_prompt.format(question=q, own=answers[i].text,
                                                   others=others or "(none)")
                requests.append(Request(agent, prompt))
            answers = yield requests
        ctx.transition(f"round-{self.rounds}", answers)
        winner, votes = majority(answers, ctx.answer_key)
        ctx.metadata["votes"] = votes
        return ctx.score(winner)
