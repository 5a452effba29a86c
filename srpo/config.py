"""Typed, validated run configuration: pydantic models loaded from YAML + `key=value` overrides.

    cfg = load_config("configs/smoke.yaml", ["sampling.temperature=0.7", "group_size=2"])
    cfg.sampling.temperature        # 0.7

Rules (later sections only add models):
  * every section is a pydantic model (`_Section`); every field has a type and a comment saying
    what it is;
  * unknown keys and wrong types raise ConfigError naming the dotted key (and the known keys);
    an int field takes only an int (not a bool, not "3"), a bool only a bool, a str only a str,
    a list field a list or a tuple;
  * a mapping field (e.g. `agents`) given in YAML replaces its default mapping as a whole;
  * overrides are applied after the YAML, on the complete config: `a.b.c=value`, the value
    parsed as YAML (`0.7`, `true`, `[a, b]`, `null`) except for string fields, which take the
    text verbatim; a new key of a mapping field creates an entry (`agents.critic.policy=shared`);
  * a float field also takes a number written as text (`1e-5`, which YAML 1.1 reads as a
    string); names that become file names (policy names) must be plain file names;
  * the config is validated once, at construction (from a mapping or with keywords in code),
    and never mutated while running; load_config also checks what the config needs of this
    machine (check_environment: a CUDA device, a writable output_dir).

What pydantic does: the schema. Each section is a `BaseModel` with `extra="forbid"` and strict
types (so no coercion but int -> float), plus two field types of this module: `Float` (a float
that also takes finite number text) and `List[T]` (a list that also takes a tuple). The rules of
a section that involve several fields or other modules (`policies.kind`, templates, method
names, sampling parameters...) are its `model_validator`s, which raise ConfigError themselves.

What this module still does itself: turning pydantic's ValidationError into one ConfigError
that names the dotted key (`_config_error`); the `key=value` override parser (`parse_override`,
`apply_overrides`, `set_dotted`, which needs the declared type of a dotted key to leave string
values verbatim); resetting the params of a workflow changed by an override; reading the YAML
file; and the machine checks (`check_environment`), which Config itself never runs.
"""

from __future__ import annotations

import copy
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Mapping, Self, Sequence, TypeVar, Union

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from srpo.objective.methods import get_method
from srpo.packs import get_pack
from srpo.rollout.agents import SamplingParams
from srpo.types import check_template


class ConfigError(ValueError):
    """A config value is missing, unknown or of the wrong type; the message names its key."""


# --------------------------------------------------------------------------- field types


def _number_text(value: Any) -> Any:
    """A number written as text, e.g. `1e-5`: YAML 1.1 reads an exponent without a dot as a
    string, in files and in `key=value` overrides alike. Only finite numbers are taken; any
    other text is left for the float check to refuse."""
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return number if math.isfinite(number) else value
    return value


