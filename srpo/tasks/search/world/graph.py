"""The world's schema and records: the kinds of entity, the typed relations between them
(RELATIONS), `Entity` and `World` (the entity graph with one Document per entity).

Entities of five kinds: people (born_in a city, birth_year, works_for an organisation), cities
(located_in a country, founded_year), countries (capital, established_year), organisations
(headquartered_in a city, founded_by a person, founded_year) and works (novels, films, albums:
created_by a person, published_by an organisation, release_year). Every relation has exactly one
value, so every question has one answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from srpo.tasks.search.documents import Document

KINDS = ("country", "city", "person", "organisation", "work")
SPLITS = ("train", "heldout")
SOURCE = "search/world"


# (subject kind, relation) -> object kind; "year" objects are literal values (attributes).
RELATIONS: Mapping[tuple[str, str], str] = {
    ("person", "born_in"): "city",
    ("person", "birth_year"): "year",
    ("person", "works_for"): "organisation",
    ("city", "located_in"): "country",
    ("city", "founded_year"): "year",
    ("country", "capital"): "city",
    ("country", "established_year"): "year",
    ("organisation", "headquartered_in"): "city",
    ("organisation", "founded_by"): "person",
    ("organisation", "founded_year"): "year",
    ("work", "created_by"): "person",
    ("work", "published_by"): "organisation",
    ("work", "release_year"): "year",
}


# Relation pairs never chained: the second always leads back to the first's subject.
_CYCLIC = {("capital", "located_in")}


@dataclass(frozen=True)
class Entity:
    """One entity of the world.

    entity_id: f"{kind}:{index}", index counted per kind.
    category: occupation (person), kind of organisation, kind of work ("novel", "film",
        "album"); "" for places.
    relations: relation -> target entity_id (one target each).
    attributes: literal facts: the asked years (birth_year, founded_year, ...) and unasked
        distractors (population, genre, ...).
    aliases: other names the entity goes by (a country's official name).
    """

    entity_id: str
    kind: str
    name: str
    split: str
    category: str = ""
    relations: Mapping[str, str] = field(default_factory=dict)
    attributes: Mapping[str, int | str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class World:
    """A generated world: its entity graph and one Document per entity (same order)."""

    seed: int
    entities: tuple[Entity, ...]
    documents: list[Document]
    _by_id: dict[str, Entity] = field(init=False, repr=False, compare=False)
    _doc_by_entity: dict[str, Document] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {e.entity_id: e for e in self.entities})
        object.__setattr__(self, "_doc_by_entity",
                           {e.entity_id: d for e, d in zip(self.entities, self.documents)})

    def entity(self, entity_id: str) -> Entity:
        try:
            return self._by_id[entity_id]
        except KeyError:
            raise KeyError(f"world {self.seed} has no entity {entity_id!r}") from None

    def document(self, entity_id: str) -> Document:
        """The document about an entity."""
        self.entity(entity_id)
        return self._doc_by_entity[entity_id]

    def of_kind(self, kind: str, split: str | None = None) -> list[Entity]:
        return [e for e in self.entities
                if e.kind == kind and (split is None or e.split == split)]

    def fact(self, entity_id: str, relation: str) -> str | int:
        """The value of a relation: a target entity_id, or the literal (a year)."""
        e = self.entity(entity_id)
        obj = RELATIONS.get((e.kind, relation))
        if obj is None:
            raise KeyError(f"{e.kind} has no relation {relation!r}")
        return e.attributes[relation] if obj == "year" else e.relations[relation]

    def triples(self) -> list[tuple[str, str, str | int]]:
        """The typed facts (subject_id, relation, object_id or year), the entity graph."""
        return [(e.entity_id, rel, self.fact(e.entity_id, rel))
                for e in self.entities for (kind, rel) in RELATIONS if kind == e.kind]


def world_doc_id(seed: int, entity_id: str) -> str:
    return f"world:{seed}:{entity_id}"
