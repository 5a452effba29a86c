"""The schema of a run's configuration: every section a pydantic model, every field typed and
commented. Loading YAML and overrides is srpo.config.loading; the package doc has the rules."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Self, TypeVar

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

from srpo.config.errors import ConfigError, config_error
from srpo.config.paths import FileReference, ModelPath
from srpo.models.precision import DTYPE_SETTINGS
from srpo.objective.aggregation import SHORT_STEPS
from srpo.objective.methods import get_method
from srpo.packs import get_pack
from srpo.rollout.agents import SamplingParams
from srpo.rollout.backends import get_backend, known_backend_names
from srpo.rollout.runner import CUT_ANSWERS
from srpo.types import template_problem
from srpo.workflows.base import UNCONSUMED

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
    """A config section: strict types, unknown keys refused, every error a ConfigError.

    Every float field is finite (allow_inf_nan=False): YAML's `.nan` / `.inf` would otherwise
    pass the range checks below (nan compares false) and fail late, e.g. when the run's config
    is written as JSON, or train silently on nan."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    def __init__(self, /, **data: Any) -> None:
        # keyword construction in code validates like a mapping loaded from YAML
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise config_error(type(self), e) from e

    # Not a "custom __init__" to pydantic (as in its RootModel): a section nested in a mapping is
    # validated by pydantic's schema, not through this method, so its errors keep their location.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- sections


ATTN_IMPLEMENTATIONS = ("auto", "eager", "sdpa", "flash_attention_2", "flex_attention")


class ModelConfig(_Section):
    """Which model every policy starts from."""

    name: ModelPath = "tiny"  # "tiny" (random, built in code) | "smollm2" | path to an HF model folder
    arch: str = "llama"  # tiny only: "llama" | "qwen2"
    tokenizer: str = "bytes"  # tiny only: "bytes" (259-token, built in code) | "smollm2"
    hidden_size: int = 64  # tiny only: hidden width (multiple of 32)
    num_layers: int = 2  # tiny only: decoder layers
    init_seed: int = 0  # tiny only: seed of the random initialisation
    # compute precision (srpo.models.precision): "auto" (bfloat16 where the CPU has AVX-512 BF16 /
    # AMX or the GPU bf16, else float32) | "float32" | "bfloat16". Trainable weights, gradients,
    # optimizer states, log-probs and the loss stay float32; a LoRA base is stored in bf16.
    dtype: str = "float32"
    # attention kernel, transformers' attn_implementation: "auto" (transformers' choice: sdpa) |
    # "eager" | "sdpa" | "flash_attention_2" | "flex_attention". Same values up to rounding;
    # measured choices in docs/training.md, "Attention".
    attn_implementation: str = "auto"

    @model_validator(mode="after")
    def _check(self) -> Self:
        one_of("model.attn_implementation", self.attn_implementation, ATTN_IMPLEMENTATIONS)
        one_of("model.arch", self.arch, ("llama", "qwen2"))
        one_of("model.tokenizer", self.tokenizer, ("bytes", "smollm2"))
        one_of("model.dtype", self.dtype, DTYPE_SETTINGS)
        positive("model.hidden_size", self.hidden_size)
        positive("model.num_layers", self.num_layers)
        seed_range("model.init_seed", self.init_seed)
        return self


