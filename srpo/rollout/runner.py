"""The rollout runner: drives many episodes' workflows at once, batching generation.

    runner = RolloutRunner(agents, backend, reward_fn, seed=0)
    result = runner.run(tasks, workflow, group_size=G)   # G rollouts per task
    result.episodes      # [len(tasks) * G] Episodes, task-major (task 0's G rollouts first)

Lock-step rounds: every episode's `run` generator is advanced until it yields requests; the
runner gathers all pending requests of the round across episodes and roles, groups them by
policy, calls the backend ONCE per policy (one batched generate, chunked by the backend only
if asked) and sends each episode its outputs. An episode that returns leaves the loop; the
others go on. So a parallel-k workflow over E episodes generates E*k solver answers in one
batch, then E aggregator answers in the next.

Sampling is random through torch's global RNG (HF generate): seed it (torch.manual_seed) before
`run` for reproducible rollouts; workflow-level randomness uses ctx.rng, derived from `seed`.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from srpo.rollout.agents import AgentSpec, check_agent_names
from srpo.rollout.backends.protocol import STOP_REASONS, Generation, GenerationBackend, GenerationRequest
from srpo.rollout.overlong import CUT, apply_overlong_penalty, check_penalty
from srpo.rollout.policies import check_policy_names
from srpo.types import Episode, Task
from srpo.workflows.base import (
    UNCONSUMED,
    Continue,
    EpisodeContext,
    Output,
    Request,
    Workflow,
    normalize_reward,
)

RewardFn = Callable[[Task, str], Any]  # -> RewardResult | {component: value} | float
# what an output cut by the token budget answers (RolloutRunner's cut_answers)
CUT_ANSWERS = ("score", "none")


@dataclass
class RolloutResult:
    episodes: list[Episode]
    stats: dict[str, float] = field(default_factory=dict)  # rounds, calls, tokens, seconds...


# The most generation rounds one episode may take (a workflow may set its own `max_rounds`):
# a workflow whose stop condition never holds would otherwise generate forever, e.g. in the
# first evaluation. A round is one yield of the workflow's run(); the built-in workflows take
# fewer than 20 (docs/workflows.md)
MAX_ROUNDS = 1000


def max_rounds(workflow: Workflow) -> int:
    """The workflow's own `max_rounds` (an int >= 1), else MAX_ROUNDS."""
    limit = getattr(workflow, "max_rounds", None)
    if limit is None:
        return MAX_ROUNDS
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"workflow {workflow.name!r}: max_rounds must be an int >= 1, got {limit!r}")
    return limit


RAISED_IN_WORKFLOW = "(raised while running "  # the note _advance adds to a workflow's exception


def workflow_error_line(error: BaseException) -> str | None:
    """One line for an error a workflow run raised (the workflow's own code, its reward, or a
    contract the runner checks: all name the workflow and task), None for anything else (a bug
    of srpo's own, which keeps its traceback). The CLI prints it instead of a traceback unless
    SRPO_DEBUG is set."""
    from srpo.workflows.base import RewardFailure

    notes = [n for n in getattr(error, "__notes__", ()) if n.startswith(RAISED_IN_WORKFLOW)]
    message = str(error)
    if not (notes or isinstance(error, RewardFailure) or
            (isinstance(error, (ValueError, TypeError)) and message.startswith("workflow '"))):
        return None
    text = " ".join([f"{type(error).__name__}: {message}", *notes])
    # one line: a message of several lines (a workflow's own exception) is joined
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


@dataclass(eq=False)
class _Live:
    """One running episode: its context, generator and the requests of the current round."""

    ctx: EpisodeContext
    gen: Any
    requests: list[GenerationRequest] = field(default_factory=list)
    targets: list[Output] = field(default_factory=list)  # output each request fills/extends
    single: bool = False  # the workflow yielded one request (reply with one Output)
    declared: frozenset[str] = frozenset()  # the workflow's `agents`: the only roles it may ask
    max_rounds: int = MAX_ROUNDS  # the rounds it may take (max_rounds)
    rounds: int = 0  # the rounds it has yielded requests for
    done: bool = False
    value: Any = None  # what run() returned (the reward components)