def _tuple_as_list(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


T = TypeVar("T")
# a float field: an int or a float, or a finite number written as text
Float = Annotated[float, BeforeValidator(_number_text)]
# a list field: a list, or a tuple (stored as a list)
List = Annotated[list[T], BeforeValidator(_tuple_as_list)]


class _Section(BaseModel):
    """A config section: strict types, unknown keys refused, every error a ConfigError."""

    model_config = ConfigDict(extra="forbid", strict=True)

    def __init__(self, /, **data: Any) -> None:
        # keyword construction in code validates like a mapping loaded from YAML
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise _config_error(type(self), e) from e

    # Not a "custom __init__" to pydantic (as in its RootModel): a section nested in a mapping is
    # validated by pydantic's schema, not through this method, so its errors keep their location.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- sections


class ModelConfig(_Section):
    """Which model every policy starts from."""

    name: str = "tiny"  # "tiny" (random, built in code) | "smollm2" | path to an HF model folder
    arch: str = "llama"  # tiny only: "llama" | "qwen2"
    tokenizer: str = "bytes"  # tiny only: "bytes" (259-token, built in code) | "smollm2"
    hidden_size: int = 64  # tiny only: hidden width (multiple of 32)
    num_layers: int = 2  # tiny only: decoder layers
    init_seed: int = 0  # tiny only: seed of the random initialisation
    dtype: str = "float32"  # "float32" | "bfloat16" | "float16"

    @model_validator(mode="after")
    def _check(self) -> Self:
        one_of("model.arch", self.arch, ("llama", "qwen2"))
        one_of("model.tokenizer", self.tokenizer, ("bytes", "smollm2"))
        one_of("model.dtype", self.dtype, ("float32", "bfloat16", "float16"))
        positive("model.hidden_size", self.hidden_size)
        positive("model.num_layers", self.num_layers)
        return self


class LoraSection(_Section):
    """LoRA adapters (policies.kind = "lora": one adapter per policy name)."""

    rank: int = 8  # r
    alpha: Float = 16.0  # lora_alpha (scale = alpha / rank)
    dropout: Float = 0.0  # lora_dropout
    target_modules: Union[str, List[str]] = "all-linear"  # peft target_modules

    @model_validator(mode="after")
    def _check(self) -> Self:
        positive("policies.lora.rank", self.rank)
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"policies.lora.dropout must be in [0, 1), got {self.dropout}")
        return self


class PoliciesConfig(_Section):
    """How policies map to models. Agents name one of `names` as their policy."""

    kind: str = "shared"  # "shared" (one model) | "separate" (a model per name) | "lora"
    names: List[str] = Field(default_factory=lambda: ["shared"])  # policy names
    # separate: the model of each policy name (a name without an entry uses `model`)
    models: dict[str, ModelConfig] = Field(default_factory=dict)
    lora: LoraSection = Field(default_factory=LoraSection)  # lora: adapter settings

    @model_validator(mode="after")
    def _check(self) -> Self:
        one_of("policies.kind", self.kind, ("shared", "separate", "lora"))
        # policy names become file and folder names (checkpoints/.../policy-<name>.safetensors,
        # export/<name>): refuse a bad one now, not at the first checkpoint
        for i, name in enumerate(self.names):
            check_file_name(f"policies.names[{i}]", name)
        for name in self.models:
            check_file_name("policies.models (a key)", name)
        if not self.names or len(set(self.names)) != len(self.names):
            raise ConfigError(f"policies.names must be distinct and non-empty, got {self.names}")
        if self.kind == "shared" and len(self.names) != 1:
            raise ConfigError(
                f"policies.kind 'shared' takes exactly one policy name, got {self.names}"
            )
        extra = sorted(set(self.models) - set(self.names))
        if extra:
            raise ConfigError(
                f"policies.models has entries {extra} not in policies.names {self.names}"
            )
        if self.models and self.kind != "separate":
            raise ConfigError("policies.models is only used with policies.kind = 'separate'")
        return self


class SamplingConfig(_Section):
    """Default sampling of every agent (an agent may override fields in agents.<name>.sampling)."""

    temperature: Float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: Float = 1.0  # 1 = off
    max_new_tokens: int = 64  # tokens per generation (eos included)
    stop: List[str] = Field(default_factory=list)  # stop strings, e.g. ["</search>"] (kept)

    @model_validator(mode="after")
    def _check(self) -> Self:
        _sampling_params(self.model_dump(), "sampling")
        return self


class AgentConfig(_Section):
    """One role. A field left unset (null) comes from the role's defaults: the workflow's own
    (`default_agents`), then the task pack's prompts for the role (srpo.build.build_agents)."""

    policy: str | None = None  # one of policies.names (null: "shared" if named there, else the only one)
    system_prompt: str | None = None  # its system turn ("" = none; SmolLM2's template then adds its own)
    template: str | None = None  # its user turn; {input} = what the workflow asks (default "{input}")
    sampling: dict[str, Any] = Field(default_factory=dict)  # overrides of `sampling` fields

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.template is not None:
            try:
                check_template(self.template, ["input"], where="agent template")
            except ValueError as e:
                raise ConfigError(str(e)) from e
        return self


