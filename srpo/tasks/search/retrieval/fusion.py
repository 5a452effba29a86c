"""Reciprocal rank fusion (Cormack et al., 2009) of any retrievers over one corpus.

    score(d) = sum over retrievers r that returned d of  1 / (k0 + rank_r(d))

with rank_r(d) = 1 for r's best passage (Passage.rank + 1, as in the paper); k0 = 60 by default.
Each retriever is asked for `depth` candidates (at least k); a document missing from a
retriever's list gets nothing from it. Ties are broken by the best single rank, then by
first appearance (retriever order), so the result is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

from srpo.tasks.search.documents import Passage, Retriever
from srpo.tasks.search.retrieval.base import check_search_args


def rrf_scores(ranked_lists: Sequence[Sequence[Passage]], k0: float = 60.0
               ) -> list[tuple[str, float]]:
    """(doc_id, fused score) best first, from each retriever's passages for one query."""
    score: dict[str, float] = {}
    best_rank: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    for passages in ranked_lists:
        for p in passages:
            score[p.doc_id] = score.get(p.doc_id, 0.0) + 1.0 / (k0 + p.rank + 1)
            best_rank[p.doc_id] = min(best_rank.get(p.doc_id, p.rank), p.rank)
            first_seen.setdefault(p.doc_id, len(first_seen))
    order = sorted(score, key=lambda d: (-score[d], best_rank[d], first_seen[d]))
    return [(d, score[d]) for d in order]


class FusedRetriever:
    """RRF of several retrievers (e.g. BM25 + dense) built on the same corpus.

    k0: the RRF constant (larger = flatter weighting of ranks).
    depth: candidates asked of each retriever (max(k, depth) per search).
    """

    kind = "fused"

    def __init__(self, retrievers: Sequence[Retriever], *, k0: float = 60.0, depth: int = 100):
        if not retrievers:
            raise ValueError("FusedRetriever needs at least one retriever")
        if k0 < 0:
            raise ValueError(f"k0 must be >= 0, got {k0}")
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        hashes = {getattr(r, "corpus_hash", None) for r in retrievers} - {None}
        if len(hashes) > 1:
            raise ValueError("FusedRetriever: the retrievers were built on different corpora "
                             f"(corpus hashes {sorted(h[:12] for h in hashes)})")
        self.retrievers = list(retrievers)
        self.k0 = float(k0)
        self.depth = int(depth)
        self.corpus_hash = next(iter(hashes), None)

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        queries = check_search_args(queries, k)
        depth = max(int(k), self.depth)
        per_retriever = [r.search(queries, depth) for r in self.retrievers]
        results = []
        for qi in range(len(queries)):
            lists = [res[qi] for res in per_retriever]
            by_id = {}
            for passages in lists:
                for p in passages:
                    by_id.setdefault(p.doc_id, p)
            fused = rrf_scores(lists, self.k0)[: int(k)]
            results.append([
                Passage(doc_id=d, title=by_id[d].title, text=by_id[d].text, score=s, rank=rank)
                for rank, (d, s) in enumerate(fused)
            ])
        return results
