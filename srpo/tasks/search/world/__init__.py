"""A generated world of fictional entities, its documents and multi-hop questions (synthetic).

    world = generate_world(seed=0)                      # ~800 entities, one Document each
    train = world_questions(world, hops=(1, 2, 3), n=300, seed=0, split="train")
    heldout = world_questions(world, n=150, seed=0, split="heldout")

Why: a model cannot know the answers (every name is made of random syllables), so questions
about this world can only be answered by searching its documents: an honest offline test bed for
multi-turn search. Everything here is labelled synthetic (source "search/world").

The package, a module per job (each module's doc has the rules of its part):
    graph.py      the schema (KINDS, RELATIONS, SPLITS) and the records: Entity, World
    names.py      unique syllable names, one category per word; work titles
    generate.py   generate_world: the entities of the train and held-out parts, their relations
    documents.py  one document per entity, stating only its own facts
    questions.py  multi-hop questions along relation paths; task ids; sampling over paths

In short: entities of five kinds with typed relations, every relation with exactly one value
(graph.py); names unique across the world (names.py); each entity in the "train" or the
"heldout" part, relations never crossing parts (generate.py); a document per entity naming
related entities in full and stating no other entity's facts (documents.py); questions whose
chain of documents must all be read, ids f"world/{seed}/{split}/{i}" (questions.py).
"""

from srpo.tasks.search.world.generate import generate_world
from srpo.tasks.search.world.graph import (
    KINDS,
    RELATIONS,
    SOURCE,
    SPLITS,
    Entity,
    World,
    world_doc_id,
)
from srpo.tasks.search.world.questions import all_world_questions, relation_paths, world_questions

__all__ = [
    "KINDS", "RELATIONS", "SOURCE", "SPLITS", "Entity", "World", "all_world_questions",
    "generate_world", "relation_paths", "world_doc_id", "world_questions",
]
