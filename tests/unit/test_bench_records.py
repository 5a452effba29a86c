"""benchmarks/provenance.py: every benchmark record's `commit` and `dirty`, on a throwaway repo."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_provenance", ROOT / "benchmarks" / "provenance.py")
provenance_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(provenance_module)
provenance = provenance_module.provenance


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           "-c", "commit.gpgsign=false", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def test_commit_and_dirty_in_a_temporary_repo(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    git(repo, "add", "code.py")
    git(repo, "commit", "-q", "-m", "first")
    sha = git(repo, "rev-parse", "--short", "HEAD")
    assert provenance(repo) == {"commit": sha, "dirty": False}

    # what benchmarks and runs write (untracked, under results/ and runs/) is not a change of code
    (repo / "results" / "bench").mkdir(parents=True)
    (repo / "results" / "bench" / "a b.json").write_text("{}")
    (repo / "runs").mkdir()
    (repo / "runs" / "metrics.jsonl").write_text("")
    assert provenance(repo) == {"commit": sha, "dirty": False}

    # an untracked file elsewhere is (a new module a run may import)
    (repo / "new_module.py").write_text("")
    assert provenance(repo)["dirty"] is True
    (repo / "new_module.py").unlink()

    # a modified tracked file is, staged or not (under results/ too: only untracked outputs are ignored)
    (repo / "code.py").write_text("x = 2\n")
    assert provenance(repo)["dirty"] is True
    git(repo, "add", "code.py")
    assert provenance(repo)["dirty"] is True
    git(repo, "commit", "-q", "-m", "second")
    assert provenance(repo) == {"commit": git(repo, "rev-parse", "--short", "HEAD"), "dirty": False}
    git(repo, "add", "results/bench/a b.json")
    git(repo, "commit", "-q", "-m", "a result")
    (repo / "results" / "bench" / "a b.json").write_text("{\"changed\": 1}")
    assert provenance(repo)["dirty"] is True
    git(repo, "checkout", "-q", "--", "results/bench/a b.json")
    assert provenance(repo)["dirty"] is False
    git(repo, "mv", "code.py", "renamed.py")  # a rename (-z writes its source as a field of its own)
    assert provenance(repo)["dirty"] is True


def test_outside_a_checkout_both_fields_are_none(tmp_path: Path) -> None:
    assert provenance(tmp_path) == {"commit": None, "dirty": None}
