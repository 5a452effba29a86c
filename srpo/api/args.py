"""SRPOConfig: the common training settings of a Python run, and how they become a srpo Config.

    args = SRPOConfig(steps=20, lr=1e-4, group_size=4, lora=True, output_dir="runs/arith")
    args = SRPOConfig(config="math/debate", overrides={"train.epochs": 2})   # any config key

Each field is one srpo config key (FIELD_KEYS); None leaves the key at the base config's value
(`config`: a preset name, a YAML file, a srpo.config.Config, or srpo's defaults). `overrides`
sets any other key, by its dotted name, as `srpo train CONFIG key=value` does. A key set by a
field (or by an SRPOTrainer argument) and again in `overrides` is refused: one place per value.

Errors name the argument: a ConfigError about `train.steps` raised for `SRPOConfig(steps=0)`
reads "args.steps: train.steps must be > 0, got 0" (name_arguments).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srpo.config import Config, ConfigError, from_dict, load_config, parse_override, set_dotted, to_dict

# SRPOConfig field -> the srpo config key it sets (`lora` sets policies.kind, see below).
FIELD_KEYS: dict[str, str] = {
    "output_dir": "output_dir",
    "method": "train.method",
    "steps": "train.steps",
    "lr": "train.lr",
    "group_size": "group_size",
    "tasks_per_step": "train.tasks_per_step",
    "seed": "seed",
    "eval_size": "eval.size",
    "method_settings": "train.method_settings",
    "max_new_tokens": "sampling.max_new_tokens",
    "temperature": "sampling.temperature",
    "lora": "policies.kind",
    "lora_rank": "policies.lora.rank",
    "lora_alpha": "policies.lora.alpha",
    "device": "device",
    "threads": "train.threads",
}


@dataclass
class SRPOConfig:
    """The settings of an SRPOTrainer run (module doc). None: the base config's value.

    output_dir: the run directory (config.yaml, metrics.jsonl, checkpoints/, eval/, export/);
        "{time}" in it becomes the start time. srpo default: "runs/default".
    method: a method of srpo.objective.methods.METHODS ("srpo", "grpo", "dapo", ...); the same as
        SRPOTrainer's `method` (give it in one of the two). train.method, default "srpo".
    steps: optimizer phases (rollout + update rounds). train.steps, default 2.
    lr: AdamW learning rate. train.lr, default 1e-5.
    group_size: G, rollouts per task (one advantage group; >= 2 to train). Default 4.
    tasks_per_step: distinct train tasks per step. train.tasks_per_step, default 4.
    seed: sampling and workflow randomness. Default 0.
    eval_size: held-out tasks evaluated before and after training (0: none). eval.size,
        default: all of eval_dataset (or task.heldout_size).
    method_settings: the method's settings, e.g. {"clip_low": 0.1}. train.method_settings.
    max_new_tokens / temperature: every agent's sampling (sampling.*; defaults 64 / 1.0).
    lora: True trains one LoRA adapter (policies.kind "lora"), False the whole model
        ("shared"). Default: the base config's policies.kind ("shared").
    lora_rank / lora_alpha: policies.lora.rank / .alpha (defaults 8 / 16).
    device: "cpu", "cuda", "cuda:N" or "mps". Default "cpu".
    threads: torch CPU threads. train.threads, default torch's.
    reward_weights: one weight per reward function (default 1 each); the episode's reward
        is the weighted sum. Not a config key: the weights scale the reward components.
    overrides: any other config key: {"train.epochs": 2, "agents.solver.system_prompt": "..."}
        (values as Python objects) or ["train.epochs=2", ...] (values as on the command line).
    config: the base config: a preset name ("math/debate"), a YAML file, a srpo Config, or
        None (srpo's defaults).
    """

    output_dir: str | Path | None = None
    method: str | None = None
    steps: int | None = None
    lr: float | None = None
    group_size: int | None = None
    tasks_per_step: int | None = None
    seed: int | None = None
    eval_size: int | None = None
    method_settings: Mapping[str, Any] | None = None
    max_new_tokens: int | None = None
    temperature: float | None = None
    lora: bool | None = None
    lora_rank: int | None = None
    lora_alpha: float | None = None
    device: str | None = None
    threads: int | None = None
    reward_weights: Sequence[float] | None = None
    overrides: Mapping[str, Any] | Sequence[str] = field(default_factory=dict)
    config: str | Path | Config | None = None


class ConfigDraft:
    """A config being assembled as plain data, remembering which argument set each key, so a
    key set twice is refused and a ConfigError can name the argument behind the key."""

    def __init__(self, base: dict[str, Any]):
        self.data = base
        self.sources: dict[str, str] = {}  # dotted key -> the argument that set it

    def set(self, key: str, value: Any, argument: str) -> None:
        clash = next((k for k in self.sources if _overlap(k, key)), None)
        if clash is not None:
            raise ValueError(f"{argument} sets {key}, which {self.sources[clash]} already sets "
                             f"({clash}): give each setting in one place")
        set_dotted(self.data, key.split("."), value, where=argument)
        self.sources[key] = argument

    def reset(self, key: str, value: Any) -> None:
        """Set a key that follows from another choice (e.g. eval.success_component back to its
        default when the reward changes) without claiming it: an override may still set it."""
        set_dotted(self.data, key.split("."), value, where=key)

    def build(self) -> Config:
        """The validated Config; a ConfigError names the arguments whose keys it mentions."""
        try:
            return from_dict(Config, self.data)
        except ConfigError as e:
            raise ConfigError(name_arguments(str(e), self.sources)) from e


def _overlap(a: str, b: str) -> bool:
    """Whether two dotted keys set the same value: equal, or one a section of the other."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def name_arguments(message: str, sources: Mapping[str, str]) -> str:
    """Prefix `message` with the arguments whose config keys it names ("args.steps: ...")."""
    named = [arg for key, arg in sources.items()
             if re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", message)]
    named = list(dict.fromkeys(named))
    return f"{' / '.join(named)}: {message}" if named else message


def base_config(config: str | Path | Config | None) -> dict[str, Any]:
    """The base config as plain data: srpo's defaults, a Config, or a preset / YAML file."""
    if config is None:
        return to_dict(Config())
    if isinstance(config, Config):
        return copy.deepcopy(to_dict(config))
    if isinstance(config, (str, Path)):
        try:  # the machine (device, output_dir) is checked when the run starts
            return to_dict(load_config(config, check_machine=False))
        except ConfigError as e:
            raise ConfigError(f"args.config: {e}") from e
    raise TypeError(f"args.config must be a preset name, a YAML file path or a srpo.config.Config, "
                    f"got {type(config).__name__}")


def check_args(args: Any) -> SRPOConfig:
    """`args` as an SRPOConfig: None -> the defaults; a srpo Config -> SRPOConfig(config=it)."""
    if args is None:
        return SRPOConfig()
    if isinstance(args, Config):
        return SRPOConfig(config=args)
    if not isinstance(args, SRPOConfig):
        raise TypeError(f"args must be an srpo.SRPOConfig (or a srpo.config.Config), got "
                        f"{type(args).__name__}")
    return args


def apply_fields(draft: ConfigDraft, args: SRPOConfig) -> None:
    """Every field of `args` that is set, at its config key."""
    for name, key in FIELD_KEYS.items():
        value = getattr(args, name)
        if value is None:
            continue
        if name == "lora":
            if not isinstance(value, bool):
                raise TypeError(f"args.lora must be True or False, got {value!r}")
            value = "lora" if value else "shared"
        elif name == "output_dir" and isinstance(value, Path):
            value = str(value)
        elif name == "method_settings":
            value = dict(value)
        draft.set(key, value, f"args.{name}")


def apply_config_overrides(draft: ConfigDraft, overrides: Mapping[str, Any] | Sequence[str]) -> None:
    """args.overrides: {dotted key: value} or ["key=value", ...] (parsed as on the command line)."""
    if isinstance(overrides, Mapping):
        items = list(overrides.items())
        for key, _ in items:
            if not isinstance(key, str) or not key or not all(key.split(".")):
                raise ValueError(f"args.overrides: a key must be a dotted config key such as "
                                 f"'train.epochs', got {key!r}")
    elif isinstance(overrides, Sequence) and not isinstance(overrides, str):
        items = []
        for text in overrides:
            if not isinstance(text, str):
                raise TypeError(f"args.overrides: each item must be 'key=value' text, got {text!r}")
            path, value = parse_override(text, Config)
            items.append((".".join(path), value))
    else:
        raise TypeError(f"args.overrides must be a mapping of dotted keys to values or a list of "
                        f"'key=value' strings, got {type(overrides).__name__}")
    for key, value in items:
        draft.set(key, value, f"args.overrides[{key!r}]")
