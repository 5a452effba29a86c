"""Policy sets: which model (or adapter) generates for each policy name.

Three layouts, one record:

    PolicySet.shared(model, tok)                    one model; roles differ only by prompt
    PolicySet.separate({"solver": (m1, tok), "aggregator": (m2, tok)})   a model per policy
    PolicySet.lora(base, tok, ["solver", "aggregator"], rank=8)          one base model + one
                                                    peft LoRA adapter per policy (name = adapter)

Agents name their policy (`AgentSpec.policy`); several agents may share one. A backend asks the
set for a policy's model and tokenizer and wraps each policy's generate call in `activated(name)`,
which switches the LoRA adapter and puts the model back as it found it (train/eval mode and the
parameters' requires_grad flags, which peft's `set_adapter` rewrites).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srpo.models.precision import adapter_inputs_uncast, compute_context

KINDS = ("shared", "separate", "lora", "scripted")


@dataclass
class Policy:
    """One policy: the model that generates for it, its tokenizer, and its adapter (LoRA).

    model: a transformers causal LM or a peft model; None for scripted (model-free) policies.
    adapter: the peft adapter to activate before generating; None = the model as is.
    """

    name: str
    model: Any
    tokenizer: Any
    adapter: str | None = None


class PolicySet:
    """Named policies of one run (see module doc). Unknown names raise ValueError."""

    def __init__(self, policies: Sequence[Policy], kind: str):
        if kind not in KINDS:
            raise ValueError(f"unknown policy kind {kind!r}; known: {list(KINDS)}")
        if not policies:
            raise ValueError("a policy set needs at least one policy")
        names = [p.name for p in policies]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate policy name(s) {dupes}")
        for p in policies:
            if not p.name or not isinstance(p.name, str):
                raise ValueError(f"policy names must be non-empty strings, got {p.name!r}")
            if p.tokenizer is None:
                raise ValueError(f"policy {p.name!r} has no tokenizer")
        self.kind = kind
        self._policies = {p.name: p for p in policies}
        # "float32" | "bfloat16": the precision every forward of these policies runs in (the
        # trainer's and the backends'), srpo.models.precision; set from model.dtype by
        # srpo.build.build_policies
        self.compute_dtype = "float32"

    # ------------------------------------------------------------------ constructors

    @classmethod
    def shared(cls, model: Any, tokenizer: Any, name: str = "shared") -> PolicySet:
        return cls([Policy(name, model, tokenizer)], "shared")

    @classmethod
    def separate(cls, models: Mapping[str, tuple[Any, Any]]) -> PolicySet:
        """models: policy name -> (model, tokenizer). Models must be distinct objects."""
        ids = [id(m) for m, _ in models.values()]
        if len(set(ids)) != len(ids):
            raise ValueError(
                "separate policies must be distinct model objects; use PolicySet.shared for one "
                "model shared by several roles"
            )
        return cls([Policy(n, m, t) for n, (m, t) in models.items()], "separate")

    @classmethod
    def lora(
        cls,
        base_model: Any,
        tokenizer: Any,
        names: Sequence[str],
        *,
        rank: int = 8,
        alpha: float = 16.0,
        dropout: float = 0.0,
        target_modules: str | Sequence[str] = "all-linear",
        init_lora_weights: bool = True,
    ) -> PolicySet:
        """Wrap `base_model` in a peft model holding one LoRA adapter per name.

        init_lora_weights=True (peft's default) starts every adapter at B = 0, i.e. exactly the
        base model; False gives random adapters (tests use it to tell adapters apart).
        """
        from peft import LoraConfig, get_peft_model  # peft is an optional dependency ([train])

        names = list(names)
        if not names:
            raise ValueError("PolicySet.lora needs at least one adapter name")
        targets = target_modules if isinstance(target_modules, str) else list(target_modules)
        config = LoraConfig(
            r=rank,
            lora_alpha=alpha,
            lora_dropout=dropout,
            target_modules=targets,
            init_lora_weights=init_lora_weights,
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(base_model, config, adapter_name=names[0])
        for name in names[1:]:
            model.add_adapter(name, config)
        return cls([Policy(n, model, tokenizer, adapter=n) for n in names], "lora")

    def load_adapter(self, name: str, folder: str | Path) -> None:
        """Set LoRA policy `name`'s adapter to the weights in FOLDER, a peft adapter folder
        (adapter_config.json, adapter_model.safetensors: what `export/<policy>/lora` of a run
        holds, or peft's own `save_pretrained`). Its rank and alpha must be this adapter's, and
        its tensors exactly this adapter's LoRA weights: anything else is an error naming what
        differs. Reads safetensors only (no pickle)."""
        from peft import get_peft_model_state_dict, set_peft_model_state_dict
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        policy = self[name]
        if self.kind != "lora" or policy.adapter is None:
            raise ValueError(f"policy {name!r} is not a LoRA adapter (policies.kind is {self.kind!r})")
        folder = Path(folder)
        config_path, weights_path = folder / "adapter_config.json", folder / "adapter_model.safetensors"
        for path in (config_path, weights_path):
            if not path.is_file():
                raise FileNotFoundError(
                    f"LoRA init of policy {name!r}: {path} does not exist (a peft adapter folder holds "
                    "adapter_config.json and adapter_model.safetensors; a run's is <run>/export/<policy>/lora). "
                    "Train that adapter first: a preset that starts from one says how in its header "
                    "(math/routed: bash scripts/train_routed_experts.sh)")
        try:
            saved = json.loads(config_path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"LoRA init of policy {name!r}: {config_path} is not JSON ({e})") from None
        mine = policy.model.peft_config[policy.adapter]
        for key, want in (("r", mine.r), ("lora_alpha", mine.lora_alpha)):
            if saved.get(key) != want:
                raise ValueError(f"LoRA init of policy {name!r}: {config_path} has {key} = {saved.get(key)!r}, "
                                 f"policy {name!r} has {want!r} (policies.lora)")
        try:
            tensors = load_file(str(weights_path))
        except SafetensorError as e:
            raise ValueError(f"LoRA init of policy {name!r}: {weights_path} is not a valid safetensors "
                             f"file ({e})") from None
        expected = get_peft_model_state_dict(policy.model, adapter_name=policy.adapter)
        missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
        if missing or extra:
            raise ValueError(f"LoRA init of policy {name!r}: {weights_path} does not hold this adapter's "
                             f"weights (missing {missing[:3]}, unexpected {extra[:3]}; "
                             f"{len(missing)} / {len(extra)} in all): other target modules or another base model?")
        wrong = [k for k in expected if tensors[k].shape != expected[k].shape]
        if wrong:
            k = wrong[0]
            raise ValueError(f"LoRA init of policy {name!r}: {k} has shape {tuple(tensors[k].shape)} in "
                             f"{weights_path}, {tuple(expected[k].shape)} in the model")
        set_peft_model_state_dict(policy.model, tensors, adapter_name=policy.adapter)

    @classmethod
    def scripted(cls, tokenizer: Any, names: Sequence[str] = ("shared",)) -> PolicySet:
        """Model-free policies (for `ScriptedBackend`): only a tokenizer per name."""
        return cls([Policy(n, None, tokenizer) for n in names], "scripted")

    # ------------------------------------------------------------------ access

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._policies)

    def __contains__(self, name: object) -> bool:
        return name in self._policies

    def __getitem__(self, name: str) -> Policy:
        try:
            return self._policies[name]
        except KeyError:
            raise ValueError(
                f"unknown policy {name!r}; known policies: {sorted(self._policies)}"
            ) from None

    def models(self) -> list[Any]:
        """The distinct model objects (one for shared and LoRA, one per policy for separate)."""
        seen: dict[int, Any] = {}
        for p in self._policies.values():
            if p.model is not None:
                seen.setdefault(id(p.model), p.model)
        return list(seen.values())

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        """The context every forward of these policies runs in: bf16 autocast on the models'
        device when compute_dtype is "bfloat16" (LoRA inputs left in bf16: the cast to the
        float32 adapter would change no value, srpo.models.precision), nothing for "float32"."""
        models = self.models()
        device = next(models[0].parameters()).device if models else "cpu"
        bf16 = self.compute_dtype == "bfloat16"
        with compute_context(self.compute_dtype, device), adapter_inputs_uncast(models if bf16 else ()):
            yield

    def with_compute_of(self, other: PolicySet) -> PolicySet:
        """This set, computing in `other`'s precision (a reference copy, an evaluation set)."""
        self.compute_dtype = other.compute_dtype
        return self

    @contextlib.contextmanager
    def activated(self, name: str) -> Iterator[Policy]:
        """Make `name` the active policy for the duration (LoRA: switch adapter), in eval mode.

        On exit the model's train/eval mode and every parameter's requires_grad flag are restored,
        so generating never changes what the trainer optimizes.
        """
        policy = self[name]
        model = policy.model
        if model is None:
            yield policy
            return
        flags = [(p, p.requires_grad) for p in model.parameters()]
        was_training = model.training
        try:
            if policy.adapter is not None:
                model.set_adapter(policy.adapter)
            model.eval()
            yield policy
        finally:
            model.train(was_training)
            for p, flag in flags:
                p.requires_grad_(flag)


def weights_version(model: Any) -> tuple[tuple[int, int], ...]:
    """What changes whenever a weight of `model` is written: each parameter's storage and
    version counter (bumped by every in-place write: optimizer steps, load_state_dict). A
    backend that generates from a copy of a policy rebuilds the copy when this changes."""
    return tuple(parameter_version(p) for p in model.parameters())


def parameter_version(p: Any) -> tuple[int, int]:
    """One parameter's part of weights_version: its storage and its version counter."""
    return p.data_ptr(), p._version


def check_policy_names(agent_policies: Mapping[str, str], policies: PolicySet) -> None:
    """Raise ValueError naming every agent whose policy is not in `policies`."""
    bad = {a: p for a, p in agent_policies.items() if p not in policies}
    if bad:
        raise ValueError(
            "agent(s) use unknown policies: "
            + ", ".join(f"{a!r} -> {p!r}" for a, p in sorted(bad.items()))
            + f"; known policies: {sorted(policies.names)}"
        )
