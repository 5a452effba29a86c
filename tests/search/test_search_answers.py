"""srpo.tasks.search.answers: SQuAD normalization, exact match, token F1, cover (hand values)."""

from __future__ import annotations

import pytest

from srpo.tasks.search.answers import (
    AnswerScores,
    contains_answer,
    exact_match,
    normalize_answer,
    qa_scores,
    token_f1,
)


@pytest.mark.parametrize("raw, normalized", [
    ("The  Eiffel Tower!", "eiffel tower"),
    # "&" is punctuation; "a", "an", "the" are dropped as whole words only.
    ("A cat, an apple & the dog.", "cat apple dog"),
    ("Theatre and Anthem", "theatre and anthem"),
    # Punctuation is deleted, not replaced by a space (as in SQuAD).
    ("Moby-Dick", "mobydick"),
    # Non-ASCII punctuation (curly quotes, en dash) goes too: same as the ASCII form.
    ("\u201cMoby\u2013Dick\u201d", "mobydick"),
    ("1,234", "1234"),
    ("  \n ", ""),
    ("Brontë", "brontë"),  # accents kept, as in SQuAD
])
def test_normalize_answer(raw, normalized):
    assert normalize_answer(raw) == normalized


def test_exact_match_uses_normalization_and_aliases():
    assert exact_match("the eiffel TOWER.", "Eiffel Tower") == 1.0
    assert exact_match("Eiffel Tower in Paris", "Eiffel Tower") == 0.0
    assert exact_match("Tour Eiffel", "Eiffel Tower", aliases=["Tour Eiffel"]) == 1.0
    # Only English articles go: "la" stays, so "Tour Eiffel" != "La Tour Eiffel".
    assert exact_match("Tour Eiffel", "Eiffel Tower", aliases=["La Tour Eiffel"]) == 0.0
    assert exact_match("Paris", "City of Light", aliases=["Lutetia", "paris"]) == 1.0


def test_token_f1_hand_values():
    # pred "the Eiffel tower" -> [eiffel, tower]; gold "Eiffel Tower in Paris" ->
    # [eiffel, tower, in, paris]. common = 2; precision = 2/2 = 1; recall = 2/4 = 0.5;
    # F1 = 2 * 1 * 0.5 / (1 + 0.5) = 2/3.
    assert token_f1("the Eiffel tower", "Eiffel Tower in Paris") == pytest.approx(2 / 3)
    # Repeated tokens count once per occurrence in both: pred [paris, paris], gold [paris]:
    # common = min(2, 1) = 1; precision = 1/2, recall = 1/1; F1 = 2 * 0.5 * 1 / 1.5 = 2/3.
    assert token_f1("Paris Paris", "Paris") == pytest.approx(2 / 3)
    # pred [john, smith, jr] vs gold [john, smith]: P = 2/3, R = 1; F1 = (4/3) / (5/3) = 0.8.
    assert token_f1("John Smith Jr.", "John Smith") == pytest.approx(0.8)
    assert token_f1("London", "Paris") == 0.0
    assert token_f1("", "Paris") == 0.0
    # Both normalize to nothing: SQuAD scores equal (empty) answers 1.
    assert token_f1("the", "a") == 1.0


def test_token_f1_is_the_max_over_aliases():
    # gold [city, of, light] shares nothing with [paris]; alias "Paris, France" -> [paris,
    # france]: P = 1, R = 1/2, F1 = 2/3; alias "Lutetia" 0. Max = 2/3.
    assert token_f1("Paris", "City of Light",
                    aliases=["Paris, France", "Lutetia"]) == pytest.approx(2 / 3)


def test_yes_no_golds_need_an_exact_match():
    # SQuAD would give "yes it is" vs "yes" P = 1/3, R = 1, F1 = 0.5; HotpotQA's rule: 0.
    assert token_f1("yes it is", "yes") == 0.0
    assert token_f1("yes no", "no") == 0.0
    assert token_f1("Yes.", "yes") == 1.0
    # A yes/no prediction against a non yes/no gold also scores only on an exact match.
    assert token_f1("no", "no way home") == 0.0


def test_contains_answer_matches_whole_tokens():
    assert contains_answer("I think it is the Eiffel Tower, in Paris.", "eiffel tower")
    assert not contains_answer("Korath is a city.", "Kora")
    assert contains_answer("It lies in Vardia.", "Republic of Vardia", aliases=["Vardia"])
    assert not contains_answer("anything at all", "the")  # normalizes to nothing


def test_qa_scores_returns_separate_components():
    scores = qa_scores("Eiffel Tower in Paris", "the Eiffel tower", aliases=["Tour Eiffel"])
    assert isinstance(scores, AnswerScores)
    # EM 0 (extra tokens); F1 2/3 (first test, roles of pred and gold swapped: P = 1/2,
    # R = 1, F1 = 2/3); the gold's tokens occur in the prediction: cover 1.
    assert scores.exact_match == 0.0
    assert scores.f1 == pytest.approx(2 / 3)
    assert scores.cover == 1.0
    assert scores.as_dict() == {"exact_match": 0.0, "f1": scores.f1, "cover": 1.0}
    assert qa_scores("Tour Eiffel", "Eiffel Tower", ["Tour Eiffel"]) == AnswerScores(1.0, 1.0, 1.0)


def test_bad_input_is_refused():
    with pytest.raises(TypeError, match="answer string"):
        normalize_answer(None)
    with pytest.raises(TypeError, match="aliases"):
        exact_match("Paris", "Paris", aliases="Paris")
