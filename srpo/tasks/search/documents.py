"""Records shared by the search task family: documents, retrieved passages, the retriever protocol.

A corpus is a sequence of Documents (on disk: JSONL of {"id", "title", "text"}). A retriever
answers a batch of queries with the top-k passages of each, best first. Search questions are
plain srpo.types.Task records with:
    task.answer                          the gold answer string
    task.metadata["answer_aliases"]      other accepted answers (list[str], may be empty)
    task.metadata["supporting_doc_ids"]  the documents that hold the evidence (list[str])
    task.metadata["hops"]                how many documents must be chained (1, 2, 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Document:
    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class Passage:
    """One retrieved document for one query."""

    doc_id: str
    title: str
    text: str
    score: float  # higher is better; scales differ between retrievers
    rank: int  # 0 = best


@runtime_checkable
class Retriever(Protocol):
    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-k passages of each query, best first (fewer if the corpus is smaller)."""
        ...
