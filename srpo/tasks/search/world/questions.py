"""Multi-hop questions about a world: `world_questions` (a sample) and `all_world_questions`.

A question follows a relation path of 1-3 relations from a start entity, e.g. born_in ->
located_in ("In which country was X born?"); the question names only the start entity, each
later (bridge) entity is named in the previous document, the answer is stated in the last one.
supporting_doc_ids = the documents of the chain's subjects, in order; hops = their number.
Wording is composed from per-relation noun phrases ("the founder of ...") and question
templates, with a few hand-written shortcuts. A candidate is dropped when its answer already
occurs in an earlier chain document (then fewer hops would do), when the chain revisits an
entity, or when the question text contains the answer. Questions of one split ask only about
that part of the world.

Task ids are f"world/{seed}/{split}/{i}", i the question's index in the split's canonical
enumeration: stable across sampling seeds, unique within one world (worlds of one seed but
other sizes reuse ids).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from srpo.tasks.search.answers import answer_tokens, contains_answer, tokens_contain
from srpo.tasks.search.world.graph import (
    _CYCLIC,
    KINDS,
    RELATIONS,
    SOURCE,
    SPLITS,
    Entity,
    World,
    world_doc_id,
)
from srpo.types import Task

# Noun phrase naming a relation's object given its subject phrase s ("the founder of s").
_NOUN_PHRASES: Mapping[str, tuple[str, ...]] = {
    "born_in": ("the birthplace of {s}", "the city where {s} was born"),
    "works_for": ("the employer of {s}", "the organisation that employs {s}"),
    "located_in": ("the country where {s} is located", "the country in which {s} lies"),
    "capital": ("the capital of {s}", "the capital city of {s}"),
    "headquartered_in": ("the city where {s} is headquartered", "the home city of {s}"),
    "founded_by": ("the founder of {s}", "the person who founded {s}"),
    "created_by/novel": ("the author of {s}", "the writer of {s}"),
    "created_by/film": ("the director of {s}", "the filmmaker who directed {s}"),
    "created_by/album": ("the musician who recorded {s}", "the artist behind {s}"),
    "published_by/novel": ("the publisher of {s}", "the publishing house that published {s}"),
    "published_by/film": ("the studio that produced {s}", "the production studio of {s}"),
    "published_by/album": ("the label that released {s}", "the record label of {s}"),
}


# Question asking for a relation's object given its subject phrase s.
_QUESTIONS: Mapping[str, tuple[str, ...]] = {
    "born_in": ("Where was {s} born?", "In which city was {s} born?",
                "What is the birthplace of {s}?"),
    "birth_year": ("In what year was {s} born?", "When was {s} born?"),
    "works_for": ("Which organisation does {s} work for?", "Who is the employer of {s}?"),
    "located_in": ("In which country is {s} located?", "In which country does {s} lie?"),
    "founded_year": ("In what year was {s} founded?", "When was {s} founded?"),
    "capital": ("What is the capital of {s}?", "Which city is the capital of {s}?"),
    "established_year": ("In what year was {s} established as an independent state?",
                         "When did {s} become an independent state?"),
    "headquartered_in": ("Where is {s} headquartered?", "In which city is {s} based?"),
    "founded_by": ("Who founded {s}?", "Who is the founder of {s}?"),
    "created_by/novel": ("Who wrote {s}?", "Who is the author of {s}?"),
    "created_by/film": ("Who directed {s}?", "Who is the director of {s}?"),
    "created_by/album": ("Who recorded {s}?", "Which musician recorded {s}?"),
    "published_by/novel": ("Which company published {s}?", "Who published {s}?"),
    "published_by/film": ("Which studio produced {s}?", "Who produced {s}?"),
    "published_by/album": ("Which label released {s}?",
                           "On which record label was {s} released?"),
    "release_year/novel": ("In what year was {s} published?", "When was {s} published?"),
    "release_year/film": ("In what year was {s} released?", "When was {s} released?"),
    "release_year/album": ("In what year was {s} released?", "When was {s} released?"),
}


# Questions for the last two relations together, given the subject of the first of them.
_SHORTCUTS: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("born_in", "located_in"): ("In which country was {s} born?",),
    ("headquartered_in", "located_in"): ("In which country is {s} headquartered?",),
    ("born_in", "founded_year"): ("In what year was the city where {s} was born founded?",),
}


def world_questions(
    world: World,
    hops: Iterable[int] = (1, 2, 3),
    n: int | None = None,
    seed: int = 0,
    split: str = "train",
) -> list[Task]:
    """n questions about one part of the world, spread evenly over `hops`, shuffled.

    n=None returns every valid question of those hop counts. Within a hop count, picks cycle
    over the relation paths (so each path is represented, not only the person-heavy ones) and
    take a random unused start entity of each. Deterministic in (world, hops, n, seed, split).
    Raises ValueError when a hop count has fewer questions than its share of n.
    """
    pools = all_world_questions(world, split, hops)
    rng = random.Random(f"srpo-world/{world.seed}/sample/{split}/{seed}")
    if n is None:
        chosen = [t for h in sorted(pools) for t in pools[h]]
        rng.shuffle(chosen)
        return chosen
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    hop_list = sorted(pools)
    share = {h: n // len(hop_list) + (1 if i < n % len(hop_list) else 0)
             for i, h in enumerate(hop_list)}
    chosen = []
    for h in hop_list:
        if share[h] > len(pools[h]):
            raise ValueError(
                f"world {world.seed}, split {split!r}: only {len(pools[h])} {h}-hop questions "
                f"exist, {share[h]} were asked for; generate a larger world"
            )
        by_path: dict[str, list[Task]] = {}
        for t in pools[h]:
            by_path.setdefault(t.metadata["path"], []).append(t)
        queues = [list(v) for _, v in sorted(by_path.items())]
        for q in queues:
            rng.shuffle(q)
        rng.shuffle(queues)
        picked: list[Task] = []
        while len(picked) < share[h]:
            for q in queues:
                if q and len(picked) < share[h]:
                    picked.append(q.pop())
        chosen += picked
    rng.shuffle(chosen)
    return chosen


def all_world_questions(world: World, split: str = "train",
                        hops: Iterable[int] = (1, 2, 3)) -> dict[int, list[Task]]:
    """Every valid question of each hop count in one part, in canonical order (hop -> tasks).

    The index i of f"world/{seed}/{split}/{i}" counts through hops 1, 2, 3 in this order,
    whatever subset `hops` names, so ids do not depend on the request.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    hops = sorted(set(hops))
    for h in hops:
        if h not in (1, 2, 3):
            raise ValueError(f"hops must be among 1, 2, 3; got {h!r}")
    out: dict[int, list[Task]] = {}
    offset = 0
    for h in (1, 2, 3):
        if h > max(hops):
            break
        cands = _candidates(world, split, h)
        if h in hops:
            # Drop repeated question texts (none expected: names are unique).
            tasks, seen = [], set()
            for i, c in enumerate(cands):
                task = _to_task(world, split, offset + i, c)
                if task.prompt in seen or contains_answer(task.prompt, task.answer):
                    continue
                seen.add(task.prompt)
                tasks.append(task)
            out[h] = tasks
        offset += len(cands)
    return out


