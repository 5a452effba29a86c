"""ScriptedBackend: deterministic text from a function, for tests and examples (no model).

Not an engine a config selects (it needs a script, which is code): tests and docs build it
directly, `ScriptedBackend(PolicySet.scripted(tokenizer, names), script)`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from srpo.rollout.backends.protocol import (
    BackendStats,
    Generation,
    GenerationRequest,
    check_requests,
    finish_tokens,
)
from srpo.rollout.policies import PolicySet

Script = Callable[[GenerationRequest], "str | Sequence[int]"]


class ScriptedBackend:
    """Deterministic outputs from a script, for tests and examples (no model).

    script: `f(request) -> text` (or a list of token ids, used verbatim: [] makes a backend
        that returns zero tokens), or a mapping agent -> text | f. Text is tokenized with the
        policy's tokenizer and eos is appended, then cut after the request's first stop string
        (stop_reason = "stop") and to `max_new_tokens` (then stop_reason = "length", no eos).
        Text "" gives the 1-token response [eos].
    logprob: the log-prob recorded for every token (None = record none).
    calls: (policy, [agent of each request]) per generate call, to check batching.
    """

    def __init__(
        self,
        policies: PolicySet,
        script: Script | Mapping[str, str | Script],
        *,
        logprob: float | None = None,
    ):
        self.policies = policies
        self.script = script
        self.logprob = logprob
        self.stats = BackendStats()
        self.calls: list[tuple[str, list[str]]] = []

    def _respond(self, r: GenerationRequest) -> str | Sequence[int]:
        if callable(self.script):
            return self.script(r)
        if r.agent not in self.script:
            raise ValueError(
                f"ScriptedBackend has no script for agent {r.agent!r}; scripted agents: "
                f"{sorted(self.script)}"
            )
        entry = self.script[r.agent]
        return entry(r) if callable(entry) else entry

    def generate(self, policy: str, requests: Sequence[GenerationRequest]) -> list[Generation]:
        check_requests(policy, requests)
        self.stats.add_call(policy, len(requests))
        self.stats.batches += 1
        self.calls.append((policy, [r.agent for r in requests]))
        tok = self.policies[policy].tokenizer
        out = []
        for r in requests:
            reply = self._respond(r)
            if isinstance(reply, str):
                ids = list(tok(reply, add_special_tokens=False)["input_ids"]) + [tok.eos_token_id]
                ids, reason = finish_tokens(
                    ids, tok.eos_token_id, r.sampling.max_new_tokens, stop=r.sampling.stop,
                    decode=lambda x: tok.decode(x, skip_special_tokens=True),
                )
            else:
                ids = list(reply)
                reason = "eos" if ids and ids[-1] == tok.eos_token_id else "length"
            lps = None if self.logprob is None else [float(self.logprob)] * len(ids)
            out.append(Generation(token_ids=ids, logprobs=lps, stop_reason=reason))
        self.stats.generated_tokens += sum(len(g.token_ids) for g in out)
        return out
