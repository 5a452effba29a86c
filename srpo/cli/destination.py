"""`--out FILE` checked before the work that fills it: `srpo rollout`, `srpo eval` and
`srpo report` write their file at the end (temp-then-rename), so a destination that can never
be written (a directory, a file inside a read-only or missing-permission folder, a name too long
for the filesystem) would otherwise be found only after minutes of generation, and the work lost.
"""

from __future__ import annotations

import os
from pathlib import Path


def check_destination(path: str | Path, what: str = "--out") -> Path:
    """Raise ValueError, one line naming `path`, unless a file can be written there: not an
    existing directory, and its folder (the nearest one that exists: missing ones are created)
    is a directory this process may create files in. Returns the path."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory; give the path of a file to write")
    try:
        os.stat(path)  # a name too long, or a parent that is a file, shows here
    except FileNotFoundError:
        pass
    except OSError as e:
        raise ValueError(f"{what} {path} cannot be written: {e.strerror or e}") from None
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ValueError(f"{what} {path} cannot be written: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        # os.access answers EROFS for a read-only filesystem, root included
        reason = "read-only file system" if _read_only(folder) else "no permission to create files"
        raise ValueError(f"{what} {path} cannot be written: {folder} is not writable ({reason}); "
                         f"nothing was done")
    return path


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False

