"""Retrievers over a corpus of Documents: BM25, dense (MiniLM + faiss), reciprocal rank fusion.

    from srpo.tasks.search.retrieval import BM25Retriever, DenseRetriever, FusedRetriever
    bm25 = BM25Retriever.build(docs); dense = DenseRetriever.build(docs)
    FusedRetriever([bm25, dense]).search(["query"], k=5)      # -> [[Passage, ...]]

    build_index(docs, "idx", bm25=True, dense=True, source="corpus.jsonl")   # = `srpo index`
    load_retriever("idx", kind="fused")

All of them follow srpo.tasks.search.documents.Retriever and the rules in retrieval/base.py
(blank query -> [], k > corpus -> every candidate, bad input -> an error naming it).
Heavy dependencies (bm25s, torch/transformers, faiss) load when a retriever is built.
"""

from srpo.tasks.search.retrieval.base import CorpusMismatchError
from srpo.tasks.search.retrieval.bm25 import BM25Retriever, BM25Settings
from srpo.tasks.search.retrieval.dense import (
    DenseRetriever,
    Encoder,
    MiniLMEncoder,
    default_embedding_cache_dir,
    embed_corpus,
    embedding_cache_path,
    minilm_path,
)
from srpo.tasks.search.retrieval.fusion import FusedRetriever, rrf_scores
from srpo.tasks.search.retrieval.index import (
    RETRIEVER_KINDS,
    build_index,
    load_retriever,
    read_manifest,
)

__all__ = [
    "RETRIEVER_KINDS",
    "BM25Retriever",
    "BM25Settings",
    "CorpusMismatchError",
    "DenseRetriever",
    "Encoder",
    "FusedRetriever",
    "MiniLMEncoder",
    "build_index",
    "default_embedding_cache_dir",
    "embed_corpus",
    "embedding_cache_path",
    "load_retriever",
    "minilm_path",
    "read_manifest",
    "rrf_scores",
]
