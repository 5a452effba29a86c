"""Retrieval recall@k on the generated world's questions, by hop count and retriever.

For every question the query is the question text itself (what a searcher that copies the
question would send). Three numbers per cell:
    first@k   the first supporting document (the entity the question names) is in the top k
    frac@k    mean share of the supporting documents in the top k
    all@k     every supporting document is in the top k (multi-hop needs more searches: low)

    python benchmarks/bench_world_recall.py [--seed 0] [--per-hop 300] [--k 5] [--no-dense]
"""

from __future__ import annotations

import argparse
import time

import torch

from srpo.tasks.search.retrieval import BM25Retriever, DenseRetriever, FusedRetriever
from srpo.tasks.search.world import generate_world, world_questions


def recall_table(retriever, questions, k: int) -> tuple[float, float, float]:
    results = retriever.search([q.prompt for q in questions], k)
    first = frac = every = 0.0
    for q, passages in zip(questions, results):
        found = {p.doc_id for p in passages}
        gold = q.metadata["supporting_doc_ids"]
        first += gold[0] in found
        share = sum(d in found for d in gold) / len(gold)
        frac += share
        every += share == 1.0
    n = len(questions)
    return first / n, frac / n, every / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-hop", type=int, default=300)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--no-dense", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    world = generate_world(args.seed)
    docs = world.documents
    questions = {h: world_questions(world, hops=(h,), n=args.per_hop, seed=args.seed, split="train") for h in (1, 2, 3)}
    print(f"world seed {args.seed}: {len(docs)} documents, {args.per_hop} train questions per hop, "
          f"built in {time.perf_counter() - t0:.2f} s")
    t0 = time.perf_counter()
    retrievers = {"bm25": BM25Retriever.build(docs)}
    print(f"bm25 index: {time.perf_counter() - t0:.2f} s")
    if not args.no_dense:
        t0 = time.perf_counter()
        retrievers["dense"] = DenseRetriever.build(docs)
        print(f"dense index (MiniLM, cache {'hit' if retrievers['dense'].from_cache else 'miss'}): "
              f"{time.perf_counter() - t0:.1f} s")
        retrievers["fused"] = FusedRetriever([retrievers["bm25"], retrievers["dense"]])
    k = args.k
    print(f"\n{'retriever':<10} {'hops':>4} {'first@' + str(k):>9} {'frac@' + str(k):>8} {'all@' + str(k):>7}")
    for name, r in retrievers.items():
        for h, qs in questions.items():
            first, frac, every = recall_table(r, qs, k)
            print(f"{name:<10} {h:>4} {first:>9.3f} {frac:>8.3f} {every:>7.3f}")


if __name__ == "__main__":
    main()
