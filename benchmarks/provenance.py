"""The code a benchmark run ran: its commit, and whether the tree held changes not in it.

Every benchmark record (each run's, not only the file's top level) carries `provenance(code)`,
taken when the run starts, from the checkout the run imports srpo from:

    {"commit": "0d0e73d", "dirty": false}

`dirty` is true when `git status --porcelain` lists anything but untracked files under
results/ and runs/ (what benchmarks and runs write): a modified, staged or deleted tracked file,
or an untracked file elsewhere (a new module the run may import). Outside a git checkout both
fields are None.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# untracked files here are outputs, not code: they do not make a tree dirty
OUTPUT_DIRS = ("results/", "runs/")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)


def _status_entries(porcelain_z: str) -> list[tuple[str, str]]:
    """(XY, path) of each entry of `git status --porcelain -z` (a rename's source path skipped)."""
    fields = porcelain_z.split("\0")
    out, i = [], 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if not entry:
            continue
        xy, path = entry[:2], entry[3:]
        out.append((xy, path))
        if xy[0] in "RC":  # -z writes a rename or copy's source as the next field
            i += 1
    return out


def provenance(repo: Path | str = ROOT) -> dict:
    """{"commit": short sha of HEAD, "dirty": bool} of the git checkout at `repo` (None, None
    outside one)."""
    repo = Path(repo)
    head = _git(repo, "rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return {"commit": None, "dirty": None}
    status = _git(repo, "--no-optional-locks", "status", "--porcelain", "-z")  # never takes the index lock
    if status.returncode != 0:
        return {"commit": head.stdout.strip(), "dirty": None}
    dirty = any(not (xy == "??" and path.startswith(OUTPUT_DIRS)) for xy, path in _status_entries(status.stdout))
    return {"commit": head.stdout.strip(), "dirty": dirty}


if __name__ == "__main__":
    print(provenance())
