"""GSM8K and MATH-500 as Tasks, from local files the user already has.

Nothing is downloaded unless the caller passes a hub id explicitly (`hub_id=`), which goes
through `datasets.load_dataset`. Local files: JSON Lines (.jsonl / .json, one object a line)
or Parquet (.parquet). Errors name the file, the line (JSONL) or record (Parquet) and the field.

GSM8K record:   {"question": str, "answer": "<worked solution> #### <final>"}
MATH-500 record: {"problem": str, "answer": str, "solution"?, "subject"?, "level"?,
                  "unique_id"?}
The question and answer fields must be strings: a number or a list there is a broken record,
refused (file, line or record, field) rather than turned into text.

A file has no train/held-out split of its own: a run holds out its first task.heldout_size
records and trains on the ones after them. `check_heldout_overlap` refuses a question that is
in both parts (`srpo train` runs it before any work): a held-out score on a question the policy
was trained on is not a held-out score. The error names how many and one example; the fix is to
remove the repeats from the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from srpo.tasks.dataset_files import Record, read_records
from srpo.tasks.dataset_files import load_tasks as _load
from srpo.tasks.dataset_files import record_source as _source
from srpo.tasks.dataset_files import require_field as _require
from srpo.tasks.math.reasoning_gym_tasks import normalize_question
from srpo.types import Task

__all__ = ["Record", "check_heldout_overlap", "gsm8k_final_answer", "load_gsm8k", "load_math500",
           "read_records"]


def _text(record: Record, where: str, field: str) -> str:
    """A required string field: str() of a number or a list would hide a broken record."""
    value = _require(record, where, field)
    if not isinstance(value, str):
        raise ValueError(f"{where}: field {field!r} must be a string, got "
                         f"{type(value).__name__} ({value!r:.60})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:  # a "\ud800" escape: the tokenizer's TypeError later
        raise ValueError(f"{where}: field {field!r} holds a lone surrogate (U+{ord(value[e.start]):04X}) "
                         f"at character {e.start}, which is not text a tokenizer can encode") from None
    return value


def check_heldout_overlap(heldout: Sequence[Task], train: Sequence[Task], *, source: str) -> None:
    """Raise ValueError when a held-out question is also a train question.

    Questions compare as normalize_question does (case and whitespace ignored); the message
    names `source`, how many held-out questions recur and the records of one of them.
    """
    held = {normalize_question(t.prompt): t for t in heldout}
    both = [(held[key], t) for t in train if (key := normalize_question(t.prompt)) in held]
    if both:
        h, t = both[0]
        raise ValueError(
            f"{source}: {len(both)} train task(s) repeat a held-out question (the held-out part "
            f"is the first task.heldout_size records), e.g. {t.metadata.get('record', t.task_id)} "
            f"repeats {h.metadata.get('record', h.task_id)}: {h.prompt!r:.80}; remove the "
            f"repeats so that the held-out score measures unseen questions"
        )


def gsm8k_final_answer(solution: str) -> str | None:
    """The final answer after the last "####" of a GSM8K solution, commas removed, else None."""
    if "####" not in solution:
        return None
    final = solution.rsplit("####", 1)[1].strip().replace(",", "")
    return final or None


def load_gsm8k(
    path: str | Path | None = None,
    *,
    hub_id: str | None = None,
    hub_config: str | None = "main",
    split: str = "test",
    limit: int | None = None,
    id_prefix: str = "gsm8k",
) -> list[Task]:
    """GSM8K as Tasks: prompt = question, answer = the number after "####" (commas removed).

    path: a local .jsonl/.parquet file; or hub_id (e.g. "openai/gsm8k", with hub_config and
    split) to opt in to a download. task_id = f"{id_prefix}/{split}/{index}" (file order).
    The worked solution is kept in metadata["solution"].
    """
    records = _source(path, hub_id, hub_config, split)

    def to_task(index: int, where: str, record: Record) -> Task:
        question = _text(record, where, "question")
        solution = _text(record, where, "answer")
        final = gsm8k_final_answer(solution)
        if final is None:
            raise ValueError(f"{where}: field 'answer' has no final answer after '####'")
        return Task(
            task_id=f"{id_prefix}/{split}/{index}",
            prompt=question,
            answer=final,
            source="gsm8k",
            metadata={"solution": solution, "record": where},
        )

    return _load(records, to_task, limit)


def load_math500(
    path: str | Path | None = None,
    *,
    hub_id: str | None = None,
    hub_config: str | None = None,
    split: str = "test",
    limit: int | None = None,
    id_prefix: str = "math500",
) -> list[Task]:
    """MATH-500 as Tasks: prompt = problem, answer = answer (LaTeX, as given).

    path: a local .jsonl/.parquet file; or hub_id (e.g. "HuggingFaceH4/MATH-500") to opt in to
    a download. task_id = f"{id_prefix}/{unique_id}" when the record has one, else
    f"{id_prefix}/{split}/{index}". solution, subject and level go to metadata when present.
    """
    records = _source(path, hub_id, hub_config, split)

    def to_task(index: int, where: str, record: Record) -> Task:
        problem = _text(record, where, "problem")
        answer = _text(record, where, "answer").strip()
        unique_id = record.get("unique_id")
        task_id = f"{id_prefix}/{unique_id}" if unique_id else f"{id_prefix}/{split}/{index}"
        metadata = {k: record[k] for k in ("solution", "subject", "level", "unique_id")
                    if record.get(k) is not None}
        metadata["record"] = where
        return Task(task_id=task_id, prompt=problem, answer=answer, source="math500",
                    metadata=metadata)

    return _load(records, to_task, limit)
