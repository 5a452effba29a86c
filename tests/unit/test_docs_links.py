"""Every relative link in the project's Markdown (README, docs/, results/, recipes/, ...) points to
a file that exists, and every `#anchor` to a heading of its target, as GitHub renders them.

Web links are not followed (the tests run offline). Image links count as links.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# [text](target) and ![alt](target); the target ends at whitespace or ')'; code spans are removed first
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"```.*?```", re.S)
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _markdown_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=False)
    if out.returncode != 0:  # not a git checkout (an sdist): every .md under the repo
        return sorted(p for p in REPO.rglob("*.md") if ".venv" not in p.parts)
    return [REPO / line for line in out.stdout.splitlines() if line]


def github_slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def _anchors(path: Path) -> frozenset[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))  # headings keep their `code`
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(text):
        slug = github_slug(heading)
        n = seen.get(slug, 0)
        found.add(slug if n == 0 else f"{slug}-{n}")  # GitHub numbers repeated headings
        seen[slug] = n + 1
    return frozenset(found)


def _broken_links(path: Path) -> list[str]:
    text = _CODE.sub("", path.read_text(encoding="utf-8"))
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    return broken


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path):
    assert _broken_links(path) == []


def test_the_checker_catches_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text(
        "# Title here\n\n## Second `part`\n\n## Second part\n\n[ok](#second-part) [ok2](a.md#title-here) "
        "[ok3](#second-part-1)\n[bad](missing.md) [bad2](#nope) `[in code](nowhere.md)` ![img](pic.png)\n")
    assert _broken_links(tmp_path / "a.md") == [
        "missing.md (no such file)", "#nope (no heading #nope in a.md)", "pic.png (no such file)"]
