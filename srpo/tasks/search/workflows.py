"""Multi-turn search workflows: agents search a corpus with <search>query</search> and answer
with <answer>...</answer> (the protocol and its outcomes: srpo/tasks/search/env.py).

| workflow | transitions: event {set members} | scored |
|---|---|---|
| search_single | `search` {searcher} | the searcher's answer |
| search_parallel | per round r: `query-r` {the k query writers whose queries ran}, `read-r` {answerer} | the answerer's
| search_planner | `plan` {planner}, `search` {searcher}, `answer` {answerer} | the answerer's |
| search_routed | `route` {router}, then the chosen route's transitions | that route's answer |

A searcher is ONE member spanning its turns: generation, observation (loss_mask 0), generation,
... (as a tool-using agent in docs/workflows.md). Its turns are steps of one policy acting
alone, and the outcome is only known at the end, so the whole trajectory is one action of size
1 (with the `mean` reduction, a GSPO-style sequence ratio over its generated tokens).
The k query writers of a round drive ONE transition, the retrieval that runs their queries
together (one retriever call): they form one active set of size k.

The retriever comes from the task: a search workflow has an `env` (SearchEnv) that the search
task pack builds from the config's `task.search` section and srpo.build binds through the
workflow protocol's `with_environment(env)`; in code, construct it with
`env=SearchEnv(retriever, ...)`. Parameters are dataclass fields (config:
workflow.params); prompts name their fields ({question}, ...) as listed per class.

search_parallel's `credit: retrieval` gives each "query-r" set its own reward, the recall gain
of its retrieval (see SearchParallel); every other transition gets the episode's outcome.

Every episode's metadata carries the search counts (SearchStats.metadata: search_calls,
search_dropped, search_invalid, search_truncated, search_budget_exhausted, recall_at_k...) and
the unweighted answer scores score_em, score_f1, score_format.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from srpo.tasks.search.env import SearchEnv, SearchStats, parse_turn, recall_gain
from srpo.tasks.search.rewards import answer_scores
from srpo.types import Task
from srpo.workflows.base import (
    Continue,
    EpisodeContext,
    Output,
    Request,
    RewardComponents,
    WorkflowRun,
    check_template,
)
from srpo.workflows.planner import parse_plan

# Default agents of the search roles (a config's `agents` overlay them field by field):
# generation stops at </search> so the results can be inserted before the agent goes on.
SEARCH_AGENTS: dict[str, dict[str, Any]] = {
    "searcher": {"system_prompt": "You answer questions by searching a document collection.",
                 "sampling": {"stop": ["</search>"]}},
    "query_writer": {"system_prompt": "You write one search query as <search>query</search>.",
                     "sampling": {"stop": ["</search>"]}},
    "answerer": {"system_prompt": "You answer questions from search results, as "
                                  "<answer>answer</answer>."},
    "planner": {"system_prompt": "You split questions into short numbered subquestions."},
    "router": {"system_prompt": "You choose whether to answer a question directly or to search."},
}


class _SearchRoles:
    """default_agents: the search roles' defaults, for the role names this workflow uses."""

    @property
    def default_agents(self) -> dict[str, dict[str, Any]]:
        return {role: SEARCH_AGENTS.get(role, {}) for role in self.agents}  # type: ignore[attr-defined]

