"""Writing a checkpoint: `save_checkpoint`.

Crash safety. A checkpoint is written into a temporary sibling directory, every file and the
directory are fsynced, `trainer_state.json` goes last, and only then is the directory renamed to
`step-N` (atomic on one filesystem) and the `latest` pointer replaced (write-temp + os.replace).
A SIGKILL at any moment therefore leaves the previous complete checkpoint as the latest; debris is
ignored by readers and removed by the next save. Older checkpoints are retired (renamed aside,
then deleted) only after the new one and the pointer are in place. One writer per run directory.

A full disk: the temporary directory is removed (a checkpoint published before its pointer could
be written is retired again), and the DiskFullError names the file under the name it would have
had (`step-N/<file>`) and what is left intact (srpo.record.checkpoint.recovery.disk_full_hint).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file, save_model

from srpo import __version__
from srpo.disk import DiskFullError, atomic_write_text, writing
from srpo.record.checkpoint.durable import (
    _fsync_dir,
    _fsync_file,
    _retire,
    _sha256,
    _torch_save,
    _write_text,
)
from srpo.record.checkpoint.layout import (
    _ADAPTER_SEP,
    CHECKPOINTS_DIR,
    FORMAT_VERSION,
    POINTER,
    RNG_FILE,
    STATE_FILE,
    _step_of,
    list_checkpoints,
)
from srpo.record.checkpoint.recovery import disk_full_hint
from srpo.record.checkpoint.state import (
    TrainState,
    _adapter_state,
    _peft_adapters,
    _rng_state,
    _validate,
)


def save_checkpoint(
    run_dir: str | Path, state: TrainState, *, keep_last: int | None = 2
) -> Path:
    """Write `RUN/checkpoints/step-{state.step}` atomically and point `latest` at it.

    keep_last: how many complete checkpoints to keep (the new one included); None keeps all.
    Older ones are deleted only after the new one is in place. Checkpoints of a higher step
    than this one are deleted too: they belong to a timeline this (resumed) run is redoing, as
    the metrics log lines past the resumed step are (`MetricsLogger.resume`).
    Returns the checkpoint's path. A full disk raises DiskFullError naming the file and the
    newest intact checkpoint, after removing everything this save wrote.
    """
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 or None, got {keep_last}")
    _validate(state)
    root = Path(run_dir) / CHECKPOINTS_DIR
    final = root / f"step-{state.step}"
    try:
        with writing(root):
            root.mkdir(parents=True, exist_ok=True)
        _clean_debris(root)
        _write_checkpoint(root, final, state)
    except DiskFullError as e:
        raise e.with_hint(disk_full_hint(run_dir), path=_final_name(e.path, final)) from e.__cause__

    older = [p for p in list_checkpoints(run_dir) if p != final]
    doomed = [p for p in older if _step_of(p) > state.step]
    if keep_last is not None:
        kept_before = [p for p in older if _step_of(p) < state.step]
        doomed += kept_before[: max(0, len(kept_before) - (keep_last - 1))]
    for path in doomed:
        _retire(path)
    return final


def _write_checkpoint(root: Path, final: Path, state: TrainState) -> None:
    """The new checkpoint in place and `latest` pointing at it, or, on any error, no trace of
    it: the temp dir is removed, and a checkpoint published before its pointer could be written
    is retired again, so the previous checkpoint stays the latest (as after a SIGKILL)."""
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    try:
        with writing(tmp):
            tmp.mkdir()
        marker = _write_files(tmp, state)
        _write_text(tmp / STATE_FILE, json.dumps(marker, indent=2, allow_nan=False) + "\n")
        with writing(tmp):  # a directory's new entries can need a block too
            _fsync_dir(tmp)
            _publish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        _write_pointer(root, final.name)
    except DiskFullError:
        _retire(final)
        raise


def _write_files(tmp: Path, state: TrainState) -> dict[str, Any]:
    """Every file except the marker; returns the marker's content."""
    policies = {
        name: _write_policy(tmp / f"policy-{name}.safetensors", model)
        for name, model in state.policies.items()
    }
    optimizers = {}
    for name, optimizer in state.optimizers.items():
        scheduler = state.schedulers.get(name)
        payload = {
            "optimizer": optimizer.state_dict(),
            "scheduler": None if scheduler is None else scheduler.state_dict(),
        }
        _torch_save(payload, tmp / f"optim-{name}.pt")
        optimizers[name] = {"file": f"optim-{name}.pt", "scheduler": scheduler is not None}
    _torch_save(_rng_state(), tmp / RNG_FILE)
    files = {}
    for path in sorted(tmp.iterdir()):
        _fsync_file(path)
        files[path.name] = _sha256(path)
    return {
        "format": FORMAT_VERSION,
        "step": state.step,
        "data_state": state.data_state,
        "config_fingerprint": state.config_fingerprint,
        "srpo_version": __version__,
        "torch_version": torch.__version__,
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "policies": policies,
        "optimizers": optimizers,
        "files": files,
    }


def _write_policy(path: Path, model: torch.nn.Module) -> dict[str, Any]:
    """Write one policy's weights; returns its entry in trainer_state.json."""
    adapters = _peft_adapters(model)
    if adapters is None:
        # save_model drops the aliases of tied tensors (which safetensors refuses) and records
        # them in the metadata; load_model re-ties them.
        with writing(path):
            save_model(model, str(path), metadata={"srpo_kind": "full"})
        return {"file": path.name, "kind": "full"}
    tensors = {
        f"{adapter}{_ADAPTER_SEP}{key}": value
        for adapter in adapters
        for key, value in _adapter_state(model, adapter).items()
    }
    with writing(path):
        save_file(tensors, str(path), metadata={"srpo_kind": "lora"})
    return {"file": path.name, "kind": "lora", "adapters": adapters}


def _publish(tmp: Path, final: Path) -> None:
    """Rename the finished temp dir into place (an existing step-N of a redone step is retired)."""
    if final.exists():
        _retire(final)
    os.rename(tmp, final)
    _fsync_dir(final.parent)


def _write_pointer(root: Path, name: str) -> None:
    atomic_write_text(root / POINTER, name + "\n")  # its temp file is .latest.tmp-<pid>
    _fsync_dir(root)


def _clean_debris(root: Path) -> None:
    for path in root.iterdir():
        if path.name.startswith((".tmp-", ".trash-", f".{POINTER}.tmp-")):
            if path.is_dir() and not path.is_symlink():  # a link: only the link goes
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _final_name(path: Path, final: Path) -> Path:
    """The temp dir, or a file in it, under the name it would have had: `step-N[/<file>]`."""
    if path.name.startswith(".tmp-"):
        return final
    return final / path.name if path.parent.name.startswith(".tmp-") else path
