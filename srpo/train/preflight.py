"""Checks of a training run before any work: settings a config may hold for evaluation or
rollouts (which load the same Config) but that make training fail late or learn nothing.

    preflight(cfg)   # the trainer's first call; raises ConfigError / ValueError

  * the machine: a CUDA device is available, output_dir is writable (config.check_environment;
    load_config checks them too, this covers configs built in code);
  * group_size >= 2 for a method whose advantages are relative within a task's group;
  * every model named is "tiny", "smollm2" or an existing local folder;
  * a local GSM8K / MATH-500 file: no held-out question recurs in the training part.
"""

from __future__ import annotations

from srpo.config import Config, ConfigError, check_environment


def preflight(cfg: Config) -> None:
    """Every check of a training run that needs no model; raises on the first problem."""
    from srpo.rollout.build import check_model_source

    check_environment(cfg)
    check_group_size(cfg)
    for model in (cfg.model, *cfg.policies.models.values()):  # before any data file is read
        check_model_source(model)
    check_math_file_split(cfg)


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


def check_math_file_split(cfg: Config) -> None:
    """A local GSM8K / MATH-500 file is split by position (held-out = its first
    task.heldout_size records, train = the next task.train_size): refuse a question in both.

    reasoning-gym splits are disjoint by construction (math_splits), so only files are read.
    """
    task = cfg.task
    if task.name != "math" or task.source == "reasoning_gym":
        return
    from srpo.rollout.build import load_tasks
    from srpo.tasks.math.loaders import check_heldout_overlap

    check_heldout_overlap(load_tasks(task, split="heldout"), load_tasks(task, split="train"),
                          source=str(task.path))