SEARCH_PROMPT = (
    "Answer the question. You may search a document collection: write <search>query</search> "
    "and the results appear between <information> and </information>. Search as often as you "
    "need, then give the final answer, a few words only, as <answer>answer</answer>.\n\n"
    "Question: {question}"
)
QUERY_PROMPT = (
    "Question: {question}\n\nFound so far:\n{found}\n\nStill missing: {note}\n\n"
    "Write one search query that finds the missing information, as <search>query</search>."
)
READ_PROMPT = "Question: {question}\n\nSearch results:\n{information}\n\n{instruction}"
MORE_INSTRUCTION = (
    "If the results answer the question, reply with <answer>answer</answer> (a few words). "
    "Otherwise say in one line what is missing; another search round follows."
)
FINAL_INSTRUCTION = "Reply with the answer as <answer>answer</answer> (a few words)."
PLAN_PROMPT = (
    "Question: {question}\n\nSplit it into short numbered sub-questions (\"1. ...\"), one per "
    "line, that a searcher can look up one after the other."
)
PLANNED_SEARCH_PROMPT = (
    "Question: {question}\n\nSub-questions:\n{subquestions}\n\nSearch for each sub-question: "
    "write <search>query</search> and the results appear between <information> and "
    "</information>. When you have found what is needed, write your findings as "
    "<answer>findings</answer>."
)
PLANNED_ANSWER_PROMPT = (
    "Question: {question}\n\nSub-questions:\n{subquestions}\n\nSearch results:\n{information}"
    "\n\nSearcher's findings: {findings}\n\nReply with the answer as <answer>answer</answer> "
    "(a few words)."
)
ROUTE_PROMPT = (
    "Question: {question}\n\nHow should it be answered?\n"
    "- direct: answer from memory, without searching\n"
    "- search: one searcher looks it up\n"
    "- parallel: {k} query writers search at once\n"
    "Reply with one word: direct, search or parallel."
)
DIRECT_PROMPT = "Question: {question}\n\nReply with the answer as <answer>answer</answer> (a few words)."

ROUTES = ("direct", "search", "parallel")
CREDITS = ("episode", "retrieval")  # search_parallel.credit
BETWEEN_ROUNDS = ("answer_or_note", "note", "none")  # search_parallel.between_rounds


def _check_env(env: Any, where: str) -> None:
    if env is not None and not isinstance(env, SearchEnv):
        raise ValueError(
            f"{where}.env must be a SearchEnv (srpo builds it from the config's task.search "
            f"section), got {type(env).__name__}"
        )


def _need_env(env: SearchEnv | None, name: str) -> SearchEnv:
    if env is None:
        raise ValueError(
            f"workflow {name!r} has no search environment: run it with task.name: search (srpo "
            f"builds the retriever from task.search), or construct it with env=SearchEnv(...)"
        )
    return env


def _positive(where: str, value: Any, *, none_ok: bool = False) -> None:
    if none_ok and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be an int >= 1, got {value!r}")


def _finish(task: Task, ctx: EpisodeContext, env: SearchEnv, stats: SearchStats,
            answer: Output | str, agent: str) -> RewardComponents:
    """Score the answer; record the search counts and the unweighted answer scores, read as the
    reward reads them (an untagged reply answers with its first line under plain_text_fallback,
    which task.search sets for the environment and the reward alike)."""
    components = ctx.score(answer, agent=agent)
    ctx.metadata.update(stats.metadata(task.metadata))
    if task.answer is not None:
        text = answer.text if isinstance(answer, Output) else answer
        scores = answer_scores(task, text, plain_text_fallback=env.plain_text_fallback)
        ctx.metadata.update({f"score_{k}": v for k, v in scores.items()})
    return components


@dataclass
class SearchLoop:
    """What one searcher's turns produced.

    output: the searcher's output (one member spanning the turns); texts: its generations
    (observations excluded); answer: the content of its answer block (None: no answer).
    """

    output: Output
    texts: list[str]
    answer: str | None

    @property
    def generated(self) -> str:
        """The generations joined by newlines: what the reward reads (no observations)."""
        return "\n".join(self.texts)


def search_loop(env: SearchEnv, ctx: EpisodeContext, agent: str, prompt: str,
                stats: SearchStats, max_turns: int):
    """Run one searcher until it answers or `max_turns` generations are spent (a generator:
    `loop = yield from search_loop(...)`). A search in the last allowed generation is not run
    (no turn is left to read it): the budget is exhausted (stats.budget_exhausted = 1)."""
    out = yield Request(agent, prompt)
    texts = []
    for turn in range(1, max_turns + 1):
        texts.append(out.last_text)
        stats.turns += 1
        parsed = parse_turn(out.last_text)
        if parsed.answer is not None:
            return SearchLoop(out, texts, parsed.answer)
        if turn == max_turns:
            break
        ctx.observe(out, env.observation(parsed, stats))
        out = yield Continue(out)
    stats.budget_exhausted = 1
    return SearchLoop(out, texts, None)


