"""Rollouts: agents (roles), policies, generation backends and the runner that drives many
multi-agent episodes at once, batching generation per policy across episodes and roles.
The backends a config selects (`rollout.backend`) are engines: srpo.rollout.backends.

    from srpo.rollout import AgentSpec, PolicySet, HFGenerateBackend, RolloutRunner
    policies = PolicySet.shared(model, tokenizer)
    runner = RolloutRunner([AgentSpec("solver"), AgentSpec("aggregator")],
                           HFGenerateBackend(policies), MathReward())
    episodes = runner.run(tasks, build_workflow("parallel", {"k": 3}), group_size=4).episodes
"""

from srpo.rollout.agents import AgentSpec, SamplingParams
from srpo.rollout.backends.hf import HFGenerateBackend
from srpo.rollout.backends.protocol import BackendStats, Generation, GenerationBackend, GenerationRequest
from srpo.rollout.policies import Policy, PolicySet
from srpo.rollout.runner import RolloutResult, RolloutRunner, rollout_metrics
from srpo.rollout.scripted import ScriptedBackend

__all__ = [
    "AgentSpec",
    "BackendStats",
    "Generation",
    "GenerationBackend",
    "GenerationRequest",
    "HFGenerateBackend",
    "Policy",
    "PolicySet",
    "RolloutResult",
    "RolloutRunner",
    "SamplingParams",
    "ScriptedBackend",
    "rollout_metrics",
]
