"""Checkpoints of a training run: everything needed to continue it exactly.

Layout of a run directory:

    RUN/checkpoints/
      step-N/
        policy-<name>.safetensors  weights: a full state dict, or every LoRA adapter of a peft model
        optim-<name>.pt            {"optimizer": state_dict, "scheduler": state_dict | None}
        rng.pt                     python `random`, numpy, torch CPU (and CUDA) generator states
        trainer_state.json         step, data position, config fingerprint, versions, the sha256
                                   of every other file; written last, so it is the completion marker
      latest                       "step-N": the newest complete checkpoint
      .tmp-step-N-<pid>/           a checkpoint being written (debris if its writer died)

Crash safety. A checkpoint is written into a temporary sibling directory, every file and the
directory are fsynced, `trainer_state.json` goes last, and only then is the directory renamed to
`step-N` (atomic on one filesystem) and the `latest` pointer replaced (write-temp + os.replace).
A SIGKILL at any moment therefore leaves the previous complete checkpoint as the latest; debris is
ignored by readers and removed by the next save. Older checkpoints are retired (renamed aside,
then deleted) only after the new one and the pointer are in place. One writer per run directory.

Exact resumption. Weights, optimizer and scheduler states and the global RNGs (python, numpy,
torch CPU and CUDA) are restored in place; the trainer's data position travels as an opaque
JSON dict. A run of 2 steps, killed, resumed for 2 more then equals a run of 4 steps, provided
the trainer draws its randomness from those global generators (or keeps any private generator's
state in `data_state`).

Loading checks everything it can before it touches any object: the config fingerprint, the set
of policies / adapters / optimizers / schedulers, every file's checksum, tensor names and shapes,
optimizer parameter-group sizes, the structure of the optimizer and RNG files. Each failure
raises a `CheckpointError` naming what is wrong; a file that safetensors or torch refuses (a
crafted header, a pickle needing code) is a CorruptCheckpointError naming it, not their own error.

A full disk. Every write runs inside `srpo.disk.writing`, so whatever the writing library
raises on ENOSPC / EDQUOT becomes a `DiskFullError` naming the file; the temporary directory or
file is removed first, and the previous checkpoint (or export) is untouched and still `latest`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import re
import shutil
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, load_model, save_file, save_model

from srpo import __version__
from srpo.disk import DiskFullError, atomic_write_text, disk_full_errno, writing

CHECKPOINTS_DIR = "checkpoints"
STATE_FILE = "trainer_state.json"  # written last: the completion marker
RNG_FILE = "rng.pt"
POINTER = "latest"
EXPORT_MANIFEST = "srpo_export.json"  # sha256 of every file of an exported policy folder
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step-(\d+)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # policy / optimizer names become file names
_ADAPTER_SEP = "::"  # adapter file keys are "<adapter>::<peft key>"; peft keys never hold "::"
_CHUNK = 1 << 20


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used to resume this run."""


