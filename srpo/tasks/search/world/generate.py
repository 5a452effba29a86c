"""Generating a world: `generate_world(seed, ...)`, deterministic in all its arguments.

Each kind of entity is split into a "train" and a "heldout" part (about heldout_fraction of
each kind), and relations never cross parts: the world is two disjoint graphs sharing one
corpus. So held-out questions ask about facts (and documents) no training question touches; a
policy cannot memorize held-out answers during training.

One generator (random.Random(f"srpo-world/{seed}")) draws the entities of the train part, then of
the held-out part, kind by kind; each entity's document has its own generator
(f"srpo-world/{seed}/doc/{entity_id}"), so the same seed and sizes give the same world, byte for
byte.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from srpo.tasks.search.documents import Document
from srpo.tasks.search.world.documents import _write_document
from srpo.tasks.search.world.graph import KINDS, SPLITS, Entity, World, world_doc_id
from srpo.tasks.search.world.names import _Names, _title

OCCUPATIONS: Mapping[str, tuple[str, ...]] = {  # occupation -> preferred employers
    "novelist": ("publishing house", "university", "newspaper"),
    "film director": ("film studio",),
    "musician": ("record label",),
    "engineer": ("engineering firm", "shipping company"),
    "economist": ("bank", "university"),
    "chemist": ("research institute", "university"),
    "journalist": ("newspaper",),
    "architect": ("engineering firm",),
    "historian": ("university", "research institute"),
}
CREATOR_OF = {"novel": "novelist", "film": "film director", "album": "musician"}
PUBLISHER_OF = {"novel": "publishing house", "film": "film studio", "album": "record label"}
_ORG_SUFFIXES = {
    "publishing house": ("Press", "Books", "Publishing"),
    "film studio": ("Pictures", "Studios", "Films"),
    "record label": ("Records", "Music", "Sound"),
    "university": ("University", "College"),
    "bank": ("Bank", "Savings Bank"),
    "newspaper": ("Herald", "Courier", "Gazette"),
    "research institute": ("Institute", "Research Institute"),
    "engineering firm": ("Engineering", "Works"),
    "shipping company": ("Shipping", "Lines"),
}
_GENRES = {
    "novel": ("mystery", "historical", "science fiction", "comic", "gothic", "coming-of-age"),
    "film": ("drama", "thriller", "comedy", "war", "documentary", "western"),
    "album": ("folk", "jazz", "electronic", "rock", "choral", "ambient"),
}
_KNOWN_FOR = {
    "novelist": ("long family sagas", "spare, unsentimental prose", "a series of sea stories"),
    "film director": ("long single-take scenes", "working with non-professional actors",
                      "slow, patient thrillers"),
    "musician": ("improvised live performances", "reviving old folk songs",
                 "unusual tunings"),
    "engineer": ("work on suspension bridges", "designs for tidal power stations",
                 "improvements to rail signalling"),
    "economist": ("studies of regional trade", "research on small-town banking",
                  "writing on monetary history"),
    "chemist": ("research on dyes", "work on soil chemistry", "studies of glass corrosion"),
    "journalist": ("reporting from border towns", "long interviews", "a weekly column"),
    "architect": ("public libraries", "timber housing", "restoring old market halls"),
    "historian": ("histories of river trade", "studies of medieval guilds",
                  "writing on coastal towns"),
}
_CITY_FEATURES = ("harbour", "glassworks", "textile markets", "stone bridges",
                  "old university quarter", "spring festival", "salt mines", "botanical garden",
                  "canals", "clock tower")
_FORMAL = ("Republic of {}", "Kingdom of {}", "Federation of {}", "Grand Duchy of {}",
           "Commonwealth of {}")
_LAST_YEAR = 2024


def generate_world(
    seed: int = 0,
    *,
    n_people: int = 400,
    n_cities: int = 48,
    n_countries: int = 12,
    n_organisations: int = 80,
    n_works: int = 200,
    heldout_fraction: float = 0.25,
) -> World:
    """A world of fictional entities and their documents, deterministic in all arguments.

    Each kind is split into a train and a held-out part (heldout_fraction of it, rounded) and
    relations stay inside a part, so each part needs at least one country, as many cities as
    countries, 3 people and 3 organisations (a creator and a publisher for each kind of work).
    """
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
    sizes = {
        "country": _split_sizes(n_countries, heldout_fraction, 1, "n_countries"),
        "city": _split_sizes(n_cities, heldout_fraction, 1, "n_cities"),
        "person": _split_sizes(n_people, heldout_fraction, 3, "n_people"),
        "organisation": _split_sizes(n_organisations, heldout_fraction, 3, "n_organisations"),
        "work": _split_sizes(n_works, heldout_fraction, 0, "n_works"),
    }
    for split in SPLITS:
        if sizes["city"][split] < sizes["country"][split]:
            raise ValueError(
                f"the {split} part has {sizes['city'][split]} cities for "
                f"{sizes['country'][split]} countries; every country needs a capital city"
            )
    rng = random.Random(f"srpo-world/{seed}")
    names = _Names(rng)
    counters = dict.fromkeys(KINDS, 0)
    drafts: dict[str, list[_Draft]] = {k: [] for k in KINDS}

    def new(kind: str, name: str, split: str, **kw) -> _Draft:
        d = _Draft(f"{kind}:{counters[kind]}", kind, name, split, **kw)
        counters[kind] += 1
        drafts[kind].append(d)
        return d

    for split in SPLITS:
        _generate_part(rng, names, new, split, {k: v[split] for k, v in sizes.items()})

    entities = tuple(
        Entity(d.entity_id, d.kind, d.name, d.split, d.category, dict(d.relations),
               dict(d.attributes), d.aliases)
        for kind in KINDS for d in drafts[kind]
    )
    by_id = {e.entity_id: e for e in entities}
    documents = [
        Document(world_doc_id(seed, e.entity_id), e.name,
                 _write_document(random.Random(f"srpo-world/{seed}/doc/{e.entity_id}"), e, by_id))
        for e in entities
    ]
    return World(seed=seed, entities=entities, documents=documents)


@dataclass
class _Draft:  # mutable while generating; frozen into an Entity at the end
    entity_id: str
    kind: str
    name: str
    split: str
    category: str = ""
    relations: dict[str, str] = field(default_factory=dict)
    attributes: dict[str, int | str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()


def _split_sizes(total: int, heldout_fraction: float, minimum: int, what: str) -> dict[str, int]:
    heldout = round(total * heldout_fraction)
    sizes = {"train": total - heldout, "heldout": heldout}
    for split, size in sizes.items():
        if size < minimum:
            raise ValueError(
                f"{what}={total} with heldout_fraction={heldout_fraction} leaves {size} in the "
                f"{split} part; each part needs at least {minimum}"
            )
    return sizes


def _generate_part(rng: random.Random, names: _Names, new, split: str, n: Mapping[str, int]):
    """Entities of one part (train or heldout); relations only between them."""
    countries = []
    for _ in range(n["country"]):
        name = names.unique(lambda: names.word("country", 1, 2))
        formal = rng.choice(_FORMAL).format(name)
        countries.append(new("country", name, split, aliases=(formal,), attributes={
            "established_year": rng.randint(1200, 1990),
            "population_millions": rng.randint(1, 90),
            "currency": names.word("currency", 1, 2).lower(),
            "formal_name": formal,
        }))

    cities = []
    for i in range(n["city"]):
        # The first cities give every country at least one city.
        country = countries[i] if i < len(countries) else rng.choice(countries)
        cities.append(new("city", names.unique(lambda: names.word("city", 1, 2)), split,
                          relations={"located_in": country.entity_id}, attributes={
                              "founded_year": rng.randint(600, 1880),
                              "population": rng.randint(5, 2000) * 1000 + rng.randint(0, 9) * 100,
                              "feature": rng.choice(_CITY_FEATURES),
                          }))
    for country in countries:
        own = [c for c in cities if c.relations["located_in"] == country.entity_id]
        country.relations["capital"] = rng.choice(own).entity_id

    n_given, n_family = max(8, n["person"] // 3), max(8, n["person"] // 2)
    given = [names.word("given", 2, 2) for _ in range(n_given)]
    family = [names.word("family", 2, 2) for _ in range(n_family)]
    forced_occupations = ["novelist", "film director", "musician"]  # every work kind has a creator
    people = []
    for i in range(n["person"]):
        occupation = forced_occupations[i] if i < 3 else rng.choice(list(OCCUPATIONS))
        name = names.unique(lambda: f"{rng.choice(given)} {rng.choice(family)}")
        people.append(new("person", name, split, category=occupation,
                          relations={"born_in": rng.choice(cities).entity_id},
                          attributes={"birth_year": rng.randint(1850, 1975),
                                      "known_for": rng.choice(_KNOWN_FOR[occupation])}))

    forced_kinds = ["publishing house", "film studio", "record label"]  # a publisher per work kind
    orgs = []
    for i in range(n["organisation"]):
        kind = forced_kinds[i] if i < 3 else rng.choice(list(_ORG_SUFFIXES))
        stem = names.word("organisation", 2, 2)
        suffixes = _ORG_SUFFIXES[kind]
        name = names.unique(lambda stem=stem, suffixes=suffixes: f"{stem} {rng.choice(suffixes)}")
        founder = rng.choice(people)
        founded = min(_LAST_YEAR, founder.attributes["birth_year"] + rng.randint(25, 45))
        employees = rng.choice([rng.randint(2, 19) * 50, rng.randint(22, 90) * 100])
        orgs.append(new("organisation", name, split, category=kind,
                        relations={"headquartered_in": rng.choice(cities).entity_id,
                                   "founded_by": founder.entity_id},
                        attributes={"founded_year": founded, "employees": employees}))

    for person in people:
        preferred = [o for o in orgs if o.category in OCCUPATIONS[person.category]]
        employer = rng.choice(preferred or orgs)
        person.relations["works_for"] = employer.entity_id
        start = max(person.attributes["birth_year"] + 20, employer.attributes["founded_year"])
        person.attributes["joined_year"] = min(_LAST_YEAR, start + rng.randint(0, 12))

    for _ in range(n["work"]):
        kind = rng.choice(list(CREATOR_OF))
        creator = rng.choice([p for p in people if p.category == CREATOR_OF[kind]])
        publisher = rng.choice([o for o in orgs if o.category == PUBLISHER_OF[kind]])
        year = max(creator.attributes["birth_year"] + 22, publisher.attributes["founded_year"])
        year = min(_LAST_YEAR, year + rng.randint(0, 15))
        title = names.unique(lambda: _title(rng, names))
        extra = {"novel": ("pages", rng.randint(12, 90) * 10),
                 "film": ("minutes", rng.randint(80, 190)),
                 "album": ("tracks", rng.randint(7, 16))}[kind]
        new("work", title, split, category=kind,
            relations={"created_by": creator.entity_id, "published_by": publisher.entity_id},
            attributes={"release_year": year, "genre": rng.choice(_GENRES[kind]),
                        extra[0]: extra[1]})
