"""The cover workflow: each round, k players answer in parallel and their joint answer is scored.

    round r:  k players (one request each, same role, prompts differ by slot)  -> one set of k
              R_S = coverage of round r's target by the set's symbols (srpo.tasks.testbed.tasks)

credit "transition": each round's set is credited with its own coverage (per-transition rewards;
    SRPO's set advantage then differs from the episode's when rounds > 1);
credit "episode": every set gets the episode's outcome, the mean coverage over rounds.
The episode's reward is the mean coverage (component "cover"); with one round both credits agree.

Roles: with `per_slot` false every member is the one role `player` and only the slot index in
the prompt tells slots apart; a tiny random model does not learn to read it (measured: reward
stalls at 0.67 for k = 4, the best a policy blind to the slot gets, 1 - (3/4)^4 = 0.68). With
`per_slot` true each (set size, round, slot) has its own role `{player}_{k}_{r}_{i}` (its own
policy in the presets), so players must coordinate to cover the target without duplicates:
the multi-agent problem the testbed is for. `set_sizes` and `rounds` must then match the task's
(task.testbed), since they name the roles.
"""

from __future__ import annotations

from dataclasses import dataclass

from srpo.tasks.testbed.tasks import SOURCE, coverage, token_symbol
from srpo.types import Task
from srpo.workflows.base import EpisodeContext, Request, WorkflowRun

CREDITS = ("transition", "episode")


@dataclass
class Cover:
    """k players per round cover a target together (task.name: testbed)."""

    player: str = "player"
    credit: str = "transition"  # "transition" | "episode"
    per_slot: bool = False  # one role per (set size, round, slot): {player}_{k}_{r}_{i}
    set_sizes: list[int] | None = None  # per_slot: the tasks' set sizes (task.testbed.set_sizes)
    rounds: int = 1  # per_slot: the tasks' rounds (task.testbed.rounds)

    name = "cover"
    description = ("testbed: k players jointly cover a target of k symbols, a set of size k per "
                   "round (task.name: testbed)")

    def __post_init__(self) -> None:
        if self.credit not in CREDITS:
            raise ValueError(f"cover.credit must be one of {list(CREDITS)}, got {self.credit!r}")
        if self.per_slot and not self.set_sizes:
            raise ValueError("cover.per_slot needs cover.set_sizes (the set sizes of the tasks, "
                             "as in task.testbed.set_sizes): they name the roles")

    def role(self, k: int, round_: int, slot: int) -> str:
        return f"{self.player}_{k}_{round_}_{slot}" if self.per_slot else self.player

    @property
    def default_agents(self) -> dict[str, dict]:
        """Every player role exists with the plain defaults (no system turn)."""
        return {role: {} for role in self.agents}

    @property
    def agents(self) -> tuple[str, ...]:
        if not self.per_slot:
            return (self.player,)
        return tuple(self.role(k, r, i) for k in dict.fromkeys(self.set_sizes)
                     for r in range(self.rounds) for i in range(k))

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        if task.source != SOURCE:
            raise ValueError(
                f"workflow 'cover' needs testbed cover tasks (task.name: testbed), got task "
                f"{task.task_id!r} from {task.source!r}"
            )
        k, m = task.metadata["k"], task.metadata["alphabet"]
        targets = task.metadata["targets"]
        if self.per_slot and (k not in self.set_sizes or len(targets) > self.rounds):
            raise ValueError(
                f"workflow 'cover' (per_slot) has roles for set sizes {self.set_sizes} and "
                f"{self.rounds} round(s), but task {task.task_id!r} has k={k} and "
                f"{len(targets)} round(s); make cover.set_sizes / cover.rounds match task.testbed"
            )
        covered = []
        for r, target in enumerate(targets):
            outs = yield [Request(self.role(k, r, i), f"{task.prompt} | round {r} slot {i}")
                          for i in range(k)]
            symbols = [token_symbol(o.response_ids[0], m) if o.response_ids else None for o in outs]
            covered.append(coverage(symbols, target))
            ctx.transition(f"round-{r}", outs,
                           reward=covered[-1] if self.credit == "transition" else None)
        ctx.metadata["coverage"] = covered
        return {"cover": sum(covered) / len(covered)}
