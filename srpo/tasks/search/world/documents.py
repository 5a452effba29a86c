"""The documents of a world: one per entity (doc id f"world:{seed}:{entity_id}", title = the
name), a few sentences from varied templates plus unasked distractor facts (population, genre,
page count).

A document states only its own entity's facts and names the related entities in full; no fact
is stated in any other document (the inverse "X wrote W" never appears in X's document), except
that a country's capital is implicitly located in it. So a question about a chain of facts can
be answered only by reading the chain's documents.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from srpo.tasks.search.world.graph import Entity


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
