"""Debate: n agents answer, then revise r-1 times after reading each other.

All n answers of round j are read together by every debater of round j+1 (or by the final vote
after the last round): they drive one transition, so each round is one active set of size n.
The final vote reads only the answers that state one: an answer cut by the token budget under
train.cut_answers: none is not consumed by it (`split_voters`, named unread), so under
train.unconsumed: singleton the last round's set holds the others and each cut answer is a
singleton of its own ("round-r:unconsumed"); under in_set (the default) it stays in the set. An earlier
round's cut answers stay in their set: the next round's debaters read their text.
The final answer is the majority answer of the last round (ties: the first debater's); the
output carrying it is scored: that is the episode's reward, and held-out accuracy reads it.

What each round's set is credited with for training (`credit`):
  "episode" (default): the episode's outcome, the vote (transition reward None);
  "debaters": the mean of its members' own rewards, each debater's answer scored as if it
      were the final one: R_round = (1/n) sum_i R(answer_i). With one round and n identical
      debaters this is the expected reward of one sampled answer, which is what greedy
      held-out accuracy of a single policy tracks; a group of G episodes then holds 3G scored
      answers instead of G votes, so more groups carry an advantage where answers are rarely
      right (measured before training on gcd up to 40: 11 of 16 groups against the vote's 3;
      docs/benchmarks.md, which also shows it did not make such tasks learn).
      Recorded as metadata debaters_credit_r<r>. The episode's reward stays the vote.
  "own": per-output credit, the per-output baselines' (GRPO with per-debater credit): each
      debater's answer is a transition of its own (a set of 1, event "round-r") credited its
      own reward R(answer_i), so the round is not one set. With a member-level method (GRPO)
      this credits each answer alone; with SRPO it is GSPO on each answer. The episode's reward
      stays the vote.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from srpo.types import Task
from srpo.workflows.base import EpisodeContext, GenericRoles, Request, WorkflowRun, check_template
from srpo.workflows.voting import majority, split_voters

CREDITS = ("episode", "debaters", "own")  # debate.credit (module doc)

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
    credit: what each round's set is credited with: "episode" (the vote), "debaters" (the
        mean of its members' own rewards) or "own" (each answer its own set and reward); see
        the module doc.
    """

    debaters: list[str] = field(default_factory=lambda: ["debater", "debater"])
    rounds: int = 2
    first_prompt: str = FIRST_PROMPT
    debate_prompt: str = DEBATE_PROMPT
    credit: str = "episode"

    name = "debate"
    description = "n debaters x r rounds, majority vote: one set of size n per round ('round-j')"

    def __post_init__(self) -> None:
        self.debaters = list(self.debaters)
        if not self.debaters:
            raise ValueError("debate.debaters must name at least one agent")
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise ValueError(f"debate.rounds must be an int >= 1, got {self.rounds!r}")
        if self.credit not in CREDITS:
            raise ValueError(f"debate.credit must be one of {list(CREDITS)}, got {self.credit!r}")
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
            self._record_round(ctx, r - 1, answers, [])
            requests = []
            for i, agent in enumerate(self.debaters):
                others = "\n\n".join(
                    f"Agent {j + 1}:\n{a.text}" for j, a in enumerate(answers) if j != i
                )
                prompt = self.debate_prompt.format(question=q, own=answers[i].text,
                                                   others=others or "(none)")
                requests.append(Request(agent, prompt))
            answers = yield requests
        # the vote reads the answers that state one: a cut answer (no_answer) is not consumed
        voters, unread = split_voters(answers)
        self._record_round(ctx, self.rounds, voters, unread)
        winner, votes = majority(answers, ctx.answer_key)
        ctx.metadata["votes"] = votes
        return ctx.score(winner)  # last: its answer_agent / extracted_answer stay in metadata

    def _record_round(self, ctx: EpisodeContext, r: int, read: list, unread: list) -> None:
        """Round r's transition(s): one set of the answers read (credit "episode" or
        "debaters"), or one set per answer (credit "own"); the unread ones as singletons."""
        event = f"round-{r}"
        if self.credit == "own":
            # in generation order; an unread answer's reward (that of "") applies only where
            # train.unconsumed: in_set keeps it as a set
            for a in sorted([*read, *unread], key=lambda o: o.index):
                is_read = any(a is o for o in read)
                ctx.transition(event, [a] if is_read else [], unread=[] if is_read else [a],
                               reward=sum(ctx.score(a).values()))
            return
        members = ctx.set_members(read, unread)  # what the set will hold (train.unconsumed)
        ctx.transition(event, read, unread=unread,
                       reward=self._round_credit(ctx, r, members) if members else None)

    def _round_credit(self, ctx: EpisodeContext, r: int, answers: list) -> float | None:
        """credit "debaters": (1/n) sum_i R(answer_i), R the weighted sum of the reward's
        components; "episode": None (the set gets the episode's outcome)."""
        if self.credit == "episode":
            return None
        credit = sum(sum(ctx.score(a).values()) for a in answers) / len(answers)  # the set's members
        ctx.metadata[f"debaters_credit_r{r}"] = credit
        return credit
