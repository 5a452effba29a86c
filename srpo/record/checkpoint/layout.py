"""Where a run's checkpoints live on disk, and which of them count.

    RUN/checkpoints/
      step-N/
        policy-<name>.safetensors  weights: a full state dict, or every LoRA adapter of a peft
                                   model (keys "<adapter>::<peft key>")
        optim-<name>.pt            {"optimizer": state_dict, "scheduler": state_dict | None}
        rng.pt                     python `random`, numpy, torch CPU (and CUDA) generator states
        trainer_state.json         format, step, data position, config fingerprint, versions,
                                   policies / optimizers, the sha256 of every other file;
                                   written last, so it is the completion marker
      latest                       "step-N": the newest complete checkpoint
      .tmp-step-N-<pid>/           a checkpoint being written (debris if its writer died)
      .trash-step-N-<pid>/         a checkpoint being deleted (debris likewise)

An exported policy folder (srpo.record.checkpoint.export) is a plain Hugging Face folder plus
srpo_export.json, {"files": {relative path: sha256}}.

A checkpoint is complete when its directory is named step-N and holds trainer_state.json;
readers list only complete ones and ignore debris.
"""

from __future__ import annotations

import re
from pathlib import Path

CHECKPOINTS_DIR = "checkpoints"
STATE_FILE = "trainer_state.json"  # written last: the completion marker
RNG_FILE = "rng.pt"
POINTER = "latest"
EXPORT_MANIFEST = "srpo_export.json"  # sha256 of every file of an exported policy folder
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step-(\d+)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # policy / optimizer names become file names
_ADAPTER_SEP = "::"  # adapter file keys are "<adapter>::<peft key>"; peft keys never hold "::"


def _step_of(path: Path) -> int:
    return int(_STEP_DIR.match(path.name).group(1))


def _is_complete(path: Path) -> bool:
    return _STEP_DIR.match(path.name) is not None and (path / STATE_FILE).is_file()


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest (lowest step) first. Debris is not listed."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _is_complete(p)]
    return sorted(found, key=_step_of)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None if it has none.

    The `latest` pointer decides; if it is missing or names no complete checkpoint (a run
    directory copied without it, a hand-deleted checkpoint) the highest complete step does.
    """
    root = Path(run_dir) / CHECKPOINTS_DIR
    try:
        name = (root / POINTER).read_text().strip()
    except OSError:
        name = ""
    if _STEP_DIR.match(name) and _is_complete(root / name):
        return root / name
    complete = list_checkpoints(run_dir)
    return complete[-1] if complete else None
