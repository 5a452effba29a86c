"""Checks of a training run before any work: settings a config may hold for evaluation or
rollouts (which load the same Config) but that make training fail late or learn nothing.

    preflight(cfg)   # the trainer's first call; raises ConfigError / ValueError

  * the machine: a CUDA device is available, output_dir is writable (config.check_environment;
    load_config checks them too, this covers configs built in code);
  * group_size >= 2 for a method whose advantages are relative within a task's group;
  * every model named is "tiny", "smollm2" or an existing local folder;
  * the task pack's checks (math: a local GSM8K / MATH-500 file's held-out questions do not
    recur in its training part).
"""

from __future__ import annotations

from srpo.config import Config, ConfigError, check_environment


def preflight(cfg: Config) -> None:
    """Every check of a training run that needs no model; raises on the first problem."""
    from srpo.build import check_model_source

    check_environment(cfg)
    check_group_size(cfg)
    for model in (cfg.model, *cfg.policies.models.values()):  # before any data file is read
        check_model_source(model)
    check_task_pack(cfg)


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
