"""Outcome reward of search tasks: exact match, token F1 and format, kept as separate components.

    SearchReward(em_weight=1.0, f1_weight=0.0, format_weight=0.1)(task, text) -> SearchRewardResult
    total = em_weight * em + f1_weight * f1 + cover_weight * cover + format_weight * format

`text` is what the answering agent generated (observations excluded; the search workflows pass
the searcher's generations joined by newlines). Its answer is the content of the first
well-formed `<answer>...</answer>` block (srpo.tasks.search.env.parse_turn), the block that
ended the search loop; no such block: no answer, em = f1 = 0.
  em:     1 if the normalized answer equals a normalized gold answer (task.answer or one of
          task.metadata["answer_aliases"]), else 0
  f1:     the best token F1 against the gold answers (normalized tokens, multiset overlap)
  cover:  1 if a normalized gold answer occurs in the normalized answer as whole tokens
          ("cover exact match": "It was Kessel." covers "Kessel"), else 0
  format: 1 if the text follows the protocol: no malformed tag or empty query anywhere, exactly
          one answer block, non-empty, and nothing but whitespace after it
Normalization, EM and F1 are srpo.tasks.search.answers' (SQuAD: lower case, punctuation and
the articles a/an/the removed, whitespace collapsed; yes/no golds need an exact match for F1).
Retrieval recall@k of the supporting documents is a diagnostic in Episode.metadata
(srpo.tasks.search.env.SearchStats), never part of this reward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from srpo.tasks.search.answers import contains_answer, exact_match, token_f1
from srpo.tasks.search.env import parse_turn, sanitize
from srpo.types import Task


def gold_answers(task: Task) -> list[str]:
    """task.answer followed by task.metadata["answer_aliases"]; ValueError when none."""
    if task.answer is None:
        raise ValueError("the task has no gold answer to compare with")
    aliases = task.metadata.get("answer_aliases") or []
    if isinstance(aliases, str) or not all(isinstance(a, str) for a in aliases):
        raise ValueError(f"answer_aliases must be a list of strings, got {aliases!r}")
    return [task.answer, *aliases]


def extract_answer(text: str, *, plain_text_fallback: bool = False) -> tuple[str | None, bool]:
    """(answer or None, format ok) of an answering agent's text (module doc). With
    plain_text_fallback, a reply without an <answer> block answers with its first non-empty
    line (format not ok)."""
    if not isinstance(text, str):
        raise TypeError(f"the answer text must be a str, got {type(text).__name__}")
    parsed = parse_turn(text)
    answers = parsed.answers
    if not answers:
        if plain_text_fallback and not parsed.blocks:
            line = next((ln for ln in (sanitize(x) for x in text.splitlines()) if ln), None)
            return line, False
        return None, False
    ok = (
        not parsed.errors
        and len(answers) == 1
        and bool(answers[0].content)
        and not text[answers[0].end :].strip()
    )
    return answers[0].content, ok


def answer_scores(task: Task, text: str, *, plain_text_fallback: bool = False) -> dict[str, float]:
    """Unweighted {"em", "f1", "cover", "format"} of a text (the workflows log them as metadata)."""
    answer, formatted = extract_answer(text, plain_text_fallback=plain_text_fallback)
    golds = gold_answers(task)
    if answer is None:
        return {"em": 0.0, "f1": 0.0, "cover": 0.0, "format": 0.0}
    return {"em": exact_match(answer, golds[0], golds[1:]),
            "f1": token_f1(answer, golds[0], golds[1:]),
            "cover": float(contains_answer(answer, golds[0], golds[1:])), "format": float(formatted)}


@dataclass(frozen=True)
class SearchRewardResult:
    """total: the weighted sum. components: unweighted {"em", "f1", "cover", "format"}. extracted: the
    answer read (None: no answer block)."""

    total: float
    components: dict[str, float]
    extracted: str | None
    weights: dict[str, float] = field(default_factory=dict)

    def weighted_components(self) -> dict[str, float]:
        """Each component times its weight (Episode.reward_components); they sum to total."""
        return {k: self.weights[k] * v for k, v in self.components.items()}


class SearchReward:
    """Exact match, token F1 and format of a search answer against task.answer (+ aliases)."""

    success_component = "em"  # what evaluation counts as solved (srpo.record.evaluate)

    def __init__(self, em_weight: float = 1.0, f1_weight: float = 0.0,
                 format_weight: float = 0.1, plain_text_fallback: bool = False,
                 cover_weight: float = 0.0):
        self.plain_text_fallback = plain_text_fallback  # untagged replies answer (format 0)
        self.weights = {"em": float(em_weight), "f1": float(f1_weight), "cover": float(cover_weight),
                        "format": float(format_weight)}
        for k, w in self.weights.items():
            if not math.isfinite(w):
                raise ValueError(f"{k}_weight must be finite, got {w!r}")

    def __call__(self, task: Task, text: str) -> SearchRewardResult:
        comps = answer_scores(task, text, plain_text_fallback=self.plain_text_fallback)
        answer, _ = extract_answer(text, plain_text_fallback=self.plain_text_fallback)
        total = math.fsum(self.weights[k] * v for k, v in comps.items())
        return SearchRewardResult(total=total, components=comps, extracted=answer,
                                  weights=dict(self.weights))
