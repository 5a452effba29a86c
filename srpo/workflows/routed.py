"""Dynamically routed: a router agent (a trained policy) picks which experts act, and how many.

1. The router reads the task and the expert list and answers with expert names, comma
   separated ("algebra_expert, checker"). Its output drives the "route" transition (size 1).
2. The chosen experts answer; their outputs form the next active set ("experts", size = the
   number chosen, so set sizes vary from episode to episode).
3. With `aggregator` set, it reads the experts' answers and answers ("aggregate", size 1);
   without, the majority answer of the experts is scored.

Strict parsing (`parse_route`): after stripping surrounding whitespace the reply must be a
comma-separated list of distinct expert names, between min_experts and max_experts of them,
and nothing else. Anything else is an invalid choice: the `fallback` experts act instead, the
episode gets the reward component route_penalty = -penalty (0.0 when valid, so every episode
carries it), and episode.metadata records route_invalid = 1 and route_error (the reason).
Every episode's metadata also records routed_to/<expert> (1 if that expert acted, else 0):
a step's metrics average them into the share of episodes routed to each expert.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from srpo.types import Task
from srpo.workflows.base import EpisodeContext, GenericRoles, Request, WorkflowRun, check_template
from srpo.workflows.parallel import numbered
from srpo.workflows.voting import majority, split_voters

ROUTE_PROMPT = (
    "Problem: {question}\n\nAvailable experts:\n{experts}\n\nChoose between {min} and {max} "
    "experts to solve this problem. Reply with their names separated by commas and nothing "
    "else."
)
EXPERT_PROMPT = "{question}"
AGGREGATE_PROMPT = (
    "Problem: {question}\n\n{solutions}\n\nDecide which answer is right and give the final "
    "answer as \\boxed{{answer}}."
)


class RouteError(ValueError):
    """A router reply that does not parse; the message says why."""


def parse_route(text: str, experts: list[str], min_experts: int, max_experts: int) -> list[str]:
    """The chosen experts, in the order given; RouteError explains an invalid reply."""
    body = text.strip()
    if not body:
        raise RouteError("empty reply")
    names = [part.strip() for part in body.split(",")]
    unknown = [n for n in names if n not in experts]
    if unknown:
        raise RouteError(f"unknown expert name(s) {unknown[:3]}")
    if len(set(names)) != len(names):
        raise RouteError("an expert is named twice")
    if not min_experts <= len(names) <= max_experts:
        raise RouteError(f"{len(names)} experts chosen, allowed {min_experts}..{max_experts}")
    return names


@dataclass
class Routed(GenericRoles):
    """Transitions: "route" {router}, "experts" {chosen experts} (+ "aggregate" {aggregator}).

    experts: the agent names the router may choose from (distinct).
    descriptions: optional one-line description per expert, shown to the router.
    fallback: experts used when the router's reply is invalid ("all", "first", or a list).
    penalty: route_penalty = -penalty on an invalid reply (a reward component of its own).
    fixed_route: the route without a router, the baseline a trained router is measured
        against: a list (every problem goes to these experts) or {kind: [experts]} (by the
        task's kind, `task.metadata["kind"]`: a mix of reasoning-gym datasets; a kind not
        named is an error). The router is then not asked: no "route" transition,
        route_penalty 0, and metadata `route` as for a valid choice. The router stays a
        declared role, so a routed config runs with only this parameter changed.
    """

    router: str = "router"
    experts: list[str] = field(
        default_factory=lambda: ["arithmetic_expert", "algebra_expert", "checker"]
    )
    descriptions: dict[str, str] = field(default_factory=dict)
    min_experts: int = 1
    max_experts: int | None = None  # None = all experts
    fallback: str | list[str] = "first"
    penalty: float = 0.5
    aggregator: str | None = None
    fixed_route: list[str] | dict[str, list[str]] | None = None
    route_prompt: str = ROUTE_PROMPT
    expert_prompt: str = EXPERT_PROMPT
    aggregate_prompt: str = AGGREGATE_PROMPT

    name = "routed"
    description = (
        "a router picks which experts act (and how many): 'route' 1, then 'experts' "
        "of variable size; invalid choices fall back and are penalized"
    )

    def __post_init__(self) -> None:
        self.experts = list(self.experts)
        if not self.experts or len(set(self.experts)) != len(self.experts):
            raise ValueError(f"routed.experts must be distinct agent names, got {self.experts}")
        for e in self.experts:
            if "," in e or e != e.strip():
                raise ValueError(f"routed.experts: name {e!r} cannot be routed to (comma/space)")
        if self.max_experts is None:
            self.max_experts = len(self.experts)
        if not 1 <= self.min_experts <= self.max_experts <= len(self.experts):
            raise ValueError(
                f"routed: need 1 <= min_experts ({self.min_experts}) <= max_experts "
                f"({self.max_experts}) <= number of experts ({len(self.experts)})"
            )
        unknown = sorted(set(self.descriptions) - set(self.experts))
        if unknown:
            raise ValueError(f"routed.descriptions names unknown experts {unknown}")
        if self.fallback == "all":
            self._fallback = list(self.experts)
        elif self.fallback == "first":
            self._fallback = self.experts[: self.min_experts]
        else:
            if isinstance(self.fallback, str):
                raise ValueError(
                    f"routed.fallback must be 'all', 'first' or a list of experts, got "
                    f"{self.fallback!r}"
                )
            self._fallback = list(self.fallback)
            bad = [e for e in self._fallback if e not in self.experts]
            if bad or not self._fallback:
                raise ValueError(
                    f"routed.fallback {self._fallback} must be a non-empty list of experts"
                )
        if not self.penalty >= 0:
            raise ValueError(f"routed.penalty must be >= 0, got {self.penalty!r}")
        if self.fixed_route is not None:
            routes = (self.fixed_route.values() if isinstance(self.fixed_route, dict)
                      else [self.fixed_route])
            for route in routes:
                if (isinstance(route, str) or not route or len(set(route)) != len(route)
                        or any(e not in self.experts for e in route)):
                    raise ValueError(f"routed.fixed_route: {route!r} must be a non-empty list of "
                                     f"distinct experts of {self.experts}")
        check_template(
            self.route_prompt, ["question", "experts", "min", "max"], where="routed.route_prompt"
        )
        check_template(self.expert_prompt, ["question"], where="routed.expert_prompt")
        check_template(
            self.aggregate_prompt, ["question", "solutions"], where="routed.aggregate_prompt"
        )

    @property
    def agents(self) -> tuple[str, ...]:
        extra = (self.aggregator,) if self.aggregator else ()
        return tuple(dict.fromkeys([self.router, *self.experts, *extra]))

    def _fixed(self, task: Task) -> list[str]:
        if not isinstance(self.fixed_route, dict):
            return list(self.fixed_route)
        kind = task.metadata.get("kind")
        if kind not in self.fixed_route:
            raise ValueError(f"routed.fixed_route names no route for task {task.task_id!r} of kind "
                             f"{kind!r}; it routes the kinds {sorted(self.fixed_route)}")
        return list(self.fixed_route[kind])

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        q = task.prompt
        listing = "\n".join(
            f"- {e}: {self.descriptions[e]}" if e in self.descriptions else f"- {e}"
            for e in self.experts
        )
        if self.fixed_route is not None:
            chosen, penalty = self._fixed(task), 0.0
            ctx.metadata["route_invalid"] = 0
        else:
            route = yield Request(
                self.router,
                self.route_prompt.format(question=q, experts=listing, min=self.min_experts,
                                         max=self.max_experts),
            )
            ctx.transition("route", [route])
            try:
                chosen = parse_route(route.text, self.experts, self.min_experts, self.max_experts)
                penalty = 0.0
                ctx.metadata["route_invalid"] = 0
            except RouteError as e:
                chosen = list(self._fallback)
                penalty = -float(self.penalty)
                ctx.metadata["route_invalid"] = 1
                ctx.metadata["route_error"] = str(e)
        ctx.metadata["route"] = chosen
        # one 0/1 number per expert: averaged over a step's episodes, the share routed to it
        # (`episode/routed_to/<expert>`), so a router that stops choosing an expert shows
        for expert in self.experts:
            ctx.metadata[f"routed_to/{expert}"] = int(expert in chosen)
        answers = yield [Request(e, self.expert_prompt.format(question=q)) for e in chosen]
        if self.aggregator is None:
            # the vote reads the answers that state one; a cut answer is not consumed by it
            voters, unread = split_voters(answers)
            ctx.transition("experts", voters, unread=unread)
            final, votes = majority(answers, ctx.answer_key)
            ctx.metadata["votes"] = votes
        else:  # the aggregator reads every expert's text, cut or not
            ctx.transition("experts", answers)
            final = yield Request(
                self.aggregator,
                self.aggregate_prompt.format(question=q,
                                             solutions=numbered([a.text for a in answers])),
            )
            ctx.transition("aggregate", [final])
        return {**ctx.score(final), "route_penalty": penalty}