class EpisodeDriver:
    """One episode advanced by a caller that generates the requests itself (e.g. an async
    generation server, one episode at a time): the same records as RolloutRunner.run.

        driver = runner.start_episode(task, workflow)
        while not driver.done:
            driver.submit([my_generate(r) for r in driver.requests])
        episode = driver.finish()
    """

    def __init__(self, runner: RolloutRunner, live: _Live):
        self._runner = runner
        self._live = live
        runner._advance(live, None)

    @property
    def done(self) -> bool:
        return self._live.done

    @property
    def requests(self) -> list[GenerationRequest]:
        """This round's requests (empty once done); answer them in this order."""
        return list(self._live.requests)

    def submit(self, generations: Sequence[Generation]) -> None:
        """One generation per request of this round, in order; advances the workflow."""
        lv = self._live
        if lv.done:
            raise ValueError(f"{self._runner._where(lv)}: the episode is finished; nothing to submit")
        if len(generations) != len(lv.requests):
            raise ValueError(f"{self._runner._where(lv)}: {len(generations)} generations for "
                             f"{len(lv.requests)} requests")
        for req, target, gen in zip(lv.requests, lv.targets, generations):
            self._runner._apply(lv, req, target, gen)
        self._runner._advance(lv, lv.targets[0] if lv.single else list(lv.targets))

    def finish(self) -> Episode:
        if not self._live.done:
            raise ValueError(f"{self._runner._where(self._live)}: the episode is still running")
        return self._runner._finish(self._live)


