"""Answer normalization, exact match and token F1 for open-domain QA (SQuAD / HotpotQA style).

    normalize_answer("The  Eiffel Tower!")      -> "eiffel tower"
    qa_scores("Eiffel Tower in Paris", "the Eiffel tower", aliases=["Tour Eiffel"])
        -> AnswerScores(exact_match=0.0, f1=0.667, cover=1.0)

normalize_answer follows the SQuAD v1.1 evaluation script: lowercase, remove punctuation, remove
the articles a/an/the, collapse whitespace. Departures, stated up front:
  * punctuation is ASCII `string.punctuation` (as in SQuAD) plus every non-ASCII Unicode
    punctuation character (category P*), so curly quotes and dashes ("’", "–") a model emits
    are removed too; as in SQuAD it is deleted, not replaced by a space ("Jean-Paul" ->
    "jeanpaul").
  * accents are kept ("Brontë" != "Bronte"), as in SQuAD; loaders may add folded aliases.
  * token F1 follows HotpotQA for yes/no golds: when the normalized gold is "yes", "no" or
    "noanswer", F1 is 1 only for an exact match (otherwise "yes no" would earn F1 0.67).

Every score is the max over the gold answer and its aliases, and the components are returned
separately (exact match, F1, cover) so each can be logged or weighted on its own.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_YES_NO = frozenset({"yes", "no", "noanswer"})


_ASCII_PUNCTUATION = {ord(ch): None for ch in string.punctuation}


def _strip_punctuation(text: str) -> str:
    text = text.translate(_ASCII_PUNCTUATION)
    if text.isascii():
        return text
    return "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lowercase, drop punctuation and articles, collapse whitespace."""
    if not isinstance(text, str):
        raise TypeError(f"expected an answer string, got {type(text).__name__} ({text!r:.60})")
    text = _strip_punctuation(text.lower())
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answer_tokens(text: str) -> list[str]:
    """Tokens of the normalized text (whitespace split)."""
    return normalize_answer(text).split()


def _golds(gold: str, aliases: Iterable[str]) -> list[str]:
    if isinstance(aliases, str):
        raise TypeError("aliases must be a sequence of strings, not a single string")
    return [gold, *aliases]


def exact_match(prediction: str, gold: str, aliases: Iterable[str] = ()) -> float:
    """1.0 if the normalized prediction equals the normalized gold or any alias, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golds(gold, aliases)))


def _f1(pred_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    """Token F1 between two normalized token lists (SQuAD; HotpotQA's yes/no rule)."""
    if " ".join(gold_tokens) in _YES_NO or " ".join(pred_tokens) in _YES_NO:
        return float(list(pred_tokens) == list(gold_tokens))
    if not pred_tokens or not gold_tokens:
        # SQuAD: an empty answer matches only an empty answer.
        return float(len(pred_tokens) == len(gold_tokens))
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, gold: str, aliases: Iterable[str] = ()) -> float:
    """Max token F1 of the prediction over the gold answer and its aliases."""
    pred = answer_tokens(prediction)
    return max(_f1(pred, answer_tokens(g)) for g in _golds(gold, aliases))


def tokens_contain(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    """Whether `needle` occurs in `haystack` as a contiguous run (False for an empty needle)."""
    n = len(needle)
    if n == 0:
        return False
    first = needle[0]
    return any(
        haystack[i] == first and list(haystack[i:i + n]) == list(needle)
        for i in range(len(haystack) - n + 1)
    )


def contains_answer(text: str, answer: str, aliases: Iterable[str] = ()) -> bool:
    """Whether the normalized answer (or an alias) occurs in the normalized text as whole tokens.

    Token-level, so "Kora" is not found in "Korath"; an answer that normalizes to nothing
    (e.g. "the") is never found. Used for "cover" scores and to check that a question's answer
    is stated in its supporting documents.
    """
    tokens = answer_tokens(text)
    return any(tokens_contain(tokens, answer_tokens(g)) for g in _golds(answer, aliases))


@dataclass(frozen=True)
class AnswerScores:
    """Scores of one prediction, each the max over the gold answer and its aliases.

    exact_match: 1.0 if the normalized prediction equals a normalized gold.
    f1: token F1 (SQuAD; yes/no golds need an exact match).
    cover: 1.0 if a normalized gold occurs inside the normalized prediction as whole tokens
        (lenient: "it is Paris" covers "Paris"; rewards that use it invite longer answers).
    """

    exact_match: float
    f1: float
    cover: float

    def as_dict(self) -> dict[str, float]:
        return {"exact_match": self.exact_match, "f1": self.f1, "cover": self.cover}


def qa_scores(prediction: str, gold: str, aliases: Iterable[str] = ()) -> AnswerScores:
    """Exact match, token F1 and cover of `prediction` against `gold` and its `aliases`."""
    aliases = list(_golds(gold, aliases)[1:])
    return AnswerScores(
        exact_match=exact_match(prediction, gold, aliases),
        f1=token_f1(prediction, gold, aliases),
        cover=float(contains_answer(prediction, gold, aliases)),
    )
