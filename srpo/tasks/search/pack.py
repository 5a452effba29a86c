"""The search task pack: questions answered by searching a corpus over several turns.

Config (under `task`): search.{corpus, world, hops, corpus_path, questions_path,
questions_format, index_dir, retriever, top_k, ...}; splits use task.train_size / heldout_size /
seed (the generated world's seed too). Search dependencies (bm25s, faiss, the world generator)
are imported only when a search task is configured: math runs never import them.
"""

from __future__ import annotations

import functools
from typing import Any, Self

from pydantic import Field, model_validator

from srpo.config import ConfigError, Float, InputPath, List, TaskSettings, one_of, positive
from srpo.packs import TaskPack
from srpo.tasks.search.env import parse_turn
from srpo.tasks.search.workflows import SEARCH_WORKFLOWS
from srpo.types import Task


class SearchSection(TaskSettings):
    """task.search: corpus and questions, retriever, protocol, reward.

    Splits use task.train_size / heldout_size / seed (the world's seed too)."""

    corpus: str = "world"  # "world" (generated fictional entities, synthetic) | "wiki" | "jsonl"
    world: dict[str, Any] = Field(default_factory=dict)  # world: generate_world keyword args
    hops: List[int] = Field(default_factory=lambda: [1, 2, 3])  # world: question hop counts
    # world: the held-out split's hop counts (null: `hops`); e.g. train on [1, 2], evaluate on [2]
    heldout_hops: List[int] | None = None
    # wiki: which synthetic questions, [1] the one-hop rules, [2] the two-hop ones (capital of
    # the country where a place is), [1, 2] both (srpo.tasks.search.wiki_questions)
    wiki_hops: List[int] = Field(default_factory=lambda: [1])
    corpus_path: InputPath | None = None  # jsonl: documents, one {"id", "title", "text"} a line
    questions_path: InputPath | None = None  # jsonl: questions file (JSONL / JSON array / Parquet)
    questions_format: str = "nq"  # jsonl: "nq" | "hotpotqa" | "2wiki" | "musique" (its loader)
    index_dir: InputPath | None = None  # a prebuilt index (`srpo index`); None = build in memory
    retriever: str = "bm25"  # "bm25" | "dense" (MiniLM + faiss) | "fused" (RRF of both)
    top_k: int = 3  # passages per query
    max_calls_per_turn: int = 1  # searches run per generation (the rest get a note)
    max_turns: int = 4  # a searcher's turn budget (generations, the answering one included)
    max_observation_chars: int = 1200  # longest observation body (cut, with a marker)
    em_weight: Float = 1.0  # weight of the exact-match component
    f1_weight: Float = 0.0  # weight of the token-F1 component
    cover_weight: Float = 0.0  # weight of the cover component (a gold answer occurs in the answer)
    format_weight: Float = 0.1  # weight of the format component (<answer> protocol kept)
    # small models: a search_parallel query writer's tagless reply is the query, and an answer
    # reply without <answer> answers with its first line (format component 0)
    plain_text_fallback: bool = False

    @model_validator(mode="after")
    def _check(self) -> Self:
        one_of("task.search.corpus", self.corpus, ("world", "wiki", "jsonl"))
        one_of("task.search.retriever", self.retriever, ("bm25", "dense", "fused"))
        one_of("task.search.questions_format", self.questions_format,
               ("nq", "hotpotqa", "2wiki", "musique"))
        if self.corpus == "jsonl" and not (self.corpus_path and self.questions_path):
            raise ConfigError("task.search.corpus 'jsonl' needs corpus_path and questions_path")
        if not self.hops or not set(self.hops) <= {1, 2, 3}:
            raise ConfigError(f"task.search.hops must be among 1, 2, 3, got {self.hops}")
        if self.heldout_hops is not None and (not self.heldout_hops
                                              or not set(self.heldout_hops) <= {1, 2, 3}):
            raise ConfigError(f"task.search.heldout_hops must be among 1, 2, 3 (or null: hops), "
                              f"got {self.heldout_hops}")
        if not self.wiki_hops or not set(self.wiki_hops) <= {1, 2}:
            raise ConfigError(f"task.search.wiki_hops must be among 1, 2, got {self.wiki_hops}")
        if self.heldout_hops is not None and self.corpus != "world":
            raise ConfigError(f"task.search.heldout_hops applies to the generated world only "
                              f"(corpus is {self.corpus!r})")
        for key in ("top_k", "max_calls_per_turn", "max_turns", "max_observation_chars"):
            positive(f"task.search.{key}", getattr(self, key))
        return self


class SearchSettings(TaskSettings):
    """The search pack's field under `task`: the `search` section."""

    search: SearchSection = Field(default_factory=SearchSection)


@functools.lru_cache(maxsize=2)
def _world(seed: int, knobs: tuple[tuple[str, Any], ...]) -> Any:
    """The generated world (documents and questions come from one generation)."""
    from srpo.tasks.search.world import generate_world

    return generate_world(seed, **dict(knobs))


