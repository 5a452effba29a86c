"""A generated world of fictional entities, its documents and multi-hop questions (synthetic).

    world = generate_world(seed=0)                      # ~800 entities, one Document each
    train = world_questions(world, hops=(1, 2, 3), n=300, seed=0, split="train")
    heldout = world_questions(world, n=150, seed=0, split="heldout")

Why: a model cannot know the answers (every name is made of random syllables), so questions
about this world can only be answered by searching its documents: an honest offline test bed for
multi-turn search. Everything here is labelled synthetic (source "search/world").

The world. Entities of five kinds with typed relations (RELATIONS): people (born_in a city,
birth_year, works_for an organisation), cities (located_in a country, founded_year), countries
(capital, established_year), organisations (headquartered_in a city, founded_by a person,
founded_year) and works (novels, films, albums: created_by a person, published_by an
organisation, release_year). Every relation has exactly one value, so every question has one
answer. Names are unique across the world; each name *word* belongs to one category only (a
family name is never a city name, an organisation's stem never a title word), so one entity's
name never occurs inside another's or inside a question about something else.

Documents. One per entity (doc id f"world:{seed}:{entity_id}", title = the name), a few
sentences from varied templates plus unasked distractor facts (population, genre, page count).
A document states only its own entity's facts and names the related entities in full; no fact
is stated in any other document (the inverse "X wrote W" never appears in X's document), except
that a country's capital is implicitly located in it. So a question about a chain of facts can
be answered only by reading the chain's documents.

Questions. A relation path of 1-3 relations from a start entity, e.g. born_in -> located_in
("In which country was X born?"); the question names only the start entity, each later
(bridge) entity is named in the previous document, the answer is stated in the last one.
supporting_doc_ids = the documents of the chain's subjects, in order; hops = their number.
Wording is composed from per-relation noun phrases ("the founder of ...") and question
templates, with a few hand-written shortcuts. A candidate is dropped when its answer already
occurs in an earlier chain document (then fewer hops would do), when the chain revisits an
entity, or when the question text contains the answer.

Splits. Each entity belongs to the "train" or the "heldout" part of the world (about
heldout_fraction of each kind), and relations never cross parts: the world is two disjoint
graphs sharing one corpus. So held-out questions ask about facts (and documents) no training
question touches; a policy cannot memorize held-out answers during training.

Task ids are f"world/{seed}/{split}/{i}", i the question's index in the split's canonical
enumeration: stable across sampling seeds, unique within one world (worlds of one seed but
other sizes reuse ids).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from srpo.tasks.search.answers import answer_tokens, contains_answer, tokens_contain
from srpo.tasks.search.records import Document
from srpo.types import Task

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


# ----------------------------------------------------------------------------- names

_ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
           "b", "d", "k", "l", "m", "n", "r", "s", "t", "v",
           "br", "dr", "gr", "kr", "tr", "vr", "th", "sh", "kh", "zh", "q", "y")
_NUCLEI = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "a", "e", "o", "ae", "ei", "ou", "y")
_CODAS = ("", "", "", "", "", "", "", "", "n", "r", "l", "s", "th", "m", "k")
_ENDINGS = {  # a suffix that gives each category a recognisable shape
    "city": ("mora", "vik", "dell", "holm", "ost", "wyn", "gard", "ence", "ith", "ara"),
    "country": ("ia", "and", "esh", "ora", "eth", "onia", "ar"),
    "currency": ("el", "un", "ar", "ot"),
}
# Generated words that happen to be common real names or words; rejected.
_REAL = frozenset((
    "nara", "anna", "maria", "thomas", "sara", "sarah", "karen", "lima", "rome", "paris",
    "oslo", "tokyo", "milan", "dana", "tina", "nina", "lena", "mara", "dora", "vera", "kira",
    "tara", "sofia", "lara", "luna", "nora", "mona", "maya", "rosa", "lisa", "elena", "ella",
    "emma", "ida", "ada", "eva", "sam", "tom", "ben", "dan", "don", "ron", "ken", "rob", "bob",
    "jon", "leon", "toby", "hugo", "otto", "bruno", "dino", "nero", "zeus", "thor", "odin",
    "hera", "juno", "mars", "venus", "india", "china", "japan", "peru", "chad", "mali", "iran",
    "iraq", "cuba", "togo", "oman", "niger", "kenya", "boston", "berlin", "sydney", "delhi",
    "dubai", "doha", "riga", "baku", "kiev", "minsk", "bern", "nice", "troy", "sparta",
    "shark", "tiger", "lion", "bear", "hawk", "moon", "star", "sun", "sky", "rain", "snow",
    "fire", "stone", "river", "bank", "book", "film",
))

_ADJECTIVES = ("Silent", "Glass", "Hollow", "Crimson", "Distant", "Burning", "Quiet",
               "Broken", "Golden", "Winter", "Salt", "Iron", "Pale", "Seventh", "Wandering",
               "Hidden", "Last", "Northern", "Paper", "Amber")
_NOUNS = ("Orchard", "Lantern", "Harbour", "Archive", "Meridian", "Garden", "Cartographer",
          "Tide", "Bellfounder", "Mirror", "Staircase", "Season", "Chronicle", "Procession",
          "Compass", "Threshold", "Lighthouse", "Weaver", "Carousel", "Atlas")


class _Names:
    """Unique syllable names; each word belongs to one category only."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.word_category: dict[str, str] = {}
        self.full: set[str] = set()

    def _syllables(self, lo: int, hi: int) -> str:
        r = self.rng
        return "".join(r.choice(_ONSETS) + r.choice(_NUCLEI) + r.choice(_CODAS)
                       for _ in range(r.randint(lo, hi)))

    def word(self, category: str, lo: int = 2, hi: int = 2) -> str:
        for _ in range(10_000):
            w = self._syllables(lo, hi)
            if category in _ENDINGS:
                ending = self.rng.choice(_ENDINGS[category])
                w = (w[:-1] if w[-1] in "aeiouy" and ending[0] in "aeiouy" else w) + ending
            key = w.lower()
            if not 5 <= len(w) <= 11 or key in _REAL or key in self.word_category:
                continue
            self.word_category[key] = category
            return w.capitalize()
        raise RuntimeError(f"could not generate a new {category} name")  # pragma: no cover

    def unique(self, make) -> str:
        """A full name from `make()` not used before (retries on collision)."""
        for _ in range(10_000):
            name = make()
            if name.lower() not in self.full:
                self.full.add(name.lower())
                return name
        raise RuntimeError("could not generate a unique name; enlarge the name pools")