@dataclass
class SearchSingle(_SearchRoles):
    """One searcher, multi-turn: search until it answers or the turn budget ends.

    Transitions: "search" {searcher} (one member spanning its turns). Reward: its generations.
    max_turns: the turn budget (None: the environment's, task.search.max_turns).
    prompt fields: {question}.
    """

    searcher: str = "searcher"
    max_turns: int | None = None
    prompt: str = SEARCH_PROMPT
    env: SearchEnv | None = None

    name = "search_single"
    description = (
        "one searcher, multi-turn <search>/<answer> with masked observations: one set of 1 "
        "('search')"
    )

    def __post_init__(self) -> None:
        _positive("search_single.max_turns", self.max_turns, none_ok=True)
        check_template(self.prompt, ["question"], where="search_single.prompt")
        _check_env(self.env, "search_single")

    @property
    def agents(self) -> tuple[str, ...]:
        return (self.searcher,)

    def with_environment(self, env: SearchEnv) -> SearchSingle:
        return dataclasses.replace(self, env=env)

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        env = _need_env(self.env, self.name)
        stats = SearchStats()
        loop = yield from search_loop(env, ctx, self.searcher,
                                      self.prompt.format(question=task.prompt), stats,
                                      self.max_turns or env.max_turns)
        ctx.transition("search", [loop.output])
        return _finish(task, ctx, env, stats, loop.generated, self.searcher)


