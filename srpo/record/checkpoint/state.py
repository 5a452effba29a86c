"""What a checkpoint holds of a run: `TrainState` (the objects the trainer hands over), the
config fingerprint, and how live pieces become savable data and back: the global RNG states
(as tensors and plain lists, loadable with weights_only=True) and a peft model's adapter tensors.
A state is validated (`_validate`) before anything is written."""

from __future__ import annotations

import hashlib
import json
import random
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from srpo.record.checkpoint.layout import _NAME


@dataclass
class TrainState:
    """What the trainer hands to `save_checkpoint` / `load_checkpoint`.

    step: number of completed training steps (the checkpoint is `step-{step}`).
    policies: name -> model. A peft model saves the weights of all its adapters (never the frozen
        base, which must come back from the config); any other module saves its full state dict.
        A shared base with one LoRA adapter per role is one entry.
    optimizers: name -> optimizer (names are free: one per policy, or one per adapter).
    config_fingerprint: hash of the resolved config (`config_fingerprint`); a checkpoint only
        loads into a run with the same fingerprint unless `allow_config_change=True`.
    schedulers: name -> LR scheduler (anything with state_dict / load_state_dict); each name must
        also name an optimizer, whose file it shares.
    data_state: JSON-able position of the data pipeline (sampler epoch/offset, ...), returned as is.
    """

    step: int
    policies: dict[str, torch.nn.Module]
    optimizers: dict[str, torch.optim.Optimizer]
    config_fingerprint: str
    schedulers: dict[str, Any] = field(default_factory=dict)
    data_state: dict[str, Any] = field(default_factory=dict)


def config_fingerprint(resolved_config: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a resolved config (sorted keys; values must be JSON-able).

    Which fields to leave out before hashing is decided in one place, srpo.record.run_identity
    (resume_fingerprint for checkpoints, result_fingerprint for finished study cells).
    """
    text = json.dumps(resolved_config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _validate(state: TrainState) -> None:
    """Raise before anything is written if the state cannot be saved."""
    if not isinstance(state.step, int) or state.step < 0:
        raise ValueError(f"TrainState.step must be a non-negative int, got {state.step!r}")
    for kind, names in (("policy", state.policies), ("optimizer", state.optimizers)):
        for name in names:
            if not _NAME.match(name):
                raise ValueError(
                    f"{kind} name {name!r} cannot be used in a file name; use letters, digits, "
                    f"'_', '.', '-' (not starting with '.', '_' or '-')"
                )
    stray = sorted(set(state.schedulers) - set(state.optimizers))
    if stray:
        raise ValueError(
            f"schedulers {stray} have no optimizer of the same name (optimizers: "
            f"{sorted(state.optimizers)}); key each scheduler by its optimizer's name"
        )
    seen: dict[int, str] = {}
    for name, model in state.policies.items():
        if id(model) in seen:
            raise ValueError(
                f"policies {seen[id(model)]!r} and {name!r} are the same module; pass a shared "
                f"model once (all adapters of a peft model are saved together)"
            )
        seen[id(model)] = name
    try:
        json.dumps(state.data_state, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"TrainState.data_state must be JSON-able: {e}") from None
    if not isinstance(state.config_fingerprint, str):
        raise ValueError(
            f"TrainState.config_fingerprint must be a str, got {type(state.config_fingerprint)}"
        )


def _peft_adapters(model: torch.nn.Module) -> list[str] | None:
    """Adapter names of a peft model, or None for any other module.

    Looks peft up in sys.modules instead of importing it: a PeftModel cannot exist unless peft
    was imported, and importing it costs seconds that plain-model runs should not pay.
    """
    peft = sys.modules.get("peft")
    if peft is not None and isinstance(model, peft.PeftModel):
        return sorted(model.peft_config)
    return None


def _adapter_state(model: torch.nn.Module, adapter: str) -> dict[str, torch.Tensor]:
    from peft import get_peft_model_state_dict

    sd = get_peft_model_state_dict(model, adapter_name=adapter)
    # Clone: adapter tensors are small, and views or shared storage make safetensors refuse.
    return {k: v.detach().to("cpu").clone().contiguous() for k, v in sd.items()}


def _rng_state() -> dict[str, Any]:
    """Global generator states as tensors and plain lists (loadable with weights_only=True)."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    cuda = state["cuda"]
    if cuda and torch.cuda.is_available():
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        else:
            warnings.warn(
                f"checkpoint holds CUDA RNG states of {len(cuda)} devices but "
                f"{torch.cuda.device_count()} are visible; CUDA RNG not restored, so the "
                f"resumed run will not repeat the original exactly",
                stacklevel=3,
            )