class LoraSection(_Section):
    """LoRA adapters (policies.kind = "lora": one adapter per policy name)."""

    rank: int = 8  # r
    alpha: Float = 16.0  # lora_alpha (scale = alpha / rank)
    dropout: Float = 0.0  # lora_dropout
    target_modules: str | List[str] = "all-linear"  # peft target_modules
    # start a policy's adapter from trained weights instead of B = 0 (the base model): policy
    # name -> a LoRA adapter folder in peft's layout (adapter_config.json and
    # adapter_model.safetensors; a run writes one per policy to export/<policy>/lora), with the
    # same rank, alpha and target modules as this section. Safetensors only; a resumed run
    # continues from its own checkpoint instead
    init: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Self:
        positive("policies.lora.rank", self.rank)
        for name, folder in self.init.items():
            if not folder:
                raise ConfigError(f"policies.lora.init.{name} is empty: name an adapter folder")
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
        unknown = sorted(set(self.lora.init) - set(self.names))
        if unknown:
            raise ConfigError(f"policies.lora.init names {unknown}, not in policies.names {self.names}")
        if self.lora.init and self.kind != "lora":
            raise ConfigError("policies.lora.init is only used with policies.kind = 'lora'")
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
    # few-shot demonstrations [[user, assistant], ...], chat turns before the request (null: none)
    examples: list[list[str]] | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        for i, pair in enumerate(self.examples or []):
            if len(pair) != 2 or not all(text.strip() for text in pair):
                raise ValueError(f"examples[{i}]: must be [user, assistant], both turns "
                                  f"non-empty, got {pair!r}")
        return self

    @field_validator("template")
    @classmethod
    def _check_template(cls, template: str | None) -> str | None:
        # a ValueError here is named by its key (agents.<role>.template)
        if template is not None and (problem := template_problem(template, ["input"])) is not None:
            raise ValueError(problem)
        return template

    @field_validator("system_prompt", "template", "examples")
    @classmethod
    def _check_text(cls, value: Any) -> Any:
        # a lone surrogate (e.g. "\ud800" in YAML) is not text: the tokenizer's TypeError later
        for text in [value] if isinstance(value, str) else [t for pair in value or [] for t in pair]:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"holds a lone surrogate (U+{ord(text[e.start]):04X}) at character "
                                 f"{e.start}, which is not text a tokenizer can encode") from None
        return value


class WorkflowConfig(_Section):
    """Which workflow runs (see `srpo workflows`) and its parameters."""

    name: FileReference = "single"  # a registered workflow name, or "file.py:Class" / "package.module:Class"
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

    name: FileReference = "math"  # the task pack: "math" | "search" | "testbed" (`srpo packs`) | "file.py:NAME"
    train_size: int = 500  # tasks in the train split
    heldout_size: int = 200  # tasks in the held-out split (disjoint from train)
    seed: int = 0  # generation seed of the splits

    @field_validator("name")
    @classmethod
    def _resolve_file(cls, name: str) -> str:
        return _resolved_file_ref(name)  # a pack file, like a workflow file, is stored resolved

    @model_validator(mode="after")
    def _check(self) -> Self:
        for key in ("train_size", "heldout_size"):
            positive(f"task.{key}", getattr(self, key), zero_ok=True)
            at_most(f"task.{key}", getattr(self, key), MAX_SPLIT_SIZE,
                    "a split is generated or read whole, and held in memory, before training")
        try:
            pack = get_pack(self.name)
        except ValueError as e:
            raise ConfigError(f"task.name: {e}") from e
        self.__pydantic_extra__ = _pack_settings(pack, dict(self.__pydantic_extra__ or {}))
        return self


GENERIC_TASK_KEYS = ("name", "train_size", "heldout_size", "seed")
# The most tasks of one split (task.train_size, task.heldout_size): every pack builds a split
# whole at start-up (reasoning-gym draws ~5,000 questions a second), so a larger one would run
# for hours, or out of memory, before the first step
MAX_SPLIT_SIZE = 1_000_000
# The most rollouts one step may generate: tasks_per_step * group_size (* dynamic sampling's
# draws); every episode's records are held in memory until the update (docs/training.md)
MAX_ROLLOUTS_PER_STEP = 1_000_000


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
        raise config_error(wrapper, e) from e
    return {name: getattr(settings, name) for name in type(settings).model_fields}


_WRAPPERS: dict[Any, type] = {}  # pack settings model or (backend name, settings model) -> wrapper


def _settings_wrapper(model: type) -> type:
    """A model with one field `task` of the pack's settings model: its errors name `task.<key>`."""
    if model not in _WRAPPERS:
        _WRAPPERS[model] = create_model(f"TaskSettingsOf{model.__name__}", __base__=_Section,
                                        task=(model, ...))
    return _WRAPPERS[model]