class WorkflowConfig(_Section):
    """Which workflow runs (see `srpo workflows`) and its parameters."""

    name: str = "single"  # a registered workflow name, or "file.py:Class" / "package.module:Class"
    params: dict[str, Any] = Field(default_factory=dict)  # keyword arguments of its factory

    @field_validator("name")
    @classmethod
    def _resolve_file(cls, name: str) -> str:
        return _resolved_file_ref(name)


def _resolved_file_ref(name: str) -> str:
    """"file.py:NAME" with the file's absolute path, so a run's config.yaml names it from any
    directory (`srpo eval RUN_DIR` elsewhere); a path that does not exist is left for the
    loader's error."""
    file, sep, attr = name.rpartition(":")
    if sep and file.endswith(".py") and Path(file).is_file():
        return f"{Path(file).resolve()}:{attr}"
    return name


class TaskSettings(_Section):
    """Base of a task pack's own settings: the fields it adds under `task` (srpo.packs.TaskPack
    .settings; e.g. math's source / dataset / reward, `task.search`, `task.testbed`)."""


class TaskConfig(_Section):
    """Where tasks come from: the task pack (`task.name`), the splits, and the pack's own
    settings, which sit beside these fields (`task.source`, `task.search.corpus`...) and are
    checked by the pack's `settings` model (unset ones take its defaults)."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: str = "math"  # the task pack: "math" | "search" | "testbed" (`srpo packs`) | "file.py:NAME"
    train_size: int = 500  # tasks in the train split
    heldout_size: int = 200  # tasks in the held-out split (disjoint from train)
    seed: int = 0  # generation seed of the splits

    @field_validator("name")
    @classmethod
    def _resolve_file(cls, name: str) -> str:
        return _resolved_file_ref(name)  # a pack file, like a workflow file, is stored resolved

    @model_validator(mode="after")
    def _check(self) -> Self:
        positive("task.train_size", self.train_size, zero_ok=True)
        positive("task.heldout_size", self.heldout_size, zero_ok=True)
        try:
            pack = get_pack(self.name)
        except ValueError as e:
            raise ConfigError(f"task.name: {e}") from e
        self.__pydantic_extra__ = _pack_settings(pack, dict(self.__pydantic_extra__ or {}))
        return self


GENERIC_TASK_KEYS = ("name", "train_size", "heldout_size", "seed")


def _pack_settings(pack: Any, given: dict[str, Any]) -> dict[str, Any]:
    """The pack's settings under `task`, validated, defaults filled in (as a field -> value map)."""
    model = pack.settings or TaskSettings
    unknown = sorted(set(given) - set(model.model_fields))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {['task.' + k for k in unknown]}; known keys of task (task pack "
            f"{pack.name!r}): {sorted([*GENERIC_TASK_KEYS, *model.model_fields])}"
        )
    wrapper = _settings_wrapper(model)
    try:
        settings = wrapper.model_validate({"task": given}).task
    except ValidationError as e:
        raise _config_error(wrapper, e) from e
    return {name: getattr(settings, name) for name in type(settings).model_fields}


_WRAPPERS: dict[type, type] = {}


def _settings_wrapper(model: type) -> type:
    """A model with one field `task` of the pack's settings model: its errors name `task.<key>`."""
    if model not in _WRAPPERS:
        _WRAPPERS[model] = create_model(f"TaskSettingsOf{model.__name__}", __base__=_Section,
                                        task=(model, ...))
    return _WRAPPERS[model]


class RolloutConfig(_Section):
    """Generation engine settings."""

    max_batch_size: int | None = None  # rows per generate call (None = all of a round)
    record_logprobs: bool = True  # keep sampling-time log-probs (mismatch diagnostic)
    # how a sampled token is drawn: "inverse_cdf" (srpo's own, 25x faster on a 49k vocabulary)
    # or "multinomial" (HF generate's torch.multinomial); the same distribution, other random draws
    sampler: str = "inverse_cdf"

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.max_batch_size is not None:
            positive("rollout.max_batch_size", self.max_batch_size)
        one_of("rollout.sampler", self.sampler, ("inverse_cdf", "multinomial"))
        return self


