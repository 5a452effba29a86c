"""Argument checks and result building shared by the retrievers.

Rules every retriever here follows (and tests):
  * `queries` is a sequence of strings (a bare string is refused: it would be searched letter
    by letter); `k` is a positive int.
  * A blank query (empty or whitespace only) gets [] : there is nothing to match, and returning
    arbitrary documents would look like evidence to an agent.
  * k larger than the corpus returns every candidate (all documents for dense retrieval; for
    BM25 every document that shares a term with the query).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from srpo.tasks.search.corpus import corpus_hash, validate_documents
from srpo.tasks.search.documents import Document, Passage


class CorpusMismatchError(ValueError):
    """An index (or embedding file) was built from other documents than the ones given."""


def check_corpus_hash(expected: str, documents: Sequence[Document], what: str) -> str:
    """Raise CorpusMismatchError unless the documents hash to `expected`; returns the hash."""
    actual = corpus_hash(documents)
    if actual != expected:
        raise CorpusMismatchError(
            f"{what} was built from a different corpus: its corpus hash is {expected[:16]}..., "
            f"the {len(documents)} documents given hash to {actual[:16]}...; rebuild the index "
            f"(srpo index) or pass the corpus it was built from"
        )
    return actual


def load_saved_index(
    directory: str | Path, meta_file: str, kind: str, documents: Sequence[Document]
) -> tuple[Path, dict[str, Any], list[Document], str]:
    """(directory, its metadata, the validated documents, their hash) of a saved index, after
    checking that `documents` are the corpus it was built from."""
    directory = Path(directory)
    meta_path = directory / meta_file
    if not meta_path.is_file():
        raise FileNotFoundError(f"{directory} is not a saved {kind} index (no {meta_file})")
    meta = json.loads(meta_path.read_text())
    docs = validate_documents(documents)
    digest = check_corpus_hash(meta["corpus_hash"], docs, f"the {kind} index in {directory}")
    return directory, meta, docs, digest


def check_search_args(queries: Sequence[str], k: int) -> list[str]:
    """The queries as a list, after checking them and k; raises TypeError / ValueError."""
    if isinstance(queries, (str, bytes)):
        raise TypeError("queries must be a sequence of strings, got a single string; "
                        "wrap it in a list: search([query], k)")
    queries = list(queries)
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise TypeError(f"query {i} is a {type(q).__name__} ({q!r:.60}), not a string")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return queries


def to_passages(documents: Sequence[Document], indices, scores) -> list[Passage]:
    """Passages (rank 0 = best) of documents[indices[j]] with scores[j], in the given order."""
    out = []
    for rank, (i, s) in enumerate(zip(indices, scores)):
        doc = documents[int(i)]
        out.append(Passage(doc_id=doc.doc_id, title=doc.title, text=doc.text,
                           score=float(s), rank=rank))
    return out