class RolloutConfig(_Section):
    """Generation: the backend (`backend`), what every backend takes, and the backend's own section
    `rollout.<backend>` (`rollout.hf`, `rollout.ctranslate2`: srpo.rollout.backends), checked by
    the backend's `settings` model, unset fields taking its defaults (the section is always
    there once loaded). A section of another backend is an error, not a setting ignored; an
    override that selects another backend drops the file's section of the old one, as
    `task.name=...` drops the old pack's settings (srpo.config.loading)."""

    model_config = ConfigDict(extra="allow", strict=True)

    # the generation backend: "hf" (transformers generate) or "ctranslate2" (CTranslate2, optional
    # extra srpo[ct2]; converted from the live weights, re-converted after each update), or one
    # a package adds (srpo.rollout.backends)
    backend: str = "hf"
    max_batch_size: int | None = None  # rows per generate call (None = all of a round)
    record_logprobs: bool = True  # keep sampling-time log-probs (mismatch diagnostic)

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for old, new in MOVED_ROLLOUT_KEYS.items():
                if old in data:
                    raise ConfigError(
                        f"rollout.{old} is now rollout.{new} (each backend's settings are its own "
                        f"section under rollout): write `rollout: {{{new.split('.')[0]}: "
                        f"{{{new.split('.')[1]}: ...}}}}` or the override rollout.{new}=..."
                    )
        return data

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.max_batch_size is not None:
            positive("rollout.max_batch_size", self.max_batch_size)
        try:
            get_backend(self.backend)
        except ValueError as e:
            raise ConfigError(f"rollout.backend: {e}") from e
        given = dict(self.__pydantic_extra__ or {})
        unknown = sorted(set(given) - set(known_backend_names()))
        if unknown:
            known = sorted([*type(self).model_fields, *known_backend_names()])
            close = difflib.get_close_matches(unknown[0], known, n=1)
            hint = f"did you mean 'rollout.{close[0]}'? " if close else ""
            raise ConfigError(f"unknown key(s) {['rollout.' + k for k in unknown]}; {hint}known keys "
                              f"of rollout (its own and the backends' sections): {known}")
        other = sorted(set(given) - {self.backend})
        if other:
            raise ConfigError(
                f"rollout.{other[0]} holds settings of the backend {other[0]!r}, but rollout.backend "
                f"is {self.backend!r}: remove the section or select that backend"
            )
        given.setdefault(self.backend, {})
        self.__pydantic_extra__ = {self.backend: _backend_settings(get_backend(self.backend),
                                                                  given[self.backend])}
        return self

    def settings_of(self, backend: str) -> Any:
        """The settings of `backend`, the one rollout.backend selects: its section
        `rollout.<backend>` (an instance of its settings model, defaults filled in)."""
        extra = self.__pydantic_extra__ or {}
        if backend not in extra:
            raise KeyError(f"rollout.{backend}: no such section (rollout.backend is {self.backend!r})")
        return extra[backend]


# keys of rollout that are now a field of a backend's section
MOVED_ROLLOUT_KEYS = {
    "sampler": "hf.sampler",
    "share_prefill": "hf.share_prefill",
    "ct2_compute_type": "ctranslate2.compute_type",
    "ct2_threads": "ctranslate2.threads",
}


def _backend_settings(backend: Any, section: Any) -> Any:
    """A backend's section validated by its settings model (an error names rollout.<backend>.<key>)."""
    if isinstance(section, BaseModel):
        section = section.model_dump()
    if not isinstance(section, Mapping):
        raise ConfigError(f"rollout.{backend.name} must be a mapping (the settings of backend "
                          f"{backend.name!r}), got {section!r}")
    wrapper = _backend_wrapper(backend)
    try:
        return getattr(wrapper.model_validate({"rollout": {backend.name: dict(section)}}).rollout,
                       backend.name)
    except ValidationError as e:
        raise config_error(wrapper, e) from e


