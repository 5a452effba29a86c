"""NQ, HotpotQA, 2WikiMultihopQA and MuSiQue as search Tasks, and their context paragraphs as
corpora, from local files the user already has.

Nothing is downloaded unless the caller passes a hub id explicitly (`hub_id=`, through
`datasets.load_dataset`). Local files: JSON Lines (.jsonl / .ndjson, or .json with one object
a line), a JSON array (.json whose first character is "["; the official HotpotQA and 2Wiki
releases) or Parquet. Errors name the file, the line or record, and the field.

Every Task carries metadata answer_aliases, supporting_doc_ids and hops (see records.py):

NQ (open)  {"question", "answer" | "answers" | "golden_answers": [str, ...]}
           answer = the first, aliases = the rest. NQ-open has no evidence documents:
           supporting_doc_ids = [], hops = 1.
HotpotQA   {"_id", "question", "answer", "supporting_facts": [[title, sent_idx], ...],
            "context": [[title, [sentence, ...]], ...], "type"?, "level"?}
           supporting_doc_ids = the supporting-fact TITLES (what the data has), in order of
           first mention; hops = their number. The corpus (hotpotqa_corpus) uses the same
           titles as document ids, so they match.
2Wiki      like HotpotQA, plus "evidences": [[subject, relation, object], ...] (kept in
           metadata when present) and "type".
MuSiQue    {"id", "question", "answer", "answer_aliases": [...], "answerable"?,
            "paragraphs": [{"idx", "title", "paragraph_text", "is_supporting"}],
            "question_decomposition"?: [...]}
           MuSiQue titles are not unique (one article gives several paragraphs), so a
           paragraph's id is musique_doc_id(title, text) = f"{title} [{sha1[:8]}]" (content
           addressed, the same in tasks and corpus). hops = len(question_decomposition), else
           the number of supporting paragraphs. Unanswerable records (MuSiQue-Full) are skipped
           unless include_unanswerable=True.
The Hugging Face versions store supporting_facts / context as dicts of lists ({"title": [...],
"sent_id": [...]}, {"title": [...], "sentences": [...]}); both forms are read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from srpo.tasks.dataset_files import Record, read_records
from srpo.tasks.dataset_files import load_tasks as _load
from srpo.tasks.dataset_files import record_source as _source
from srpo.tasks.dataset_files import require_field as _require
from srpo.tasks.search.documents import Document
from srpo.types import Task

# ----------------------------------------------------------------------------- reading


def read_qa_records(path: str | Path) -> Iterator[tuple[str, Record]]:
    """(location, record) pairs of a local JSONL, JSON-array or Parquet file."""
    return read_records(path)


# ----------------------------------------------------------------------------- fields


def _text(record: Record, where: str, field: str) -> str:
    value = _require(record, where, field)
    if not isinstance(value, str):
        raise ValueError(f"{where}: field {field!r} must be a string, got "
                         f"{type(value).__name__} ({value!r:.60})")
    return value.strip()


def _strings(value: Any, where: str, field: str) -> list[str]:
    """A list of strings (a single string becomes a list of one); blanks and repeats dropped."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: field {field!r} must be a list of strings, got {value!r:.80}")
    out: list[str] = []
    for v in value:
        v = v.strip()
        if v and v not in out:
            out.append(v)
    return out


def _pairs(value: Any, where: str, field: str, keys: tuple[str, str]) -> list[tuple[Any, Any]]:
    """[[a, b], ...] or the Hugging Face dict of lists {keys[0]: [...], keys[1]: [...]}."""
    if isinstance(value, dict):
        if not all(k in value for k in keys):
            raise ValueError(f"{where}: field {field!r} is a dict without keys {keys}")
        firsts, seconds = value[keys[0]], value[keys[1]]
        if len(firsts) != len(seconds):
            raise ValueError(f"{where}: field {field!r} has {len(firsts)} {keys[0]} but "
                             f"{len(seconds)} {keys[1]}")
        return list(zip(firsts, seconds))
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(p, (list, tuple)) and len(p) == 2 for p in value
    ):
        raise ValueError(f"{where}: field {field!r} must be a list of [{keys[0]}, {keys[1]}] "
                         f"pairs, got {value!r:.80}")
    return [tuple(p) for p in value]