def relation_paths(max_hops: int = 3) -> list[tuple[str, tuple[str, ...]]]:
    """(start kind, relations) of every question path of 1..max_hops relations, in a fixed
    order: by length, then schema order."""
    paths: list[tuple[str, tuple[str, ...]]] = []
    frontier = [(kind, (), kind) for kind in KINDS]
    for _ in range(max_hops):
        longer = []
        for start, rels, kind in frontier:
            for (subj, rel), obj in RELATIONS.items():
                if subj != kind or (rels and (rels[-1], rel) in _CYCLIC):
                    continue
                paths.append((start, rels + (rel,)))
                if obj != "year":
                    longer.append((start, rels + (rel,), obj))
        frontier = longer
    return sorted(paths, key=lambda p: len(p[1]))


def _key(relation: str, start: Entity, position: int) -> str:
    """Template key: work relations (only ever the first hop) depend on the kind of work."""
    return f"{relation}/{start.category}" if position == 0 and start.kind == "work" else relation


def _question_text(rng: random.Random, start: Entity, path: Sequence[str]) -> str:
    keys = [_key(r, start, i) for i, r in enumerate(path)]
    options: list[str] = []
    # Subject phrase of relation i: the start name wrapped in the noun phrases before i.
    phrases = [start.name]
    for k in keys[:-1]:
        phrases.append(rng.choice(_NOUN_PHRASES[k]).format(s=phrases[-1]))
    options += [q.format(s=phrases[-1]) for q in _QUESTIONS[keys[-1]]]
    if len(path) >= 2 and (path[-2], path[-1]) in _SHORTCUTS:
        options += [q.format(s=phrases[-2]) for q in _SHORTCUTS[(path[-2], path[-1])]]
    return rng.choice(options)


