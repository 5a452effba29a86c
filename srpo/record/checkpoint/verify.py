"""Reading and checking checkpoints and exports without touching any live object.

Every check that loading can make first: the marker (trainer_state.json: its format, the files
it lists, which must be plain names inside the checkpoint), every file's sha256, tensor names
and shapes from the safetensors headers, the structure of the optimizer and RNG files (read with
torch.load(weights_only=True) only: nothing here unpickles code). Each failure raises a
`CheckpointError` naming what is wrong; a file that safetensors or torch refuses (a crafted
header, a pickle needing code) is a CorruptCheckpointError naming it, not their own error.
`verify_checkpoint` and `verify_export` are the public checks of a whole checkpoint or export.
"""

from __future__ import annotations

import json
import random
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open

from srpo.record.checkpoint.durable import _sha256
from srpo.record.checkpoint.errors import (
    CheckpointError,
    CheckpointMismatchError,
    CorruptCheckpointError,
)
from srpo.record.checkpoint.layout import (
    _ADAPTER_SEP,
    _STEP_DIR,
    CHECKPOINTS_DIR,
    EXPORT_MANIFEST,
    FORMAT_VERSION,
    STATE_FILE,
    latest_checkpoint,
)
from srpo.record.checkpoint.state import _adapter_state, _peft_adapters


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
    _check_listed(folder, manifest, files)
    _check_files(folder, files, marker=manifest, nested=True)
    _check_headers(folder)
    return True


# what transformers loads weights from: an export's manifest must list one of them
WEIGHTS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def _check_listed(folder: Path, manifest: Path, files: Mapping[str, Any]) -> None:
    """The manifest lists every file of the folder (srpo's export lists all it wrote) and at least
    one weights file: a file it leaves out (weights swapped in after the export, or `{"files": {}}`)
    would otherwise be loaded unchecked while eval says "checksums verified"."""
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_file() and path != manifest and name not in files:
            raise CorruptCheckpointError(
                f"{path} is not listed in {manifest}: it was added or renamed after the export, "
                f"so it cannot be checked (re-export the run, or remove the file)"
            )
    if not any(str(name).endswith(WEIGHTS_SUFFIXES) for name in files):
        raise CorruptCheckpointError(
            f"{manifest} lists no weights file ({', '.join(f'*{s}' for s in WEIGHTS_SUFFIXES)}): "
            f"the export's weights cannot be checked; re-export the run"
        )


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
    if not isinstance(meta, dict):
        raise CorruptCheckpointError(
            f"{ckpt / STATE_FILE} holds a JSON {type(meta).__name__}, not the object srpo writes: "
            f"it was altered or written by something else"
        )
    if meta.get("format") != FORMAT_VERSION:
        raise CheckpointError(
            f"{ckpt / STATE_FILE} has format {meta.get('format')!r}; this srpo reads format "
            f"{FORMAT_VERSION}"
        )
    _check_marker(ckpt / STATE_FILE, meta)
    return meta


def _check_marker(path: Path, meta: Mapping[str, Any]) -> None:
    """The marker's shape, every field loading reads (save.py writes them all), so a marker
    that is JSON but not srpo's (`[1,2,3]`, no `step`, `"step": "two"`) is refused in one line
    naming the file and the field, not a KeyError deep in loading."""
    def entries(key: str, fields: Mapping[str, tuple[type, ...]]) -> str | None:
        value = meta.get(key)
        if not isinstance(value, dict):
            return f"'{key}' is not a mapping"
        for name, entry in value.items():
            if not isinstance(entry, dict):
                return f"'{key}' entry {name!r} is not a mapping"
            for field, types in fields.items():
                if not isinstance(entry.get(field), types):
                    return f"'{key}' entry {name!r} has no valid {field!r}"
        return None

    step = meta.get("step")
    problem = (
        "'step' is not a step number" if not isinstance(step, int) or isinstance(step, bool) or step < 0
        else "'data_state' is not a mapping" if not isinstance(meta.get("data_state"), dict)
        else "'config_fingerprint' is not a string" if not isinstance(meta.get("config_fingerprint"), str)
        else "'srpo_version' is not a string" if not isinstance(meta.get("srpo_version"), str)
        else "'files' is not a mapping" if not isinstance(meta.get("files"), dict)
        else entries("policies", {"file": (str,), "kind": (str,)})
        or entries("optimizers", {"file": (str,), "scheduler": (bool,)})
    )
    if problem is None:
        lora = [n for n, e in meta["policies"].items() if e["kind"] == "lora"
                and not (isinstance(e.get("adapters"), list) and all(isinstance(a, str) for a in e["adapters"]))]
        problem = f"'policies' entry {lora[0]!r} has no valid 'adapters'" if lora else None
    if problem is not None:
        raise CorruptCheckpointError(
            f"{path} is not a marker srpo wrote ({problem}): it was altered or written by "
            f"something else"
        )


