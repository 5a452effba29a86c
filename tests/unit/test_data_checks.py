"""Bad data refused before work: a held-out question repeated in the training part of a math
file, a non-string question or answer, a search corpus with empty documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from srpo.config import load_config
from srpo.tasks.math import load_gsm8k, load_math500
from srpo.tasks.search.corpus import load_corpus, read_corpus_jsonl
from srpo.train.preflight import check_task_pack as check_math_file_split
from srpo.train.preflight import preflight

SMOKE = Path(__file__).resolve().parents[2] / "srpo" / "presets" / "smoke.yaml"


def gsm8k(question: str, final: int) -> dict:
    return {"question": question, "answer": f"It is {final}.\n#### {final}"}


def math500(problem: str, final: int) -> dict:
    return {"problem": problem, "answer": str(final)}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def file_config(source: str, path: Path, **sizes: int):
    sizes = {"heldout_size": 2, "train_size": 3, **sizes}
    return load_config(SMOKE, [f"task.source={source}", f"task.path={path}", "train.tasks_per_step=1",
                               "eval.size=null", *(f"task.{k}={v}" for k, v in sizes.items())])


# --------------------------------------------------------------------------- held-out / train overlap


@pytest.mark.parametrize("source, record", [("gsm8k", gsm8k), ("math500", math500)])
def test_a_heldout_question_repeated_in_the_train_part_is_refused(tmp_path, source, record):
    records = [record("What is 1 + 1?", 2), record("What is 2 + 2?", 4), record("What is 3 + 3?", 6),
               record("what is 2+2 ?", 4),  # held-out line 2 again (case and spaces differ)
               record("What is 5 + 5?", 10)]
    cfg = file_config(source, write_jsonl(tmp_path / f"{source}.jsonl", records))
    with pytest.raises(ValueError, match=r"1 train task\(s\) repeat a held-out question .* e\.g\. "
                                         r".*jsonl:line 4 repeats .*jsonl:line 2: 'What is 2 \+ 2\?'"):
        preflight(cfg)


def test_repeats_inside_one_part_are_not_an_overlap(tmp_path):
    records = [gsm8k("A?", 1), gsm8k("A?", 1), gsm8k("B?", 2), gsm8k("C?", 3), gsm8k("C?", 3)]
    check_math_file_split(file_config("gsm8k", write_jsonl(tmp_path / "g.jsonl", records)))


def test_only_the_configured_parts_are_compared(tmp_path):
    # the repeat lies beyond heldout_size + train_size: no run trains on it
    records = [gsm8k("A?", 1), gsm8k("B?", 2), gsm8k("C?", 3), gsm8k("D?", 4), gsm8k("A?", 1)]
    check_math_file_split(file_config("gsm8k", write_jsonl(tmp_path / "g.jsonl", records),
                                      heldout_size=1, train_size=3))


# --------------------------------------------------------------------------- non-string fields


@pytest.mark.parametrize("loader, record, field", [
    (load_gsm8k, {"question": 42, "answer": "#### 42"}, "question"),
    (load_gsm8k, {"question": "How many?", "answer": ["#### 4"]}, "answer"),
    (load_math500, {"problem": {"text": "p"}, "answer": "1"}, "problem"),
    (load_math500, {"problem": "What is $2^{10}$?", "answer": 1024}, "answer"),
])
def test_a_non_string_question_or_answer_is_refused(tmp_path, loader, record, field):
    good = {"question": "Fine?", "answer": "#### 1"} if loader is load_gsm8k else {"problem": "Fine?", "answer": "1"}
    path = write_jsonl(tmp_path / "data.jsonl", [good, record])
    with pytest.raises(ValueError, match=rf"data\.jsonl:line 2: field '{field}' must be a string, got "
                                         rf"{type(record[field]).__name__}"):
        loader(path)


def test_a_non_string_field_of_a_parquet_record_is_refused(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow not installed: parquet loading untested")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "m.parquet"
    pq.write_table(pa.table({"problem": ["What is 2 + 2?", "What is 3 + 3?"], "answer": [4, 6]}), path)
    with pytest.raises(ValueError, match=r"m\.parquet:record 0: field 'answer' must be a string, got int"):
        load_math500(path)


# --------------------------------------------------------------------------- search corpus


def test_a_corpus_with_empty_documents_is_refused(tmp_path):
    docs = [{"id": "a", "title": "A", "text": "alpha"}, {"id": "b", "title": "B", "text": ""},
            {"id": "c", "text": "gamma"}, {"id": "d", "title": "D", "text": " \n\t "}]
    path = write_jsonl(tmp_path / "corpus.jsonl", docs)
    message = r"corpus\.jsonl:line 2: document 'b' has an empty text; 2 of 4 documents have no text"
    with pytest.raises(ValueError, match=message):
        read_corpus_jsonl(path)
    with pytest.raises(ValueError, match=message):
        load_corpus(str(path))
