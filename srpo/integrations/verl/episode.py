"""One srpo workflow episode driven by an async generate function (no verl import here).

The agent loop (agent_loop.py) runs inside verl's rollout: every session (one of rollout.n
rollouts of a prompt) is one episode. `run_episode` advances the workflow generator exactly as
srpo's RolloutRunner does (same request building, same output validation, same transition and
reward records: it reuses the runner's own steps), but sends each round's requests to an async
`generate(request) -> Generation` concurrently instead of a batched backend. `episode_records`
flattens the episode into one record per member, in set order, carrying the set metadata of
srpo.integrations.verl.fields.

Also here: the task <-> verl dataset row conversion that recipes/verl/prepare_data.py writes and
the agent loop reads, and `EpisodeSetup`, the workflow / agents / reward built from an srpo
config file (the same YAML as `srpo train`).
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from srpo.integrations.verl import fields
from srpo.rollout.agents import AgentSpec, check_agent_names
from srpo.rollout.backends.protocol import BackendStats, Generation, GenerationRequest
from srpo.rollout.policies import PolicySet
from srpo.rollout.runner import RewardFn, RolloutRunner
from srpo.types import Episode, Task
from srpo.workflows.base import Workflow

GenerateFn = Callable[[GenerationRequest], Awaitable[Generation]]


@dataclass
class EpisodeSetup:
    """What an episode needs besides the task and the generator."""

    workflow: Workflow
    agents: dict[str, AgentSpec]
    reward_fn: RewardFn
    policy: str  # the one policy verl trains (every agent names it)
    answer_key: Callable[[str], str | None] | None = None  # the task pack's (majority votes)
    # what becomes of an output a transition did not read (train.unconsumed, srpo.workflows.base)
    unconsumed: str = "in_set"
    unconsumed_reward: float = 0.0


def setup_from_config(path: str | None, overrides: Sequence[str] = ()) -> EpisodeSetup:
    """Workflow, agents and reward of an srpo config file (srpo.config.load_config).

    verl trains one actor, so every agent must name one and the same policy (policies.kind
    shared); a LoRA-per-role or separate-model layout raises here instead of being merged.
    Model, train, eval and checkpoint sections are ignored: verl's config owns those. The two
    train settings that change an episode's reward (train.cut_answers, train.overlong_penalty)
    are not applied under verl either, where the same episodes also score validation: a config
    that sets them gets a warning naming them rather than silently training without them.
    """
    from srpo.build import bind_environment, build_agents, build_workflow_from, task_pack
    from srpo.config import load_config

    # verl's own config owns the device and the output directory: no machine checks here
    cfg = load_config(path, list(overrides), check_machine=False)
    wf = bind_environment(build_workflow_from(cfg), cfg)
    agents = build_agents(cfg, wf)
    check_agent_names(getattr(wf, "agents", ()), agents, where=f"workflow {wf.name!r}")
    policies = sorted({a.policy for a in agents.values()})
    if cfg.policies.kind != "shared" or len(policies) != 1:
        raise ValueError(
            f"verl trains one actor model, but the srpo config has policies.kind "
            f"{cfg.policies.kind!r} with agents on {policies}: use policies.kind shared (one "
            f"policy; roles differ by prompt) for the verl integration"
        )
    _warn_reward_settings_not_applied(cfg.train, path)
    pack = task_pack(cfg)
    return EpisodeSetup(workflow=wf, agents=agents, reward_fn=pack.make_reward(cfg.task),
                        policy=policies[0], answer_key=pack.answer_key,
                        unconsumed=cfg.train.unconsumed, unconsumed_reward=cfg.train.unconsumed_reward)


def _warn_reward_settings_not_applied(train: Any, path: str | None) -> None:
    defaults = type(train).model_fields  # the schema's defaults leave rewards as the task's
    set_here = [f"train.{key}={getattr(train, key)!r}" for key in ("cut_answers", "overlong_penalty")
                if getattr(train, key) != defaults[key].default]
    if set_here:
        warnings.warn(f"srpo config {path or '(default)'}: {', '.join(set_here)} not applied under verl "
                      f"(its episodes score training and validation alike); cut answers are scored",
                      stacklevel=3)


class _NoBatchBackend:
    """Tokenizers for the runner's request building; generation goes through run_episode."""

    def __init__(self, tokenizer: Any, policy: str):
        self.policies = PolicySet.scripted(tokenizer, [policy])
        self.stats = BackendStats()

    def generate(self, policy: str, requests: Sequence[GenerationRequest]) -> list[Generation]:
        raise RuntimeError("run_episode generates through its async generate function")