@dataclass
class SearchParallel(_SearchRoles):
    """k query writers, one retrieval, an answerer that answers or asks for another round.

    Round r: each writer proposes a query (<search>q</search>; its first max_calls_per_turn
    queries run); their outputs form ONE set "query-r" (size k): ONE retriever call runs all
    their queries. The answerer reads everything found so far (dedup by doc id, by best rank)
    and replies <answer>...</answer>, or says what is missing: then round r+1 (up to `rounds`;
    the last round's answerer is told to answer). Its output is the set "read-r" (size 1).
    Reward: the last answerer's output. A writer output without a valid query is counted in
    search_invalid; the retrieval ran nothing of it, so it is not consumed (named unread):
    under train.unconsumed: singleton the set "query-r" holds the writers whose queries ran and
    each invalid writer is a singleton of its own ("query-r:unconsumed", credited
    train.unconsumed_reward); under in_set (the default) it stays in the set.

    credit: what each "query-r" set is credited with (the "read-r" sets always get the
    episode's outcome, and the episode's reward is the same either way):
      "episode" (default): the episode's outcome reward (transition reward None);
      "retrieval": its own retrieval's credit, a per-transition reward in [0, 1],
          credit_r = (1 - w) * gain_r + w * hit_r, w = credit_hit_weight (default 0), where
          gain_r = |G ∩ (D_r - D_<r)| / |G| (G: task.metadata["supporting_doc_ids"], D_r: the
          documents round r's one retrieval call returned, top_k per query; D_<r: those of the
          earlier rounds) and hit_r = 1 if G ∩ D_r is not empty, else 0. A round whose queries
          are all invalid runs no retrieval: D_r is empty, credit 0. With w = 0 the credits
          of an episode sum to its recall_at_k. Recorded as metadata retrieval_credit_r<r>
          (rounds that ran) and retrieval_credit_total (their sum). A task without
          supporting_doc_ids is an error (never a silent 0).
    between_rounds: what the answerer does after a round that is not the last:
      "answer_or_note" (default): it reads, and a well-formed <answer> ends the episode; any
          other reply is the next round's {note};
      "note": it reads and its whole reply (tags and all) is the next round's {note}; every
          round runs (a fixed R-round search, for questions known to need R hops);
      "none": no read; every round runs, the next round's writers see what was found ({note}
          is empty) and the answerer reads once, after the last round (sets: query-1, ...,
          query-R, read-R).
    query_prompt fields: {question}, {found}, {note}; first_query_prompt (round 1, when given;
    nothing is found yet): {question}; read_prompt: {question}, {information}, {instruction},
    where {instruction} is more_instruction, or final_instruction in the last round.
    """

    k: int = 3
    writer: str = "query_writer"
    writers: list[str] | None = None  # distinct roles per slot; overrides k and writer
    answerer: str = "answerer"
    rounds: int = 2
    query_prompt: str = QUERY_PROMPT
    first_query_prompt: str | None = None  # round 1's query prompt (None: query_prompt)
    read_prompt: str = READ_PROMPT
    more_instruction: str = MORE_INSTRUCTION  # {instruction} of every read but the last
    final_instruction: str = FINAL_INSTRUCTION  # {instruction} of the last round's read
    credit: str = "episode"  # "episode" | "retrieval" (see the class doc)
    credit_hit_weight: float = 0.0  # w in [0, 1]: credit = (1 - w) * recall gain + w * any hit
    between_rounds: str = "answer_or_note"  # "answer_or_note" | "note" | "none" (class doc)
    env: SearchEnv | None = None

    name = "search_parallel"
    description = (
        "k query writers -> one retrieval -> an answerer, up to R rounds: sets of k "
        "('query-r') and 1 ('read-r')"
    )

    def __post_init__(self) -> None:
        if self.writers is not None:
            if not self.writers:
                raise ValueError("search_parallel.writers must name at least one agent")
            self.writers = list(self.writers)
            self.k = len(self.writers)
        _positive("search_parallel.k", self.k)
        _positive("search_parallel.rounds", self.rounds)
        if self.credit not in CREDITS:
            raise ValueError(
                f"search_parallel.credit must be one of {list(CREDITS)}, got {self.credit!r}"
            )
        w = self.credit_hit_weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0.0 <= w <= 1.0:
            raise ValueError(f"search_parallel.credit_hit_weight must be a number in [0, 1], "
                             f"got {w!r}")
        if w and self.credit != "retrieval":
            raise ValueError("search_parallel.credit_hit_weight applies only with credit: "
                             f"retrieval (credit is {self.credit!r})")
        if self.between_rounds not in BETWEEN_ROUNDS:
            raise ValueError(f"search_parallel.between_rounds must be one of {list(BETWEEN_ROUNDS)}, "
                             f"got {self.between_rounds!r}")
        check_template(self.query_prompt, ["question", "found", "note"],
                       where="search_parallel.query_prompt")
        if self.first_query_prompt is not None:
            check_template(self.first_query_prompt, ["question"],
                           where="search_parallel.first_query_prompt")
        check_template(self.read_prompt, ["question", "information", "instruction"],
                       where="search_parallel.read_prompt")
        _check_env(self.env, "search_parallel")

    @property
    def slots(self) -> list[str]:
        return list(self.writers) if self.writers is not None else [self.writer] * self.k

    @property
    def agents(self) -> tuple[str, ...]:
        return (*dict.fromkeys(self.slots), self.answerer)

    def with_environment(self, env: SearchEnv) -> SearchParallel:
        return dataclasses.replace(self, env=env)

    def supporting_ids(self, task: Task) -> list[str]:
        """The task's supporting document ids, which credit "retrieval" needs (else an error)."""
        ids = task.metadata.get("supporting_doc_ids")
        if not ids:
            raise ValueError(
                f"search_parallel.credit='retrieval' needs the task's supporting documents, but "
                f"task {task.task_id!r} has no metadata['supporting_doc_ids'] (NQ questions list "
                f"none); use credit: episode, or questions that list them (generated world, "
                f"wiki, HotpotQA, 2Wiki, MuSiQue)"
            )
        return list(ids)

    def retrieval_credit(self, gold: list[str], round_ids: set[str],
                         earlier_ids: set[str]) -> float:
        """credit_r = (1 - w) * recall gain + w * any hit, in [0, 1] (see the class doc)."""
        gain = recall_gain(round_ids, earlier_ids, gold)
        hit = float(bool(set(gold) & round_ids))
        w = float(self.credit_hit_weight)
        return (1.0 - w) * gain + w * hit

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        env = _need_env(self.env, self.name)
        gold = self.supporting_ids(task) if self.credit == "retrieval" else None
        stats = SearchStats()
        q = task.prompt
        found, note = "(nothing yet)", "everything"
        credits: list[float] = []
        for r in range(1, self.rounds + 1):
            if r == 1 and self.first_query_prompt is not None:
                prompt = self.first_query_prompt.format(question=q)
            else:
                prompt = self.query_prompt.format(question=q, found=found, note=note)
            writers = yield [Request(w, prompt) for w in self.slots]
            queries: list[str] = []
            read, unread = [], []  # writers the retrieval ran a query of; those it ran none of
            for out in writers:
                stats.turns += 1
                parsed = parse_turn(out.text)
                if parsed.errors or not parsed.queries:
                    plain = env.plain_query(out.text, parsed, stats)
                    if plain is None:
                        env.invalid(parsed, stats)
                        unread.append(out)
                    else:
                        queries.append(plain)
                        read.append(out)
                    continue
                queries += env.split_calls(parsed, stats)[0]
                read.append(out)
            earlier = set(stats.found)
            results = env.retrieve(queries, stats)  # one call for the whole set
            reward = None
            if gold is not None:
                reward = self.retrieval_credit(gold, {p.doc_id for ps in results for p in ps},
                                               earlier)
                credits.append(reward)
                ctx.metadata[f"retrieval_credit_r{r}"] = reward
            # the round's credit is its retrieval's, whoever the set holds (train.unconsumed)
            ctx.transition(f"query-{r}", read, unread=unread, reward=reward)
            found = env.information(stats).strip()
            last = r == self.rounds
            if not last and self.between_rounds == "none":
                note = ""
                continue
            reader = yield Request(self.answerer, self.read_prompt.format(
                question=q, information=found,
                instruction=self.final_instruction if last else self.more_instruction))
            ctx.transition(f"read-{r}", [reader])
            answered = parse_turn(reader.text).answer is not None
            if answered and (last or self.between_rounds == "answer_or_note"):
                break
            note = " ".join(reader.text.split()) or "(not said)"
        else:
            stats.budget_exhausted = 1
        ctx.metadata["search_rounds"] = r
        if gold is not None:
            ctx.metadata["retrieval_credit_total"] = sum(credits)
        return _finish(task, ctx, env, stats, reader, self.answerer)