@dataclass(frozen=True)
class _Candidate:
    start: str
    path: tuple[str, ...]
    chain: tuple[str, ...]  # subject entity ids, one per hop
    answer: str
    aliases: tuple[str, ...]


def _answer_of(world: World, entity_id: str, relation: str) -> tuple[str, tuple[str, ...]]:
    value = world.fact(entity_id, relation)
    if isinstance(value, int):
        return str(value), ()
    target = world.entity(value)
    aliases = target.aliases
    if target.kind == "city":  # "Velmora, Vardia" names the same city
        aliases = (f"{target.name}, {world.entity(target.relations['located_in']).name}",)
    return target.name, aliases


def _candidates(world: World, split: str, hops: int) -> list[_Candidate]:
    """Every valid question of `hops` hops in one part, in canonical order (see module doc)."""
    tokens = {e.entity_id: answer_tokens(d.text) for e, d in zip(world.entities, world.documents)}
    out = []
    for start_kind, path in relation_paths(hops):
        if len(path) != hops:
            continue
        for start in world.of_kind(start_kind, split):
            chain = [start.entity_id]
            for rel in path[:-1]:
                chain.append(world.fact(chain[-1], rel))
            answer, aliases = _answer_of(world, chain[-1], path[-1])
            if len(set(chain)) < len(chain):
                continue
            # Fewer hops would do if an earlier document already states the answer.
            needle = answer_tokens(answer)
            if any(tokens_contain(tokens[c], needle) for c in chain[:-1]):
                continue
            if not tokens_contain(tokens[chain[-1]], needle):  # a template bug, never expected
                raise AssertionError(f"answer {answer!r} missing from the document of {chain[-1]}")
            out.append(_Candidate(start.entity_id, tuple(path), tuple(chain), answer, aliases))
    return out


def _to_task(world: World, split: str, index: int, c: _Candidate) -> Task:
    start = world.entity(c.start)
    rng = random.Random(f"srpo-world/{world.seed}/question/{split}/{c.start}/{'.'.join(c.path)}")
    question = _question_text(rng, start, c.path)
    supporting = [world_doc_id(world.seed, e) for e in c.chain]
    return Task(
        task_id=f"world/{world.seed}/{split}/{index}",
        prompt=question,
        answer=c.answer,
        source=SOURCE,
        metadata={
            "answer_aliases": list(c.aliases),
            "supporting_doc_ids": supporting,
            "hops": len(c.path),
            "relations": list(c.path),
            "path": ".".join((start.kind, *c.path)),  # e.g. "work.created_by.born_in"
            "entity_ids": list(c.chain),
            "bridge_entities": [world.entity(e).name for e in c.chain[1:]],
            "split": split,
            "world_seed": world.seed,
            "synthetic": True,
        },
    )