def _task_id(prefix: str, split: str, index: int, record: Record, id_fields: Iterable[str]) -> str:
    for f in id_fields:
        if record.get(f) not in (None, ""):
            return f"{prefix}/{record[f]}"
    return f"{prefix}/{split}/{index}"


def _context_paragraphs(record: Record, where: str) -> list[tuple[str, str]]:
    """(title, text) of the HotpotQA / 2Wiki "context" field, sentences joined."""
    pairs = _pairs(_require(record, where, "context"), where, "context", ("title", "sentences"))
    out = []
    for title, sentences in pairs:
        if not isinstance(title, str) or not title.strip():
            raise ValueError(f"{where}: field 'context' has a paragraph without a title")
        if not isinstance(sentences, (list, tuple)) or not all(
            isinstance(s, str) for s in sentences
        ):
            raise ValueError(f"{where}: field 'context': paragraph {title!r} must have a list "
                             f"of sentence strings, got {sentences!r:.80}")
        # HotpotQA keeps each sentence's leading space (" It is ..."); strip, join with one.
        out.append((title, " ".join(s.strip() for s in sentences if s.strip())))
    return out


# ----------------------------------------------------------------------------- NQ


def load_nq(
    path: str | Path | None = None,
    *,
    hub_id: str | None = None,
    hub_config: str | None = None,
    split: str = "validation",
    limit: int | None = None,
    id_prefix: str = "nq",
) -> list[Task]:
    """Natural Questions (open) as Tasks: answer = first gold answer, aliases = the others.

    Reads "answer", "answers" or "golden_answers" (FlashRAG / Search-R1 files), each a list of
    strings or one string. task_id = f"{id_prefix}/{id}" when the record has "id" / "_id" /
    "example_id", else f"{id_prefix}/{split}/{index}".
    """
    def to_task(index: int, where: str, record: Record) -> Task:
        question = _text(record, where, "question")
        field = next((f for f in ("answer", "answers", "golden_answers") if f in record), None)
        if field is None:
            raise ValueError(f"{where}: record is missing required field 'answer' "
                             f"(or 'answers' / 'golden_answers')")
        answers = _strings(record[field], where, field)
        if not answers:
            raise ValueError(f"{where}: field {field!r} has no non-empty answer")
        return Task(
            task_id=_task_id(id_prefix, split, index, record, ("id", "_id", "example_id")),
            prompt=question,
            answer=answers[0],
            source="nq",
            metadata={"answer_aliases": answers[1:], "supporting_doc_ids": [], "hops": 1,
                      "record": where},
        )

    return _load(_source(path, hub_id, hub_config, split), to_task, limit)


# ----------------------------------------------------------------------------- HotpotQA, 2Wiki


def _supporting_titles(record: Record, where: str) -> tuple[list[str], list[list]]:
    facts = _pairs(_require(record, where, "supporting_facts"), where, "supporting_facts",
                   ("title", "sent_id"))
    titles: list[str] = []
    for title, _ in facts:
        if not isinstance(title, str) or not title.strip():
            raise ValueError(f"{where}: field 'supporting_facts' has an entry without a title")
        if title not in titles:
            titles.append(title)
    if not titles:
        raise ValueError(f"{where}: field 'supporting_facts' is empty")
    return titles, [[t, int(s)] for t, s in facts]


def _wiki_multihop_task(source: str, id_prefix: str, split: str, index: int, where: str,
                        record: Record, extra: Iterable[str],
                        more: dict[str, Any] | None = None) -> Task:
    question = _text(record, where, "question")
    answer = _text(record, where, "answer")
    titles, facts = _supporting_titles(record, where)
    aliases = _strings(record.get("answer_aliases") or [], where, "answer_aliases")
    metadata: dict[str, Any] = {
        "answer_aliases": [a for a in aliases if a != answer],
        "supporting_doc_ids": titles,
        "hops": len(titles),
        "supporting_facts": facts,
        "record": where,
    }
    for f in extra:
        if record.get(f) is not None:
            metadata[f] = record[f]
    metadata.update(more or {})
    return Task(task_id=_task_id(id_prefix, split, index, record, ("_id", "id")),
                prompt=question, answer=answer, source=source, metadata=metadata)


