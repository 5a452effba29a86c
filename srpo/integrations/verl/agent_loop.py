"""A verl agent loop (AgentLoopBase) that runs srpo workflows inside verl's rollout.

verl runs one agent loop per session (one of rollout.n rollouts of a prompt) and, in its V1
trainer (trainer.use_v1=True, the default in 0.9.1), accepts a *list* of outputs from it: each
becomes its own training row under the key "{uid}_{session_id}_{index}". This loop runs the
configured srpo workflow for the session's task (srpo.integrations.verl.episode.run_episode:
the workflow's requests go to verl's LLM server, concurrently within a round) and returns one
output per member of every active set, in set order, each carrying its set id, agent, policy,
event key and set return in `extra_fields` (srpo.integrations.verl.fields). The trainer reads
them back to keep sets whole (trainer.py).

Register it with an agent loop config file (actor_rollout_ref.rollout.agent.agent_loop_config_path,
see recipes/verl/agent_loop.yaml):

    - name: srpo_workflow
      _target_: srpo.integrations.verl.agent_loop.SrpoWorkflowAgentLoop
      srpo_config: /abs/path/to/recipes/verl/math_parallel.srpo.yaml   # an srpo config file
      srpo_overrides: []                                               # key=value overrides
      seed: 0

Sampling: temperature / top-p / top-k come from verl's rollout config (the trainer recomputes
log-probs at rollout.temperature, so per-agent temperatures would be wrong there); each agent's
srpo settings contribute its max_new_tokens (capped by rollout.response_length) and stop strings.
Prompts longer than rollout.prompt_length and members longer than rollout.response_length
raise (the session fails and verl's replay buffer drops its prompt group) instead of being cut.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from srpo.integrations.verl.episode import (
    EpisodeSetup,
    episode_records,
    run_episode,
    setup_from_config,
    task_from_row,
)
from srpo.rollout.backends.protocol import Generation, GenerationRequest, finish_tokens


@functools.lru_cache(maxsize=8)
def _cached_setup(path: str | None, overrides: tuple[str, ...]) -> EpisodeSetup:
    # one build per worker process (a search corpus / index is loaded once, not per session)
    return setup_from_config(path, overrides)


class SrpoWorkflowAgentLoop(AgentLoopBase):
    """Runs an srpo workflow per session; returns one output per active-set member."""

    def __init__(
        self,
        *args: Any,
        srpo_config: str | None = None,
        srpo_overrides: Sequence[str] = (),
        seed: int = 0,
        setup: EpisodeSetup | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.setup = setup if setup is not None else _cached_setup(srpo_config, tuple(srpo_overrides or ()))
        self.seed = int(seed)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.engine = str(self.rollout_config.get("name", "vllm"))

    def _sampling(self, base: dict[str, Any], req: GenerationRequest) -> dict[str, Any]:
        sp = dict(base)
        sp["max_tokens"] = min(req.sampling.max_new_tokens, self.response_length)
        if req.sampling.stop:
            sp["stop"] = list(req.sampling.stop)
            if self.engine == "vllm":
                sp["include_stop_str_in_output"] = True
            elif self.engine == "sglang":
                sp["no_stop_trim"] = True
        return sp

    async def _generate(self, base: dict[str, Any], req: GenerationRequest) -> Generation:
        if len(req.prompt_ids) > self.prompt_length + self.response_length:
            raise ValueError(
                f"agent {req.agent!r}: context of {len(req.prompt_ids)} tokens exceeds "
                f"rollout.prompt_length + response_length; raise them"
            )
        sp = self._sampling(base, req)
        out = await self.server_manager.generate(
            request_id=uuid4().hex, prompt_ids=list(req.prompt_ids), sampling_params=sp
        )
        if out.stop_reason == "aborted":
            raise RuntimeError(f"agent {req.agent!r}: the LLM server aborted the generation")
        tok = self.tokenizer
        ids, reason = finish_tokens(
            list(out.token_ids), tok.eos_token_id, sp["max_tokens"], stop=req.sampling.stop,
            decode=lambda x: tok.decode(x, skip_special_tokens=True),
        )
        logprobs = list(out.log_probs[: len(ids)]) if out.log_probs else None
        return Generation(token_ids=ids, logprobs=logprobs, stop_reason=reason)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        task = task_from_row(kwargs)
        session = int(kwargs.get("session_id", 0))
        episode = await run_episode(
            self.setup, task, self.tokenizer,
            lambda req: self._generate(sampling_params, req),
            rollout_index=session, seed=self.seed,
        )
        outputs = []
        for rec in episode_records(episode):
            ex = rec["extra_fields"]
            if len(rec["prompt_ids"]) > self.prompt_length:
                raise ValueError(
                    f"task {task.task_id!r}, agent {ex['srpo_agent']!r}: prompt of "
                    f"{len(rec['prompt_ids'])} tokens > rollout.prompt_length={self.prompt_length}"
                )
            if len(rec["response_ids"]) > self.response_length:
                raise ValueError(
                    f"task {task.task_id!r}, agent {ex['srpo_agent']!r}: response of "
                    f"{len(rec['response_ids'])} tokens > rollout.response_length={self.response_length}"
                )
            outputs.append(AgentLoopOutput(
                prompt_ids=rec["prompt_ids"],
                response_ids=rec["response_ids"],
                response_mask=rec["response_mask"],
                response_logprobs=rec["response_logprobs"],
                reward_score=rec["reward_score"],
                num_turns=2,
                metrics=AgentLoopMetrics(),
                extra_fields=ex,
            ))
        return outputs
