"""The search environment (tag parsing, retrieval accounting, observations), the search reward
(EM / F1 / format), and stop strings in the generation backends."""

from __future__ import annotations

import re

import pytest
import torch

from srpo.models import build_byte_tokenizer, build_tiny_model
from srpo.rollout import HFGenerateBackend, PolicySet, SamplingParams, ScriptedBackend
from srpo.rollout.backends.protocol import GenerationRequest, finish_tokens
from srpo.tasks.search.documents import Document, Passage
from srpo.tasks.search.env import TRUNCATED, SearchEnv, SearchStats, parse_turn, sanitize
from srpo.tasks.search.rewards import SearchReward, answer_scores, extract_answer
from srpo.types import Task

DOCS = [
    Document("veltra", "Veltra", "Veltra is a river port founded by Ilsa Marr in 1712."),
    Document("marr", "Ilsa Marr", "Ilsa Marr was a shipwright born in Kessel."),
    Document("kessel", "Kessel", "Kessel is a mountain village known for its copper mines."),
    Document("ostmark", "Ostmark", "Ostmark is a northern province; its capital is Brannock."),
    Document("brannock", "Brannock", "Brannock is a walled town on the Ost river."),
]
_WORD = re.compile(r"[a-z0-9]+")
_STOP = {"the", "a", "an", "is", "was", "of", "in", "by", "its", "on", "who", "where", "what"}


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


class KeywordRetriever:
    """A tiny in-memory retriever (the Retriever protocol): documents sharing the most words
    with the query first (ties: corpus order); only documents sharing a word are returned."""

    def __init__(self, documents=DOCS):
        if not documents:
            raise ValueError("KeywordRetriever: empty corpus")
        self.documents = list(documents)
        self.calls: list[list[str]] = []

    def search(self, queries, k):
        self.calls.append(list(queries))
        out = []
        for q in queries:
            scored = [(len(_words(q) & _words(d.title + " " + d.text)), i)
                      for i, d in enumerate(self.documents)]
            top = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:k]
            out.append([Passage(self.documents[i].doc_id, self.documents[i].title,
                                self.documents[i].text, float(s), rank)
                        for rank, (s, i) in enumerate(top)])
        return out


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("text,queries,answer,errors", [
    ("<search>who founded Veltra</search>", ["who founded Veltra"], None, []),
    ("think <answer> Kessel </answer>", [], "Kessel", []),
    ("<search>a</search> then <search>b</search>", ["a", "b"], None, []),
    ("<search>who founded", [], None, ["<search> is not closed"]),  # unclosed (cut or eos)
    ("<search>a <search>b</search>", ["b"], None,  # nested: the outer tag is malformed
     ["<search> is not closed before <search>"]),
    ("<search>   </search>", [], None, ["empty query"]),
    ("x</search>", [], None, ["</search> without an opening <search>"]),
    ("<search>q <answer>A</answer></search>", [], "A",
     ["<search> is not closed before <answer>", "</search> without an opening <search>"]),
    ("no tags at all", [], None, []),
])
def test_parse_turn(text, queries, answer, errors):
    p = parse_turn(text)
    assert p.queries == queries and p.answer == answer and list(p.errors) == errors


def test_sanitize_removes_protocol_tags_from_passages():
    assert sanitize("a <answer>x</answer>\n<SEARCH>b</search> <information>") == "a x b"


# --------------------------------------------------------------------------- the environment


def env(**kw):
    return SearchEnv(KeywordRetriever(), **{"top_k": 2, **kw})


def test_observation_runs_the_query_and_formats_results():
    e, stats = env(), SearchStats()
    obs = e.observation(parse_turn("<search>Ilsa Marr born</search>"), stats)
    # "ilsa", "marr", "born" all in doc marr (3 words), "ilsa", "marr" in veltra (2)
    assert obs == ("\n<information>\nQuery: Ilsa Marr born\n"
                   "[1] Ilsa Marr. Ilsa Marr was a shipwright born in Kessel.\n"
                   "[2] Veltra. Veltra is a river port founded by Ilsa Marr in 1712.\n"
                   "</information>\n")
    assert (stats.calls, stats.dropped, stats.invalid, stats.truncated) == (1, 0, 0, 0)
    assert list(stats.found) == ["marr", "veltra"]


def test_too_many_calls_in_one_turn_only_the_first_n_run():
    e, stats = env(max_calls_per_turn=2), SearchStats()
    obs = e.observation(parse_turn(
        "<search>Kessel</search><search>Ostmark</search><search>Brannock</search>"), stats)
    assert e.retriever.calls == [["Kessel", "Ostmark"]]  # one retriever call, first two only
    assert "Query: Brannock\n(not run: at most 2 searches per turn)" in obs
    assert (stats.calls, stats.dropped) == (2, 1)