def _check_names(what: str, ckpt: Path, expected: set[str], saved: set[str]) -> None:
    if expected == saved:
        return
    parts = []
    if expected - saved:
        parts.append(f"in this run but not in the checkpoint: {sorted(expected - saved)}")
    if saved - expected:
        parts.append(f"in the checkpoint but not in this run: {sorted(saved - expected)}")
    raise CheckpointMismatchError(f"{what} differ from checkpoint {ckpt}: " + "; ".join(parts))


def _inside(name: str, *, nested: bool) -> bool:
    """Whether a listed name is a file inside the folder: a plain name, or with nested=True (an
    export's lora/ folder) a relative path of plain names; never absolute, never through '..'."""
    parts = name.split("/")
    if not nested and len(parts) != 1:
        return False
    return all(part not in ("", ".", "..") and Path(part).name == part for part in parts)


def _check_files(ckpt: Path, files: Mapping[str, str], *, marker: Path | None = None,
                 nested: bool = False) -> None:
    """Every listed file exists inside CKPT with its checksum. marker: the file that lists them
    (default: the checkpoint's STATE_FILE); nested: names may hold subfolders (exports)."""
    marker = ckpt / STATE_FILE if marker is None else marker
    if not isinstance(files, Mapping):
        raise CorruptCheckpointError(f"{marker}: 'files' must map file names to checksums")
    for name, digest in files.items():
        # srpo writes names of files inside the folder; anything else (a path out of it, e.g.
        # '../../x' or '/etc/x', which would have its checksum read) is a crafted marker
        if not isinstance(name, str) or not isinstance(digest, str) or not _inside(name, nested=nested):
            raise CorruptCheckpointError(
                f"{marker} lists {name!r}, which is not a file of the {'export' if nested else 'checkpoint'}: "
                f"the marker was altered or written by something else"
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
            f"{path} is not a valid safetensors file ({_first_line(e)}): it was altered or written by something else"
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


def _check_headers(folder: Path) -> None:
    """Every weights file's header, parsed before transformers sees it (whose errors on a crafted
    header are tracebacks): a manifest's checksums can be recomputed by whoever crafted it."""
    for path in sorted(folder.rglob("*.safetensors")):
        check_safetensors_header(path)


def _check_tensors(path: Path, expected: Mapping[str, torch.Size], aliases: set[str]) -> None:
    """Tensor names and shapes of a weights file against the module's, from its header only."""
    with _safetensors_file(path), safe_open(str(path), framework="pt") as f:
        saved = {key: torch.Size(f.get_slice(key).get_shape()) for key in f.keys()}  # noqa: SIM118 (safe_open is not iterable)
    missing = sorted(set(expected) - set(saved) - aliases)
    unexpected = sorted(set(saved) - set(expected))
    wrong = sorted(k for k in set(saved) & set(expected) if saved[k] != expected[k])
    if missing or unexpected or wrong:
        details = [f"missing {missing[:5]}"] if missing else []
        details += [f"unexpected {unexpected[:5]}"] if unexpected else []
        details += [f"{k}: saved {tuple(saved[k])}, model {tuple(expected[k])}" for k in wrong[:5]]
        raise CheckpointMismatchError(f"{path} does not fit the model: " + "; ".join(details))


def _check_policy(path: Path, model: torch.nn.Module, entry: Mapping[str, Any]) -> None:
    adapters = _peft_adapters(model)
    kind = "full" if adapters is None else "lora"
    if entry["kind"] != kind:
        raise CheckpointMismatchError(
            f"{path} holds a {entry['kind']} policy but this run's model is {kind} ({type(model).__name__})"
        )
    if adapters is None:
        expected = {k: v.shape for k, v in model.state_dict().items()}
        with _safetensors_file(path), safe_open(str(path), framework="pt") as f:
            aliases = set((f.metadata() or {}).keys()) - {"srpo_kind"}
        _check_tensors(path, expected, aliases)
        return
    saved = set(entry["adapters"])
    _check_names(f"LoRA adapters of {path.name}", path.parent, set(adapters), saved)
    expected = {f"{a}{_ADAPTER_SEP}{k}": v.shape for a in adapters for k, v in _adapter_state(model, a).items()}
    _check_tensors(path, expected, set())


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
            f"{path} is not a checkpoint file srpo wrote: it cannot be read as one ({_first_line(e)})"
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
    except Exception as e:
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
    ok = (
        isinstance(optimizer, dict)
        and isinstance(optimizer.get("state"), dict)
        and isinstance(groups, list)
        and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups)
        and (isinstance(scheduler, dict) if with_scheduler else scheduler is None)
    )
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
