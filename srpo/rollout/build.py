"""From a Config to running objects: models, policies, agents, backend, runner, tasks.

    runner, workflow = build_rollout(cfg)            # loads the model(s)
    tasks = load_tasks(cfg.task, split="train", limit=8)
    result = runner.run(tasks, workflow, group_size=cfg.group_size)
"""

from __future__ import annotations

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
        from pathlib import Path

        from transformers import AutoModelForCausalLM, AutoTokenizer

        from srpo.models.tokenizers import set_pad_token

        if not Path(cfg.name).is_dir():
            raise ValueError(
                f"model.name {cfg.name!r} is neither 'tiny', 'smollm2' nor an existing model folder"
            )
        model = AutoModelForCausalLM.from_pretrained(cfg.name, dtype=dtype, local_files_only=True)
        tok = set_pad_token(AutoTokenizer.from_pretrained(cfg.name, local_files_only=True))
    return model.to(device), tok


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
    base = SamplingParams(**vars(cfg.sampling))
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
    )
    runner = RolloutRunner(agents, backend, build_reward(cfg.task), seed=cfg.seed)
    return runner, wf