@pytest.mark.parametrize("text,reason", [
    ("<search>who founded Veltra", "<search> is not closed"),
    ("<search>a <search>b</search>", "<search> is not closed before <search>"),
    ("<search> </search>", "empty query"),
    ("I do not know", "no <search> or <answer> tag"),
])
def test_malformed_turns_run_nothing_and_say_why(text, reason):
    e, stats = env(), SearchStats()
    obs = e.observation(parse_turn(text), stats)
    assert e.retriever.calls == []
    assert obs.startswith(f"\n<information>\nInvalid action: {reason}. Search with")
    assert (stats.invalid, stats.calls, stats.errors) == (1, 0, [reason])


def test_overlong_observation_is_truncated_with_a_marker():
    e, stats = env(max_observation_chars=60), SearchStats()
    obs = e.observation(parse_turn("<search>Ilsa Marr born</search>"), stats)
    body = obs.removeprefix("\n<information>\n").removesuffix("\n</information>\n")
    assert len(body) == 60 and body.endswith(TRUNCATED)
    assert body == ("Query: Ilsa Marr born\n[1] Ilsa Marr. Ilsa Marr was a shipwr"[: 60 - len(TRUNCATED)]
                    + TRUNCATED)
    assert stats.truncated == 1


def test_merged_results_dedup_by_doc_id_best_rank_first():
    e, stats = env(top_k=3), SearchStats()
    e.retrieve(["Veltra port", "Ilsa Marr born Kessel"], stats)
    # query 1: veltra (rank 0); query 2: marr (0), kessel (1), veltra (2) -> veltra keeps rank 0
    assert [p.doc_id for p in stats.merged()] == ["veltra", "marr", "kessel"]
    meta = stats.metadata({"supporting_doc_ids": ["marr", "brannock"]})
    assert meta["recall_at_k"] == 0.5 and meta["retrieved_docs"] == 3
    assert "recall_at_k" not in stats.metadata({})  # no supporting docs: no recall


def test_first_step_and_per_hop_recall_diagnostics():
    e, stats = env(top_k=1), SearchStats()
    chain = {"supporting_doc_ids": ["veltra", "marr"], "hops": 2}
    meta = stats.metadata(chain)  # nothing retrieved yet: no step, recall 0
    assert (meta["first_step_recall"], meta["first_step_complete"]) == (0.0, 0.0)
    assert (meta["recall_hop1"], meta["recall_hop2"]) == (0.0, 0.0)
    e.retrieve([], stats)  # a round that ran no query is an empty first step
    e.retrieve(["Veltra port"], stats)  # veltra
    e.retrieve(["Ilsa Marr shipwright"], stats)  # marr
    assert stats.steps == [frozenset(), frozenset({"veltra"}), frozenset({"marr"})]
    meta = stats.metadata(chain)
    assert (meta["recall_at_k"], meta["first_step_recall"], meta["first_step_complete"]) == (1.0, 0.0, 0.0)
    assert (meta["recall_hop1"], meta["recall_hop2"]) == (1.0, 1.0)

    e, stats = env(top_k=2), SearchStats()
    e.retrieve(["Veltra Ilsa Marr"], stats)  # one step: veltra and marr together
    meta = stats.metadata(chain)
    assert (meta["first_step_recall"], meta["first_step_complete"]) == (1.0, 1.0)
    meta = stats.metadata({"supporting_doc_ids": ["marr", "kessel"], "hops": 2})
    assert (meta["first_step_recall"], meta["recall_hop1"], meta["recall_hop2"]) == (0.5, 1.0, 0.0)
    # not a chain (more documents than hops): no per-hop recall
    assert "recall_hop1" not in stats.metadata({"supporting_doc_ids": ["marr", "kessel"], "hops": 1})


def test_env_rejects_bad_settings():
    with pytest.raises(ValueError, match="top_k must be an int >= 1"):
        SearchEnv(KeywordRetriever(), top_k=0)
    with pytest.raises(ValueError, match="max_observation_chars must exceed"):
        SearchEnv(KeywordRetriever(), max_observation_chars=5)
    with pytest.raises(TypeError, match="must have search"):
        SearchEnv(object())

    class Short(KeywordRetriever):
        def search(self, queries, k):
            return []

    with pytest.raises(ValueError, match="returned 0 result lists for 1 queries"):
        SearchEnv(Short()).retrieve(["q"], SearchStats())


# --------------------------------------------------------------------------- reward

TASK = Task("q1", "Where was the founder of Veltra born?", "Kessel",
            metadata={"answer_aliases": ["Kessel village"]})


