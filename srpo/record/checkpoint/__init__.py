"""Checkpoints of a training run: everything needed to continue it exactly, and the export of a
trained policy as a plain Hugging Face folder.

    state = TrainState(step=2, policies={"shared": model}, optimizers={"shared": opt},
                       config_fingerprint=fp)
    save_checkpoint(run_dir, state)              # RUN/checkpoints/step-2, `latest` -> it
    state = load_checkpoint(run_dir, state)      # the newest complete one, restored in place
    export_policy(model, tokenizer, run_dir / "export" / "shared")

On disk (layout.py has the whole picture): RUN/checkpoints/step-N/ holds one safetensors file
per policy, one torch file per optimizer (with its LR scheduler), the RNG states, and
trainer_state.json, written last as the completion marker, with the sha256 of every other file;
RUN/checkpoints/latest names the newest complete one. The format version is FORMAT_VERSION.

The package, a module per job:
    layout.py    file and directory names, which checkpoints are complete, the newest one
    errors.py    CheckpointError and its two kinds (corrupt, mismatched)
    durable.py   fsync, writes that name their file on a full disk, rename-then-delete, sha256
    state.py     TrainState, the config fingerprint, RNG and LoRA adapter states as data
    save.py      save_checkpoint: temp dir, marker last, atomic rename, pointer, retiring
    verify.py    every check of a checkpoint or export before anything is loaded
    load.py      load_checkpoint (resume exactly) and load_checkpoint_policies (weights only)
    recovery.py  what a failure leaves intact: newest intact checkpoint, one-line messages
    export.py    export_policy: a Hugging Face folder with a checksum manifest

Crash safety (save.py): a SIGKILL at any moment leaves the previous complete checkpoint as the
latest. Exact resumption (load.py): weights, optimizers, schedulers and the global RNGs come back
in place. Loading checks everything it can before it touches any object (verify.py), and each
failure is a CheckpointError naming what is wrong. A full disk raises srpo.disk.DiskFullError
naming the file, after removing what the failed write left; the previous checkpoint (or export)
is untouched.

This package is one module split by job, and keeps that module's patch points: setting a name
on the package (a test injecting a fault, `monkeypatch.setattr(checkpoint, "_publish", stall)`
or `checkpoint.save_model = ...`) sets it in every part that uses the name too, so the code of
the parts sees it, as it did when they were one module (`_OneModule` below).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from srpo.disk import DiskFullError
from srpo.record.checkpoint import (
    durable,
    errors,
    export,
    layout,
    load,
    recovery,
    save,
    state,
    verify,
)
from srpo.record.checkpoint.errors import (
    CheckpointError,
    CheckpointMismatchError,
    CorruptCheckpointError,
)
from srpo.record.checkpoint.export import export_policy
from srpo.record.checkpoint.layout import (
    CHECKPOINTS_DIR,
    EXPORT_MANIFEST,
    FORMAT_VERSION,
    POINTER,
    RNG_FILE,
    STATE_FILE,
    latest_checkpoint,
    list_checkpoints,
)
from srpo.record.checkpoint.load import load_checkpoint, load_checkpoint_policies
from srpo.record.checkpoint.recovery import (
    corrupt_checkpoint_message,
    disk_full_hint,
    newest_intact_checkpoint,
)
from srpo.record.checkpoint.save import save_checkpoint
from srpo.record.checkpoint.state import TrainState, config_fingerprint
from srpo.record.checkpoint.verify import (
    check_safetensors_header,
    verify_checkpoint,
    verify_export,
)

__all__ = [
    "CHECKPOINTS_DIR", "EXPORT_MANIFEST", "FORMAT_VERSION", "POINTER", "RNG_FILE", "STATE_FILE",
    "CheckpointError", "CheckpointMismatchError", "CorruptCheckpointError", "DiskFullError",
    "TrainState", "check_safetensors_header", "config_fingerprint", "corrupt_checkpoint_message",
    "disk_full_hint", "export_policy", "latest_checkpoint", "list_checkpoints", "load_checkpoint",
    "load_checkpoint_policies", "newest_intact_checkpoint", "save_checkpoint", "verify_checkpoint",
    "verify_export",
]

# The parts, in the order their names are looked up; each part's globals are its own.
_PARTS = (layout, errors, durable, state, verify, recovery, save, load, export)


# One namespace, as the single module had: every name a part defines or imports (but modules)
# is also the package's, so reading or patching `checkpoint.<name>` reaches it.
for _part in _PARTS:
    for _name, _value in vars(_part).items():
        if not _name.startswith("__") and not isinstance(_value, types.ModuleType):
            globals().setdefault(_name, _value)
del _part, _name, _value


class _OneModule(types.ModuleType):
    """The package's module type (module doc): setting a name on the package also sets it in
    every part whose globals hold it, so the parts' code sees the new value (and an undone patch
    restores the old one there too)."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        for part in _PARTS:
            if name in vars(part):
                setattr(part, name, value)


sys.modules[__name__].__class__ = _OneModule