class TrainConfig(_Section):
    """The optimization: method, batch shape, optimizer, regularizers."""

    method: str = "srpo"  # srpo | grpo | dapo | dr_grpo | gspo | magrpo | at_grpo | dr_mas (`srpo methods`)
    method_settings: dict[str, Any] = Field(default_factory=dict)  # MethodSpec overrides, e.g. {reduction: pooled}
    steps: int = 2  # optimizer phases (rollout + update rounds) of the run
    tasks_per_step: int = 4  # distinct train tasks per step; each is rolled out group_size times
    epochs: int = 1  # K passes over each rollout batch
    minibatches: int = 1  # optimizer steps per epoch; each holds whole sets
    micro_batch_tokens: int = 16384  # padded tokens per forward/backward (memory knob; exact)
    lr: Float = 1e-5  # AdamW learning rate of every policy
    policy_lr: dict[str, Float] = Field(default_factory=dict)  # per-policy learning rates
    weight_decay: Float = 0.0  # AdamW weight decay
    adam_betas: List[Float] = Field(default_factory=lambda: [0.9, 0.999])  # AdamW betas
    warmup_steps: int = 0  # linear learning-rate warm-up (optimizer steps)
    grad_clip: Float = 1.0  # max global gradient norm per policy (0 = off)
    kl_beta: Float = 0.0  # beta of the k3 KL penalty to the initial policy (0 = no reference model)
    entropy_alpha: Float = 0.0  # alpha of the entropy bonus
    logprob_chunk_size: int = 1024  # tokens per lm_head chunk in log-prob computation
    # leave sets whose advantage is exactly 0 out of the old-log-prob pass and the update's
    # forward and backward (their loss and gradient are exactly 0; normalizations stay those of
    # the full step). Only when kl_beta and entropy_alpha are 0; false = compute them anyway
    skip_zero_advantage: bool = True
    # recompute each decoder layer's activations in the backward instead of keeping them
    # (HF gradient checkpointing): less memory per micro-batch token, more compute
    # (benchmarks/bench_update_memory.py measures both)
    activation_checkpointing: bool = False
    # DAPO's dynamic sampling: roll out more tasks (fresh draws of tasks_per_step) until the step
    # holds tasks_per_step tasks whose groups are informative (some advantage non-zero), at
    # most dynamic_sampling_max_draws rollouts a step; what is dropped is logged and counted
    dynamic_sampling: bool = False
    dynamic_sampling_max_draws: int = 3
    threads: int | None = None  # torch CPU threads (None = torch's default)

    @model_validator(mode="after")
    def _check(self) -> Self:
        try:
            get_method(self.method, **self.method_settings)
        except ValueError as e:
            raise ConfigError(f"train.method / train.method_settings: {e}") from e
        except TypeError as e:  # a method setting of the wrong type, e.g. clip_low: abc
            raise ConfigError(f"train: {e}") from e
        for key in ("steps", "tasks_per_step", "epochs", "minibatches", "micro_batch_tokens",
                    "logprob_chunk_size", "dynamic_sampling_max_draws"):
            positive(f"train.{key}", getattr(self, key))
        if not self.lr > 0:
            raise ConfigError(f"train.lr must be > 0, got {self.lr}")
        if len(self.adam_betas) != 2 or not all(0 <= b < 1 for b in self.adam_betas):
            raise ConfigError(f"train.adam_betas must be two numbers in [0, 1), got {self.adam_betas}")
        for key in ("weight_decay", "grad_clip", "kl_beta", "entropy_alpha", "warmup_steps"):
            if getattr(self, key) < 0:
                raise ConfigError(f"train.{key} must be >= 0, got {getattr(self, key)}")
        if self.threads is not None and self.threads < 1:  # torch would fail much later
            raise ConfigError(f"train.threads must be >= 1 (or null: torch's default), got {self.threads}")
        return self