class CorruptCheckpointError(CheckpointError):
    """A file of the checkpoint is missing, truncated or altered."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint does not belong to this run (config, policies, optimizers, shapes)."""


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

    Which fields to leave out before hashing is decided in one place, srpo.train.run_identity
    (resume_fingerprint for checkpoints, result_fingerprint for finished study cells).
    """
    text = json.dumps(resolved_config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------- files


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_file(path: Path) -> None:
    with writing(path), open(path, "rb") as f:  # a delayed write can fail here (NFS, quotas)
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    """Make a rename / new entry in `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - Windows
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_text(path: Path, text: str) -> None:
    with writing(path), open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _torch_save(obj: Any, path: Path) -> None:
    """torch.save into a file object we opened: given a path, torch reports a full disk as
    "unexpected pos N vs M" with no trace of the OS error; given a file, the OSError of the
    failed write is kept (as the context), so `writing` recognises it."""
    with writing(path), open(path, "wb") as f:
        torch.save(obj, f)


def _retire(path: Path) -> None:
    """Delete a directory: renamed aside first, so a kill mid-delete leaves no half-deleted
    `step-N` behind, only `.trash-*` debris that the next save removes."""
    trash = path.with_name(f".trash-{path.name}-{os.getpid()}")
    shutil.rmtree(trash, ignore_errors=True)  # left by an earlier process with our pid
    os.rename(path, trash)
    shutil.rmtree(trash)


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


# --------------------------------------------------------------------------- state pieces


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


# --------------------------------------------------------------------------- save


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
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


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


def _final_name(path: Path, final: Path) -> Path:
    """The temp dir, or a file in it, under the name it would have had: `step-N[/<file>]`."""
    if path.name.startswith(".tmp-"):
        return final
    return final / path.name if path.parent.name.startswith(".tmp-") else path


def disk_full_hint(run_dir: str | Path) -> str:
    """What a full disk left intact in a run and how to continue, for the end of its message."""
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        return ("the run has no complete checkpoint yet: free space, then start it again "
                "(resume=true starts it from step 0)")
    try:
        verify_checkpoint(ckpt)
    except CheckpointError as e:
        return corrupt_checkpoint_message(ckpt, e)
    return (f"the newest intact checkpoint is {ckpt} (unchanged): free space, then run again with "
            f"resume=true to continue from it")


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


# --------------------------------------------------------------------------- load


def _resolve(path_or_run_dir: str | Path) -> Path:
    path = Path(path_or_run_dir)
    if (path / STATE_FILE).is_file():
        return path
    if _STEP_DIR.match(path.name) and path.is_dir():
        raise CorruptCheckpointError(
            f"{path} has no {STATE_FILE}: it is an incomplete checkpoint (its save was "
            f"interrupted); load the run directory to get its newest complete checkpoint"
        )
    found = latest_checkpoint(path)
    if found is None:
        raise FileNotFoundError(
            f"no complete checkpoint in {path / CHECKPOINTS_DIR} (expected step-N/{STATE_FILE})"
        )
    return found


def _read_marker(ckpt: Path) -> dict[str, Any]:
    try:
        meta = json.loads((ckpt / STATE_FILE).read_text())
    except (OSError, ValueError) as e:
        raise CorruptCheckpointError(f"{ckpt / STATE_FILE} cannot be read: {e}") from None
    if meta.get("format") != FORMAT_VERSION:
        raise CheckpointError(
            f"{ckpt / STATE_FILE} has format {meta.get('format')!r}; this srpo reads format "
            f"{FORMAT_VERSION}"
        )
    return meta


def _check_names(what: str, ckpt: Path, expected: set[str], saved: set[str]) -> None:
    if expected == saved:
        return
    parts = []
    if expected - saved:
        parts.append(f"in this run but not in the checkpoint: {sorted(expected - saved)}")
    if saved - expected:
        parts.append(f"in the checkpoint but not in this run: {sorted(saved - expected)}")
    raise CheckpointMismatchError(f"{what} differ from checkpoint {ckpt}: " + "; ".join(parts))


def _check_files(ckpt: Path, files: Mapping[str, str]) -> None:
    if not isinstance(files, Mapping):
        raise CorruptCheckpointError(f"{ckpt / STATE_FILE}: 'files' must map file names to checksums")
    for name, digest in files.items():
        # srpo writes plain names of files inside the checkpoint; anything else (a path out of it,
        # e.g. '../../x', which would have its checksum read) is a crafted marker
        if not isinstance(name, str) or not isinstance(digest, str) or Path(name).name != name or name in ("", ".", ".."):
            raise CorruptCheckpointError(
                f"{ckpt / STATE_FILE} lists {name!r}, which is not a file of the checkpoint: the "
                f"marker was altered or written by something else"
            )
        path = ckpt / name
        if not path.is_file():
            raise CorruptCheckpointError(f"checkpoint {ckpt} is missing its file {name}")
        if _sha256(path) != digest:
            raise CorruptCheckpointError(
                f"checksum mismatch for {path} ({path.stat().st_size} bytes): the file is "
                f"truncated or altered since it was saved"
            )


@contextmanager
def _safetensors_file(path: Path) -> Iterator[None]:
    """safetensors' own errors (a header claiming 2^62 bytes, offsets past the end, a truncated
    file) as a CorruptCheckpointError naming the file. Checksums do not rule these out: whoever
    crafted the file could recompute them."""
    try:
        yield
    except SafetensorError as e:
        raise CorruptCheckpointError(
            f"{path} is not a valid safetensors file ({_first_line(e)}): it was altered or "
            f"written by something else"
        ) from None


def _first_line(error: BaseException, limit: int = 200) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:limit] if text else type(error).__name__


def check_safetensors_header(path: str | Path) -> None:
    """Parses a .safetensors file's header (names, dtypes, shapes, offsets against the file's
    size) without reading its tensors; raises CorruptCheckpointError naming it if invalid."""
    path = Path(path)
    with _safetensors_file(path), safe_open(str(path), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 - a safetensors handle, not a dict
            f.get_slice(key).get_shape()


def _check_tensors(path: Path, expected: Mapping[str, torch.Size], aliases: set[str]) -> None:
    """Tensor names and shapes of a weights file against the module's, from its header only."""
    with _safetensors_file(path), safe_open(str(path), framework="pt") as f:
        saved = {key: torch.Size(f.get_slice(key).get_shape()) for key in f.keys()}
    missing = sorted(set(expected) - set(saved) - aliases)
    unexpected = sorted(set(saved) - set(expected))
    wrong = sorted(k for k in set(saved) & set(expected) if saved[k] != expected[k])
    if missing or unexpected or wrong:
        details = [f"missing {missing[:5]}"] if missing else []
        details += [f"unexpected {unexpected[:5]}"] if unexpected else []
        details += [f"{k}: saved {tuple(saved[k])}, model {tuple(expected[k])}" for k in wrong[:5]]
        raise CheckpointMismatchError(
            f"{path} does not fit the model: " + "; ".join(details)
        )


def _check_policy(path: Path, model: torch.nn.Module, entry: Mapping[str, Any]) -> None:
    adapters = _peft_adapters(model)
    kind = "full" if adapters is None else "lora"
    if entry["kind"] != kind:
        raise CheckpointMismatchError(
            f"{path} holds a {entry['kind']} policy but this run's model is {kind} "
            f"({type(model).__name__})"
        )
    if adapters is None:
        expected = {k: v.shape for k, v in model.state_dict().items()}
        with _safetensors_file(path), safe_open(str(path), framework="pt") as f:
            aliases = set((f.metadata() or {}).keys()) - {"srpo_kind"}
        _check_tensors(path, expected, aliases)
        return
    saved = set(entry["adapters"])
    _check_names(f"LoRA adapters of {path.name}", path.parent, set(adapters), saved)
    expected = {
        f"{a}{_ADAPTER_SEP}{k}": v.shape
        for a in adapters
        for k, v in _adapter_state(model, a).items()
    }
    _check_tensors(path, expected, set())


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


def _torch_load(path: Path) -> Any:
    """A checkpoint's optimizer / RNG file, with weights_only=True only: nothing here ever
    unpickles arbitrary objects. A file that needs more (a crafted or foreign file: its sha256
    proves nothing, whoever wrote it could recompute it) is refused, naming it.

    torch's own message is not passed on: it advises loading with weights_only=False, which
    would run the file's code. Its warnings (about pickle protocols) are silenced: they would
    be a second line on stderr before the one that matters."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises UnpicklingError or RuntimeError depending on version
        if "weights_only" in str(e) or "Unpickl" in type(e).__name__:
            raise CorruptCheckpointError(
                f"{path} is not a checkpoint file srpo wrote: it holds more than tensors and plain "
                f"containers (such as pickled objects that need code to load), and srpo never runs "
                f"code from a checkpoint; it was crafted or written by another program"
            ) from None
        raise CorruptCheckpointError(
            f"{path} is not a checkpoint file srpo wrote: it cannot be read as one "
            f"({_first_line(e)})"
        ) from None


def _check_rng(path: Path, state: Any) -> None:
    """The RNG file's states, tried on throwaway generators: a file of the wrong shape (`{}`,
    a list, bad numbers) is refused naming it before any real generator is touched."""
    try:
        if not isinstance(state, dict):
            raise TypeError(f"a {type(state).__name__}, not a dict")
        version, internal, gauss = state["python"]
        random.Random().setstate((version, tuple(internal), gauss))
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.RandomState().set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
        torch.Generator().set_state(state["torch"])
        if not isinstance(state["cuda"], list) or not all(isinstance(t, torch.Tensor) for t in state["cuda"]):
            raise TypeError("'cuda' is not a list of tensors")
    except Exception as e:  # noqa: BLE001 - whatever a crafted state makes the generators raise
        detail = f"no {e}" if isinstance(e, KeyError) else _first_line(e)
        raise CorruptCheckpointError(
            f"{path} does not hold the random generator states srpo saves (python, numpy, torch, "
            f"cuda; {detail}): it was altered or written by something else"
        ) from None


def _check_optim_payload(path: Path, payload: Any, with_scheduler: bool) -> None:
    """An optimizer file's structure, before its numbers are trusted: what srpo writes is
    {"optimizer": {"state": {...}, "param_groups": [{"params": [...]}, ...]}, "scheduler": ...}."""
    optimizer = payload.get("optimizer") if isinstance(payload, dict) else None
    groups = optimizer.get("param_groups") if isinstance(optimizer, dict) else None
    scheduler = payload.get("scheduler") if isinstance(payload, dict) else None
    ok = (isinstance(optimizer, dict) and isinstance(optimizer.get("state"), dict)
          and isinstance(groups, list)
          and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups)
          and (isinstance(scheduler, dict) if with_scheduler else scheduler is None))
    if not ok:
        raise CorruptCheckpointError(
            f"{path} does not hold the optimizer state srpo saves (optimizer state and parameter "
            f"groups{', and a scheduler' if with_scheduler else ''}): it was altered or written by "
            f"something else"
        )


def _check_optimizer(path: Path, optimizer: torch.optim.Optimizer, saved: Mapping) -> None:
    have = [len(g["params"]) for g in optimizer.param_groups]
    want = [len(g["params"]) for g in saved["param_groups"]]
    if have != want:
        raise CheckpointMismatchError(
            f"{path}: saved optimizer has parameter groups of sizes {want}, this run's has {have}"
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


def verify_checkpoint(ckpt: str | Path) -> dict[str, Any]:
    """Reads a complete checkpoint's marker and checks every file's sha256; returns the marker.
    Raises CorruptCheckpointError naming the file that is unreadable, missing or altered."""
    ckpt = Path(ckpt)
    meta = _read_marker(ckpt)
    files = meta.get("files")
    if not isinstance(files, dict):
        raise CorruptCheckpointError(f"{ckpt / STATE_FILE} lists no files")
    _check_files(ckpt, files)
    return meta


def newest_intact_checkpoint(run_dir: str | Path, *, below_step: int | None = None) -> Path | None:
    """The newest complete checkpoint whose files all pass `verify_checkpoint` (optionally only
    those of steps < below_step), or None."""
    for ckpt in reversed(list_checkpoints(run_dir)):
        if below_step is not None and _step_of(ckpt) >= below_step:
            continue
        try:
            verify_checkpoint(ckpt)
        except CheckpointError:
            continue
        return ckpt
    return None


def corrupt_checkpoint_message(ckpt: Path, error: CheckpointError) -> str:
    """One line for a user: what is wrong with `ckpt`, and which intact checkpoint is left."""
    previous = newest_intact_checkpoint(ckpt.parent.parent, below_step=_step_of(ckpt))
    hint = (f"the newest intact checkpoint is {previous}: move {ckpt.name} aside (e.g. "
            f"mv {ckpt} {ckpt}.corrupt) and resume again to continue from step {_step_of(previous)}"
            if previous is not None else "no older intact checkpoint is left: start the run again")
    return f"checkpoint {ckpt} is unusable: {error}. {hint}"


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


def verify_export(folder: str | Path, *, allow_missing_manifest: bool = False) -> bool:
    """Checks an exported policy folder against its manifest and parses the header of each of
    its .safetensors files. True when verified; raises CorruptCheckpointError naming the file on
    a mismatch or an invalid header.

    A folder without a manifest is an error: a deleted manifest would otherwise let altered
    weights pass unchecked. allow_missing_manifest=True (for folders exported by other tools,
    `srpo eval --trust-export`) returns False for it instead, after the header check.
    """
    folder = Path(folder)
    manifest = folder / EXPORT_MANIFEST
    if not manifest.is_file():
        if not allow_missing_manifest:
            raise CorruptCheckpointError(
                f"{folder} has no {EXPORT_MANIFEST}, so its files cannot be checked (srpo writes "
                f"one with every export: it was deleted, or another tool exported this folder; "
                f"to evaluate it unchecked anyway, pass --trust-export)"
            )
        _check_headers(folder)
        return False
    try:
        files = json.loads(manifest.read_text())["files"]
        if not isinstance(files, dict):
            raise TypeError("'files' is not a mapping")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CorruptCheckpointError(f"{manifest} cannot be read: {e}") from None
    _check_files(folder, files)
    _check_headers(folder)
    return True


def _check_headers(folder: Path) -> None:
    """Every weights file's header, parsed before transformers sees it (whose errors on a crafted
    header are tracebacks): a manifest's checksums can be recomputed by whoever crafted it."""
    for path in sorted(folder.rglob("*.safetensors")):
        check_safetensors_header(path)


# --------------------------------------------------------------------------- export


def export_policy(
    model: torch.nn.Module,
    tokenizer: Any | None,
    out_dir: str | Path,
    *,
    adapter: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a plain Hugging Face folder that `AutoModelForCausalLM.from_pretrained` loads.

    A peft model is merged on a deep copy (`merge_and_unload`), so the training model keeps its
    adapters; `adapter` picks which one when it has several. The folder is filled in a temp
    sibling and renamed into place. An existing out_dir is an error unless overwrite=True.
    """
    out = Path(out_dir).absolute()
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True to replace it")
    adapters = _peft_adapters(model)
    if adapters is not None:
        if adapter is None:
            if len(adapters) > 1:
                raise ValueError(f"model has adapters {adapters}; choose one with adapter=")
            adapter = adapters[0]
        if adapter not in adapters:
            raise ValueError(f"adapter {adapter!r} not in the model's adapters {adapters}")
        model = copy.deepcopy(model).merge_and_unload(adapter_names=[adapter])
    with writing(out.parent):
        out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    earlier = out.exists()
    try:
        _write_export(model, tokenizer, tmp, out)
    except DiskFullError as e:
        # named as in the finished folder: the temp dir is gone by the time anyone reads this
        path = out / e.path.relative_to(tmp) if e.path.is_relative_to(tmp) else e.path
        shutil.rmtree(tmp, ignore_errors=True)
        hint = "the unfinished export was removed" + (f" and the earlier {out} is unchanged" if earlier else "")
        raise e.with_hint(hint, path=path) from e.__cause__
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _newest_file(folder: Path) -> Path:
    """The file written last in `folder` (the one a failed save_pretrained was writing), or the
    folder itself if it holds none."""
    files = [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
    return max(files, key=lambda p: p.stat().st_mtime_ns, default=folder)


def _write_export(model: torch.nn.Module, tokenizer: Any | None, tmp: Path, out: Path) -> None:
    """Fill `tmp` (weights, tokenizer, manifest) and rename it to `out`. The writers inside
    transformers do not say which file a full disk stopped, so the newest file in `tmp` is named."""
    for save in (model.save_pretrained, None if tokenizer is None else tokenizer.save_pretrained):
        if save is None:
            continue
        try:
            save(tmp)
        except Exception as e:
            code = disk_full_errno(e)
            if code is None:
                raise
            named = e.filename if isinstance(e, OSError) and e.filename else None
            raise DiskFullError(Path(named) if named else _newest_file(tmp), code) from e
    for path in tmp.rglob("*"):
        if path.is_file():
            _fsync_file(path)
    # checksums of every file, so `srpo eval RUN` can tell an intact export from a damaged one
    manifest = {str(p.relative_to(tmp)): _sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    _write_text(tmp / EXPORT_MANIFEST, json.dumps({"files": manifest}, indent=1) + "\n")
    _fsync_dir(tmp)
    if out.exists():
        _retire(out)
    os.rename(tmp, out)
    _fsync_dir(out.parent)