@dataclass
class SearchPlanner(_SearchRoles):
    """Planner -> searcher (multi-turn) -> answerer.

    The planner writes numbered sub-questions ("plan", size 1; parsed like `planner`'s plans;
    none found: the question itself is the only one, metadata plan_fallback = 1). The searcher
    looks them up, multi-turn, until it writes its findings as <answer>...</answer> or its turn
    budget ends ("search", size 1, one member spanning its turns). The answerer reads the
    sub-questions, everything retrieved (dedup by doc id, by best rank) and the findings, and
    answers ("answer", size 1); its answer is scored.
    Prompt fields: plan_prompt {question}; search_prompt {question}, {subquestions};
    answer_prompt {question}, {subquestions}, {information}, {findings}.
    """

    planner: str = "planner"
    searcher: str = "searcher"
    answerer: str = "answerer"
    max_turns: int | None = None
    plan_prompt: str = PLAN_PROMPT
    search_prompt: str = PLANNED_SEARCH_PROMPT
    answer_prompt: str = PLANNED_ANSWER_PROMPT
    env: SearchEnv | None = None

    name = "search_planner"
    description = (
        "planner -> multi-turn searcher -> answerer: sets of 1 ('plan', 'search', 'answer')"
    )

    def __post_init__(self) -> None:
        _positive("search_planner.max_turns", self.max_turns, none_ok=True)
        check_template(self.plan_prompt, ["question"], where="search_planner.plan_prompt")
        check_template(self.search_prompt, ["question", "subquestions"],
                       where="search_planner.search_prompt")
        check_template(self.answer_prompt, ["question", "subquestions", "information",
                                            "findings"], where="search_planner.answer_prompt")
        _check_env(self.env, "search_planner")

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([self.planner, self.searcher, self.answerer]))

    def with_environment(self, env: SearchEnv) -> SearchPlanner:
        return dataclasses.replace(self, env=env)

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        env = _need_env(self.env, self.name)
        stats = SearchStats()
        q = task.prompt
        plan = yield Request(self.planner, self.plan_prompt.format(question=q))
        ctx.transition("plan", [plan])
        steps = parse_plan(plan.text)
        ctx.metadata["plan_steps"] = len(steps)
        ctx.metadata["plan_fallback"] = int(not steps)
        subquestions = "\n".join(f"{i}. {s}" for i, s in enumerate(steps or [q], 1))
        loop = yield from search_loop(
            env, ctx, self.searcher,
            self.search_prompt.format(question=q, subquestions=subquestions), stats,
            self.max_turns or env.max_turns,
        )
        ctx.transition("search", [loop.output])
        final = yield Request(self.answerer, self.answer_prompt.format(
            question=q, subquestions=subquestions, information=env.information(stats).strip(),
            findings=loop.answer if loop.answer else "(none)"))
        ctx.transition("answer", [final])
        return _finish(task, ctx, env, stats, final, self.answerer)


