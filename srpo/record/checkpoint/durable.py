"""Durable file operations of checkpoints and exports: fsync of files and directories, writes
that report a full disk naming their file (`srpo.disk.writing`), deletion by rename-then-remove,
and the sha256 of a file (the checksums of trainer_state.json and srpo_export.json)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from srpo.disk import open_no_follow, refuse_symlink, writing

_CHUNK = 1 << 20


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
    with writing(path), open_no_follow(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _torch_save(obj: Any, path: Path) -> None:
    """torch.save into a file object we opened: given a path, torch reports a full disk as
    "unexpected pos N vs M" with no trace of the OS error; given a file, the OSError of the
    failed write is kept (as the context), so `writing` recognises it."""
    with writing(path), open_no_follow(path, "wb") as f:
        torch.save(obj, f)


def _retire(path: Path) -> None:
    """Delete a directory: renamed aside first, so a kill mid-delete leaves no half-deleted
    `step-N` behind, only `.trash-*` debris that the next save removes. A link at `path` is
    refused (renamed aside, it would make rmtree fail on it after the rename)."""
    refuse_symlink(path, "a folder")
    trash = path.with_name(f".trash-{path.name}-{os.getpid()}")
    shutil.rmtree(trash, ignore_errors=True)  # left by an earlier process with our pid
    os.rename(path, trash)
    shutil.rmtree(trash)