def load_tasks(cfg: Any, split: str, size: int) -> list[Task]:
    """The first `size` questions of `split`."""
    s = cfg.search
    if s.corpus == "world":
        from srpo.tasks.search.world import world_questions

        world = _world(cfg.seed, tuple(sorted(s.world.items())))
        full = cfg.train_size if split == "train" else cfg.heldout_size
        hops = s.hops if split == "train" or s.heldout_hops is None else s.heldout_hops
        return world_questions(world, hops=hops, n=full, seed=cfg.seed, split=split)[:size]
    if s.corpus == "wiki":
        from srpo.tasks.search.wiki_questions import (
            read_wiki_entries,
            wiki_questions_from_entries,
            wiki_two_hop_questions_from_entries,
        )

        entries = read_wiki_entries()  # once, for both kinds of question
        tasks = [*(wiki_questions_from_entries(entries, split=split, seed=cfg.seed) if 1 in s.wiki_hops else []),
                 *(wiki_two_hop_questions_from_entries(entries, split=split, seed=cfg.seed)
                   if 2 in s.wiki_hops else [])]
    else:
        from srpo.tasks.search import loaders

        load = {"nq": loaders.load_nq, "hotpotqa": loaders.load_hotpotqa,
                "2wiki": loaders.load_2wiki, "musique": loaders.load_musique}[s.questions_format]
        tasks = load(s.questions_path)
        # as for math files: held-out = the first heldout_size questions, train = the rest
        tasks = tasks[cfg.heldout_size :] if split == "train" else tasks[: cfg.heldout_size]
    full = cfg.train_size if split == "train" else cfg.heldout_size
    if len(tasks) < full:
        raise ValueError(f"task.search.corpus {s.corpus!r}: only {len(tasks)} {split} "
                         f"questions, task.{split}_size is {full}")
    return tasks[:size]


def check_question_file(cfg: Any) -> None:
    """Before any model is built (the trainer's preflight): a questions file given with
    `corpus: jsonl` reads whole (every record and field, an empty question named with its file
    and line), as its loader will read it. The generated world and Wikipedia need no check."""
    s = cfg.search
    if s.corpus == "jsonl":
        from srpo.tasks.search import loaders

        {"nq": loaders.load_nq, "hotpotqa": loaders.load_hotpotqa,
         "2wiki": loaders.load_2wiki, "musique": loaders.load_musique}[s.questions_format](s.questions_path)


def make_reward(cfg: Any) -> Any:
    from srpo.tasks.search.rewards import SearchReward

    s = cfg.search
    return SearchReward(em_weight=s.em_weight, f1_weight=s.f1_weight,
                        format_weight=s.format_weight, plain_text_fallback=s.plain_text_fallback,
                        cover_weight=s.cover_weight)


def build_search_env(cfg: Any) -> Any:
    """The SearchEnv of a search task: its corpus, a retriever over it, the protocol limits.

    A prebuilt index (task.search.index_dir, `srpo index`) is loaded and checked against the
    corpus; otherwise the retriever is built in memory. An empty corpus is an error here."""
    if cfg.name != "search":
        raise ValueError(
            f"a search workflow needs task.name: search (a corpus and a retriever, settings in "
            f"task.search), got task.name {cfg.name!r}"
        )
    from srpo.tasks.search.corpus import read_corpus_jsonl, validate_documents, wikipedia_summaries
    from srpo.tasks.search.env import SearchEnv
    from srpo.tasks.search.retrieval import (
        BM25Retriever,
        DenseRetriever,
        FusedRetriever,
        load_retriever,
    )

    s = cfg.search
    if s.corpus == "world":
        docs = _world(cfg.seed, tuple(sorted(s.world.items()))).documents
    elif s.corpus == "wiki":
        docs = wikipedia_summaries()
    else:
        docs = read_corpus_jsonl(s.corpus_path)
    docs = validate_documents(docs, source=f"task.search.corpus {s.corpus!r}")
    if s.index_dir is not None:
        retriever = load_retriever(s.index_dir, s.retriever, corpus=docs)
    elif s.retriever == "bm25":
        retriever = BM25Retriever.build(docs)
    elif s.retriever == "dense":
        retriever = DenseRetriever.build(docs)
    else:
        retriever = FusedRetriever([BM25Retriever.build(docs), DenseRetriever.build(docs)])
    return SearchEnv(retriever, top_k=s.top_k, max_calls_per_turn=s.max_calls_per_turn,
                     max_turns=s.max_turns, max_observation_chars=s.max_observation_chars,
                     plain_text_fallback=s.plain_text_fallback)


def answer_key(text: str) -> str | None:
    """The <answer> of a reply, lower-cased and whitespace-normalized (majority votes)."""
    found = parse_turn(text).answer
    return None if found is None else " ".join(found.lower().split()) or None


PACK = TaskPack(
    name="search",
    description="questions answered by searching a corpus over turns (generated world, "
                "Wikipedia summaries, or NQ / HotpotQA / 2Wiki / MuSiQue files)",
    load_tasks=load_tasks,
    make_reward=make_reward,
    settings=SearchSettings,
    success_component="em",  # SearchReward.success_component
    reward_components=("em", "f1", "cover", "format"),  # answer_scores' components
    workflows=SEARCH_WORKFLOWS,
    answer_key=answer_key,
    make_environment=build_search_env,
    check=check_question_file,
)
