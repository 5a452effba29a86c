"""A user-written workflow with a tool call (one file, no library change): observation tokens
inserted into a member's response get loss_mask 0, and the agent continues after them."""

from __future__ import annotations

import re

import pytest
import torch
from rollout_helpers import make_agents, make_tasks, scripted_runner, tiny, tok  # noqa: F401 (fixtures)

from srpo.batch import build_flat_batch
from srpo.rollout import HFGenerateBackend, PolicySet, RolloutRunner
from srpo.tasks.math import MathReward
from srpo.workflows import Continue, Request, register_workflow, registry
from srpo.workflows.registry import build_workflow, list_workflows


class CalculatorWorkflow:
    """The solver may write CALC: <expr>; the tool's result is appended to its response and it
    goes on. One member (gen + observation + gen), one set of size 1."""

    name = "calculator"
    description = "a solver with a calculator tool (multi-turn member)"
    agents = ("solver",)

    def __init__(self, max_calls: int = 2):
        self.max_calls = max_calls

    def run(self, task, ctx):
        out = yield Request("solver", task.prompt)
        for _ in range(self.max_calls):
            call = re.search(r"CALC: ([0-9+\-* ]+)$", out.last_text.strip())
            if call is None:
                break
            result = eval(call.group(1), {"__builtins__": {}})  # a toy tool, trusted input
            ctx.observe(out, f"\n<result>{result}</result>\n")
            out = yield Continue(out)
        ctx.transition("solve", [out])
        return ctx.score(out)


def tool_script(tok):
    def reply(req):
        seen = tok.decode(list(req.prompt_ids))
        return "done: \\boxed{4}" if "<result>4</result>" in seen else "CALC: 2 + 2"
    return reply


def test_observation_tokens_are_masked_and_the_agent_continues(tok):
    runner, backend = scripted_runner(tok, tool_script(tok), logprob=-1.0)
    eps = runner.run(make_tasks(2), CalculatorWorkflow(), group_size=2).episodes
    eos = tok.eos_token_id
    gen1 = tok("CALC: 2 + 2", add_special_tokens=False)["input_ids"] + [eos]
    obs = tok("\n<result>4</result>\n", add_special_tokens=False)["input_ids"]
    gen2 = tok("done: \\boxed{4}", add_special_tokens=False)["input_ids"] + [eos]
    for e in eps:
        (aset,) = e.transitions
        (m,) = aset.members
        assert m.response_ids == gen1 + obs + gen2
        assert m.loss_mask == [1] * len(gen1) + [0] * len(obs) + [1] * len(gen2)
        assert m.sampling_logprobs == [-1.0] * len(gen1) + [0.0] * len(obs) + [-1.0] * len(gen2)
        assert m.text == "CALC: 2 + 2\n<result>4</result>\ndone: \\boxed{4}"
        # prompt_ids stay the original prompt: the continuation is part of the response
        assert tok.decode(m.prompt_ids).endswith("<|im_start|>assistant\n")
        assert e.reward == pytest.approx(1.1)  # correct 1 + format 0.1
    # two rounds, each one batched call over the 4 episodes
    assert backend.calls == [("shared", ["solver"] * 4)] * 2
    batch = build_flat_batch(eps, pad_token_id=tok.pad_token_id)
    assert batch.response_mask[0].tolist()[: len(m.loss_mask)] == [bool(x) for x in m.loss_mask]


def test_continue_after_consumption_is_an_error(tok):
    class Bad:
        name, description, agents = "bad", "continues a consumed output", ("solver",)

        def run(self, task, ctx):
            out = yield Request("solver", task.prompt)
            ctx.transition("solve", [out])
            out = yield Continue(out)
            return ctx.score(out)

    runner, _ = scripted_runner(tok)
    with pytest.raises(ValueError, match="cannot continue the output of agent 'solver'; it was already consumed"):
        runner.run(make_tasks(1), Bad())


def test_tool_workflow_on_a_tiny_model(tiny):
    """With a real model the continuation is conditioned on prompt + response + observation."""

    class AlwaysTool(CalculatorWorkflow):
        def run(self, task, ctx):
            out = yield Request("solver", task.prompt)
            ctx.observe(out, "<result>7</result>")
            out = yield Continue(out)
            ctx.transition("solve", [out])
            return ctx.score(out)

    model, tok = tiny
    runner = RolloutRunner(make_agents(max_new_tokens=4, temperature=0),
                           HFGenerateBackend(PolicySet.shared(model, tok)), MathReward())
    (ep,) = runner.run(make_tasks(1), AlwaysTool()).episodes
    (m,) = ep.transitions[0].members
    obs = tok("<result>7</result>", add_special_tokens=False)["input_ids"]
    n1 = m.loss_mask.index(0)
    assert m.response_ids[n1 : n1 + len(obs)] == obs
    assert m.loss_mask == [1] * n1 + [0] * len(obs) + [1] * (len(m.response_ids) - n1 - len(obs))
    # the second generation is what greedy decoding gives after prompt + gen1 + observation
    ctx_ids = torch.tensor([m.prompt_ids + m.response_ids[: n1 + len(obs)]])
    with torch.no_grad():
        first_next = model(ctx_ids).logits[0, -1].argmax().item()
    assert m.response_ids[n1 + len(obs)] == first_next


def test_registering_a_user_workflow(monkeypatch):
    monkeypatch.setattr(registry.WORKFLOWS, "_registered", registry.WORKFLOWS.registered())  # keep it clean
    register_workflow(CalculatorWorkflow)
    assert ("calculator", CalculatorWorkflow.description) in list_workflows()
    wf = build_workflow("calculator", {"max_calls": 1})
    assert wf.max_calls == 1
    with pytest.raises(ValueError, match=r"has no parameter\(s\) \['calls'\]; its parameters: \['max_calls'\]"):
        build_workflow("calculator", {"calls": 1})