class EvalConfig(_Section):
    """Held-out evaluation: greedy, one rollout per held-out task."""

    before: bool = True  # evaluate before training
    after: bool = True  # evaluate after training
    every: int = 0  # also every N steps (0 = never in between)
    size: int | None = None  # held-out tasks used (None = task.heldout_size, 0 = no evaluation)
    # the reward component that counts as solved (> 0); None: "correct" (math), else "em" (search)
    success_component: str | None = None
    # held-out tasks rolled out together; progress (tasks done, running accuracy) shows after each
    # batch. None: all at once (one batch: no progress until the end)
    batch_tasks: int | None = 64

    @model_validator(mode="after")
    def _check(self) -> Self:
        positive("eval.every", self.every, zero_ok=True)
        if self.size is not None:
            positive("eval.size", self.size, zero_ok=True)
        if self.batch_tasks is not None:
            positive("eval.batch_tasks", self.batch_tasks)
        return self


class CheckpointConfig(_Section):
    """What a run writes besides metrics.jsonl."""

    every: int = 0  # checkpoint every N steps (0 = only at the end)
    keep_last: int = 2  # complete checkpoints kept
    export: bool = True  # export each trained policy as a Hugging Face folder at the end
    plots: bool = True  # write plots/*.png at the end
    tensorboard: bool = True  # also log to RUN/tensorboard
    wandb: bool = False  # also log to Weights & Biases (needs the wandb package; never required)
    # episodes kept per step in RUN/episodes/ for the report's browser: whole task groups, the
    # step's first tasks (srpo.train.episodes_log). None: all; 0: none
    episodes_per_step: int | None = 256
    report: bool = True  # write RUN/report.html (srpo report) at the end

    @model_validator(mode="after")
    def _check(self) -> Self:
        positive("checkpoint.every", self.every, zero_ok=True)
        positive("checkpoint.keep_last", self.keep_last)
        if self.episodes_per_step is not None:
            positive("checkpoint.episodes_per_step", self.episodes_per_step, zero_ok=True)
        return self


class Config(_Section):
    """A run: model and policies, agents, workflow, tasks, sampling, rollout settings."""

    model: ModelConfig = Field(default_factory=ModelConfig)  # base model of every policy
    policies: PoliciesConfig = Field(default_factory=PoliciesConfig)  # policy layout
    # role -> settings over the role's defaults (the workflow's, then the task pack's prompts)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    workflow: WorkflowConfig = Field(default_factory=WorkflowConfig)  # what the agents run
    task: TaskConfig = Field(default_factory=TaskConfig)  # tasks and reward
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)  # default sampling
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)  # generation engine
    group_size: int = 4  # G: rollouts per task (one advantage group; >= 2 to train)
    seed: int = 0  # seeds sampling (torch) and workflow randomness
    device: str = "cpu"  # torch device of the models
    train: TrainConfig = Field(default_factory=TrainConfig)  # optimization (srpo train)
    eval: EvalConfig = Field(default_factory=EvalConfig)  # held-out evaluation
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)  # run outputs
    output_dir: str = "runs/default"  # run directory (config.yaml, metrics.jsonl, checkpoints/, plots/)
    resume: bool = False  # continue the latest complete checkpoint in output_dir

    @model_validator(mode="after")
    def _check(self) -> Self:
        positive("group_size", self.group_size)
        if self.train.tasks_per_step > self.task.train_size:
            raise ConfigError(
                f"train.tasks_per_step ({self.train.tasks_per_step}) exceeds task.train_size "
                f"({self.task.train_size})"
            )
        if self.eval.size is not None and self.eval.size > self.task.heldout_size:
            raise ConfigError(f"eval.size ({self.eval.size}) exceeds task.heldout_size ({self.task.heldout_size})")
        for name, agent in self.agents.items():
            if agent.policy is not None and agent.policy not in self.policies.names:
                raise ConfigError(
                    f"agents.{name}.policy: unknown policy {agent.policy!r}; known policies "
                    f"(policies.names): {self.policies.names}"
                )
            defaults = self.sampling.model_dump()
            unknown = sorted(set(agent.sampling) - set(defaults))
            if unknown:
                raise ConfigError(
                    f"agents.{name}.sampling: unknown key(s) {unknown}; known: "
                    f"{sorted(defaults)}"
                )
            _sampling_params({**defaults, **agent.sampling}, f"agents.{name}.sampling")
        return self