async def run_episode(
    setup: EpisodeSetup,
    task: Task,
    tokenizer: Any,
    generate: GenerateFn,
    *,
    rollout_index: int = 0,
    seed: int = 0,
) -> Episode:
    """Run `setup.workflow` on `task`; each round's requests are generated concurrently."""
    runner = RolloutRunner(setup.agents, _NoBatchBackend(tokenizer, setup.policy), setup.reward_fn, seed=seed,
                           answer_key=setup.answer_key, unconsumed=setup.unconsumed,
                           unconsumed_reward=setup.unconsumed_reward)
    driver = runner.start_episode(task, setup.workflow, rollout_index=rollout_index)
    while not driver.done:
        driver.submit(await asyncio.gather(*(generate(r) for r in driver.requests)))
    return driver.finish()


def episode_records(episode: Episode) -> list[dict[str, Any]]:
    """One record per member, transitions in order and members in set order.

    Keys: prompt_ids, response_ids, response_mask (the member's loss mask: 0 on observation
    tokens), response_logprobs (None unless every token has one), reward_score (the episode's
    outcome reward: verl's rm_scores), extra_fields (fields.EXTRA_KEYS + reward_extra_info).
    """
    records = []
    returns = episode.set_returns()
    # a set's index in its episode identifies it (its turn does not: the singletons of the
    # outputs a transition did not read share that transition's turn)
    for set_in_episode, (aset, ret) in enumerate(zip(episode.transitions, returns)):
        for j, m in enumerate(aset.members):
            records.append({
                "prompt_ids": list(m.prompt_ids),
                "response_ids": list(m.response_ids),
                "response_mask": list(m.loss_mask),
                "response_logprobs": None if m.sampling_logprobs is None else list(m.sampling_logprobs),
                "reward_score": float(episode.reward),
                "extra_fields": {
                    fields.SET: set_in_episode,
                    fields.SET_SIZE: aset.size,
                    fields.MEMBER: j,
                    fields.AGENT: m.agent,
                    fields.POLICY: m.policy,
                    fields.EVENT: aset.event,
                    fields.SET_REWARD: float(ret),
                    fields.TASK_ID: aset.task_id,
                    fields.WORKFLOW: episode.workflow,
                    # verl copies the final output's reward_extra_info to every output
                    "reward_extra_info": dict(episode.reward_components),
                },
            })
    return records


# --------------------------------------------------------------------------- dataset rows

SRPO_TASK = "srpo_task"  # extra_info key: the srpo Task as JSON


def task_to_row(task: Task, *, data_source: str, agent_name: str = "srpo_workflow",
                index: int = 0) -> dict[str, Any]:
    """A verl RL dataset row (parquet) for an srpo task; the task itself rides in extra_info."""
    payload = {"task_id": task.task_id, "prompt": task.prompt, "answer": task.answer,
               "source": task.source, "metadata": dict(task.metadata)}
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": task.prompt}],
        "ability": "srpo",
        "reward_model": {"style": "rule", "ground_truth": task.answer or ""},
        "extra_info": {"index": index, SRPO_TASK: json.dumps(payload)},
        "agent_name": agent_name,
    }


def task_from_row(row: Mapping[str, Any]) -> Task:
    """The srpo task of a verl dataset row (as the agent loop receives it: dataset fields)."""
    extra = row.get("extra_info") or {}
    raw = extra.get(SRPO_TASK) if isinstance(extra, Mapping) else None
    if raw is not None:
        d = json.loads(raw) if isinstance(raw, str) else dict(raw)
        return Task(task_id=str(d["task_id"]), prompt=d["prompt"], answer=d.get("answer"),
                    source=d.get("source", ""), metadata=d.get("metadata") or {})
    messages = list(row.get("raw_prompt") or [])
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        raise ValueError(
            f"dataset row has neither extra_info.{SRPO_TASK} nor a user turn in raw_prompt; "
            f"write rows with recipes/verl/prepare_data.py"
        )
    rm = row.get("reward_model") or {}
    uid = row.get("uid", row.get("index", ""))
    return Task(task_id=str(uid), prompt=str(users[-1]["content"]), answer=rm.get("ground_truth"),
                source=str(row.get("data_source", "")))
