"""The srpo_workflow agent loop, driven by a scripted async generation server, returns the
records the workflow defines: one verl output per active-set member, in set order, with its set
id, agent, policy, event key and set return; the same tokens, masks and rewards as srpo's own
RolloutRunner gives on the same script."""

from __future__ import annotations

import asyncio

import pytest

# "verl.trainer": a submodule only the real verl package has
pytest.importorskip("verl.trainer")

from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl_helpers import ScriptedServer

from srpo.integrations.verl import fields
from srpo.integrations.verl.agent_loop import SrpoWorkflowAgentLoop
from srpo.integrations.verl.episode import (
    EpisodeSetup,
    setup_from_config,
    task_from_row,
    task_to_row,
)
from srpo.models import build_byte_tokenizer
from srpo.rollout import AgentSpec, PolicySet, RolloutRunner, SamplingParams, ScriptedBackend
from srpo.tasks.math import MathReward
from srpo.types import Task
from srpo.workflows import Debate, ParallelAggregate


def script(text: str) -> str:
    """Solvers disagree by role prompt; the aggregator answers 4."""
    if "You compare" in text:
        return "the answer is \\boxed{4}"
    return "I think \\boxed{4}" if "Problem 1" in text else "maybe \\boxed{5}"


def _agents(max_new_tokens=48):
    sp = SamplingParams(max_new_tokens=max_new_tokens)
    return {
        "solver": AgentSpec("solver", system_prompt="You solve.", sampling=sp),
        "aggregator": AgentSpec("aggregator", system_prompt="You compare solutions.", sampling=sp),
        "debater": AgentSpec("debater", system_prompt="You debate.", sampling=sp),
    }


def _loop(tok, setup, server, response_length=64, prompt_length=512, name="vllm"):
    config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"prompt_length": prompt_length, "response_length": response_length,
                                          "name": name}},
        "data": {"apply_chat_template_kwargs": {}, "mm_processor_kwargs": {}},
    })
    return SrpoWorkflowAgentLoop(
        trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tok, processor=None,
        dataset_cls=None, data_config=DictConfigWrap(config.data), setup=setup, seed=0,
    )