# --------------------------------------------------------------------------- validation helpers


def one_of(key: str, value: Any, allowed: Sequence[Any]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {list(allowed)}, got {value!r}")


def positive(key: str, value: int, *, zero_ok: bool = False) -> None:
    if value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(f"{key} must be {'>= 0' if zero_ok else '> 0'}, got {value}")


# One safe file-name component: no separator, no "..", no leading dot or dash (hidden files,
# command-line flags); the longest name leaves room for prefixes and suffixes within 255 bytes.
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_file_name(key: str, value: Any) -> None:
    """A config name that becomes a file or folder name under the run directory is one safe
    path component: it can neither leave the run directory nor fail when the file is written."""
    if not (isinstance(value, str) and _FILE_NAME.fullmatch(value) and ".." not in value):
        raise ConfigError(
            f"{key} must be a plain file name (letters, digits, '.', '_', '-', starting with a "
            f"letter or digit, at most 128 characters, no '/', '\\' or '..'): it names files "
            f"of the run, got {value!r}"
        )


def check_environment(cfg: Config) -> None:
    """What a config needs of this machine: its device and a writable output_dir.

    Called by load_config (and by the trainer's preflight, for configs built in code); not by
    Config itself, so a config written for another machine can still be built and inspected.
    """
    _check_device(cfg.device)
    _check_output_dir(cfg.output_dir)


def _check_device(device: str) -> None:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"device {device!r}: CUDA is not available on this machine "
            f"(torch.cuda.is_available() is False); use device=cpu"
        )


def _check_output_dir(output_dir: str) -> None:
    path = Path(output_dir)
    if "{time}" in output_dir:
        # the run fills in "{time}" when it starts: check the folder above the templated part
        parts = path.parts
        first = next(i for i, part in enumerate(parts) if "{time}" in part)
        path = Path(*parts[:first]) if first else Path(".")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = "exists as a file" if existing == path else f"is under the file {str(existing)!r}"
        raise ConfigError(f"output_dir {output_dir!r} {where}: it must be a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"output_dir {output_dir!r}: {str(existing)!r} is not writable, so the run could "
            f"not write its files there"
        )


def _sampling_params(values: Mapping[str, Any], key: str) -> Any:
    try:
        return SamplingParams(**values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{key}: {e}") from e


# --------------------------------------------------------------------------- loader


def from_dict(cls: type[BaseModel], data: Mapping[str, Any]) -> Any:
    """Build section `cls` from a mapping, recursively; ConfigError names any bad key."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise _config_error(cls, e) from e


def to_dict(config: BaseModel) -> dict[str, Any]:
    """The config as plain data (YAML-safe), e.g. to save next to a run."""
    return config.model_dump()


def _declared(tp: Any) -> Any:
    """A declared type without its pydantic metadata (Annotated) and without Optional."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (Union, types.UnionType):
        non_none = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(non_none) == 1:
            return _declared(non_none[0])
    return tp


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _error_key(cls: Any, loc: Sequence[Any]) -> tuple[str, Any, tuple[str, Any, int] | None]:
    """A pydantic error location as a dotted key (`train.adam_betas[1]`, `agents.solver.policy`),
    the type declared there, and (key, type, position in loc) of the union of several types it
    went through, if any (pydantic puts the tag of the member tried under it, not in the key)."""
    key, tp, union = "", cls, None
    for i, part in enumerate(loc):
        tp = _declared(tp)
        if union is None and typing.get_origin(tp) in (Union, types.UnionType):
            union, tp = (key, tp, i), Any  # `part` is the member's tag
            continue
        if isinstance(part, int) and (tp is Any or typing.get_origin(tp) is list):
            key += f"[{part}]"
        else:
            key += f".{part}" if key else str(part)
        if _is_section(tp):
            field = tp.model_fields.get(str(part))
            tp = field.annotation if field is not None else Any
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        elif typing.get_origin(tp) is list:
            tp = typing.get_args(tp)[0]
        else:
            tp = Any
    return key, _declared(tp), union


# pydantic's type errors (strict mode) -> what the value must be
_MUST_BE = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
}


