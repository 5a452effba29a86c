"""BM25 over title + text (bm25s, Lucene variant), English Snowball stemming and stopwords.

    bm25 = BM25Retriever.build(documents)
    bm25.search(["who painted the mona lisa"], k=5)   # -> [[Passage, ...]]
    bm25.save("idx/bm25"); BM25Retriever.load("idx/bm25", documents)   # no re-indexing

Only documents that share at least one (stemmed, non-stopword) term with the query are
returned: a BM25 score of 0 means "no match", so a query made only of stopwords or unknown words
gets [], and k larger than the corpus returns every matching document.
The saved index holds no text: `load` takes the documents and checks them against the corpus
hash recorded at build time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from srpo.tasks.search.corpus import corpus_hash, index_text, validate_documents
from srpo.tasks.search.documents import Document, Passage
from srpo.tasks.search.retrieval.base import check_search_args, load_saved_index, to_passages

META_FILE = "srpo_bm25.json"


@dataclass(frozen=True)
class BM25Settings:
    k1: float = 1.5  # term-frequency saturation
    b: float = 0.75  # length normalisation
    method: str = "lucene"  # bm25s scoring variant
    stemmer: str = "english"  # PyStemmer (Snowball) language; "" = no stemming
    stopwords: str = "en"  # bm25s stopword list; "" = keep all words


def _import_bm25s():
    try:
        import bm25s
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            "BM25 retrieval needs bm25s and PyStemmer: pip install 'srpo[search]'", name=e.name
        ) from e
    # bm25s logs at INFO for every empty query; that is our documented case, not news.
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


class BM25Retriever:
    """Sparse lexical retrieval; build with `build`, reload with `load`."""

    kind = "bm25"

    def __init__(self, documents: Sequence[Document], model, settings: BM25Settings,
                 corpus_hash_: str):
        self.documents = list(documents)
        self.settings = settings
        self.corpus_hash = corpus_hash_
        self._model = model  # bm25s.BM25, indexed on self.documents in order
        self._stemmer = _make_stemmer(settings.stemmer)

    @classmethod
    def build(cls, documents: Sequence[Document], settings: BM25Settings | None = None
              ) -> BM25Retriever:
        bm25s = _import_bm25s()
        settings = settings or BM25Settings()
        docs = validate_documents(documents)
        stemmer = _make_stemmer(settings.stemmer)
        tokens = bm25s.tokenize([index_text(d) for d in docs], stopwords=settings.stopwords or None,
                                stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            raise ValueError("corpus has no indexable term (every document is empty or only "
                             "stopwords); BM25 cannot index it")
        model = bm25s.BM25(k1=settings.k1, b=settings.b, method=settings.method, backend="numpy")
        model.index(tokens, show_progress=False)
        return cls(docs, model, settings, corpus_hash(docs))

    def save(self, directory: str | Path) -> Path:
        """Write the index (bm25s files + srpo_bm25.json) into `directory`; no document text."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._model.save(str(directory), show_progress=False)
        meta = {"corpus_hash": self.corpus_hash, "num_documents": len(self.documents),
                "settings": asdict(self.settings)}
        (directory / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        return directory

    @classmethod
    def load(cls, directory: str | Path, documents: Sequence[Document]) -> BM25Retriever:
        """Reload a saved index for `documents` (must be the corpus it was built from)."""
        bm25s = _import_bm25s()
        directory, meta, docs, digest = load_saved_index(directory, META_FILE, "BM25", documents)
        model = bm25s.BM25.load(str(directory), show_progress=False)
        model.backend = "numpy"  # numba (if installed) would JIT-compile for seconds on load
        return cls(docs, model, BM25Settings(**meta["settings"]), digest)

    @property
    def vocabulary_size(self) -> int:
        """Distinct stemmed terms in the index."""
        return sum(1 for t in self._model.vocab_dict if t)  # bm25s adds "" for empty queries

    def query_terms(self, query: str) -> list[str]:
        """The stemmed, non-stopword terms of a query that occur in the corpus."""
        bm25s = _import_bm25s()
        (terms,) = bm25s.tokenize([query], stopwords=self.settings.stopwords or None,
                                  stemmer=self._stemmer, return_ids=False, show_progress=False)
        vocab = self._model.vocab_dict
        return [t for t in terms if t and t in vocab]

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        queries = check_search_args(queries, k)
        results: list[list[Passage]] = [[] for _ in queries]
        terms = [self.query_terms(q) if q.strip() else [] for q in queries]
        todo = [i for i, t in enumerate(terms) if t]
        if not todo:
            return results
        depth = min(int(k), len(self.documents))
        indices, scores = self._model.retrieve([terms[i] for i in todo], k=depth,
                                               show_progress=False, n_threads=0,
                                               backend_selection="numpy")
        for row, i in enumerate(todo):
            keep = scores[row] > 0  # 0 = the document has none of the query's terms
            results[i] = to_passages(self.documents, indices[row][keep], scores[row][keep])
        return results


def _make_stemmer(language: str):
    if not language:
        return None
    try:
        import Stemmer
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            "BM25 stemming needs PyStemmer: pip install 'srpo[search]' (or BM25Settings("
            "stemmer=''))", name=e.name) from e
    return Stemmer.Stemmer(language)