class RolloutRunner:
    """Runs workflows on tasks with the given agents, backend and task reward (module doc).

    agents: role name -> AgentSpec (or a list of AgentSpecs).
    backend: a GenerationBackend; every agent's policy must be one of backend.policies.
    reward_fn: (task, final answer text) -> RewardResult | mapping | float. Errors propagate
        as RewardFailure naming task, agent and workflow.
    seed: seeds each episode's ctx.rng (workflow-level randomness, e.g. mixed's draw).
    answer_key: (text) -> the final answer it states, normalized, or None; what majority votes
        compare (the task pack's; default: the whole text, whitespace-normalized).
    overlong_penalty: w >= 0; when > 0 every episode's reward gets the component
        overlong = -w * (share of its outputs the token budget cut), and a transition with its
        own reward is charged for its members' share (srpo.rollout.overlong). A training
        setting (train.overlong_penalty); evaluation runners leave it at 0.
    cut_answers: "score" (default): an output cut by the token budget (stop reason "length")
        is read and scored like any other; "none": it states no answer (Output.no_answer:
        majority votes leave it out, ctx.score scores it as ""). A training setting
        (train.cut_answers); evaluation runners score cut outputs.
    unconsumed, unconsumed_reward: what becomes of an output a transition names as not read
        (`ctx.transition(..., unread=...)`: a cut answer a vote leaves out): "singleton"
        trains it as a set of its own credited `unconsumed_reward` (default 0); "in_set"
        (default) keeps it in the transition's set. train.unconsumed,
        train.unconsumed_reward (srpo.workflows.base).
    """

    def __init__(
        self,
        agents: Mapping[str, AgentSpec] | Sequence[AgentSpec],
        backend: GenerationBackend,
        reward_fn: RewardFn,
        *,
        seed: int = 0,
        answer_key: Callable[[str], str | None] | None = None,
        overlong_penalty: float = 0.0,
        cut_answers: str = "score",
        unconsumed: str = "in_set",
        unconsumed_reward: float = 0.0,
    ):
        if not isinstance(agents, Mapping):
            agents = {a.name: a for a in agents}
        for key, spec in agents.items():
            if key != spec.name:
                raise ValueError(f"agent registered as {key!r} is named {spec.name!r}")
        check_policy_names({a.name: a.policy for a in agents.values()}, backend.policies)
        self.agents = dict(agents)
        self.backend = backend
        self.reward_fn = reward_fn
        self.seed = seed
        self.answer_key = answer_key
        self.overlong_penalty = check_penalty(overlong_penalty)
        if cut_answers not in CUT_ANSWERS:
            raise ValueError(f"cut_answers must be one of {list(CUT_ANSWERS)}, got {cut_answers!r}")
        self.cut_answers = cut_answers
        if unconsumed not in UNCONSUMED:
            raise ValueError(f"unconsumed must be one of {list(UNCONSUMED)}, got {unconsumed!r}")
        if isinstance(unconsumed_reward, bool) or not isinstance(unconsumed_reward, (int, float)) \
                or not math.isfinite(unconsumed_reward):
            raise ValueError(f"unconsumed_reward must be a finite number, got {unconsumed_reward!r}")
        self.unconsumed, self.unconsumed_reward = unconsumed, float(unconsumed_reward)

    # ------------------------------------------------------------------ tokenization

    def tokenize_chat(self, policy: str, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The exact prompt ids: the policy's chat template with the generation prompt."""
        tok = self.backend.policies[policy].tokenizer
        text = tok.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return list(tok(text, add_special_tokens=False)["input_ids"])

    def tokenize_text(self, policy: str, text: str) -> list[int]:
        tok = self.backend.policies[policy].tokenizer
        return list(tok(text, add_special_tokens=False)["input_ids"])

    # ------------------------------------------------------------------ running

    def run(
        self, tasks: Iterable[Task], workflow: Workflow, *, group_size: int = 1,
        on_round: Callable[[int, int, int], None] | None = None,
    ) -> RolloutResult:
        """G = group_size rollouts of `workflow` on each task, all advanced together.
        on_round(round, episodes finished, episodes) after each round (a progress bar's hook)."""
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
        tasks = list(tasks)
        dupes = sorted(i for i, n in Counter(t.task_id for t in tasks).items() if n > 1)
        if dupes:
            raise ValueError(f"duplicate task ids {dupes[:5]}: task ids must be unique per run")
        declared = frozenset(getattr(workflow, "agents", ()))
        check_agent_names(sorted(declared), self.agents, where=f"workflow {workflow.name!r}")
        limit = max_rounds(workflow)
        start = time.perf_counter()
        calls0, tokens0 = self.backend.stats.calls, self.backend.stats.generated_tokens
        lives = []
        for task in tasks:
            for g in range(group_size):
                ctx = self.episode_context(task, workflow.name, rollout_index=g)
                lives.append(_Live(ctx=ctx, gen=workflow.run(task, ctx), declared=declared,
                                   max_rounds=limit))
        for live in lives:
            self._advance(live, None)
        rounds = 0
        while True:
            active = [lv for lv in lives if not lv.done]
            if not active:
                break
            rounds += 1
            by_policy: dict[str, list[tuple[_Live, int]]] = {}
            for lv in active:
                for j, req in enumerate(lv.requests):
                    by_policy.setdefault(req.policy, []).append((lv, j))
            for policy, items in by_policy.items():
                reqs = [lv.requests[j] for lv, j in items]
                gens = self.backend.generate(policy, reqs)
                if len(gens) != len(reqs):
                    raise ValueError(
                        f"backend returned {len(gens)} generations for {len(reqs)} requests of "
                        f"policy {policy!r}"
                    )
                for (lv, j), gen in zip(items, gens):
                    self._apply(lv, lv.requests[j], lv.targets[j], gen)
            for lv in active:
                reply = lv.targets[0] if lv.single else list(lv.targets)
                self._advance(lv, reply)
            if on_round is not None:
                on_round(rounds, sum(lv.done for lv in lives), len(lives))
        seconds = time.perf_counter() - start
        tokens = self.backend.stats.generated_tokens - tokens0
        episodes = [self._finish(lv) for lv in lives]
        stats = {
            "rounds": float(rounds),
            "generate_calls": float(self.backend.stats.calls - calls0),
            "generated_tokens": float(tokens),
            "seconds": seconds,
            "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        }
        return RolloutResult(episodes=episodes, stats=stats)

    def start_episode(self, task: Task, workflow: Workflow, *, rollout_index: int = 0) -> EpisodeDriver:
        """One episode to drive request by request (EpisodeDriver)."""
        declared = frozenset(getattr(workflow, "agents", ()))
        check_agent_names(sorted(declared), self.agents, where=f"workflow {workflow.name!r}")
        ctx = self.episode_context(task, workflow.name, rollout_index=rollout_index)
        return EpisodeDriver(self, _Live(ctx=ctx, gen=workflow.run(task, ctx), declared=declared,
                                         max_rounds=max_rounds(workflow)))

    def episode_context(self, task: Task, workflow_name: str, *, rollout_index: int) -> EpisodeContext:
        """The context of one episode: this runner's reward, tokenizer and answer key, as
        plain callables (a workflow never sees the runner)."""
        return EpisodeContext(task, workflow_name, rollout_index=rollout_index, seed=self.seed,
                              reward_fn=self.reward_fn, tokenize=self.tokenize_text,
                              answer_key=self.answer_key, unconsumed=self.unconsumed,
                              unconsumed_reward=self.unconsumed_reward)

    def _where(self, lv: _Live) -> str:
        c = lv.ctx
        return f"workflow {c.workflow_name!r}, task {c.task.task_id!r}, rollout {c.rollout_index}"

    def _advance(self, lv: _Live, reply: Any) -> None:
        """Send the reply; collect the next requests, or the return value when it finishes."""
        try:
            yielded = lv.gen.send(reply)
        except StopIteration as stop:
            lv.done = True
            lv.requests, lv.targets = [], []
            lv.value = stop.value
            return
        except Exception as e:
            e.add_note(f"{RAISED_IN_WORKFLOW}{self._where(lv)})")
            raise
        lv.rounds += 1
        if lv.rounds > lv.max_rounds:
            lv.gen.close()
            raise ValueError(
                f"workflow {lv.ctx.workflow_name!r} did not finish within {lv.max_rounds} generation "
                f"rounds (task {lv.ctx.task.task_id!r}, rollout {lv.ctx.rollout_index}): its stop condition "
                f"never held; end run() with a return, or set the workflow's max_rounds "
                f"(srpo.rollout.runner.MAX_ROUNDS)"
            )
        single = not isinstance(yielded, list)
        items = [yielded] if single else yielded
        if not items:
            raise ValueError(f"{self._where(lv)}: yielded an empty list of requests")
        lv.single = single
        lv.requests, lv.targets = [], []
        for item in items:
            req, target = self._make_request(lv, item)
            lv.requests.append(req)
            lv.targets.append(target)
        if len({id(t) for t in lv.targets}) != len(lv.targets):
            raise ValueError(f"{self._where(lv)}: the same output is continued twice in one round")

    def _make_request(self, lv: _Live, item: Any) -> tuple[GenerationRequest, Output]:
        ctx = lv.ctx
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            item = Request(*item)
        if isinstance(item, Request):
            check_agent_names([item.agent], self.agents, where=self._where(lv))
            if item.agent not in lv.declared:
                raise ValueError(
                    f"{self._where(lv)}: requested agent {item.agent!r}, which the workflow does not "
                    f"declare in its `agents` {sorted(lv.declared)}; a workflow may only ask the "
                    f"roles it declares (they are checked against the config before it runs)"
                )
            spec = self.agents[item.agent]
            messages = tuple(spec.messages(item.content))
            prompt_ids = self.tokenize_chat(spec.policy, messages)
            target = Output(
                agent=spec.name, policy=spec.policy, messages=messages, prompt_ids=prompt_ids, index=len(ctx.outputs)
            )
            ctx.outputs.append(target)
            context_ids = prompt_ids
        elif isinstance(item, Continue):
            target = item.output
            if all(target is not o for o in ctx.outputs):
                raise ValueError(f"{self._where(lv)}: Continue of an output of another episode")
            if target.consumed_by is not None:
                raise ValueError(
                    f"{self._where(lv)}: cannot continue the output of agent {target.agent!r}; "
                    f"it was already consumed by {target.consumed_by!r}"
                )
            spec = self.agents[target.agent]
            messages = target.messages
            context_ids = target.prompt_ids + target.response_ids
        else:
            raise TypeError(
                f"{self._where(lv)}: yielded {type(item).__name__}; yield a Request(agent, "
                f"content), an (agent, content) tuple, a Continue(output) or a list of them"
            )
        req = GenerationRequest(
            agent=spec.name,
            policy=spec.policy,
            messages=messages,
            prompt_ids=tuple(context_ids),
            sampling=spec.sampling,
        )
        return req, target

    def _apply(self, lv: _Live, req: GenerationRequest, out: Output, gen: Generation) -> None:
        """Validate one backend generation and write it into its Output."""
        where = f"{self._where(lv)}, agent {req.agent!r} (policy {req.policy!r})"
        if not isinstance(gen, Generation):
            raise TypeError(f"{where}: backend returned {type(gen).__name__}, not a Generation")
        ids = list(gen.token_ids)
        if not ids:
            raise ValueError(
                f"{where}: the backend returned zero tokens. A response has at least one token; "
                f"an empty answer is the single eos token"
            )
        if gen.stop_reason not in STOP_REASONS:
            raise ValueError(f"{where}: unknown stop reason {gen.stop_reason!r}; expected {STOP_REASONS}")
        tok = self.backend.policies[req.policy].tokenizer
        if gen.stop_reason == "eos" and ids[-1] != tok.eos_token_id:
            raise ValueError(f"{where}: stop_reason 'eos' but the last token is not eos")
        if gen.logprobs is not None:
            if len(gen.logprobs) != len(ids):
                raise ValueError(f"{where}: {len(gen.logprobs)} log-probs for {len(ids)} tokens")
            if not all(math.isfinite(x) for x in gen.logprobs):
                raise ValueError(f"{where}: non-finite sampling log-prob")
        text = tok.decode(ids, skip_special_tokens=True)
        first = not out.response_ids
        if not first and req.sampling.temperature != out.temperature:
            # one member, one sampling distribution: its log-probs are computed at one temperature
            raise ValueError(
                f"{where}: a continuation sampled at temperature {req.sampling.temperature} of an "
                f"output sampled at {out.temperature}"
            )
        out.temperature = req.sampling.temperature
        out.response_ids.extend(ids)
        out.loss_mask.extend([1] * len(ids))
        if gen.logprobs is None or (out.logprobs is None and not first):
            out.logprobs = None
        else:
            if out.logprobs is None:
                out.logprobs = []
            out.logprobs.extend(float(x) for x in gen.logprobs)
        out.text += text
        out.last_text = text
        out.stop_reason = gen.stop_reason
        out.no_answer = self.cut_answers == "none" and gen.stop_reason == CUT

    def _finish(self, lv: _Live) -> Episode:
        ctx = lv.ctx
        where = self._where(lv)
        value = lv.value
        for out in ctx.outputs:
            if out.consumed_by is None:
                raise ValueError(
                    f"{where}: the output #{out.index} of agent {out.agent!r} was never consumed "
                    f"by a transition; every generated output must be consumed by exactly one "
                    f"ctx.transition(...), or named in its unread=[...] when it did not read it"
                )
        if not ctx.transitions:
            raise ValueError(f"{where}: the episode recorded no transition")
        if value is None:
            raise ValueError(
                f"{where}: run() returned no reward; end it with `return ctx.score(final_output)` "
                f"(or a dict of reward components)"
            )
        components = normalize_reward(value, what=f"{where}: the return value of run()")
        if self.overlong_penalty > 0:
            components = apply_overlong_penalty(components, ctx.transitions, self.overlong_penalty)
        metadata = {"rollout_index": ctx.rollout_index, **ctx.metadata}
        return Episode(
            task=ctx.task,
            workflow=ctx.workflow_name,
            transitions=list(ctx.transitions),
            reward=_finite_sum(components, where),
            reward_components=components,
            metadata=metadata,
        )


def _finite_sum(components: dict[str, float], where: str) -> float:
    """The episode's reward, the sum of its (finite) components; a sum past the largest float
    (huge reward weights) is a ValueError naming the workflow, task and components."""
    try:
        total = math.fsum(components.values())
    except OverflowError:  # fsum's own "intermediate overflow"
        total = math.inf
    if not math.isfinite(total):
        raise ValueError(
            f"{where}: the reward components {components} sum past the largest float "
            f"({total}); lower the weights of the reward functions"
        )
    return total


# --------------------------------------------------------------------------- metrics


def rollout_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Flat metrics of a batch of episodes (for logs and the CLI summary).

    reward/mean, reward/std (population), reward/<component>: mean weighted component;
    sets/size_<k>: number of active sets of size k; sets/count, members/count;
    event/<key>: sets per event key; workflow/<name>: episodes per workflow;
    tokens/generated: trained (loss_mask 1) tokens; length/<agent>: mean response length;
    members/empty_share: the share of members whose response is only the eos token;
    answers/top_share: share of episodes whose final answer (metadata extracted_answer) is the
    most common one (absent when no episode records one);
    stop/length: share of members cut by the token budget; members/empty: members whose
    response is only the eos token; members/unconsumed_share: the share of outputs no
    transition read (singletons of `unread` outputs), and members/unconsumed_share/<event>
    the same for the outputs produced for each event's transitions (read or not); episode/<key>:
    the mean of a number the workflow recorded in episode metadata (e.g. episode/route_invalid,
    the share of unparsable router outputs).
    """
    out: dict[str, float] = {"episodes": float(len(episodes))}
    if not episodes:
        return out
    rewards = [e.reward for e in episodes]
    mean = math.fsum(rewards) / len(rewards)
    out["reward/mean"] = mean
    out["reward/std"] = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / len(rewards))
    comps: Counter = Counter()
    for e in episodes:
        comps.update(e.reward_components)
    for k, v in sorted(comps.items()):
        out[f"reward/{k}"] = v / len(episodes)
    sizes: Counter = Counter()
    events: Counter = Counter()
    lengths: dict[str, list[int]] = {}
    members = stopped_by_length = empty = generated = 0
    produced: Counter = Counter()  # outputs of each event's transitions, read or not
    unread: Counter = Counter()
    for e in episodes:
        for s in e.transitions:
            sizes[s.size] += 1
            events[s.event] += 1
            source = s.event if s.consumed else s.unconsumed_from
            produced[source] += s.size
            unread[source] += 0 if s.consumed else s.size
            for m in s.members:
                members += 1
                generated += m.num_trained_tokens
                lengths.setdefault(m.agent, []).append(len(m.response_ids))
                stopped_by_length += m.stop_reason == "length"
                empty += m.num_trained_tokens == 1 and m.stop_reason == "eos"
    for k in sorted(sizes):
        out[f"sets/size_{k}"] = float(sizes[k])
    out["sets/count"] = float(sum(sizes.values()))
    out["members/count"] = float(members)
    out["members/empty"] = float(empty)
    out["members/empty_share"] = empty / members if members else 0.0
    out["stop/length"] = stopped_by_length / members if members else 0.0
    out["members/unconsumed_share"] = sum(unread.values()) / members if members else 0.0
    # the share of episodes whose final answer (what the reward read: metadata extracted_answer)
    # is the most common one; a constant answer is a drift (srpo.record.drift)
    answers = Counter(
        e.metadata["extracted_answer"] for e in episodes if e.metadata.get("extracted_answer") is not None
    )
    if answers:
        out["answers/top_share"] = answers.most_common(1)[0][1] / len(episodes)
    for k in sorted(produced):
        out[f"members/unconsumed_share/{k}"] = unread[k] / produced[k]
    out["tokens/generated"] = float(generated)
    for k in sorted(events):
        out[f"event/{k}"] = float(events[k])
    for a in sorted(lengths):
        out[f"length/{a}"] = sum(lengths[a]) / len(lengths[a])
    for w, n in sorted(Counter(e.workflow for e in episodes).items()):
        out[f"workflow/{w}"] = float(n)
    # What workflows record per episode as numbers in metadata (tool calls, malformed tags,
    # recall@k, votes, invalid routes as 0/1...): the mean per episode over the episodes that
    # report it, as episode/<key> (a 0/1 flag's mean is its rate). The runner's own
    # bookkeeping (rollout_index) is not a metric; non-numbers (lists of reasons) are skipped.
    values: dict[str, list[float]] = {}
    for e in episodes:
        for k, v in e.metadata.items():
            if k not in NOT_EPISODE_METRICS and isinstance(v, (int, float)):
                values.setdefault(k, []).append(float(v))
    for k in sorted(values):
        out[f"episode/{k}"] = sum(values[k]) / len(values[k])
    return out


NOT_EPISODE_METRICS = frozenset({"rollout_index"})