def load_hotpotqa(
    path: str | Path | None = None,
    *,
    hub_id: str | None = None,
    hub_config: str | None = "distractor",
    split: str = "validation",
    limit: int | None = None,
    id_prefix: str = "hotpotqa",
) -> list[Task]:
    """HotpotQA as Tasks; supporting_doc_ids are supporting-fact titles (see module doc).

    Required fields: question, answer, supporting_facts. "type" and "level" go to metadata.
    """
    def to_task(index: int, where: str, record: Record) -> Task:
        return _wiki_multihop_task("hotpotqa", id_prefix, split, index, where, record,
                                   ("type", "level"))

    return _load(_source(path, hub_id, hub_config, split), to_task, limit)


def load_2wiki(
    path: str | Path | None = None,
    *,
    hub_id: str | None = None,
    hub_config: str | None = None,
    split: str = "dev",
    limit: int | None = None,
    id_prefix: str = "2wiki",
) -> list[Task]:
    """2WikiMultihopQA as Tasks; supporting_doc_ids are supporting-fact titles.

    Required fields: question, answer, supporting_facts. "evidences" ([subject, relation,
    object] triples) and "type" go to metadata when present.
    """
    def to_task(index: int, where: str, record: Record) -> Task:
        more = {}
        if record.get("evidences") is not None:
            evidences = record["evidences"]
            if not isinstance(evidences, (list, tuple)) or not all(
                isinstance(t, (list, tuple)) and len(t) == 3 for t in evidences
            ):
                raise ValueError(f"{where}: field 'evidences' must be a list of [subject, "
                                 f"relation, object] triples, got {evidences!r:.80}")
            more["evidences"] = [list(t) for t in evidences]
        return _wiki_multihop_task("2wiki", id_prefix, split, index, where, record, ("type",),
                                   more)

    return _load(_source(path, hub_id, hub_config, split), to_task, limit)


def _title_corpus(records: Iterable[tuple[str, Record]], limit: int | None,
                  on_conflict: str) -> list[Document]:
    if on_conflict not in ("error", "first"):
        raise ValueError(f"on_conflict must be 'error' or 'first', got {on_conflict!r}")
    docs: dict[str, Document] = {}
    first_at: dict[str, str] = {}
    for n, (where, record) in enumerate(records):
        if limit is not None and n >= limit:
            break
        for title, text in _context_paragraphs(record, where):
            if title in docs:
                if docs[title].text != text and on_conflict == "error":
                    raise ValueError(
                        f"{where}: paragraph {title!r} differs from the one at {first_at[title]}; "
                        f"document ids are titles, so pass on_conflict='first' to keep the first"
                    )
                continue
            docs[title] = Document(doc_id=title, title=title, text=text)
            first_at[title] = where
    return list(docs.values())


def hotpotqa_corpus(
    path: str | Path | None = None,
    *,
    hub_id: str | None = None,
    hub_config: str | None = "distractor",
    split: str = "validation",
    limit: int | None = None,
    on_conflict: str = "error",
) -> list[Document]:
    """The context paragraphs of HotpotQA records as Documents (id = title = the paragraph's
    title; text = its sentences joined), one per title, in order of first appearance.

    limit: read only the first `limit` records. A title seen again with different text raises
    (on_conflict="error") or keeps the first (on_conflict="first").
    """
    return _title_corpus(_source(path, hub_id, hub_config, split), limit, on_conflict)