def _backend_wrapper(backend: Any) -> type:
    """A model `{rollout: {<backend>: settings}}`: its errors name `rollout.<backend>.<key>`."""
    key = (backend.name, backend.settings)
    if key not in _WRAPPERS:
        inner = create_model(f"RolloutOf{backend.settings.__name__}", __base__=_Section,
                             **{backend.name: (backend.settings, ...)})
        _WRAPPERS[key] = create_model(f"BackendSettingsOf{backend.settings.__name__}",
                                      __base__=_Section, rollout=(inner, ...))
    return _WRAPPERS[key]


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
    # policies that act but are not updated (no optimizer, no gradient): e.g. trained experts
    # under a router that learns. Sets whose members are all frozen are left out of the update
    # (their gradient is 0); at least one policy must stay trained
    frozen_policies: List[str] = Field(default_factory=list)
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
    # run each distinct prompt of a policy's micro-batch rows through the decoder once and the
    # members' responses on its KV cache (a task's members share their prompt): the same
    # log-probs and gradients up to float rounding, far fewer forward tokens when prompts are
    # long and answers short. Not under activation_checkpointing, whose recomputation would
    # append to the cache again: there every row runs whole
    share_prompt_forward: bool = True
    # a diagnostic: log each set size's share of the gradient, grad/k{K}/norm = the norm (all
    # policies' parameters together, before clipping) of the gradient of the loss over that
    # size's sets. The update then packs micro-batches of one set size each (the same loss and
    # gradient up to float rounding) and snapshots the gradient once per size (docs/metrics.md)
    grad_norm_by_set_size: bool = False
    # DAPO's dynamic sampling: roll out more tasks (fresh draws of tasks_per_step) until the step
    # holds tasks_per_step tasks whose groups are informative (some advantage non-zero), at
    # most dynamic_sampling_max_draws rollouts a step; what is dropped is logged and counted
    dynamic_sampling: bool = False
    dynamic_sampling_max_draws: int = 3
    # roll out every draw of a step at once (one batch per policy and round) and choose after,
    # in draw order: the same tasks and choice, more rows per generate call, and the draws a
    # sequential step would have stopped before are generated anyway (docs/training.md)
    dynamic_sampling_at_once: bool = False
    # with dynamic_sampling_at_once: a step still short of tasks_per_step informative tasks after
    # its at-once draws rolls out up to this many more draws, one at a time, stopping as soon as
    # it is full (more signal only where a step lacks it; docs/training.md, "Short steps")
    dynamic_sampling_extra_draws: int = 0
    # a step where dynamic sampling kept k < tasks_per_step informative tasks: "scaled" (default)
    # multiplies its loss by k / tasks_per_step, as if the missing tasks were kept with advantage
    # 0 (what a step without dynamic sampling does with its uninformative tasks), so a step with
    # little signal makes a small update; "full" averages over the sets it kept (a full-size
    # update on 1 task). On 8 untuned tasks x 3 seeds "scaled" lost significantly on none, and
    # the default job kept its gain (docs/training.md, "Short steps"; docs/benchmarks.md).
    # Without dynamic sampling every step keeps all its tasks: nothing to scale
    dynamic_sampling_short_steps: str = "scaled"
    threads: int | None = None  # torch CPU threads (None = torch's default)
    # truncated importance sampling (docs/algorithms.md): weight each ratio unit's loss by
    # min(pi_old / pi_sampler, tis_cap), the sampler's recorded log-probs against the trainer's
    # old ones, at the method's ratio unit (token, sequence, set); 0 = off. Needs
    # rollout.record_logprobs; lets a sampler that is not the trained policy (CTranslate2 int8)
    # be trained on
    tis_cap: Float = 0.0
    # DAPO's overlong punishment at set level (srpo.rollout.overlong): each training episode's
    # reward gets overlong = -w * (share of its outputs the token budget cut); 0 = off.
    # Held-out evaluation never includes it
    overlong_penalty: Float = 0.0
    # what a training output cut by the token budget answers: "score" (read like any other
    # text) or "none" (it states no answer: majority votes leave it out and it is scored as
    # the empty text; srpo.rollout.runner). Held-out evaluation always scores cut outputs
    cut_answers: str = "score"
    # what becomes of an output a transition did not read (a cut answer the vote left out under
    # cut_answers: none): "singleton" trains it as a set of its own, credited unconsumed_reward,
    # so it never shares the set's advantage (the definition's set; docs/algorithms.md,
    # "Consumed sets"); "in_set" (default) keeps it in the set it was produced for: on the default
    # job singleton gained less (+13.0 against +21.1 over 5 seeds; docs/benchmarks.md)
    unconsumed: str = "in_set"
    unconsumed_reward: Float = 0.0

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
        learning_rate("train.lr", self.lr)
        for name, lr in self.policy_lr.items():
            learning_rate(f"train.policy_lr.{name}", lr)
        if len(self.adam_betas) != 2 or not all(0 <= b < 1 for b in self.adam_betas):
            raise ConfigError(f"train.adam_betas must be two numbers in [0, 1), got {self.adam_betas}")
        if self.tis_cap != 0 and not self.tis_cap >= 1:
            raise ConfigError(f"train.tis_cap must be 0 (off) or >= 1 (the largest importance "
                              f"weight kept), got {self.tis_cap}")
        one_of("train.cut_answers", self.cut_answers, CUT_ANSWERS)
        one_of("train.unconsumed", self.unconsumed, UNCONSUMED)
        one_of("train.dynamic_sampling_short_steps", self.dynamic_sampling_short_steps, SHORT_STEPS)
        positive("train.dynamic_sampling_extra_draws", self.dynamic_sampling_extra_draws, zero_ok=True)
        if self.dynamic_sampling_extra_draws and not (self.dynamic_sampling and self.dynamic_sampling_at_once):
            raise ConfigError("train.dynamic_sampling_extra_draws needs train.dynamic_sampling and "
                              "train.dynamic_sampling_at_once: true (drawing one at a time already "
                              "stops when a step is full: raise train.dynamic_sampling_max_draws)")
        if not math.isfinite(self.unconsumed_reward):
            raise ConfigError(f"train.unconsumed_reward must be finite, got {self.unconsumed_reward}")
        if not math.isfinite(self.overlong_penalty):
            raise ConfigError(f"train.overlong_penalty must be finite, got {self.overlong_penalty}")
        for key in ("weight_decay", "grad_clip", "kl_beta", "entropy_alpha", "warmup_steps",
                    "overlong_penalty"):
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
    # agents that sample at evaluation, by role: {role: temperature}; every other agent decodes
    # greedily (default: all of them). E.g. {query_writer: 0.7}: a set of query writers whose
    # members differ at evaluation as in training; the run's seed fixes the draws
    # (a seeded fork of torch's generator: training's draws are untouched).
    temperatures: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Self:
        positive("eval.every", self.every, zero_ok=True)
        for role, t in self.temperatures.items():
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t < float("inf"):
                raise ValueError(f"eval.temperatures.{role} must be a temperature >= 0, got {t!r}")
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
    # step's first tasks (srpo.record.episodes_log). None: all; 0: none
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
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)  # generation backend
    group_size: int = 4  # G: rollouts per task (one advantage group; >= 2 to train)
    seed: int = 0  # seeds sampling (torch) and workflow randomness
    device: str = "cpu"  # torch device of the models
    train: TrainConfig = Field(default_factory=TrainConfig)  # optimization (srpo train)
    eval: EvalConfig = Field(default_factory=EvalConfig)  # held-out evaluation
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)  # run outputs
    output_dir: str = "runs/default"  # run directory (config.yaml, metrics.jsonl, checkpoints/, plots/)
    resume: bool = False  # continue the latest complete checkpoint in output_dir

    @field_validator("device")
    @classmethod
    def _device(cls, device: str) -> str:
        check_device_name(device)
        return device

    @model_validator(mode="after")
    def _check(self) -> Self:
        positive("group_size", self.group_size)
        rollouts = rollouts_per_step(self)
        if rollouts > MAX_ROLLOUTS_PER_STEP:
            raise ConfigError(
                f"group_size ({self.group_size}) x train.tasks_per_step ({self.train.tasks_per_step})"
                f"{' x train.dynamic_sampling_max_draws (+ extra_draws)' if self.train.dynamic_sampling else ''} = "
                f"{rollouts} rollouts a step exceeds the cap of {MAX_ROLLOUTS_PER_STEP} (a documented "
                f"bound: every rollout of a step is held in memory until its update)"
            )
        if not self.output_dir.strip():
            raise ConfigError("output_dir is empty: the run would write its files into the working "
                              "directory; name a run directory, e.g. output_dir=runs/x")
        seed_range("seed", self.seed)  # the trainer seeds numpy with it
        unknown = sorted(set(self.train.policy_lr) - set(self.policies.names))
        if unknown:
            raise ConfigError(
                f"train.policy_lr.{unknown[0]}: unknown policy {unknown[0]!r}; known policies "
                f"(policies.names): {self.policies.names}"
            )
        frozen = self.train.frozen_policies
        unknown = sorted(set(frozen) - set(self.policies.names))
        if unknown:
            raise ConfigError(
                f"train.frozen_policies: unknown policy {unknown[0]!r}; known policies "
                f"(policies.names): {self.policies.names}"
            )
        if len(set(frozen)) != len(frozen):
            raise ConfigError(f"train.frozen_policies names a policy twice: {frozen}")
        if set(frozen) >= set(self.policies.names):
            raise ConfigError(f"train.frozen_policies freezes every policy ({frozen}): nothing "
                              f"would be trained; evaluate with `srpo eval` instead")
        both = sorted(set(frozen) & set(self.train.policy_lr))
        if both:
            raise ConfigError(f"train.policy_lr.{both[0]}: policy {both[0]!r} is frozen "
                              f"(train.frozen_policies), so it has no learning rate")
        if self.train.tis_cap > 0 and not self.rollout.record_logprobs:
            raise ConfigError("train.tis_cap needs rollout.record_logprobs: true (truncated importance "
                              "sampling weighs each output by its sampler's recorded log-probs)")
        if self.train.tasks_per_step > self.task.train_size:
            raise ConfigError(
                f"train.tasks_per_step ({self.train.tasks_per_step}) exceeds task.train_size "
                f"({self.task.train_size})"
            )
        if ":" not in self.workflow.name:  # a workflow file's run() may return its own components
            check_success_component(self.eval.success_component, get_pack(self.task.name))
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


