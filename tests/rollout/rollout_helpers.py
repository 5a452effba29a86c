"""Helpers and fixtures of the rollout tests: scripted agents, tiny tasks, tokenizer, model.

Not a conftest.py on purpose: tests/unit does `from conftest import make_episodes`, and with
pytest's default (prepend) import mode a second conftest.py would shadow that module. Test
files import the fixtures they use from here.
"""

from __future__ import annotations

import pytest
import torch

from srpo.models import build_byte_tokenizer, build_tiny_model
from srpo.rollout import AgentSpec, PolicySet, RolloutRunner, SamplingParams, ScriptedBackend
from srpo.rollout.backends.protocol import GenerationRequest
from srpo.tasks.math import MathReward
from srpo.types import Task


@pytest.fixture(scope="session")
def tok():
    return build_byte_tokenizer()


@pytest.fixture(scope="session")
def tiny():
    """(model, tokenizer): the random tiny Llama with the byte tokenizer."""
    return build_tiny_model(seed=0)


ROLES = (
    "solver", "verifier", "reviser", "aggregator", "debater", "planner", "worker", "router",
    "arithmetic_expert", "algebra_expert", "checker",
)


def make_tasks(n: int = 3, answer: str = "4") -> list[Task]:
    return [Task(task_id=f"t{i}", prompt=f"What is {i} + 4 - {i}?", answer=answer) for i in range(n)]


def make_agents(policy_of=None, max_new_tokens: int = 64, **sampling) -> list[AgentSpec]:
    policy_of = policy_of or {}
    sp = SamplingParams(max_new_tokens=max_new_tokens, **sampling)
    return [
        AgentSpec(r, policy=policy_of.get(r, "shared"), system_prompt=f"You are the {r}.",
                  sampling=sp)
        for r in ROLES
    ]


def default_script(req) -> str:
    """Deterministic replies: the router picks two experts, the planner writes two steps,
    everyone else answers 4 in a box."""
    if req.agent == "router":
        return "algebra_expert, checker"
    if req.agent == "planner":
        return "1. add the numbers\n2. state the answer"
    return "so the answer is \\boxed{4}"


def scripted_runner(tok, script=default_script, *, policies=("shared",), policy_of=None,
                    reward=None, logprob=None, seed=0, overlong_penalty=0.0, cut_answers="score",
                    unconsumed="singleton", **agent_kw):
    backend = ScriptedBackend(PolicySet.scripted(tok, policies), script, logprob=logprob)
    runner = RolloutRunner(make_agents(policy_of, **agent_kw), backend,
                           reward or MathReward(correct_weight=1.0, format_weight=0.1),
                           seed=seed, overlong_penalty=overlong_penalty, cut_answers=cut_answers,
                           unconsumed=unconsumed)
    return runner, backend


def backend_requests(tok, texts, sampling, policy="shared"):
    return [
        GenerationRequest("a", policy, (), tuple(tok(t, add_special_tokens=False)["input_ids"]), sampling)
        for t in texts
    ]


def reference_logprobs(model, prompt, response, sampling):
    """log-softmax of the processed logits (temperature, top-k, top-p), by hand."""
    ids = torch.tensor([list(prompt) + list(response)])
    with torch.no_grad():
        z = model(ids).logits[0, len(prompt) - 1 : -1].float()
    if sampling.temperature > 0:
        z = z / sampling.temperature
    if sampling.top_k:
        kth = z.topk(sampling.top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if sampling.top_p < 1:
        sorted_z, order = z.sort(dim=-1)  # ascending, as HF's TopPLogitsWarper
        cum = sorted_z.softmax(-1).cumsum(-1)
        drop = cum <= 1 - sampling.top_p
        drop[:, -1] = False
        z = z.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return z.log_softmax(-1).gather(1, torch.tensor(response)[:, None])[:, 0]
