"""The search task pack: questions answered by searching a corpus over several turns.

Config (under `task`): search.{corpus, world, hops, corpus_path, questions_path,
questions_format, index_dir, retriever, top_k, ...}; splits use task.train_size / heldout_size /
seed (the generated world's seed too). Search dependencies (bm25s, faiss, the world generator)
are imported only when a search task is configured: math runs never import them.
"""

from __future__ import annotations

import functools
from typing import Any

from srpo.packs import TaskPack
from srpo.tasks.search.env import parse_turn
from srpo.tasks.search.workflows import SEARCH_WORKFLOWS
from srpo.types import Task


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
        return world_questions(world, hops=s.hops, n=full, seed=cfg.seed, split=split)[:size]
    if s.corpus == "wiki":
        from srpo.tasks.search.wiki_questions import wiki_questions

        tasks = wiki_questions(split=split, seed=cfg.seed)
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
    success_component="em",  # SearchReward.success_component
    workflows=SEARCH_WORKFLOWS,
    answer_key=answer_key,
    make_environment=build_search_env,
)
