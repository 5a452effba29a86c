"""Restoring a checkpoint into a run's objects: `load_checkpoint` (everything, to resume) and
`load_checkpoint_policies` (only the weights, to evaluate).

Exact resumption. Weights, optimizer and scheduler states and the global RNGs (python, numpy,
torch CPU and CUDA) are restored in place; the trainer's data position travels as an opaque
JSON dict. A run of 2 steps, killed, resumed for 2 more then equals a run of 4 steps, provided
the trainer draws its randomness from those global generators (or keeps any private generator's
state in `data_state`). Every check (srpo.record.checkpoint.verify) runs before any object is
modified.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model

from srpo import __version__
from srpo.record.checkpoint.errors import CheckpointMismatchError, CorruptCheckpointError
from srpo.record.checkpoint.layout import _ADAPTER_SEP, _STEP_DIR, CHECKPOINTS_DIR, RNG_FILE
from srpo.record.checkpoint.recovery import corrupt_checkpoint_message
from srpo.record.checkpoint.state import TrainState, _peft_adapters, _set_rng_state
from srpo.record.checkpoint.verify import (
    _check_files,
    _check_names,
    _check_optim_payload,
    _check_optimizer,
    _check_policy,
    _check_rng,
    _read_marker,
    _resolve,
    _safetensors_file,
    _torch_load,
)


def load_checkpoint(
    path_or_run_dir: str | Path, state: TrainState, *, allow_config_change: bool = False,
    files_verified: bool = False,
) -> TrainState:
    """Restore a checkpoint into `state`'s objects in place and return the resumed state.

    path_or_run_dir: a `step-N` directory, or a run directory (its newest complete checkpoint).
    Weights, optimizers, schedulers and the global RNGs are restored in place; the returned
    TrainState carries the checkpoint's step and data_state (and the same objects). All checks
    run before any object is modified. Raises FileNotFoundError if there is no checkpoint and a
    CheckpointError subclass naming the problem otherwise. files_verified: the caller has just
    run `verify_checkpoint` on this checkpoint (the trainer does, when it picks it), so the
    files' sha256 are not computed a second time. A checkpoint of a run directory found corrupt
    here (a file safetensors or torch refuses, though its checksum matches) is reported as
    `corrupt_checkpoint_message` does, naming the newest intact checkpoint left.
    """
    ckpt = _resolve(path_or_run_dir)
    try:
        meta, optim, rng = _read_checked(ckpt, state, allow_config_change, files_verified)
        _apply(ckpt, meta, state, optim, rng)
    except CorruptCheckpointError as e:
        if ckpt.parent.name != CHECKPOINTS_DIR or not _STEP_DIR.match(ckpt.name):
            raise
        raise CorruptCheckpointError(corrupt_checkpoint_message(ckpt, e)) from None
    return replace(state, step=int(meta["step"]), data_state=meta["data_state"])


def _read_checked(
    ckpt: Path, state: TrainState, allow_config_change: bool, files_verified: bool
) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """Every check of `load_checkpoint`, touching no object: (marker, optimizer files, RNG)."""
    meta = _read_marker(ckpt)
    if meta["config_fingerprint"] != state.config_fingerprint and not allow_config_change:
        raise CheckpointMismatchError(
            f"checkpoint {ckpt} was saved by a run with config fingerprint "
            f"{meta['config_fingerprint']!r}, but this run's config has fingerprint "
            f"{state.config_fingerprint!r}. Resume with the original config, or pass "
            f"allow_config_change=True to load it anyway"
        )
    _check_names("policies", ckpt, set(state.policies), set(meta["policies"]))
    _check_names("optimizers", ckpt, set(state.optimizers), set(meta["optimizers"]))
    with_sched = {n for n, e in meta["optimizers"].items() if e["scheduler"]}
    _check_names("LR schedulers", ckpt, set(state.schedulers), with_sched)
    if not files_verified:
        _check_files(ckpt, meta["files"])

    for name, model in state.policies.items():
        _check_policy(ckpt / meta["policies"][name]["file"], model, meta["policies"][name])
    optim = {}
    for name, optimizer in state.optimizers.items():
        path = ckpt / meta["optimizers"][name]["file"]
        optim[name] = _torch_load(path)
        _check_optim_payload(path, optim[name], with_scheduler=name in state.schedulers)
        _check_optimizer(path, optimizer, optim[name]["optimizer"])
    rng = _torch_load(ckpt / RNG_FILE)
    _check_rng(ckpt / RNG_FILE, rng)
    return meta, optim, rng


def _apply(ckpt: Path, meta: dict[str, Any], state: TrainState, optim: dict[str, Any], rng: Any) -> None:
    """Restore the checked checkpoint into `state`'s objects in place."""
    if meta["srpo_version"] != __version__:
        warnings.warn(
            f"checkpoint {ckpt} was saved by srpo {meta['srpo_version']}, this is {__version__}",
            stacklevel=3,
        )
    for name, model in state.policies.items():
        _load_policy(ckpt / meta["policies"][name]["file"], model)
    for name, optimizer in state.optimizers.items():
        optimizer.load_state_dict(optim[name]["optimizer"])
        if name in state.schedulers:
            state.schedulers[name].load_state_dict(optim[name]["scheduler"])
    _set_rng_state(rng)


def load_checkpoint_policies(path_or_run_dir: str | Path, policies: Mapping[str, torch.nn.Module]) -> Path:
    """Only the weights of a checkpoint (for evaluation): checks the marker, the policy files'
    checksums and shapes, then loads them into `policies` in place. Returns the checkpoint."""
    ckpt = _resolve(path_or_run_dir)
    meta = _read_marker(ckpt)
    _check_names("policies", ckpt, set(policies), set(meta["policies"]))
    wanted = {meta["policies"][n]["file"] for n in policies}
    _check_files(ckpt, {f: d for f, d in meta["files"].items() if f in wanted})
    for name, model in policies.items():
        _check_policy(ckpt / meta["policies"][name]["file"], model, meta["policies"][name])
    for name, model in policies.items():
        _load_policy(ckpt / meta["policies"][name]["file"], model)
    return ckpt


def _load_policy(path: Path, model: torch.nn.Module) -> None:
    adapters = _peft_adapters(model)
    if adapters is None:
        with _safetensors_file(path):
            load_model(model, str(path), strict=True)
        return
    from peft import set_peft_model_state_dict

    with _safetensors_file(path):
        tensors = load_file(str(path))
    for adapter in adapters:
        prefix = f"{adapter}{_ADAPTER_SEP}"
        sd = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
        result = set_peft_model_state_dict(model, sd, adapter_name=adapter)
        if result.unexpected_keys:
            raise CheckpointMismatchError(
                f"{path}: adapter {adapter!r} keys not in the model: {result.unexpected_keys[:5]}"
            )