def rollouts_per_step(cfg: Config) -> int:
    """The most episodes one training step generates: tasks_per_step * group_size, times
    dynamic sampling's draws when it is on."""
    t = cfg.train
    draws = t.dynamic_sampling_max_draws + t.dynamic_sampling_extra_draws if t.dynamic_sampling else 1
    return cfg.train.tasks_per_step * cfg.group_size * draws


def at_most(key: str, value: int, limit: int, what: str) -> None:
    if value > limit:
        raise ConfigError(f"{key} must be <= {limit} ({what}), got {value}")


def positive(key: str, value: int, *, zero_ok: bool = False) -> None:
    if value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(f"{key} must be {'>= 0' if zero_ok else '> 0'}, got {value}")


def check_success_component(name: str | None, pack: Any) -> None:
    """eval.success_component names one of the task pack's reward components (when the pack
    declares them): a misspelt one would be a traceback at the first evaluation, after the
    model was built and rolled out."""
    known = list(pack.reward_components)
    if name is not None and known and name not in known:
        raise ConfigError(f"eval.success_component must be a reward component of task pack "
                          f"{pack.name!r}: one of {known} (or null: {pack.success_component!r}), "
                          f"got {name!r}")


DEVICE_TYPES = ("cpu", "cuda", "mps")  # where the models can run