@dataclass
class SearchRouted(_SearchRoles):
    """A router picks, per question, how to answer: "direct" (the answerer, no retrieval),
    "search" (search_single with `search_turns` turns: 2 = search once, then answer) or
    "parallel" (search_parallel with k writers and `parallel_rounds` rounds).

    Transitions: "route" {router}, then the route's: "answer" {answerer} | "search" {searcher}
    | "query-r" {k writers}, "read-r" {answerer}.
    Strict parsing: the reply, stripped, must be exactly one of the route names. Anything else
    is invalid: the `fallback` route runs, and the episode gets route_penalty = -penalty (0.0
    on valid replies, so every episode carries it); metadata records route, route_invalid
    (0/1) and route_error, reported by rollout_metrics as episode/route_invalid, the
    share of routed episodes with an invalid choice (as in `routed`).
    route_prompt fields: {question}, {k}; direct_prompt: {question}.
    """

    router: str = "router"
    answerer: str = "answerer"
    searcher: str = "searcher"
    writer: str = "query_writer"
    k: int = 3
    search_turns: int = 2
    parallel_rounds: int = 1
    fallback: str = "search"
    penalty: float = 0.5
    route_prompt: str = ROUTE_PROMPT
    direct_prompt: str = DIRECT_PROMPT
    env: SearchEnv | None = None
    _single: SearchSingle = field(init=False, repr=False)
    _parallel: SearchParallel = field(init=False, repr=False)

    name = "search_routed"
    description = (
        "a router picks direct answer / one searcher / k parallel query writers per "
        "question: 'route' 1, then that route's sets; invalid choices fall back, penalized"
    )

    def __post_init__(self) -> None:
        if self.fallback not in ROUTES:
            raise ValueError(
                f"search_routed.fallback must be one of {list(ROUTES)}, got {self.fallback!r}"
            )
        if isinstance(self.penalty, bool) or not self.penalty >= 0:
            raise ValueError(f"search_routed.penalty must be >= 0, got {self.penalty!r}")
        check_template(self.route_prompt, ["question", "k"], where="search_routed.route_prompt")
        check_template(self.direct_prompt, ["question"], where="search_routed.direct_prompt")
        _check_env(self.env, "search_routed")
        self._single = SearchSingle(searcher=self.searcher, max_turns=self.search_turns,
                                    env=self.env)
        self._parallel = SearchParallel(k=self.k, writer=self.writer, answerer=self.answerer,
                                        rounds=self.parallel_rounds, env=self.env)

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([self.router, self.answerer, self.searcher, self.writer]))

    def with_environment(self, env: SearchEnv) -> SearchRouted:
        return dataclasses.replace(self, env=env)

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        env = _need_env(self.env, self.name)
        route = yield Request(self.router,
                              self.route_prompt.format(question=task.prompt, k=self.k))
        ctx.transition("route", [route])
        choice = route.text.strip()
        if choice in ROUTES:
            penalty = 0.0
            ctx.metadata["route_invalid"] = 0
        else:
            ctx.metadata["route_invalid"] = 1
            ctx.metadata["route_error"] = (
                "empty reply" if not choice else f"unknown route {choice[:40]!r}"
            )
            choice, penalty = self.fallback, -float(self.penalty)
        ctx.metadata["route"] = choice
        if choice == "search":
            components = yield from self._single.run(task, ctx)
        elif choice == "parallel":
            components = yield from self._parallel.run(task, ctx)
        else:
            final = yield Request(self.answerer, self.direct_prompt.format(question=task.prompt))
            ctx.transition("answer", [final])
            components = _finish(task, ctx, env, SearchStats(), final, self.answerer)
        return {**components, "route_penalty": penalty}


SEARCH_WORKFLOWS = (SearchSingle, SearchParallel, SearchPlanner, SearchRouted)
