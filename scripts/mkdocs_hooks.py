"""mkdocs hooks (mkdocs.yml `hooks:`): the site checks links the way GitHub renders the pages.

The pages under docs/ are read in two places: on GitHub, where a link to `../srpo/batch.py` opens
the source file, and in the mkdocs site, whose `docs_dir` holds the pages only. Two things make
one `mkdocs build --strict` check both readings:

- Headings get GitHub's anchors (`github_slug`, `-1` for a repeated heading), so a `#anchor`
  that works on GitHub is the one mkdocs validates (tests/unit/test_docs_links.py slugs the same).
- A link or image that leaves `docs_dir` (code, results, the README) is checked here: the file
  must exist in the repository, else a warning names it (which `--strict` turns into a failure);
  an existing one is pointed at `repo_url` (`/blob/main/<path>`) when mkdocs.yml sets one, else at
  the repository path from the site's root, where the build copies the file (so plots and code
  open from a site served at its root, as `mkdocs serve` does). mkdocs itself validates links
  between pages and their anchors (`validation:` in mkdocs.yml).
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

import markdown
from markdown.extensions import Extension, toc
from markdown.treeprocessors import Treeprocessor

log = logging.getLogger("mkdocs.hooks.srpo")  # under "mkdocs": --strict counts its warnings


def github_slug(heading: str) -> str:
    """GitHub's anchor of a heading's text: lower case, punctuation dropped, each space a '-'."""
    text = heading.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _github_unique(slug: str, ids: set[str], counters: dict[str, int] | None = None) -> str:
    """A repeated heading's anchor as GitHub numbers it: slug, slug-1, slug-2, ..."""
    candidate, n = slug, 0
    while candidate in ids:
        n += 1
        candidate = f"{slug}-{n}"
    ids.add(candidate)
    return candidate


class _State:
    """What the tree processor needs to know about the build and the page being rendered."""

    docs_dir = Path(".")
    repo_root = Path(".")
    repo_url = ""
    page_src = ""  # the page's path inside docs_dir, e.g. "training.md"
    linked: set[str] = set()  # repository files the pages link to, by repository path


class _OutsideLinks(Treeprocessor):
    """Checks and rewrites the links and images of a page that leave docs_dir. It runs before
    mkdocs' own link processor (a higher priority), which then sees only links it can check."""

    def run(self, root):
        for el in root.iter():
            attr = {"a": "href", "img": "src"}.get(el.tag)
            if attr and el.get(attr):
                el.set(attr, _outside_target(el.get(attr)))


def _outside_target(url: str) -> str:
    scheme, netloc, path, _query, anchor = urlsplit(url)
    if scheme or netloc or not path or path.startswith("/"):
        return url  # a web link, a site-absolute path or a bare #anchor: not ours
    in_docs = posixpath.normpath(posixpath.join(posixpath.dirname(_State.page_src), unquote(path)))
    if not in_docs.startswith("../"):
        return url  # inside docs_dir: mkdocs validates it (page, file and anchor)
    # normalized, not resolved: a linked-in folder (a symlink) stays inside the repository
    target = Path(os.path.normpath(_State.docs_dir / posixpath.dirname(_State.page_src) / unquote(path)))
    try:
        repo_path = target.relative_to(_State.repo_root).as_posix()
    except ValueError:
        log.warning(f"Doc file '{_State.page_src}' links to '{url}', which is outside the repository")
        return url
    if not target.exists():
        log.warning(f"Doc file '{_State.page_src}' links to '{url}', but the repository has no "
                    f"file '{repo_path}'")
        return url
    suffix = f"#{anchor}" if anchor else ""
    if target.is_file():
        _State.linked.add(repo_path)
    if _State.repo_url:
        return f"{_State.repo_url.rstrip('/')}/blob/main/{repo_path}{suffix}"
    return f"/{repo_path}{suffix}"


class _OutsideLinksExtension(Extension):
    def extendMarkdown(self, md: markdown.Markdown) -> None:
        md.treeprocessors.register(_OutsideLinks(md), "srpo_outside_links", 10)  # mkdocs' is 0


def on_config(config):
    """GitHub's anchors for every heading; the outside-link check for every page."""
    toc.unique = _github_unique  # toc numbers repeats "_1"; GitHub "-1" (the links say "-1")
    config.mdx_configs.setdefault("toc", {})["slugify"] = lambda value, sep: github_slug(value)
    config.markdown_extensions.append(_OutsideLinksExtension())
    _State.docs_dir = Path(os.path.abspath(config.docs_dir))
    _State.repo_root = Path(os.path.abspath(config.config_file_path)).parent
    _State.repo_url = config.repo_url or ""
    _State.linked = set()
    return config


def on_page_markdown(markdown_text, page, config, files):
    _State.page_src = page.file.src_uri
    return markdown_text


def on_post_build(config):
    """The repository files the pages link to, copied to their repository paths in the site."""
    if _State.repo_url:
        return  # the links open the files on the repository's host
    for repo_path in sorted(_State.linked):
        dest = Path(config.site_dir) / repo_path
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_State.repo_root / repo_path, dest)
