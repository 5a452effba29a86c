"""srpo.tasks.search.loaders: NQ / HotpotQA / 2Wiki / MuSiQue on small fixture files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from srpo.tasks.search.answers import contains_answer
from srpo.tasks.search.loaders import (
    hotpotqa_corpus,
    load_2wiki,
    load_hotpotqa,
    load_musique,
    load_nq,
    musique_corpus,
    musique_doc_id,
    read_qa_records,
    twowiki_corpus,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "search" / "qa"


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def fixture_records(name: str) -> list[dict]:
    return [r for _, r in read_qa_records(FIXTURES / name)]


# ----------------------------------------------------------------------------- NQ


def test_nq():
    tasks = load_nq(FIXTURES / "nq.jsonl")
    assert [t.task_id for t in tasks] == ["nq/validation/0", "nq/validation/1", "nq/nq-custom-7"]
    assert tasks[0].prompt == "who wrote the novel frankenstein"
    assert tasks[0].answer == "Mary Shelley"
    assert tasks[0].metadata["answer_aliases"] == ["Mary Wollstonecraft Shelley"]
    assert tasks[1].metadata == {"answer_aliases": [], "supporting_doc_ids": [], "hops": 1,
                                 "record": f"{FIXTURES / 'nq.jsonl'}:line 2"}
    # FlashRAG / Search-R1 files name the list "golden_answers".
    assert (tasks[2].answer, tasks[2].metadata["answer_aliases"]) == ("two", ["2"])
    assert all(t.source == "nq" for t in tasks)
    assert len(load_nq(FIXTURES / "nq.jsonl", limit=2)) == 2


# ----------------------------------------------------------------------------- HotpotQA


def test_hotpotqa_tasks_and_corpus():
    path = FIXTURES / "hotpotqa.json"  # the official release: one JSON array
    tasks = load_hotpotqa(path)
    assert [t.task_id for t in tasks] == ["hotpotqa/5a8b57f25542995d1e6f1371",
                                          "hotpotqa/5a8c7595554299585d9e36b6",
                                          "hotpotqa/5ab3b0bf5542992ade7c6e39"]
    first = tasks[0]
    assert first.answer == "Australia"
    # Supporting-fact titles, each once, in order of first mention.
    assert first.metadata["supporting_doc_ids"] == ["Lake Burley Griffin", "Molonglo River"]
    assert first.metadata["hops"] == 2
    assert first.metadata["supporting_facts"] == [["Lake Burley Griffin", 0],
                                                  ["Molonglo River", 0], ["Molonglo River", 1]]
    assert (first.metadata["type"], first.metadata["level"]) == ("bridge", "medium")
    assert first.metadata["record"] == f"{path}:record 0"
    assert tasks[1].answer == "yes" and tasks[1].metadata["answer_aliases"] == []

    corpus = hotpotqa_corpus(path)
    # "Charles Babbage" is in two records with the same text: one document.
    assert [d.doc_id for d in corpus] == ["Lake Burley Griffin", "Molonglo River", "Canberra",
                                          "Ada Lovelace", "Charles Babbage", "Analytical Engine"]
    assert all(d.doc_id == d.title for d in corpus)
    docs = {d.doc_id: d.text for d in corpus}
    assert docs["Molonglo River"] == ("The Molonglo River is a river in south-eastern Australia. "
                                      "It flows through Canberra.")
    for t in tasks:  # supporting ids address corpus documents; the answer is in one of them
        assert set(t.metadata["supporting_doc_ids"]) <= set(docs)
        if t.answer != "yes":
            assert any(contains_answer(docs[i], t.answer) for i in t.metadata["supporting_doc_ids"])
    assert len(hotpotqa_corpus(path, limit=1)) == 3


def test_hotpotqa_hugging_face_layout_reads_the_same(tmp_path):
    # datasets' hotpot_qa stores the pairs as dicts of lists.
    records = fixture_records("hotpotqa.json")
    hf = []
    for r in records:
        r = dict(r)
        r["supporting_facts"] = {"title": [t for t, _ in r["supporting_facts"]],
                                 "sent_id": [s for _, s in r["supporting_facts"]]}
        r["context"] = {"title": [t for t, _ in r["context"]],
                        "sentences": [s for _, s in r["context"]]}
        hf.append(r)
    path = write_jsonl(tmp_path / "hotpot_hf.jsonl", hf)
    strip = lambda ts: [(t.task_id, t.answer, t.metadata["supporting_doc_ids"])
                        for t in ts]
    assert strip(load_hotpotqa(path)) == strip(load_hotpotqa(FIXTURES / "hotpotqa.json"))
    assert hotpotqa_corpus(path) == hotpotqa_corpus(FIXTURES / "hotpotqa.json")


def test_parquet_files_are_read(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    records = fixture_records("nq.jsonl")
    table = pa.Table.from_pylist([{"question": r["question"],
                                   "answer": r.get("answer") or r["golden_answers"]}
                                  for r in records])
    pq.write_table(table, tmp_path / "nq.parquet")
    tasks = load_nq(tmp_path / "nq.parquet")
    assert [t.answer for t in tasks] == ["Mary Shelley", "Canberra", "two"]
    assert tasks[0].metadata["record"].endswith("nq.parquet:record 0")


# ----------------------------------------------------------------------------- 2Wiki


def test_2wiki_tasks_and_corpus():
    tasks = load_2wiki(FIXTURES / "2wiki.json")
    assert [t.task_id for t in tasks] == ["2wiki/a1b2c3d4", "2wiki/e5f6a7b8", "2wiki/c9d0e1f2"]
    first = tasks[0]
    assert first.answer == "Otto Lindqvist" and first.source == "2wiki"
    assert first.metadata["supporting_doc_ids"] == ["Night Harbour", "Erik Lindqvist"]
    assert first.metadata["evidences"] == [["Night Harbour", "director", "Erik Lindqvist"],
                                           ["Erik Lindqvist", "father", "Otto Lindqvist"]]
    assert first.metadata["type"] == "compositional"
    assert [t.metadata["hops"] for t in tasks] == [2, 2, 4]

    corpus = twowiki_corpus(FIXTURES / "2wiki.json", on_conflict="first")
    assert [d.doc_id for d in corpus] == ["Night Harbour", "Erik Lindqvist",
                                          "Summer Rain (film)", "Karen Holm"]
    # The third record has a longer "Summer Rain (film)" and "Erik Lindqvist" paragraph than
    # the earlier ones: with the default on_conflict="error" that is refused, naming both.
    with pytest.raises(ValueError, match=r"record 2: paragraph 'Summer Rain \(film\)' differs "
                                         r"from the one at .*record 1"):
        twowiki_corpus(FIXTURES / "2wiki.json")


# ----------------------------------------------------------------------------- MuSiQue


def test_musique_tasks_and_corpus():
    path = FIXTURES / "musique.jsonl"
    tasks = load_musique(path)
    assert [t.task_id for t in tasks] == ["musique/2hop__1001_2002",
                                          "musique/3hop1__3003_4004_5005"]
    first = tasks[0]
    assert first.answer == "Canberra" and first.metadata["answer_aliases"] == ["Canberra, ACT"]
    assert first.metadata["supporting_doc_ids"] == [
        musique_doc_id("Molonglo River",
                       "The Molonglo River is a river in south-eastern Australia."),
        musique_doc_id("Australia", "Australia is a country whose capital is Canberra."),
    ]
    assert [t.metadata["hops"] for t in tasks] == [2, 3]  # len(question_decomposition)
    assert len(first.metadata["question_decomposition"]) == 2

    # The unanswerable record is kept only on request.
    all_tasks = load_musique(path, include_unanswerable=True)
    assert len(all_tasks) == 3 and all_tasks[2].metadata["answerable"] is False
    assert all_tasks[2].metadata["supporting_doc_ids"] == []

    corpus = musique_corpus(path)
    # 3 + 4 + 2 paragraphs, one repeated ("Australia is the sixth-largest ..."): 8 documents;
    # the two different "Australia" paragraphs get different ids.
    assert len(corpus) == 8
    assert len([d for d in corpus if d.title == "Australia"]) == 2
    ids = {d.doc_id for d in corpus}
    docs = {d.doc_id: d.text for d in corpus}
    for t in tasks:
        assert set(t.metadata["supporting_doc_ids"]) <= ids
        assert contains_answer(docs[t.metadata["supporting_doc_ids"][-1]], t.answer)
    assert musique_doc_id("Australia", "x") == musique_doc_id("Australia", "x") != \
        musique_doc_id("Australia", "y")
    assert musique_doc_id("Australia", "x").startswith("Australia [")


# ----------------------------------------------------------------------------- errors


def test_missing_file_is_named():
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_nq("nope.jsonl")
    with pytest.raises(ValueError, match="exactly one of path= .* or hub_id="):
        load_hotpotqa()
    with pytest.raises(ValueError, match="exactly one of"):
        load_musique(FIXTURES / "musique.jsonl", hub_id="bdsaglam/musique")


def test_missing_fields_name_the_line_and_field(tmp_path):
    ok = {"question": "q?", "answer": ["a"]}
    path = write_jsonl(tmp_path / "nq.jsonl", [ok, {"question": "q2?"}])
    with pytest.raises(ValueError, match=r"nq.jsonl:line 2: record is missing required field "
                                         r"'answer'"):
        load_nq(path)
    path = write_jsonl(tmp_path / "nq_empty.jsonl", [{"question": "q?", "answer": []}])
    with pytest.raises(ValueError, match="line 1: field 'answer' has no non-empty answer"):
        load_nq(path)

    records = fixture_records("hotpotqa.json")
    broken = [records[0], {k: v for k, v in records[1].items() if k != "supporting_facts"}]
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(broken), encoding="utf-8")
    with pytest.raises(ValueError, match=r"hotpot.json:record 1: record is missing required "
                                         r"field 'supporting_facts'"):
        load_hotpotqa(path)
    bad = dict(records[0], supporting_facts="Lake Burley Griffin")
    path = write_jsonl(tmp_path / "hotpot_bad.jsonl", [bad])
    with pytest.raises(ValueError, match=r"line 1: field 'supporting_facts' must be a list of "
                                         r"\[title, sent_id\] pairs"):
        load_hotpotqa(path)
    path = write_jsonl(tmp_path / "hotpot_noctx.jsonl",
                       [{k: v for k, v in records[0].items() if k != "context"}])
    assert len(load_hotpotqa(path)) == 1  # tasks need no context ...
    with pytest.raises(ValueError, match="line 1: record is missing required field 'context'"):
        hotpotqa_corpus(path)  # ... the corpus does

    wiki = fixture_records("2wiki.json")
    path = write_jsonl(tmp_path / "2wiki.jsonl", [dict(wiki[0], evidences=[["a", "b"]])])
    with pytest.raises(ValueError, match="line 1: field 'evidences' must be a list of"):
        load_2wiki(path)

    musique = fixture_records("musique.jsonl")
    record = json.loads(json.dumps(musique[0]))
    del record["paragraphs"][1]["paragraph_text"]
    path = write_jsonl(tmp_path / "musique.jsonl", [musique[1], record])
    with pytest.raises(ValueError, match=r"line 2: paragraphs\[1\] is missing required field "
                                         r"'paragraph_text'"):
        load_musique(path)
    no_support = json.loads(json.dumps(musique[0]))
    for p in no_support["paragraphs"]:
        p["is_supporting"] = False
    path = write_jsonl(tmp_path / "musique2.jsonl", [no_support])
    with pytest.raises(ValueError, match="line 1: no paragraph has is_supporting true"):
        load_musique(path)


def test_bad_files_and_duplicates(tmp_path):
    path = tmp_path / "array.json"
    path.write_text(json.dumps([{"question": "q", "answer": ["a"]}, ["not", "an", "object"]]))
    with pytest.raises(ValueError, match="array.json:record 1: expected a JSON object"):
        load_nq(path)
    path = tmp_path / "broken.json"
    path.write_text('[{"question": "q", ')
    with pytest.raises(ValueError, match="broken.json: invalid JSON"):
        load_nq(path)
    path = write_jsonl(tmp_path / "dup.jsonl", [{"id": 1, "question": "q", "answer": "a"}] * 2)
    with pytest.raises(ValueError, match="line 2: duplicate task id 'nq/1' \\(first at .*line 1"):
        load_nq(path)
    with pytest.raises(ValueError, match="on_conflict"):
        hotpotqa_corpus(FIXTURES / "hotpotqa.json", on_conflict="last")