def check_device_name(device: str) -> None:
    """A torch device string of a type the models run on: "cpu", "cuda", "cuda:N" or "mps".
    Whether this machine has it is check_environment's question (a config may be written for
    another machine); a name torch cannot parse would be a traceback at the first model."""
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, ValueError, TypeError):
        kind = None
    if kind not in DEVICE_TYPES:
        raise ConfigError(f"device must be 'cpu', 'cuda', 'cuda:N' (N a GPU index) or 'mps', "
                          f"got {device!r}")


def seed_range(key: str, value: int) -> None:
    """A seed in [0, 2**32 - 1]: numpy refuses any other (with a message naming no key) and
    torch one beyond 64 bits."""
    if not 0 <= value <= 2**32 - 1:
        raise ConfigError(f"{key} must be in [0, 2**32 - 1] (a random seed), got {value}")


def learning_rate(key: str, value: float) -> None:
    """0 < lr <= 1: AdamW takes any number, but a negative one is torch's error at the first
    step and a huge one overflows its float state (1e300: a traceback); useful rates are
    around 1e-6 to 1e-3."""
    if not 0 < value <= 1:
        raise ConfigError(f"{key} must be in (0, 1] (a learning rate, e.g. 1e-5), got {value}")


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


def _sampling_params(values: Mapping[str, Any], key: str) -> Any:
    try:
        return SamplingParams(**values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{key}: {e}") from e
