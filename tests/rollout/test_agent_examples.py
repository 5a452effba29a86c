"""Few-shot demonstrations (`agents.<name>.examples`): chat turns before the request, prompt only."""

from __future__ import annotations

from pathlib import Path

import pytest

from srpo.build import build_agents
from srpo.config import ConfigError, load_config
from srpo.models import build_byte_tokenizer
from srpo.rollout import AgentSpec, PolicySet, RolloutRunner, ScriptedBackend
from srpo.tasks.math import MathReward
from srpo.types import Task
from srpo.workflows import build_workflow

SMOKE = Path(__file__).resolve().parents[2] / "srpo" / "presets" / "smoke.yaml"
SHOTS = (("Q: 2+2?", "<answer>4</answer>"), ("Q: 3+4?", "<answer>7</answer>"))


def test_examples_go_between_the_system_turn_and_the_request_verbatim():
    agent = AgentSpec("solver", system_prompt="You solve.", template="Task: {input}", examples=SHOTS)
    assert agent.messages("Q: 5+1?") == [
        {"role": "system", "content": "You solve."},
        {"role": "user", "content": "Q: 2+2?"},  # the template is not applied to an example
        {"role": "assistant", "content": "<answer>4</answer>"},
        {"role": "user", "content": "Q: 3+4?"},
        {"role": "assistant", "content": "<answer>7</answer>"},
        {"role": "user", "content": "Task: Q: 5+1?"},
    ]
    # no system prompt: the examples come first; a multi-turn request keeps its own order after them
    bare = AgentSpec("solver", examples=SHOTS[:1])
    chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"}]
    assert [t["content"] for t in bare.messages(chat)] == ["Q: 2+2?", "<answer>4</answer>", "a", "b", "c"]
    # none: exactly the messages without the field
    assert AgentSpec("solver").messages("x") == [{"role": "user", "content": "x"}]


def test_lists_from_yaml_become_tuples_so_the_spec_stays_hashable_and_equal():
    agent = AgentSpec("solver", examples=[["Q", "A"]])
    assert agent.examples == (("Q", "A"),) and agent == AgentSpec("solver", examples=(("Q", "A"),))
    hash(agent)


@pytest.mark.parametrize("examples", [[("Q", "")], [("Q",)], [("Q", "A", "B")], [("Q", 3)], ["QA"]])
def test_a_malformed_example_names_its_index(examples):
    with pytest.raises(ValueError, match=r"agent 'solver': examples\[0\] must be a pair of non-empty"):
        AgentSpec("solver", examples=examples)


def test_config_examples_reach_the_agent_and_bad_ones_name_the_key():
    cfg = load_config(SMOKE, ["agents.solver.examples=[['Q: 2+2?', '<answer>4</answer>']]"])
    agents = build_agents(cfg)
    assert agents["solver"].examples == (("Q: 2+2?", "<answer>4</answer>"),)
    assert agents["aggregator"].examples == ()  # per role: nobody else sees them
    with pytest.raises(
        ConfigError, match=r"agents.solver.*examples\[0\]: must be \[user, assistant\], both turns non-empty"
    ):
        load_config(SMOKE, ["agents.solver.examples=[['Q', ' ']]"])
    with pytest.raises(ConfigError, match=r"agents.solver: examples\[0\]: must be \[user, assistant\]"):
        load_config(SMOKE, ["agents.solver.examples=[['Q', 'A', 'B']]"])
    with pytest.raises(ConfigError, match=r"agents.solver.examples"):
        load_config(SMOKE, ["agents.solver.examples=[['Q', 3]]"])


def test_examples_are_in_the_prompt_and_never_in_the_trained_response():
    tok = build_byte_tokenizer()
    agents = [AgentSpec("solver", examples=SHOTS[:1])]
    backend = ScriptedBackend(PolicySet.scripted(tok, ("shared",)), lambda req: "9", logprob=-1.0)
    runner = RolloutRunner(agents, backend, MathReward())
    result = runner.run([Task("t0", "Q: 4+5?", "9")], build_workflow("single"), group_size=1)
    (member,) = result.episodes[0].transitions[0].members
    prompt = tok.decode(list(member.prompt_ids))
    assert prompt.index("Q: 2+2?") < prompt.index("<answer>4</answer>") < prompt.index("Q: 4+5?")
    assert tok.decode(list(member.response_ids)).startswith("9")
    assert "<answer>4</answer>" not in tok.decode(list(member.response_ids))