def _error_message(cls: Any, error: Mapping[str, Any]) -> str:
    """One pydantic error as a sentence that names its dotted key."""
    loc, kind, value = error["loc"], error["type"], error.get("input")
    if loc and loc[-1] == "[key]":  # a key of a mapping field
        return f"{_error_key(cls, loc[:-2])[0]}: keys must be strings, got {loc[-2]!r}"
    key = _error_key(cls, loc)[0] or cls.__name__
    if kind in ("value_error", "assertion_error"):
        raised = error.get("ctx", {}).get("error")
        if isinstance(raised, ConfigError):
            return str(raised)  # a section's own rule: its message names the key already
        return f"{key}: {raised if raised is not None else error['msg']}"
    if kind == "bool_type":
        return f"{key} must be true or false, got {value!r}"
    if kind in ("model_type", "model_attributes_type"):
        return f"{key} must be a mapping (section {error['ctx']['class_name']}), got {value!r}"
    if kind in _MUST_BE:
        return f"{key} must be {_MUST_BE[kind]}, got {type(value).__name__} {value!r}"
    return f"{key}: {error['msg']}"


def _config_error(cls: Any, e: ValidationError) -> ConfigError:
    """pydantic's ValidationError as one ConfigError naming the dotted key. Unknown keys come
    first (all those of the first section that has some, with its known keys), else the first
    error; a value that matches no member of a union lists why for each member."""
    errors = e.errors(include_url=False)
    unknown = [err for err in errors if err["type"] == "extra_forbidden"]
    if unknown:
        parent = unknown[0]["loc"][:-1]
        where, section, _ = _error_key(cls, parent)
        names = sorted(f"{where}.{err['loc'][-1]}" if where else str(err["loc"][-1])
                       for err in unknown if err["loc"][:-1] == parent)
        known = sorted(section.model_fields)
        return ConfigError(
            f"unknown key(s) {names}; known keys{' of ' + where if where else ''}: {known}"
        )
    union = _error_key(cls, errors[0]["loc"])[2]
    if union is None:
        return ConfigError(_error_message(cls, errors[0]))
    key, tp, at = union
    members = [err for err in errors if _error_key(cls, err["loc"])[2] == union]
    # the value given: the input of an error of a member itself (not of an item below it)
    value = next((err["input"] for err in members if len(err["loc"]) == at + 1), members[0]["input"])
    if value is None:
        return ConfigError(f"{key} must not be null")
    names = " | ".join(str(a).replace("typing.", "") if typing.get_origin(a) else a.__name__
                       for a in map(_declared, typing.get_args(tp)))
    reasons = "; ".join(_error_message(cls, err) for err in members)
    return ConfigError(f"{key}: {value!r} matches none of {names} ({reasons})")


def _field_type(cls: Any, path: Sequence[str]) -> Any:
    """The declared type at a dotted path (Any when it goes below a free-form mapping)."""
    tp: Any = cls
    for part in path:
        tp = _declared(tp)
        if _is_section(tp):
            if part not in tp.model_fields:
                return None  # unknown key: validation reports it with the known ones
            tp = tp.model_fields[part].annotation
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return Any
    return tp


def parse_override(text: str, cls: Any = None) -> tuple[list[str], Any]:
    """"a.b=value" -> (["a", "b"], parsed value). String fields take the text verbatim."""
    if "=" not in text:
        raise ConfigError(
            f"override {text!r} must look like key=value (e.g. sampling.temperature=0.7)"
        )
    key, raw = text.split("=", 1)
    path = key.strip().split(".")
    if not all(path):
        raise ConfigError(f"override {text!r}: bad key {key!r}")
    tp = _field_type(cls, path) if cls is not None else Any
    str_only = tp is str or (
        typing.get_origin(tp) in (Union, types.UnionType)
        and set(typing.get_args(tp)) == {str, type(None)}
        and raw.strip() not in ("null", "~")
    )
    if str_only:
        return path, raw
    try:
        return path, yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ConfigError(f"override {key}: cannot parse value {raw!r}: {e}") from e


