"""Checks of a training run before any work: settings a config may hold for evaluation or
rollouts (which load the same Config) but that make training fail late or learn nothing.

    preflight(cfg)   # the trainer's first call; raises ConfigError / ValueError

  * the machine: a CUDA device is available, output_dir is writable (config.check_environment;
    load_config checks them too, this covers configs built in code);
  * group_size >= 2 for a method whose advantages are relative within a task's group;
  * every model named is "tiny", "smollm2" or a local model folder (with config.json);
  * every configured agent is a role some workflow declares (a misspelt `agents.solvr`);
  * the task pack's checks (math: a local GSM8K / MATH-500 file's held-out questions do not
    recur in its training part; search: a questions file reads whole, blank questions named).

Once the checkpoint and the models are known (the trainer's set-up, before any work):
check_resume_steps (train.steps not below the steps a resumed run has done) and
check_question_lengths (no question longer than the model's context).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from srpo.config import Config, ConfigError, check_environment
from srpo.objective.methods import MethodSpec
from srpo.train.distributed import DistContext, check_data_parallel
from srpo.types import Task


def preflight(cfg: Config, *, models_given: bool = False) -> None:
    """Every check of a training run that needs no model; raises on the first problem.
    models_given: the caller built the policies (srpo.api's model object), so model.name only
    records where they came from and names nothing to load."""
    from srpo.build import check_model_source

    check_environment(cfg)
    check_group_size(cfg)
    if not models_given:
        check_model_source(cfg.model)  # before any data file is read
        for name, model in cfg.policies.models.items():
            check_model_source(model, f"policies.models.{name}.name")
    check_agents(cfg)
    check_task_pack(cfg)


def check_agents(cfg: Config) -> None:
    """Every configured agent is a role a workflow declares (srpo.build.check_configured_agents),
    checked on the configured workflow before any model is built."""
    from srpo.build import build_workflow_from, check_configured_agents

    check_configured_agents(cfg, build_workflow_from(cfg))


def check_group_size(cfg: Config) -> None:
    """Refuse group_size 1 for a method that centers advantages within a task's group.

    Every method of srpo.objective.methods groups by task (MAGRPO included), so with one rollout
    per task each group holds one value and its relative advantage is 0: the run would train
    without any gradient. `srpo rollout` / `srpo eval` may still use group_size 1.
    """
    from srpo.objective.methods import get_method

    spec = get_method(cfg.train.method, **cfg.train.method_settings)
    if cfg.group_size < 2 and "task" in spec.group_keys:
        raise ConfigError(
            f"group_size must be >= 2 to train with train.method {spec.name!r}, got "
            f"{cfg.group_size}: every advantage group (the rollouts of one task) holds one "
            f"rollout, so every relative advantage is 0 and nothing is learned; use group_size >= 2"
        )


def check_task_pack(cfg: Config) -> None:
    """The task pack's own checks (e.g. math: a local GSM8K / MATH-500 file's held-out
    questions must not recur in its training part)."""
    from srpo.build import task_pack

    pack = task_pack(cfg)
    if pack.check is not None:
        pack.check(cfg.task)


def check_resume_steps(ckpt: Path | None, steps: int) -> None:
    """resume=true with train.steps fewer than the steps its checkpoint has done is refused: the
    run would end at once, saying it ran the steps it had. A marker that cannot be read is left
    to the checkpoint's own checks, which name what is wrong with it."""
    from srpo.record.checkpoint import STATE_FILE

    if ckpt is None:
        return
    try:
        done = json.loads((ckpt / STATE_FILE).read_text(encoding="utf-8"))["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if isinstance(done, int) and not isinstance(done, bool) and done > steps:
        raise ConfigError(
            f"train.steps ({steps}) is fewer than the {done} steps the run in {ckpt.parent.parent} "
            f"has done (checkpoint {ckpt.name}): resume with train.steps >= {done} to train on, or "
            f"choose another output_dir"
        )


def check_question_lengths(tasks: Sequence[Task], policies: Any, max_new_tokens: int,
                           split: str) -> None:
    """Every task's question, tokenized alone by each policy's tokenizer, leaves room for
    max_new_tokens within the policy's context (its model's max_position_embeddings): a longer
    one would only get transformers' warning and positions past what the model was trained on.
    Only questions long enough to matter are tokenized (a token holds at least one byte, plus
    a few for markers)."""
    for name in policies.names:
        policy = policies[name]
        context = getattr(getattr(policy.model, "config", None), "max_position_embeddings", None)
        if not isinstance(context, int) or context <= 0:
            continue
        room = context - max_new_tokens
        for task in tasks:
            if len(task.prompt.encode("utf-8", "surrogatepass")) + 8 < room:
                continue
            n = len(policy.tokenizer(task.prompt, add_special_tokens=False, verbose=False)["input_ids"])
            if n > room:
                raise ConfigError(
                    f"task {task.task_id!r} ({split} split): its question alone is {n} tokens "
                    f"(policy {name!r}); with sampling.max_new_tokens {max_new_tokens} that "
                    f"exceeds the model's context of {context} tokens: shorten or leave out "
                    f"the question, or lower sampling.max_new_tokens"
                )


def check_process_layout(cfg: Config, spec: MethodSpec, dist: DistContext) -> None:
    """What a step needs of the processes it runs on (checked on every rank before any work)."""
    t = cfg.train
    if dist.active:
        check_data_parallel(spec)
        if t.tasks_per_step < dist.world:
            raise ValueError(f"train.tasks_per_step ({t.tasks_per_step}) must be >= the number "
                             f"of processes ({dist.world}): ranks own whole tasks")
    check_minibatches(t.minibatches, t.tasks_per_step, cfg.group_size, dist.world)
    if t.dynamic_sampling and dist.active:
        raise ValueError("train.dynamic_sampling runs in one process only: ranks would keep different "
                         "numbers of tasks (and minibatches); turn it off for data-parallel runs")


def check_minibatches(minibatches: int, tasks_per_step: int, group_size: int, world: int) -> None:
    """Every rank must be able to cut its sets into exactly `minibatches` parts of whole sets,
    so that all ranks make the same number of optimizer steps (and collective calls).

    A rank owns at least floor(tasks_per_step / world) tasks, i.e. that many times group_size
    episodes, and every episode has at least one active set: that many sets are guaranteed on
    every rank whatever the workflow does. Checked on every rank before any work.
    """
    episodes = (tasks_per_step // world) * group_size
    if minibatches > episodes:
        where = f" on each of {world} processes" if world > 1 else ""
        raise ValueError(
            f"train.minibatches ({minibatches}) exceeds the episodes of a step{where} ({episodes} = "
            f"{tasks_per_step // world} tasks x group_size {group_size}); an episode may have a single "
            f"active set and a minibatch holds whole sets, so use at most {episodes} minibatches"
        )
