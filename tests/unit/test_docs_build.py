"""The user guide builds as a site with `mkdocs build --strict` (mkdocs.yml), and that build
fails on what would break a reader: a page missing from the nav, a link to a page or a
repository file that does not exist, an anchor no heading has.

The failing cases run on a copy of the docs in a temporary folder (the repository's other
top-level entries linked in, so links to code resolve as they do here); each one breaks one
thing and checks that the build fails and names it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOOKS = REPO / "scripts" / "mkdocs_hooks.py"


def _mkdocs_build(root: Path, site: Path) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed: `pip install -e '.[dev]'` (scripts/setup.sh does)")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(root / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=root, capture_output=True, text=True, env=env, timeout=300, check=False)


def _output(result: subprocess.CompletedProcess) -> str:
    return f"exit status {result.returncode}\n{result.stdout}\n{result.stderr}"


@pytest.fixture
def docs_copy(tmp_path) -> Path:
    """The repository with docs/, mkdocs.yml and the hooks copied (editable) and every other
    top-level entry linked (read-only use)."""
    root = tmp_path / "repo"
    root.mkdir()
    for entry in REPO.iterdir():
        if entry.name in ("docs", "mkdocs.yml", "scripts", ".git", ".venv", "site"):
            continue
        (root / entry.name).symlink_to(entry)
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    (root / "scripts").mkdir()
    shutil.copy(HOOKS, root / "scripts" / HOOKS.name)
    return root


def test_the_docs_build_strict(tmp_path):
    result = _mkdocs_build(REPO, tmp_path / "site")
    assert result.returncode == 0, _output(result)
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "getting-started" / "index.html").is_file()
    page = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert not re.findall(r'(?:src|href)="https?://[^"]*\.(?:js|css)"', page)  # opens offline


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


BREAKS = {  # a deliberate break -> what the failed build must name
    "[a page](no-such-page.md)": "no-such-page.md",
    "[an anchor](training.md#no-such-heading)": "no-such-heading",
    "[an anchor here](#no-such-heading-here)": "no-such-heading-here",
    "[code](../srpo/no_such_module.py)": "srpo/no_such_module.py",
    "![a plot](../results/no-such-plot.png)": "results/no-such-plot.png",
}


def test_each_broken_link_fails_the_build_and_is_named(docs_copy, tmp_path):
    """The copy builds as the repository does (test_a_link_to_a_repository_file_that_exists_builds);
    with the breaks added the build fails, and names every one (strict mode reports them all)."""
    _append(docs_copy / "docs" / "index.md", "\n\nDeliberate breaks: " + " ".join(BREAKS) + "\n")
    result = _mkdocs_build(docs_copy, tmp_path / "broken")
    assert result.returncode != 0, _output(result)
    unnamed = [named for named in BREAKS.values() if named not in result.stderr + result.stdout]
    assert unnamed == [], _output(result)


def test_a_page_missing_from_the_nav_or_a_nav_entry_without_its_page_fails(docs_copy, tmp_path):
    (docs_copy / "docs" / "orphan.md").write_text("# A page no nav entry names\n")
    orphan = _mkdocs_build(docs_copy, tmp_path / "orphan")
    assert orphan.returncode != 0 and "orphan.md" in orphan.stderr + orphan.stdout, _output(orphan)

    (docs_copy / "docs" / "orphan.md").unlink()
    (docs_copy / "docs" / "testbed.md").unlink()  # still in the nav
    missing = _mkdocs_build(docs_copy, tmp_path / "missing")
    assert missing.returncode != 0 and "testbed.md" in missing.stderr + missing.stdout, _output(missing)


def test_a_link_to_a_repository_file_that_exists_builds(docs_copy, tmp_path):
    _append(docs_copy / "docs" / "index.md",
            "\n\n[the records](../srpo/types.py) and [the README](../README.md)\n")
    result = _mkdocs_build(docs_copy, tmp_path / "site")
    assert result.returncode == 0, _output(result)
    page = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert 'href="/srpo/types.py"' in page  # pointed at the repository path (no repo_url set)
    copied = tmp_path / "site" / "srpo" / "types.py"  # where the build puts the file it links
    assert copied.read_bytes() == (REPO / "srpo" / "types.py").read_bytes()


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("heading", [
    "Watching a run: progress and the report (srpo report)",
    "5. The GPU smoke run: an offline bundle",
    "Several processes (one node, several GPUs or CPU processes)",
    "Clip defaults per reduction",
    "`task.search` keys -- and more",
])
def test_the_site_and_the_link_check_give_a_heading_the_same_anchor(heading):
    """The site's anchors (the hook) are the link check's (GitHub's), so one link works in both."""
    hooks = _module(HOOKS, "srpo_mkdocs_hooks")
    link_check = _module(Path(__file__).with_name("test_docs_links.py"), "srpo_docs_link_check")
    assert hooks.github_slug(heading) == link_check.github_slug(heading)