def apply_overrides(
    data: dict[str, Any], overrides: Sequence[str], cls: Any = None
) -> dict[str, Any]:
    """Set each `a.b.c=value` in a nested dict (in place; intermediate dicts are created)."""
    for text in overrides:
        path, value = parse_override(text, cls)
        set_dotted(data, path, value, where=f"override {text!r}")
    return data


def set_dotted(data: dict[str, Any], path: Sequence[str], value: Any, *, where: str = "") -> None:
    """data[a][b][c] = value for path [a, b, c] (in place; missing sections are created)."""
    if not path or not all(path):
        raise ConfigError(f"{where or 'key'}: bad key {'.'.join(path)!r}")
    node = data
    for i, part in enumerate(path[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"{where or '.'.join(path)}: {'.'.join(path[: i + 1])} is a value, not a section")
        node = child
    node[path[-1]] = value


def reset_params_of_a_changed_workflow(before: dict[str, Any], after: dict[str, Any],
                                       overrides: Sequence[str]) -> None:
    """An override that names another workflow (`workflow.name=...`, `srpo train --workflow`)
    starts it from its own defaults: the file's `workflow.params` belong to the file's workflow
    and would fail on (or silently configure) another one. Params given on the command line
    (`workflow.params.x=`, `workflow.params={...}`, `workflow={...}`) are kept."""
    if after["workflow"]["name"] == before["workflow"]["name"]:
        return
    keys = [o.split("=", 1)[0].strip() for o in overrides]
    if any(k in ("workflow", "workflow.params") for k in keys):  # params given whole
        return
    after["workflow"]["params"] = {}
    apply_overrides(after, [o for o, k in zip(overrides, keys) if k.startswith("workflow.params.")], Config)


def reset_settings_of_a_changed_task_pack(before: dict[str, Any], after: dict[str, Any],
                                          overrides: Sequence[str]) -> None:
    """An override that names another task pack (`task.name=search`) starts it from its own
    settings: the file's pack settings (math's `task.source`...) belong to the file's pack. The
    split fields and task settings given on the command line (`task.search.corpus=...`) stay."""
    if after["task"]["name"] == before["task"]["name"]:
        return
    keys = [o.split("=", 1)[0].strip() for o in overrides]
    if "task" in keys:  # the task section given whole
        return
    given = {k.split(".")[1] for k in keys if k.startswith("task.")}
    for key in list(after["task"]):
        if key not in GENERIC_TASK_KEYS and key not in given:
            del after["task"][key]


def load_config(path: str | Path | None = None, overrides: Sequence[str] = (),
                cls: type = Config, *, check_machine: bool = True) -> Any:
    """Config from a YAML file (None = all defaults) plus `key=value` overrides.

    check_machine: also check_environment (CUDA for a cuda device, a writable output_dir);
    False for a caller that uses neither (e.g. one that only builds workflows and rewards).
    """
    data: Any = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {str(path)!r} is not valid YAML: {e}") from e
        if not isinstance(data, dict):
            raise ConfigError(f"config file {str(path)!r} must hold a mapping at top level")
    cfg = from_dict(cls, data)
    if overrides:
        # Overrides edit the complete config (defaults included), then everything is re-validated.
        full = to_dict(cfg)
        edited = apply_overrides(copy.deepcopy(full), overrides, cls)
        if cls is Config:
            reset_params_of_a_changed_workflow(full, edited, overrides)
            reset_settings_of_a_changed_task_pack(full, edited, overrides)
        cfg = from_dict(cls, edited)
    if check_machine and isinstance(cfg, Config):
        check_environment(cfg)
    return cfg
