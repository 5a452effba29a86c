"""From a Config to running objects: models, policies, agents, backend, runner, tasks.

    runner, workflow = build_rollout(cfg)            # loads the model(s)
    tasks = load_tasks(cfg.task, split="train", limit=8)
    result = runner.run(tasks, workflow, group_size=cfg.group_size)
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from srpo.config import Config, ModelConfig, PoliciesConfig, TaskConfig
from srpo.rollout.agents import AgentSpec, SamplingParams
from srpo.rollout.backends import HFGenerateBackend
from srpo.rollout.policies import PolicySet
from srpo.rollout.runner import RolloutRunner
from srpo.types import Task
from srpo.workflows.base import Workflow
from srpo.workflows.registry import build_workflow

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_model(cfg: ModelConfig, device: str = "cpu") -> tuple[Any, Any]:
    """(model, tokenizer) for a model section; nothing is downloaded."""
    dtype = _DTYPES[cfg.dtype]
    if cfg.name == "tiny":
        from srpo.models import build_tiny_model

        model, tok = build_tiny_model(
            cfg.arch, tokenizer=cfg.tokenizer, hidden_size=cfg.hidden_size,
            num_layers=cfg.num_layers, seed=cfg.init_seed, dtype=dtype,
        )
    elif cfg.name == "smollm2":
        from srpo.models import load_smollm2

        model, tok = load_smollm2(dtype=dtype)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from srpo.models.tokenizers import set_pad_token_of_folder

        check_model_source(cfg)
        # the tokenizer first: a bad one fails before the weights are read
        tok = set_pad_token_of_folder(AutoTokenizer.from_pretrained(cfg.name, local_files_only=True))
        model = AutoModelForCausalLM.from_pretrained(cfg.name, dtype=dtype, local_files_only=True)
    return model.to(device), tok


def check_model_source(cfg: ModelConfig) -> None:
    """A model name is "tiny", "smollm2" or an existing local folder (nothing is downloaded)."""
    from pathlib import Path

    if cfg.name not in ("tiny", "smollm2") and not Path(cfg.name).is_dir():
        raise ValueError(
            f"model.name {cfg.name!r} is neither 'tiny', 'smollm2' nor an existing model folder "
            f"(a local Hugging Face folder: config.json, weights, tokenizer; nothing is downloaded)"
        )


def build_policies(model_cfg: ModelConfig, cfg: PoliciesConfig, device: str = "cpu") -> PolicySet:
    if cfg.kind == "shared":
        model, tok = build_model(model_cfg, device)
        return PolicySet.shared(model, tok, name=cfg.names[0])
    if cfg.kind == "separate":
        return PolicySet.separate(
            {n: build_model(cfg.models.get(n, model_cfg), device) for n in cfg.names}
        )
    model, tok = build_model(model_cfg, device)
    lora = cfg.lora
    return PolicySet.lora(
        model, tok, cfg.names, rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout,
        target_modules=lora.target_modules,
    )


def build_agents(cfg: Config) -> dict[str, AgentSpec]:
    base = SamplingParams(**cfg.sampling.model_dump())
    return {
        name: AgentSpec(
            name=name,
            policy=a.policy,
            system_prompt=a.system_prompt,
            template=a.template,
            sampling=base.replace(**a.sampling),
        )
        for name, a in cfg.agents.items()
    }


def build_reward(cfg: TaskConfig) -> Any:
    if cfg.name == "testbed":  # scored per set by the cover workflow
        from srpo.tasks.testbed import CoverReward

        return CoverReward()
    if cfg.name == "search":
        from srpo.tasks.search.rewards import SearchReward

        s = cfg.search
        return SearchReward(em_weight=s.em_weight, f1_weight=s.f1_weight,
                            format_weight=s.format_weight, plain_text_fallback=s.plain_text_fallback,
                            cover_weight=s.cover_weight)
    from srpo.tasks.math import MathReward

    r = cfg.reward
    return MathReward(
        correct_weight=r.correct_weight, format_weight=r.format_weight,
        format_rule=r.format_rule, strict=r.strict, timeout_s=r.timeout_s,
    )


def load_tasks(cfg: TaskConfig, *, split: str = "train", limit: int | None = None) -> list[Task]:
    """The first `limit` tasks (default: the whole split) of `split` ("train" | "heldout").

    reasoning-gym splits are generated exactly as `math_splits` does (train excludes every
    held-out question), so a prefix here is a prefix of the full split.
    """
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    size = cfg.train_size if split == "train" else cfg.heldout_size
    if limit is not None:
        if limit < 1:
            raise ValueError(f"the number of tasks must be >= 1, got {limit}")
        if limit > size:
            raise ValueError(
                f"asked for {limit} {split} tasks but task.{split}_size is {size}; raise it"
            )
        size = limit
    if cfg.name == "search":
        return _search_questions(cfg, split)[:size]
    if cfg.name == "testbed":
        from srpo.tasks.testbed import CoverSpec, cover_tasks

        t = cfg.testbed
        spec = CoverSpec(tuple(t.set_sizes), t.rounds, t.alphabet_factor)
        return cover_tasks(spec, size, seed=cfg.seed, split=split)
    if cfg.source == "reasoning_gym":
        from srpo.tasks.math import math_splits, reasoning_gym_tasks

        if split == "heldout":
            return reasoning_gym_tasks(cfg.dataset, size=size, seed=cfg.seed, split="heldout",
                                       config=cfg.difficulty)
        train, _ = math_splits(cfg.dataset, train_size=size, heldout_size=cfg.heldout_size,
                               seed=cfg.seed, config=cfg.difficulty)
        return train
    from srpo.tasks.math import load_gsm8k, load_math500

    loader = load_gsm8k if cfg.source == "gsm8k" else load_math500
    tasks = loader(cfg.path)
    # Files have no train/heldout split of their own: held-out = the first heldout_size records.
    tasks = tasks[cfg.heldout_size :] if split == "train" else tasks[: cfg.heldout_size]
    if len(tasks) < size:
        raise ValueError(f"{cfg.path}: only {len(tasks)} {split} tasks, asked for {size}")
    return tasks[:size]


# --------------------------------------------------------------------------- search tasks
# Search dependencies (bm25s, faiss, the world generator) are imported only here, when a
# search task is configured: math runs never import them.


@functools.lru_cache(maxsize=2)
def _world(seed: int, knobs: tuple[tuple[str, Any], ...]) -> Any:
    """The generated world (documents and questions come from one generation)."""
    from srpo.tasks.search.world import generate_world

    return generate_world(seed, **dict(knobs))


def _search_questions(cfg: TaskConfig, split: str) -> list[Task]:
    """The whole `split` of a search task (train_size / heldout_size questions)."""
    s = cfg.search
    size = cfg.train_size if split == "train" else cfg.heldout_size
    if s.corpus == "world":
        from srpo.tasks.search.world import world_questions

        world = _world(cfg.seed, tuple(sorted(s.world.items())))
        return world_questions(world, hops=s.hops, n=size, seed=cfg.seed, split=split)
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
    if len(tasks) < size:
        raise ValueError(f"task.search.corpus {s.corpus!r}: only {len(tasks)} {split} "
                         f"questions, task.{split}_size is {size}")
    return tasks[:size]


def build_search_env(cfg: TaskConfig) -> Any:
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


def build_workflow_from(cfg: Config, name: str | None = None) -> Workflow:
    """The configured workflow; with `name` (e.g. the CLI's --workflow) that one instead, with
    the configured params only if it is the configured workflow."""
    if name is None or name == cfg.workflow.name:
        return build_workflow(cfg.workflow.name, cfg.workflow.params)
    return build_workflow(name)


def build_rollout(cfg: Config, *, workflow: str | None = None,
                  policies: PolicySet | None = None) -> tuple[RolloutRunner, Workflow]:
    """(runner, workflow) for a config. The workflow is built first so that a bad name fails
    before any model is loaded; `policies` reuses already loaded models (the trainer's)."""
    wf = build_workflow_from(cfg, workflow)
    if hasattr(wf, "with_search_env"):  # a search workflow: bind the task's retriever
        wf = wf.with_search_env(build_search_env(cfg.task))
    agents = build_agents(cfg)
    missing = sorted(set(wf.agents) - set(agents))
    if missing:
        raise ValueError(
            f"workflow {wf.name!r} needs agent(s) {missing}, which the config does not define; "
            f"configured agents: {sorted(agents)}"
        )
    if policies is None:
        policies = build_policies(cfg.model, cfg.policies, cfg.device)
    backend = HFGenerateBackend(
        policies,
        max_batch_size=cfg.rollout.max_batch_size,
        record_logprobs=cfg.rollout.record_logprobs,
        sampler=cfg.rollout.sampler,
    )
    runner = RolloutRunner(agents, backend, build_reward(cfg.task), seed=cfg.seed)
    return runner, wf
