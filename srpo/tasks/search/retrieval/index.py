"""Index directories: what `srpo index` writes and `load_retriever` reads.

    DIR/
      manifest.json   format, corpus {hash, num_documents, source}, one entry per index
      bm25/           bm25s arrays + srpo_bm25.json             (if built)
      dense/          embeddings.npy [N, dim] + srpo_dense.json (if built)

No document text is stored: the manifest records where the corpus came from (an absolute JSONL
path, or "wikipedia[:lang]" for the installed summaries) and its hash. `load_retriever` reads the
corpus again (or takes one) and refuses it unless the hash matches, so an index never silently
answers with another corpus's documents.
"""

from __future__ import annotations

import datetime
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from srpo.tasks.search.corpus import corpus_hash, load_corpus, validate_documents
from srpo.tasks.search.documents import Document, Retriever
from srpo.tasks.search.retrieval.base import check_corpus_hash
from srpo.tasks.search.retrieval.bm25 import BM25Retriever, BM25Settings
from srpo.tasks.search.retrieval.dense import DenseRetriever, Encoder, MiniLMEncoder
from srpo.tasks.search.retrieval.fusion import FusedRetriever

MANIFEST = "manifest.json"
INDEX_FORMAT = "srpo-search-index"
FORMAT_VERSION = 1
RETRIEVER_KINDS = ("bm25", "dense", "fused")


def build_index(documents: Sequence[Document], out_dir: str | Path, *, bm25: bool = True,
                dense: bool = False, source: str | None = None,
                bm25_settings: BM25Settings | None = None, encoder: Encoder | None = None,
                cache_dir: str | Path | None = None, use_cache: bool = True) -> dict:
    """Build the chosen indexes of `documents` into `out_dir`; returns the manifest.

    source: where the documents can be read again (a JSONL path or "wikipedia[:lang]"),
        recorded so `load_retriever(out_dir)` needs no corpus argument; None = the caller
        will pass the corpus when loading.
    The directory is filled as a temporary sibling and renamed into place, so a failed build
    leaves nothing half-written. An existing `out_dir` is replaced only if it is an index
    (has a manifest) or empty; anything else is refused rather than deleted.
    """
    if not (bm25 or dense):
        raise ValueError("build_index: choose at least one of bm25 / dense")
    docs = validate_documents(documents, source=source or "corpus")
    out = Path(out_dir).expanduser().absolute()
    if out.exists() and not (out / MANIFEST).is_file() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not an srpo index (no {MANIFEST}); "
                              f"choose another --out or remove it")
    out.parent.mkdir(parents=True, exist_ok=True)
    manifest: dict = {
        "format": INDEX_FORMAT, "format_version": FORMAT_VERSION,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "corpus": {"hash": corpus_hash(docs), "num_documents": len(docs), "source": source},
        "indexes": {},
    }
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        if bm25:
            t0 = time.perf_counter()
            retriever = BM25Retriever.build(docs, bm25_settings)
            retriever.save(tmp / "bm25")
            manifest["indexes"]["bm25"] = {
                "path": "bm25", "settings": asdict(retriever.settings),
                "vocabulary": retriever.vocabulary_size,
                "build_seconds": round(time.perf_counter() - t0, 3)}
        if dense:
            t0 = time.perf_counter()
            retriever = DenseRetriever.build(docs, encoder, cache_dir=cache_dir,
                                             use_cache=use_cache)
            retriever.save(tmp / "dense")
            manifest["indexes"]["dense"] = {
                "path": "dense", "model": retriever.encoder.name, "dim": retriever.encoder.dim,
                "max_length": retriever.encoder.max_length,
                "embeddings_from_cache": retriever.from_cache,
                "build_seconds": round(time.perf_counter() - t0, 3)}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        tmp.chmod(0o755)  # mkdtemp makes it owner-only; an index is a normal folder
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def read_manifest(index_dir: str | Path) -> dict:
    path = Path(index_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{index_dir} is not an srpo index: no {MANIFEST} "
                                f"(build one with `srpo index CORPUS --out DIR`)")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("format") != INDEX_FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: not an {INDEX_FORMAT} v{FORMAT_VERSION} manifest "
                         f"(format={manifest.get('format')!r}, "
                         f"version={manifest.get('format_version')!r})")
    return manifest


def load_retriever(index_dir: str | Path, kind: str = "bm25", *,
                   corpus: Sequence[Document] | str | Path | None = None,
                   encoder: Encoder | None = None, k0: float = 60.0,
                   depth: int = 100) -> Retriever:
    """A retriever over a built index directory.

    kind: "bm25" | "dense" | "fused" (reciprocal rank fusion of both; needs both indexes).
    corpus: the documents (or a source spec / JSONL path); default: the source recorded in the
        manifest. Raises CorpusMismatchError (a ValueError) if they are not the indexed corpus.
    encoder: the query encoder of a dense index (default: MiniLM from the installed package).
    k0, depth: RRF settings of kind "fused" (see FusedRetriever).
    """
    if kind not in RETRIEVER_KINDS:
        raise ValueError(f"unknown retriever kind {kind!r}; choose one of {RETRIEVER_KINDS}")
    index_dir = Path(index_dir)
    manifest = read_manifest(index_dir)
    needed = ("bm25", "dense") if kind == "fused" else (kind,)
    missing = [n for n in needed if n not in manifest["indexes"]]
    if missing:
        flags = " ".join(f"--{n}" for n in needed)
        raise ValueError(f"{index_dir} has no {' / '.join(missing)} index (it has "
                         f"{sorted(manifest['indexes']) or 'none'}); a {kind!r} retriever needs "
                         f"`srpo index CORPUS --out {index_dir} {flags}`")
    if corpus is None:
        source = manifest["corpus"]["source"]
        if source is None:
            raise ValueError(f"{index_dir}: the manifest records no corpus source; pass corpus=")
        corpus = source
    docs = load_corpus(corpus) if isinstance(corpus, (str, Path)) else validate_documents(corpus)
    check_corpus_hash(manifest["corpus"]["hash"], docs, f"the index {index_dir}")
    loaded: dict[str, Retriever] = {}
    if "bm25" in needed:
        loaded["bm25"] = BM25Retriever.load(index_dir / manifest["indexes"]["bm25"]["path"], docs)
    if "dense" in needed:
        meta = manifest["indexes"]["dense"]
        encoder = encoder or MiniLMEncoder(max_length=meta["max_length"])
        loaded["dense"] = DenseRetriever.load(index_dir / meta["path"], docs, encoder)
    if kind == "fused":
        return FusedRetriever([loaded["bm25"], loaded["dense"]], k0=k0, depth=depth)
    return loaded[kind]
