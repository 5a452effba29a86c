"""studies/search_2hop/screen.py's episode summary on two hand-made episodes: the means of the
episode diagnostics, the bridge entity in notes and round-2 queries, and each writer set against
its writers alone (each writer's query re-run through the same retriever)."""

from __future__ import annotations

import gzip
import json

import pytest
from test_search_env import KeywordRetriever

from srpo.tasks.search.env import SearchEnv
from srpo.types import Task
from studies.search_2hop.screen import summarize

TASKS = {q: Task(q, "Where was the founder of Veltra born?", "Kessel",
                 metadata={"supporting_doc_ids": ["veltra", "marr"], "hops": 2, "bridge_entities": ["Ilsa Marr"]})
         for q in ("q1", "q2")}


def record(task_id, metadata, transitions):
    return {"task_id": task_id, "metadata": metadata,
            "transitions": [{"event": event, "members": [{"text": t} for t in texts]} for event, texts in transitions]}


def test_summary_of_two_episodes(tmp_path):
    episodes = [
        # two rounds: round 1 both writers find veltra; round 2 one finds marr ("Ilsa Marr shipwright"),
        # the other ostmark ("Brannock": ostmark names Brannock, and comes first in the corpus)
        record("q1", {"score_em": 1.0, "recall_hop1": 1.0, "recall_hop2": 1.0, "first_step_complete": 0.0,
                      "search_rounds": 2, "score_format": 1.0},
               [("query-1", ["Veltra", "Veltra"]), ("query-2", ["Ilsa Marr shipwright", "Brannock"]),
                ("read-2", ["<answer>Kessel</answer>"])]),
        # one round: the writers find veltra and marr, one each: the set finds more than either
        record("q2", {"score_em": 0.0, "recall_hop1": 1.0, "recall_hop2": 1.0, "first_step_complete": 1.0,
                      "search_rounds": 1, "score_format": 0.0},
               [("query-1", ["Veltra", "Ilsa Marr shipwright"]), ("read-1", ["Dorn"])]),
    ]
    path = tmp_path / "v.episodes.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(e) + "\n" for e in episodes)
    env = SearchEnv(KeywordRetriever(), top_k=1, plain_text_fallback=True)
    row = summarize(path, TASKS, env)
    assert row["n"] == 2 and row["em"] == 0.5 and row["rounds"] == 1.5 and row["tagged"] == 0.5
    assert (row["recall_hop1"], row["recall_hop2"], row["first_step_complete"]) == (1.0, 1.0, 0.5)
    # one episode of two has a round 2; it has no read-1 note; a round-2 query names Ilsa Marr
    assert (row["second_round"], row["bridge_in_note"], row["bridge_queried"]) == (0.5, 0.0, 1.0)
    # three writer sets: supporting documents 1, 1, 2 together; 1, 1, 1 for the best writer alone
    assert row["set_docs_per_round"] == pytest.approx(4 / 3)
    assert row["best_writer_docs_per_round"] == 1.0
    assert row["set_beats_best_writer"] == pytest.approx(1 / 3)
