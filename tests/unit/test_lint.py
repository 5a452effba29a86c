"""The code passes the linter configured in pyproject.toml ([tool.ruff]: pyflakes, pycodestyle,
import order, pyupgrade, bugbear, simplify, comprehensions), so the README's test command runs
it. ruff is pinned in the dev extra: another version may read the same rules differently."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"ruff check . found:\n{done.stdout}{done.stderr}"
