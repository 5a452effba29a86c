"""The files of a study's cells: JSON records written atomically, and the code a cell ran with."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from srpo.disk import atomic_write_text


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def write_json(path: Path, data: dict[str, Any], *, compact: bool = False) -> None:
    """Atomic: a reader sees the old file or the new one, never half of it. compact: no
    indentation (a series study's per-run records: thousands of them)."""
    text = json.dumps(data, separators=(",", ":")) if compact else json.dumps(data, indent=1)
    atomic_write_text(path, text + "\n")


def code_version() -> str:
    """The git commit of the code a cell ran with (+"-dirty" with uncommitted changes), or
    "unknown" outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "srpo"], cwd=root, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")
