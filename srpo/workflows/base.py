"""The workflow protocol: a multi-agent system as a small state machine.

A workflow is an object with `name`, `description`, `agents` (the roles it may ask for) and a
`run(task, ctx)` generator. The generator

  * `yield`s generation requests and receives the outputs back:
        out = yield Request("solver", "What is 2+3?")              # one request -> one Output
        outs = yield [Request("solver", q), Request("solver", q)]  # a list -> a list
    (a plain `(agent, content)` tuple works as a Request);
  * records every state transition with the outputs it consumed, its active set:
        ctx.transition("solve", outs)          # one multi-agent action, |S| = len(outs)
  * returns the episode's reward components (usually `ctx.score(final_output)`).

Every generated output must be accounted for by exactly one transition: consumed by it, or
named as one it did not read; an output listed twice or never is an error naming the workflow
and the agent. That is what makes each recorded `ActiveSet` the true multi-agent action that
SRPO updates as a unit. An output the transition did not read (a cut answer a vote leaves out,
a query that was not run) is named as such:

        ctx.transition("vote", voters, unread=cut)   # read: `voters`; not read: `cut`

With train.unconsumed: singleton (the definition's set) the set is `voters`, and each unread
output is trained as a set of its own in the event "<event>:unconsumed" with the run's
unconsumed reward (train.unconsumed_reward, default 0: what an output that states nothing
scores), so it never shares the set's advantage. With in_set (the default, chosen by
measurement) it stays in the set (docs/algorithms.md, "Consumed sets").

Tools and multi-turn agents: any Python code may run between yields (call a retriever, a
calculator...). `ctx.observe(out, text)` appends observation tokens to an output's response
(loss_mask 0: not trained), and `yield Continue(out)` lets the same agent keep generating after
them, extending the same member (its response becomes gen + observation + gen).

The runner (srpo.rollout.runner) drives the generators of many episodes in lock-step rounds and
batches their requests per policy; a workflow never sees models or batching.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Union, runtime_checkable

from srpo.types import ActiveSet, Member, Message, Task, check_template

__all__ = ["UNCONSUMED", "Continue", "EpisodeContext", "GenericRoles", "Message", "Output", "Request",
           "RewardFailure", "Workflow", "WorkflowRun", "check_template", "normalize_reward",
           "unconsumed_event"]

# What an episode context is given (plain callables: a workflow never sees the runner).
ScoreFn = Callable[[Task, str], Any]  # (task, final answer text) -> reward result
TokenizeFn = Callable[[str, str], list[int]]  # (policy, text) -> token ids
AnswerKey = Callable[[str], "str | None"]  # a text's final answer, normalized (voting); None: none


@dataclass(frozen=True)
class Request:
    """Ask `agent` to generate. content: the user turn (str) or chat turns without a system turn
    (the agent adds its system prompt and applies its template to the last user turn)."""

    agent: str
    content: str | Sequence[Message]


@dataclass(frozen=True)
class Continue:
    """Let the agent of `output` keep generating after its response so far (including any
    observations appended with ctx.observe); the new tokens extend the same member."""

    output: Output


RequestLike = Request | Continue | tuple
Reply = Union["Output", list["Output"]]
RewardComponents = dict[str, float]
WorkflowRun = Generator[RequestLike | list[RequestLike], Reply, Mapping[str, float]]


@dataclass(eq=False)
class Output:
    """One generated response, as a workflow sees it (a Member before it is consumed).

    text: everything generated so far plus observations, decoded (special tokens removed).
    last_text: the text of the latest generation (after the latest Continue) only.
    no_answer: the runner marked it as stating no answer: its latest generation was cut by
        the token budget and the run says cut outputs answer nothing (train.cut_answers:
        none). `majority` leaves it out of the vote and `ctx.score` scores it as "".
    """

    agent: str
    policy: str
    messages: tuple[Message, ...]  # the chat it was conditioned on (system turn included)
    prompt_ids: list[int]  # [P]
    response_ids: list[int] = field(default_factory=list)  # [L]
    loss_mask: list[int] = field(default_factory=list)  # [L] 1 generated, 0 observation
    logprobs: list[float] | None = field(default_factory=list)  # [L] or None
    text: str = ""
    last_text: str = ""
    stop_reason: str = ""
    temperature: float = 1.0  # sampling temperature of its generations (0 = greedy)
    index: int = 0  # order of creation within its episode
    consumed_by: str | None = None  # event of the transition that consumed it
    no_answer: bool = False

    def to_member(self) -> Member:
        return Member(
            agent=self.agent,
            policy=self.policy,
            prompt_ids=list(self.prompt_ids),
            response_ids=list(self.response_ids),
            loss_mask=list(self.loss_mask),
            text=self.text,
            sampling_logprobs=None if self.logprobs is None else list(self.logprobs),
            stop_reason=self.stop_reason,
            temperature=self.temperature,
        )

    @property
    def num_tokens(self) -> int:
        return len(self.response_ids)


class RewardFailure(RuntimeError):
    """The task's reward raised; names the task, the agent whose answer was scored and the
    workflow. Never turned into a 0 reward."""

    def __init__(self, task_id: str, agent: str, workflow: str, cause: BaseException):
        super().__init__(
            f"reward failed for task {task_id!r} (answer of agent {agent!r}, workflow "
            f"{workflow!r}): {type(cause).__name__}: {cause}"
        )
        self.task_id, self.agent, self.workflow = task_id, agent, workflow


def normalize_reward(value: Any, *, what: str) -> RewardComponents:
    """A reward function's result -> weighted components {name: float}, all finite.

    Accepts an object with `weighted_components()` (srpo.tasks.math.RewardResult), a mapping of
    components, or a plain number (-> {"reward": x}).
    """
    if hasattr(value, "weighted_components"):
        comps = dict(value.weighted_components())
    elif isinstance(value, Mapping):
        comps = dict(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        comps = {"reward": float(value)}
    else:
        raise TypeError(
            f"{what} must be a RewardResult, a mapping of components or a number, got "
            f"{type(value).__name__}"
        )
    out = {}
    for k, v in comps.items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{what}: component {k!r}={v!r} is not a str -> number pair")
        if not math.isfinite(v):
            raise ValueError(f"{what}: component {k!r} is not finite ({v!r})")
        out[k] = float(v)
    return out


class EpisodeContext:
    """What a workflow's `run` can do besides yielding requests (one per episode).

    task: the task; rollout_index: g in 0..G-1 within the task's group; seed: the run seed.
    rng: a random.Random private to this episode (deterministic in seed, task, rollout).
    metadata: free-form dict copied into Episode.metadata (counts, parse failures, routes...).
    unconsumed: what `transition(..., unread=...)` does with the outputs a transition did not
        read: "singleton" (each is its own set in the event "<event>:unconsumed", credited
        `unconsumed_reward`) or "in_set" (default: they join the transition's set;
        train.unconsumed).
    workflow_name: the name recorded on the episode (a mixed workflow sets its pick's name).
    reward_fn: (task, answer text) -> reward result; what `score` calls.
    tokenize: (policy, text) -> ids without special-token additions; what `observe` calls.
    answer_key: (text) -> the final answer it states, normalized, or None (majority votes
        compare these); given by the task pack (default: the stripped text itself).
    """

    def __init__(self, task: Task, workflow_name: str, *, rollout_index: int, seed: int,
                 reward_fn: ScoreFn, tokenize: TokenizeFn, answer_key: AnswerKey | None = None,
                 unconsumed: str = "in_set", unconsumed_reward: float = 0.0):
        if unconsumed not in UNCONSUMED:
            raise ValueError(f"unconsumed must be one of {list(UNCONSUMED)}, got {unconsumed!r}")
        if not math.isfinite(unconsumed_reward):
            raise ValueError(f"unconsumed_reward must be finite, got {unconsumed_reward!r}")
        self.unconsumed = unconsumed
        self.unconsumed_reward = float(unconsumed_reward)
        self.task = task
        self.workflow_name = workflow_name
        self.rollout_index = rollout_index
        self.seed = seed
        self.rng = random.Random(f"{seed}/{task.task_id}/{rollout_index}")
        self.metadata: dict[str, Any] = {}
        self.transitions: list[ActiveSet] = []
        self.outputs: list[Output] = []
        self._reward_fn = reward_fn
        self._tokenize = tokenize
        self.answer_key: AnswerKey = answer_key or _whole_text_answer

    # ------------------------------------------------------------------ transitions

    def transition(
        self, event: str, consumed: Sequence[Output], *, reward: float | None = None,
        unread: Sequence[Output] = (),
    ) -> ActiveSet | None:
        """Record one state transition and the outputs it consumed (its active set).

        event: the transition's type, e.g. "solve", "aggregate", "round-2" (advantage grouping
            may refine the task key with it). reward: a return credited to this transition
            only; None = the episode's outcome reward (the default for every built-in).
        unread: outputs produced for this transition that it did not read (a cut answer left
            out of a vote, a query that was not run). They are not members of its set: each
            becomes a singleton set of its own in the event "<event>:unconsumed", credited the
            run's unconsumed reward (module doc). `consumed` may then be empty (a vote that
            read nothing); the transition records no set of its own, and None is returned.
        Returns the consumed set.
        """
        where = f"workflow {self.workflow_name!r}, task {self.task.task_id!r}, event {event!r}"
        if not isinstance(event, str) or not event:
            raise ValueError(f"{where}: event must be a non-empty string")
        consumed, unread = list(consumed), list(unread)
        if self.unconsumed == "in_set" and unread:  # the ablation: the set holds them too, in
            # the order they were generated (as a workflow listed them before consumed sets)
            consumed, unread = sorted([*consumed, *unread], key=lambda o: o.index), []
        if not consumed and not unread:
            raise ValueError(f"{where}: a transition must consume at least one output")
        seen: set[int] = set()
        for out in [*consumed, *unread]:
            if not isinstance(out, Output) or all(out is not o for o in self.outputs):
                raise ValueError(
                    f"{where}: consumed {out!r}, which is not an output of this episode"
                )
            if id(out) in seen:
                raise ValueError(f"{where}: the output of agent {out.agent!r} is listed twice")
            seen.add(id(out))
            if out.consumed_by is not None:
                raise ValueError(
                    f"{where}: the output of agent {out.agent!r} was already consumed by event "
                    f"{out.consumed_by!r}; each output belongs to exactly one transition"
                )
        if reward is not None and not math.isfinite(reward):
            raise ValueError(f"{where}: transition reward must be finite, got {reward!r}")
        aset, turn = None, len(self.transitions)  # a transition's singletons share its turn
        if consumed:
            for out in consumed:
                out.consumed_by = event
            aset = ActiveSet(
                members=tuple(o.to_member() for o in consumed),
                event=event,
                task_id=self.task.task_id,
                turn=turn,
                reward=reward,
            )
            self.transitions.append(aset)
        for out in unread:
            out.consumed_by = unconsumed_event(event)
            self.transitions.append(ActiveSet(
                members=(out.to_member(),),
                event=out.consumed_by,
                task_id=self.task.task_id,
                turn=turn,
                reward=self.unconsumed_reward,
                unconsumed_from=event,
            ))
        return aset

    def set_members(self, read: Sequence[Output], unread: Sequence[Output] = ()) -> list[Output]:
        """The outputs `transition(event, read, unread=unread)` will put in its set: `read`, or
        under unconsumed "in_set" all of them in generation order (for a workflow's own credit
        over the set's members)."""
        if self.unconsumed == "in_set" and unread:
            return sorted([*read, *unread], key=lambda o: o.index)
        return list(read)

    # ------------------------------------------------------------------ rewards

    def score(self, answer: Output | str, *, agent: str | None = None) -> RewardComponents:
        """The task reward of a final answer, as weighted components.

        answer: the output holding the final answer, or a text (e.g. merged outputs) with
        `agent` naming who produced it (used in errors). An output marked `no_answer` is
        scored as the empty text. A raising reward function gives a
        RewardFailure naming task, agent and workflow.
        """
        if isinstance(answer, Output):
            # a cut output under train.cut_answers: none states nothing (Output.no_answer)
            text, agent = ("" if answer.no_answer else answer.text), answer.agent
        else:
            text = answer
            if agent is None:
                raise ValueError("ctx.score(text) needs agent= naming who produced the text")
        try:
            result = self._reward_fn(self.task, text)
            components = normalize_reward(result, what="the reward")
        except Exception as e:
            raise RewardFailure(self.task.task_id, agent, self.workflow_name, e) from e
        self.metadata["answer_agent"] = agent
        if hasattr(result, "extracted"):  # RewardResult: what the reward read as the answer
            self.metadata["extracted_answer"] = result.extracted
        return components

    # ------------------------------------------------------------------ tools

    def observe(self, output: Output, text: str) -> list[int]:
        """Append observation tokens (a tool result) to `output`'s response with loss_mask 0.

        The text is tokenized with the output's policy tokenizer (special tokens such as
        `<|im_end|>` in it are parsed as such) and appended to output.text. Returns the ids.
        """
        if output.consumed_by is not None:
            raise ValueError(
                f"workflow {self.workflow_name!r}: cannot append an observation to the output of "
                f"agent {output.agent!r}, it was already consumed by {output.consumed_by!r}"
            )
        ids = self._tokenize(output.policy, text)
        output.response_ids.extend(ids)
        output.loss_mask.extend([0] * len(ids))
        if output.logprobs is not None:
            output.logprobs.extend([0.0] * len(ids))  # not sampled; masked out of the loss
        output.text += text
        return ids


@runtime_checkable
class Workflow(Protocol):
    """What the runner needs from a workflow (see module doc).

    Optional, looked up with getattr by srpo.build:
      default_agents: {role: {"system_prompt", "template", "sampling", "policy"}} defaults of
          the roles it declares (a task pack's prompts and the config's `agents` overlay them);
          a role with no default anywhere must be configured.
      with_environment(env) -> workflow: a copy bound to the environment the task pack builds
          (e.g. a retriever); a workflow that defines it is refused with a pack that has none.
    """

    name: str
    description: str

    @property
    def agents(self) -> tuple[str, ...]:
        """Every agent name `run` may request (checked against the configured agents first)."""
        ...

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun: ...


UNCONSUMED = ("singleton", "in_set")  # EpisodeContext's unconsumed (train.unconsumed)


def unconsumed_event(event: str) -> str:
    """The event of the singleton sets of outputs that `event`'s transition did not read."""
    return f"{event}:unconsumed"


def _whole_text_answer(text: str) -> str | None:
    """The default answer key: the whole text, whitespace-normalized (None if empty)."""
    key = " ".join(text.split())
    return key or None


class GenericRoles:
    """default_agents of a built-in generic workflow: each of its standard roles (those of its
    default parameters, e.g. parallel's "solver" and "aggregator") exists with the plain
    defaults (no system turn, the template "{input}"); the task pack supplies the prompts (the
    math pack's "Solve the math problem..."). A role renamed in the params (aggregator: judge)
    has no default: the config defines it."""

    @property
    def default_agents(self) -> dict[str, dict[str, Any]]:
        standard = set(type(self)().agents)  # type: ignore[call-arg]
        return {role: {} for role in self.agents if role in standard}  # type: ignore[attr-defined]