def _sampling():
    return {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


@pytest.mark.parametrize("workflow,sizes,events", [
    (ParallelAggregate(k=3), [3, 1], ["solve", "aggregate"]),
    (Debate(debaters=["debater"] * 3, rounds=2), [3, 3], ["round-1", "round-2"]),
])
def test_agent_loop_records_match_the_workflow(workflow, sizes, events):
    tok = build_byte_tokenizer()
    setup = EpisodeSetup(workflow=workflow, agents=_agents(), reward_fn=MathReward(), policy="shared")
    server = ScriptedServer(tok, script, logprob=-0.25)
    task = Task(task_id="t7", prompt="Problem 1: what is 2 + 2?", answer="4")
    row = {**task_to_row(task, data_source="test"), "uid": "u7", "session_id": 2, "index": 0,
           "raw_prompt": [{"role": "user", "content": task.prompt}]}
    assert task_from_row(row) == task
    outputs = asyncio.run(_loop(tok, setup, server).run(_sampling(), **row))

    # the same episode from srpo's own runner and the scripted backend (same seed, rollout index)
    backend = ScriptedBackend(
        PolicySet.scripted(tok),
        lambda req: script(tok.decode(list(req.prompt_ids), skip_special_tokens=False)),
        logprob=-0.25,
    )
    runner = RolloutRunner(_agents(), backend, MathReward(), seed=0)

    ref_ctx = runner.episode_context(task, workflow.name, rollout_index=2)
    assert ref_ctx.rng.random() == runner.episode_context(task, workflow.name, rollout_index=2).rng.random()
    ref = runner.run([task], workflow, group_size=1).episodes[0]
    members = [(s, j, m) for s in ref.transitions for j, m in enumerate(s.members)]

    assert len(outputs) == sum(sizes) == len(members)
    for out, (aset, j, m) in zip(outputs, members):
        ex = out.extra_fields
        assert out.prompt_ids == m.prompt_ids and out.response_ids == m.response_ids
        assert out.response_mask == m.loss_mask
        assert out.response_logprobs == [-0.25] * len(m.response_ids)
        assert out.reward_score == ref.reward
        assert (ex[fields.SET], ex[fields.SET_SIZE], ex[fields.MEMBER]) == (aset.turn, aset.size, j)
        assert (ex[fields.AGENT], ex[fields.POLICY], ex[fields.EVENT]) == (m.agent, "shared", aset.event)
        assert ex[fields.SET_REWARD] == ref.reward and ex[fields.TASK_ID] == "t7"
        assert ex["reward_extra_info"] == ref.reward_components
        d = out.as_dict()  # verl's own conversion to the TransferQueue record
        assert d["responses"].tolist() == m.response_ids and d["rm_scores"][-1] == ref.reward
    assert [o.extra_fields[fields.SET_SIZE] for o in outputs if o.extra_fields[fields.MEMBER] == 0] == sizes
    # verl stores output i under "{uid}_{session}_{i}": the trainer's set keys rebuild the sets
    keys = fields.set_keys([f"u7_2_{i}" for i in range(len(outputs))], [o.extra_fields for o in outputs])
    assert [keys.count(k) for k in dict.fromkeys(keys)] == sizes and keys[0] == "u7_2/0"
    if events:
        assert [o.extra_fields[fields.EVENT] for o in outputs if o.extra_fields[fields.MEMBER] == 0] == events
    # the aggregator read the solvers' answers: the last member answered 4 and is correct
    assert ref.reward == 1.0
    # sampling: verl's temperature etc., the agent's budget as max_tokens
    assert all(c["max_tokens"] == 48 and c["temperature"] == 1.0 for c in server.calls)


def test_agent_loop_stop_strings():
    tok = build_byte_tokenizer()
    agents = {
        "solver": AgentSpec("solver", sampling=SamplingParams(max_new_tokens=40, stop=("</search>",))),
        "aggregator": AgentSpec("aggregator", sampling=SamplingParams(max_new_tokens=40)),
    }
    setup = EpisodeSetup(workflow=ParallelAggregate(k=2), agents=agents, reward_fn=MathReward(), policy="shared")
    server = ScriptedServer(tok, lambda text: "<search>q</search> and more \\boxed{4}")
    task = Task(task_id="t", prompt="2+2?", answer="4")
    row = {**task_to_row(task, data_source="x"), "uid": "u", "session_id": 0}
    outs = asyncio.run(_loop(tok, setup, server).run(_sampling(), **row))
    solver = outs[0]
    assert tok.decode(solver.response_ids).endswith("</search>")  # cut after the stop string, kept
    assert any(c.get("stop") == ["</search>"] and c.get("include_stop_str_in_output") for c in server.calls)


class ToolOnce:
    """One member: generate, a tool observation (loss mask 0), generate again (Continue)."""

    name, description, agents = "tool_once", "test", ("solver",)

    def run(self, task, ctx):
        from srpo.workflows import Continue, Request

        out = yield Request("solver", task.prompt)
        ctx.observe(out, "<information>" + "o" * 12 + "</information>")
        out = yield Continue(out)
        ctx.transition("solve", [out])
        return ctx.score(out)


def test_agent_loop_tool_member_and_length_limit():
    tok = build_byte_tokenizer()
    agents = {"solver": AgentSpec("solver", sampling=SamplingParams(max_new_tokens=16))}
    setup = EpisodeSetup(workflow=ToolOnce(), agents=agents, reward_fn=MathReward(), policy="shared")
    task = Task(task_id="t", prompt="2+2?", answer="4")
    row = {**task_to_row(task, data_source="x"), "uid": "u", "session_id": 0}
    server = ScriptedServer(tok, lambda text: "\\boxed{4}")
    (out,) = asyncio.run(_loop(tok, setup, server).run(_sampling(), **row))
    n_obs = len(tok("<information>" + "o" * 12 + "</information>", add_special_tokens=False)["input_ids"])
    assert out.response_mask.count(0) == n_obs and out.response_mask[0] == 1 and out.response_mask[-1] == 1
    assert out.extra_fields[fields.SET_SIZE] == 1 and out.reward_score == 1.0
    # a member longer than rollout.response_length (two turns + observation) fails loudly
    with pytest.raises(ValueError, match="response_length"):
        asyncio.run(_loop(tok, setup, server, response_length=len(out.response_ids) - 1).run(_sampling(), **row))


def test_setup_from_srpo_config(tmp_path):
    cfg = tmp_path / "wf.yaml"
    cfg.write_text(
        "agents:\n  solver: {system_prompt: 'Solve.'}\n  aggregator: {system_prompt: 'Compare.'}\n"
        "workflow: {name: parallel, params: {k: 2}}\nsampling: {max_new_tokens: 32}\n"
    )
    setup = setup_from_config(str(cfg))
    assert setup.workflow.name == "parallel" and setup.workflow.k == 2 and setup.policy == "shared"
    assert setup.agents["solver"].sampling.max_new_tokens == 32
    bad = tmp_path / "lora.yaml"
    bad.write_text(
        "policies: {kind: lora, names: [solver, aggregator]}\n"
        "agents:\n  solver: {policy: solver}\n  aggregator: {policy: aggregator}\n"
        "workflow: {name: parallel, params: {k: 2}}\n"
    )
    with pytest.raises(ValueError, match="verl trains one actor"):
        setup_from_config(str(bad))
