"""rollout_metrics averages the per-episode tool diagnostics workflows record in metadata."""

from srpo.rollout.runner import rollout_metrics
from srpo.types import ActiveSet, Episode, Member, Task


def _episode(**metadata):
    m = Member(agent="searcher", policy="p", prompt_ids=[1], response_ids=[2, 3], loss_mask=[1, 1])
    return Episode(Task("t", "q"), "search_single", [ActiveSet((m,), "search", "t")], reward=0.0,
                   metadata=dict(metadata))


def test_search_counters_and_recall_are_averaged_over_reporting_episodes():
    eps = [
        _episode(search_calls=2, search_invalid=1, recall_at_k=0.5, search_errors=["unclosed"]),
        _episode(search_calls=4, search_invalid=0, recall_at_k=1.0, rollout_index=3),
        _episode(votes=2),  # reports none of them: not in the means
    ]
    m = rollout_metrics(eps)
    assert m["episode/search_calls"] == 3.0  # (2 + 4) / 2
    assert m["episode/search_invalid"] == 0.5
    assert m["episode/recall_at_k"] == 0.75
    assert "episode/search_errors" not in m  # a list of reasons, not a number
    assert not any(k.startswith("episode/") and "rollout_index" in k for k in m)
