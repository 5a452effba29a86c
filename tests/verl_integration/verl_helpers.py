"""Helpers of the verl integration tests (tests/verl_integration): a composed verl config, synthetic
multi-agent rows, verl's micro-batch pipeline replayed on CPU, a scripted generation server.

Not a conftest.py (see tests/rollout/rollout_helpers.py): test files import from here after
`pytest.importorskip("verl")`.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import torch
import verl
from verl.workers.rollout.replica import TokenOutput


def verl_config(*overrides: str):
    """verl 0.9.1's own ppo_trainer config (hydra compose), with srpo settings + overrides."""
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    base = [
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.actor.policy_loss.loss_mode=srpo",
        "actor_rollout_ref.actor.clip_ratio_low=0.01",
        "actor_rollout_ref.actor.clip_ratio_high=0.013",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.use_dynamic_bsz=False",
        "actor_rollout_ref.actor.shuffle=False",
        "algorithm.adv_estimator=srpo",
    ]
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=base + list(overrides))


@dataclass
class Row:
    """One member as verl stores it: key '{uid}_{session}_{index}', set key, tokens, reward."""

    key: str
    uid: str
    set_key: str
    prompt: list[int]
    response: list[int]
    mask: list[int]
    reward: float


def make_rows(num_prompts=3, sessions=4, set_sizes=(3, 1), seed=0, max_resp=6) -> list[Row]:
    """Episodes of a parallel-k workflow: per session, a set of k solvers then an aggregator;
    every member of an episode carries the episode's outcome reward (0 or 1)."""
    rng = random.Random(seed)
    rows = []
    for p in range(num_prompts):
        uid = f"u{p}"
        for s in range(sessions):
            reward = float(rng.random() < 0.5)
            index = 0
            for turn, k in enumerate(set_sizes):
                for _ in range(k):
                    length = rng.randint(1, max_resp)
                    mask = [1] * length
                    if length >= 4:
                        mask[1] = 0  # an observation token
                    rows.append(Row(
                        key=f"{uid}_{s}_{index}", uid=uid, set_key=f"{uid}_{s}/{turn}",
                        prompt=[rng.randrange(3, 200) for _ in range(rng.randint(1, 5))],
                        response=[rng.randrange(3, 200) for _ in range(length)], mask=mask,
                        reward=reward,
                    ))
                    index += 1
    return rows


def padded(rows_values, width=None, fill=0.0, dtype=torch.float32):
    width = width or max(len(v) for v in rows_values)
    out = torch.full((len(rows_values), width), fill, dtype=dtype)
    for i, v in enumerate(rows_values):
        out[i, : len(v)] = torch.tensor(v, dtype=dtype)
    return out


def nested(rows_values, dtype):
    return torch.nested.as_nested_tensor([torch.tensor(v, dtype=dtype) for v in rows_values], layout=torch.jagged)


class ScriptedServer:
    """An async generation server with verl's LLMServerClient.generate signature: the reply is
    script(prompt text) tokenized + eos, cut at sampling_params["max_tokens"]; every token gets
    log-prob `logprob`. Records each call's sampling params."""

    def __init__(self, tokenizer, script, logprob=-0.5):
        self.tok, self.script, self.logprob = tokenizer, script, logprob
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        self.calls.append(dict(sampling_params))
        text = self.tok.decode(prompt_ids, skip_special_tokens=False)
        ids = list(self.tok(self.script(text), add_special_tokens=False)["input_ids"]) + [self.tok.eos_token_id]
        ids = ids[: sampling_params.get("max_tokens", len(ids))]
        return TokenOutput(token_ids=ids, log_probs=[self.logprob] * len(ids), stop_reason="completed")
