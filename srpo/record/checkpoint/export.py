"""Exporting a trained policy as a plain Hugging Face folder (`export_policy`): a peft model
merged on a copy, the folder filled in a temporary sibling, fsynced, given a checksum manifest
(srpo_export.json, which `verify_export` and `srpo eval RUN` check) and renamed into place. A
full disk removes the unfinished folder and leaves an earlier export unchanged."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from srpo.disk import DiskFullError, disk_full_errno, refuse_symlink, writing
from srpo.record.checkpoint.durable import _fsync_dir, _fsync_file, _retire, _sha256, _write_text
from srpo.record.checkpoint.layout import EXPORT_MANIFEST
from srpo.record.checkpoint.state import _peft_adapters


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
    adapters; `adapter` picks which one when it has several. Its adapter alone is also written,
    unmerged, in peft's own layout to out_dir/lora (adapter_config.json, adapter_model.safetensors:
    what `PeftModel.from_pretrained` and `policies.lora.init` load). The folder is filled in a
    temp sibling and renamed into place. An existing out_dir is an error unless overwrite=True.
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
        lora = _adapter_files(model, adapter)
        model = copy.deepcopy(model).merge_and_unload(adapter_names=[adapter])
    else:
        lora = None
    with writing(out.parent):
        out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    # save_pretrained would fill a link's target folder; rmtree leaves a link alone: refuse it
    refuse_symlink(tmp, "a temporary folder")
    refuse_symlink(out, "a folder")
    shutil.rmtree(tmp, ignore_errors=True)
    earlier = out.exists()
    try:
        _write_export(model, tokenizer, tmp, out, lora)
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


def _adapter_files(model: Any, adapter: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(adapter_config.json's content, adapter_model.safetensors' tensors) of one adapter, in
    peft's layout (keys without the adapter name), taken before the merge."""
    from peft import get_peft_model_state_dict

    config = model.peft_config[adapter].to_dict()
    # sets (target_modules after peft resolved "all-linear") are not JSON
    config = {k: sorted(v) if isinstance(v, set) else v for k, v in config.items()}
    tensors = {k: v.detach().cpu().contiguous()
               for k, v in get_peft_model_state_dict(model, adapter_name=adapter).items()}
    return config, tensors


def _save_adapter(lora: tuple[dict[str, Any], dict[str, torch.Tensor]], folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir()
    config, tensors = lora
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=1, default=str) + "\n")
    save_file(tensors, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})


def _write_export(model: torch.nn.Module, tokenizer: Any | None, tmp: Path, out: Path,
                  lora: tuple[dict[str, Any], dict[str, torch.Tensor]] | None = None) -> None:
    """Fill `tmp` (weights, the adapter alone, tokenizer, manifest) and rename it to `out`. The
    writers inside transformers do not say which file a full disk stopped, so the newest file in
    `tmp` is named."""
    for save in (model.save_pretrained, None if tokenizer is None else tokenizer.save_pretrained,
                 None if lora is None else (lambda folder: _save_adapter(lora, folder / "lora"))):
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


def _newest_file(folder: Path) -> Path:
    """The file written last in `folder` (the one a failed save_pretrained was writing), or the
    folder itself if it holds none."""
    files = [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
    return max(files, key=lambda p: p.stat().st_mtime_ns, default=folder)