def twowiki_corpus(
    path: str | Path | None = None,
    *,
    hub_id: str | None = None,
    hub_config: str | None = None,
    split: str = "dev",
    limit: int | None = None,
    on_conflict: str = "error",
) -> list[Document]:
    """The context paragraphs of 2WikiMultihopQA records as Documents (see hotpotqa_corpus)."""
    return _title_corpus(_source(path, hub_id, hub_config, split), limit, on_conflict)


# ----------------------------------------------------------------------------- MuSiQue


def musique_doc_id(title: str, text: str) -> str:
    """Content-addressed id of a MuSiQue paragraph: f"{title} [{sha1(title, text)[:8]}]"."""
    digest = hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:8]
    return f"{title} [{digest}]"


def _musique_paragraphs(record: Record, where: str) -> list[tuple[str, str, bool]]:
    paragraphs = _require(record, where, "paragraphs")
    if not isinstance(paragraphs, (list, tuple)):
        raise ValueError(f"{where}: field 'paragraphs' must be a list, got "
                         f"{type(paragraphs).__name__}")
    out = []
    for i, p in enumerate(paragraphs):
        at = f"{where}: paragraphs[{i}]"
        if not isinstance(p, dict):
            raise ValueError(f"{at} must be an object")
        title = p.get("title")
        text = p.get("paragraph_text")
        if not isinstance(title, str):
            raise ValueError(f"{at} is missing required field 'title'")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{at} is missing required field 'paragraph_text'")
        out.append((title, text.strip(), bool(p.get("is_supporting", False))))
    return out


def load_musique(
    path: str | Path | None = None,
    *,
    hub_id: str | None = None,
    hub_config: str | None = None,
    split: str = "validation",
    limit: int | None = None,
    id_prefix: str = "musique",
    include_unanswerable: bool = False,
) -> list[Task]:
    """MuSiQue as Tasks; supporting_doc_ids are musique_doc_id of the supporting paragraphs.

    Required fields: question, answer, paragraphs (each with title and paragraph_text).
    answer_aliases and question_decomposition are used when present; "answerable": false
    records are skipped unless include_unanswerable (then metadata["answerable"] is False).
    """
    def to_task(index: int, where: str, record: Record) -> Task | None:
        answerable = record.get("answerable", True) is not False
        if not answerable and not include_unanswerable:
            return None
        question = _text(record, where, "question")
        answer = _text(record, where, "answer")
        paragraphs = _musique_paragraphs(record, where)
        supporting = [musique_doc_id(t, x) for t, x, s in paragraphs if s]
        supporting = list(dict.fromkeys(supporting))
        if answerable and not supporting:
            raise ValueError(f"{where}: no paragraph has is_supporting true")
        aliases = _strings(record.get("answer_aliases") or [], where, "answer_aliases")
        decomposition = record.get("question_decomposition")
        hops = len(decomposition) if isinstance(decomposition, (list, tuple)) and decomposition \
            else len(supporting)
        metadata: dict[str, Any] = {
            "answer_aliases": [a for a in aliases if a != answer],
            "supporting_doc_ids": supporting,
            "hops": hops,
            "answerable": answerable,
            "record": where,
        }
        if decomposition:
            metadata["question_decomposition"] = decomposition
        return Task(task_id=_task_id(id_prefix, split, index, record, ("id", "_id")),
                    prompt=question, answer=answer, source="musique", metadata=metadata)

    return _load(_source(path, hub_id, hub_config, split), to_task, limit)


def musique_corpus(
    path: str | Path | None = None,
    *,
    hub_id: str | None = None,
    hub_config: str | None = None,
    split: str = "validation",
    limit: int | None = None,
) -> list[Document]:
    """The paragraphs of MuSiQue records as Documents (id = musique_doc_id(title, text)),
    each distinct paragraph once, in order of first appearance."""
    docs: dict[str, Document] = {}
    for n, (where, record) in enumerate(_source(path, hub_id, hub_config, split)):
        if limit is not None and n >= limit:
            break
        for title, text, _ in _musique_paragraphs(record, where):
            doc_id = musique_doc_id(title, text)
            docs.setdefault(doc_id, Document(doc_id=doc_id, title=title, text=text))
    return list(docs.values())