# ----------------------------------------------------------------------------- world

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
    counters = {k: 0 for k in KINDS}
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


def _title(rng: random.Random, names: _Names) -> str:
    # Every title carries a generated word, so no title is a real one.
    word = names.word("title", 2, 2)
    pattern = rng.randrange(4)
    if pattern == 0:
        return f"The {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} of {word}"
    if pattern == 1:
        return f"{rng.choice(_NOUNS)} of {word}"
    if pattern == 2:
        noun = rng.choice(_NOUNS)
        return f"{rng.choice(_ADJECTIVES)} {noun}{'es' if noun.endswith('s') else 's'} in {word}"
    return f"The {word} {rng.choice(_NOUNS)}"


# ----------------------------------------------------------------------------- documents


def _a(phrase: str) -> str:
    """The phrase with its indefinite article ("an engineer", "a university")."""
    vowel = phrase[0] in "aeio" or (phrase[0] == "u" and not phrase.startswith("uni"))
    return f"{'an' if vowel else 'a'} {phrase}"


def _write_document(rng: random.Random, e: Entity, by_id: Mapping[str, Entity]) -> str:
    """A few sentences stating the entity's own facts; related entities named in full."""
    a = e.attributes
    rel = {k: by_id[v].name for k, v in e.relations.items()}
    pick = rng.choice
    if e.kind == "person":
        short = e.name.split()[-1]
        intro = pick([
            f"{e.name} is {_a(e.category)} born in {rel['born_in']} in {a['birth_year']}.",
            f"{e.name} (born {a['birth_year']} in {rel['born_in']}) is {_a(e.category)}.",
            f"Born in {rel['born_in']} in {a['birth_year']}, {e.name} is {_a(e.category)}.",
            (f"{e.name} is {_a(e.category)}. {short} was born in {a['birth_year']} in "
             f"{rel['born_in']}."),
        ])
        rest = [
            pick([f"{short} works for {rel['works_for']}.",
                  f"{short} is employed by {rel['works_for']}.",
                  f"Since {a['joined_year']}, {short} has worked at {rel['works_for']}.",
                  f"{short} joined {rel['works_for']} in {a['joined_year']}."]),
            pick([f"{short} is known for {a['known_for']}.",
                  f"{short} is best known for {a['known_for']}."]),
        ]
    elif e.kind == "city":
        size = ("small" if a["population"] < 100_000
                else "mid-sized" if a["population"] < 600_000 else "large")
        intro = pick([
            f"{e.name} is a city in {rel['located_in']}.",
            f"{e.name} is a {size} city located in {rel['located_in']}.",
            f"The city of {e.name} lies in {rel['located_in']}.",
        ])
        rest = [
            pick([f"It was founded in {a['founded_year']}.",
                  f"{e.name} was founded in {a['founded_year']}.",
                  f"The city was founded in {a['founded_year']}."]),
            pick([f"It has a population of about {a['population']:,}.",
                  f"About {a['population']:,} people live in {e.name}."]),
            pick([f"{e.name} is known for its {a['feature']}.",
                  f"The city is famous for its {a['feature']}."]),
        ]
    elif e.kind == "country":
        intro = pick([
            f"{e.name}, officially the {a['formal_name']}, is a sovereign country.",
            f"{e.name} (officially the {a['formal_name']}) is a country.",
        ])
        rest = [
            pick([f"Its capital is {rel['capital']}.",
                  f"The capital of {e.name} is {rel['capital']}.",
                  f"{rel['capital']} serves as the capital of {e.name}."]),
            pick([(f"{e.name} was established as an independent state in "
                   f"{a['established_year']}."),
                  f"It became an independent state in {a['established_year']}.",
                  f"The state was established in {a['established_year']}."]),
            pick([f"Its population is about {a['population_millions']} million.",
                  f"About {a['population_millions']} million people live there."]),
            f"Its currency is the {a['currency']}.",
        ]
    elif e.kind == "organisation":
        intro = pick([
            f"{e.name} is {_a(e.category)} based in {rel['headquartered_in']}.",
            f"{e.name} is {_a(e.category)} headquartered in {rel['headquartered_in']}.",
            f"Headquartered in {rel['headquartered_in']}, {e.name} is {_a(e.category)}.",
        ])
        rest = [
            pick([f"It was founded by {rel['founded_by']} in {a['founded_year']}.",
                  f"{rel['founded_by']} founded {e.name} in {a['founded_year']}.",
                  f"{e.name} was established in {a['founded_year']} by {rel['founded_by']}."]),
            pick([f"It employs about {a['employees']:,} people.",
                  f"{e.name} has roughly {a['employees']:,} employees."]),
        ]
    else:  # work
        creator, publisher, year, genre = (rel["created_by"], rel["published_by"],
                                           a["release_year"], a["genre"])
        if e.category == "novel":
            intro = pick([f"{e.name} is {_a(genre)} novel by {creator}.",
                          f"{e.name} is {_a(genre)} novel written by {creator}.",
                          f"Written by {creator}, {e.name} is {_a(genre)} novel."])
            rest = [pick([f"It was published by {publisher} in {year}.",
                          f"{publisher} published it in {year}.",
                          f"The novel first appeared in {year}, published by {publisher}."]),
                    f"The book runs to {a['pages']} pages."]
        elif e.category == "film":
            intro = pick([f"{e.name} is {_a(genre)} film directed by {creator}.",
                          f"Directed by {creator}, {e.name} is {_a(genre)} film."])
            rest = [pick([f"It was produced by {publisher} and released in {year}.",
                          f"{publisher} produced the film, which was released in {year}."]),
                    f"It runs for {a['minutes']} minutes."]
        else:
            intro = pick([f"{e.name} is {_a(genre)} album recorded by {creator}.",
                          f"{creator} recorded the {genre} album {e.name}."])
            rest = [pick([f"It was released in {year} on the {publisher} label.",
                          f"{publisher} released it in {year}."]),
                    f"It contains {a['tracks']} tracks."]
    rng.shuffle(rest)
    return " ".join([intro, *rest])


# ----------------------------------------------------------------------------- questions

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


def _key(relation: str, start: Entity, position: int) -> str:
    """Template key: work relations (only ever the first hop) depend on the kind of work."""
    return f"{relation}/{start.category}" if position == 0 and start.kind == "work" else relation


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