@pytest.mark.parametrize("text,em,f1,cover,fmt", [
    ("<answer>Kessel</answer>", 1, 1, 1, 1),
    ("<search>x</search>\n<answer> the kessel. </answer>\n", 1, 1, 1, 1),  # normalized
    ("<answer>Kessel Village</answer>", 1, 1, 1, 1),  # an alias
    # F1 vs "kessel" = 2*(1/3*1)/(1/3+1) = 0.5; vs "kessel village" = 2*(2/3*1)/(2/3+1) = 0.8
    ("<answer>in Kessel village</answer>", 0, 0.8, 1, 1),  # covers the gold: cover 1
    ("<answer>Brannock</answer>", 0, 0, 0, 1),
    ("<answer>Kesselton</answer>", 0, 0, 0, 1),  # whole tokens only
    ("Kessel", 0, 0, 0, 0),  # no answer block: no answer
    ("<answer>Kessel", 0, 0, 0, 0),  # unclosed answer
    ("<search>a<answer>Kessel</answer>", 1, 1, 1, 0),  # answered, but a malformed tag
    ("<answer>Kessel</answer> and more", 1, 1, 1, 0),  # text after the answer
    ("<answer>Kessel</answer><answer>Ostmark</answer>", 1, 1, 1, 0),  # the first answer counts
    ("<answer></answer>", 0, 0, 0, 0),
])
def test_em_f1_cover_format(text, em, f1, cover, fmt):
    assert answer_scores(TASK, text) == pytest.approx({"em": em, "f1": f1, "cover": cover, "format": fmt})


def test_search_reward_weights_components_separately():
    r = SearchReward(em_weight=1.0, f1_weight=0.5, format_weight=0.2)(
        TASK, "<answer>in Kessel village</answer>")
    assert r.components == pytest.approx({"em": 0.0, "f1": 0.8, "cover": 1.0, "format": 1.0})
    assert r.weighted_components() == pytest.approx({"em": 0.0, "f1": 0.4, "cover": 0.0, "format": 0.2})
    assert r.total == pytest.approx(0.6) and r.extracted == "in Kessel village"
    assert extract_answer("none") == (None, False)
    with pytest.raises(ValueError, match="no gold answer"):
        SearchReward()(Task("x", "q"), "<answer>a</answer>")


# --------------------------------------------------------------------------- stop strings


def test_sampling_params_stop_is_a_tuple_and_validated():
    assert SamplingParams(stop=["</search>"]).stop == ("</search>",)
    assert hash(SamplingParams(stop=["a"])) == hash(SamplingParams(stop=("a",)))
    for bad in ("</search>", [""], [3]):
        with pytest.raises(ValueError, match="stop must be a list of non-empty strings"):
            SamplingParams(stop=bad)


def test_finish_tokens_cuts_after_the_token_completing_a_stop_string():
    tok = build_byte_tokenizer()
    dec = lambda ids: tok.decode(ids, skip_special_tokens=True)
    ids = tok("ab</search>cd", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert finish_tokens(ids, tok.eos_token_id, 64, stop=["</search>"], decode=dec) == (
        ids[:11], "stop")
    assert finish_tokens(ids, tok.eos_token_id, 64, stop=["zz"], decode=dec) == (ids, "eos")
    assert finish_tokens(ids, tok.eos_token_id, 5, stop=["</search>"], decode=dec) == (
        ids[:5], "length")  # the budget ends before the stop string is complete


def test_scripted_backend_honours_stop():
    tok = build_byte_tokenizer()
    backend = ScriptedBackend(PolicySet.scripted(tok, ("shared",)), lambda r: "<search>q</search>x")
    req = GenerationRequest("a", "shared", (), (1,), SamplingParams(stop=("</search>",)))
    (g,) = backend.generate("shared", [req])
    assert tok.decode(g.token_ids) == "<search>q</search>" and g.stop_reason == "stop"


def test_hf_backend_stops_at_a_stop_string():
    model, tok = build_tiny_model(seed=0)
    prompt = tuple(tok("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                       add_special_tokens=False)["input_ids"])
    backend = HFGenerateBackend(PolicySet.shared(model, tok))

    def gen(sampling):
        return backend.generate("shared", [GenerationRequest("a", "shared", (), prompt, sampling)])[0]

    torch.manual_seed(0)
    free = gen(SamplingParams(temperature=1.0, max_new_tokens=24))
    text = tok.decode(free.token_ids, skip_special_tokens=True)
    stop = text[6:8]  # the random model babbles; stop at a piece from the middle of its text
    # a plain reference: the shortest prefix whose text contains the stop string
    n = next(i for i in range(1, len(free.token_ids) + 1)
             if stop in tok.decode(free.token_ids[:i], skip_special_tokens=True))
    torch.manual_seed(0)  # the same draws: the stopped row is a prefix of the free one
    cut = gen(SamplingParams(temperature=1.0, max_new_tokens=24, stop=(stop,)))
    assert n < len(free.token_ids)
    assert cut.stop_reason == "stop" and cut.token_ids == free.token_ids[:n]
    assert cut.logprobs == pytest.approx(free.logprobs[:n])
