"""eval.temperatures: agents named there sample at evaluation (every other agent greedy), so a
set of query writers differs at evaluation as in training; bad names and values are refused
before any model loads."""

from __future__ import annotations

import pytest
import torch
from test_search_credit import CREDIT_CONFIG, TINY

from srpo.build import build_agents, build_rollout, load_tasks
from srpo.config import ConfigError, load_config
from srpo.record.evaluate import evaluate, greedy_runner

TINY_EVAL = [*TINY, "task.heldout_size=8", "sampling.max_new_tokens=8"]


def writer_texts(episodes):
    """(round-1 writer texts) of each episode."""
    return [tuple(m.text for m in ep.transitions[0].members) for ep in episodes]


def test_sampled_writers_differ_where_greedy_ones_agree():
    greedy_cfg = load_config(str(CREDIT_CONFIG), TINY_EVAL)
    runner, workflow = build_rollout(greedy_cfg)
    tasks = load_tasks(greedy_cfg.task, split="heldout")
    _, greedy = evaluate(runner, workflow, tasks, seed=0)
    # one prompt, one policy, greedy: the two writers of a round write the same text
    assert all(a == b for a, b in writer_texts(greedy))
    _, sampled = evaluate(runner, workflow, tasks, seed=0, temperatures={"query_writer": 1.0})
    assert any(a != b for a, b in writer_texts(sampled))  # the random tiny model at T = 1
    _, again = evaluate(runner, workflow, tasks, seed=0, temperatures={"query_writer": 1.0})
    assert writer_texts(again) == writer_texts(sampled)  # the seed fixes the draws (this batching)
    # training's random stream is untouched: the evaluation draws from a seeded fork of it
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    evaluate(runner, workflow, tasks, seed=0, temperatures={"query_writer": 1.0})
    assert torch.equal(torch.rand(3), expected)
    # the answerer stays greedy: its agent spec at evaluation
    agents = greedy_runner(runner, 0, {"query_writer": 0.7}).agents
    assert agents["query_writer"].sampling.temperature == 0.7
    assert agents["answerer"].sampling.temperature == 0.0


def test_bad_eval_temperatures_are_refused():
    with pytest.raises(ConfigError, match="eval.temperatures.query_writer must be a temperature >= 0"):
        load_config(str(CREDIT_CONFIG), [*TINY, "eval.temperatures={query_writer: -1}"])
    cfg = load_config(str(CREDIT_CONFIG), [*TINY, "eval.temperatures={query_writr: 0.7}"])
    with pytest.raises(ValueError, match=r"eval.temperatures names \['query_writr'\], not agents of this run"):
        build_agents(cfg)
