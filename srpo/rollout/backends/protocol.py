"""Generation backends: turn prompt token ids into response token ids (+ log-probs).

The runner hands a backend all pending requests of one policy in one call; the backend batches
them however it likes. A backend implements `GenerationBackend`:

    policies: PolicySet                     names + tokenizers (+ models) of its policies
    generate(policy, requests) -> [Generation, ...]   one per request, same order
    samples_trained_policy() -> str | None  optional: why its sampler is not the policy being
                                            trained (None, or no method: it is that policy)

Contract of a `Generation` (checked by the runner, errors name the agent):
  - token_ids: the response, >= 1 token. When the policy stopped by itself the eos token
    (`<|im_end|>`) is the LAST token and stop_reason == "eos" (kept so the model learns to
    stop); when the decoded response reached one of the request's stop strings
    (SamplingParams.stop) first, it ends with the token that completed it and stop_reason ==
    "stop"; otherwise stop_reason == "length" and there is no eos. An "empty" answer is the
    1-token response [eos].
  - logprobs: None, or one sampling-time log-prob per token (see HFGenerateBackend for which).

This module is the protocol and what every backend shares (the request and result types, the
token cut `finish_tokens`). The backends a config selects are engines (srpo.rollout.backends:
hf, ctranslate2, and any a package adds); `ScriptedBackend` (srpo.rollout.scripted) answers
from a function, for tests. A vLLM backend only has to implement the same members and declare
an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from srpo.rollout.agents import Message, SamplingParams
from srpo.rollout.policies import PolicySet

STOP_REASONS = ("eos", "length", "stop")


@dataclass(frozen=True)
class GenerationRequest:
    """One pending generation, as the runner hands it to a backend.

    prompt_ids: the exact tokens the policy is conditioned on (chat template applied).
    messages: the chat those tokens encode (scripted backends read it; real ones need not).
    """

    agent: str
    policy: str
    messages: tuple[Message, ...]
    prompt_ids: tuple[int, ...]  # [P]
    sampling: SamplingParams


@dataclass
class Generation:
    token_ids: list[int]  # [L] response tokens, eos last iff stop_reason == "eos"
    logprobs: list[float] | None  # [L] sampling-time log-probs, or None
    stop_reason: str  # "eos" | "length"


@dataclass
class BackendStats:
    """Counters a backend accumulates (the runner reports them per rollout)."""

    calls: int = 0  # generate() calls (one per policy per round)
    batches: int = 0  # model.generate batches (more than calls when chunked or sampling differs)
    requests: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    prefill_rows_shared: int = 0  # prompt rows whose prefill was copied from an identical row's
    calls_by_policy: dict[str, int] = field(default_factory=dict)

    def add_call(self, policy: str, n_requests: int) -> None:
        self.calls += 1
        self.requests += n_requests
        self.calls_by_policy[policy] = self.calls_by_policy.get(policy, 0) + 1


@runtime_checkable
class GenerationBackend(Protocol):
    policies: PolicySet
    stats: BackendStats

    def generate(self, policy: str, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """One Generation per request, in order. All requests name `policy`."""
        ...


def check_training_backend(backend: Any, *, corrected: bool = False) -> None:
    """Refuse a backend whose sampler is not the policy being trained, unless the update corrects
    for it (corrected: truncated importance sampling, train.tis_cap > 0). A backend says so with
    `samples_trained_policy() -> str | None`: None when it samples the trained weights exactly
    (up to float rounding), else why not (e.g. CTranslate2 int8: a quantized copy). A backend
    without the method is taken to sample the policy itself (hf, scripted)."""
    why = backend.samples_trained_policy() if hasattr(backend, "samples_trained_policy") else None
    if why is not None and not corrected:
        raise ValueError(f"{why}; or correct for it with truncated importance sampling "
                         f"(train.tis_cap, e.g. 2.0; docs/algorithms.md)")


def check_backend_args(backend: str, policies: Any, max_batch_size: int | None) -> None:
    """What every backend's constructor checks: a positive max_batch_size (or None) and a model
    for every policy (`backend` names the class in the error)."""
    if max_batch_size is not None and max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1 or None, got {max_batch_size}")
    for name in policies.names:
        if policies[name].model is None:
            raise ValueError(f"{backend}: policy {name!r} has no model")


def check_requests(policy: str, requests: Sequence[GenerationRequest]) -> None:
    """Every request names `policy` (the runner sends one policy's requests per call)."""
    for r in requests:
        if r.policy != policy:
            raise ValueError(
                f"request of agent {r.agent!r} names policy {r.policy!r} but was sent to the "
                f"generate call of policy {policy!r}"
            )


def finish_tokens(
    token_ids: Sequence[int], eos_id: int, max_new_tokens: int, *, stop: Sequence[str] = (),
    decode: Callable[[list[int]], str] | None = None,
) -> tuple[list[int], str]:
    """Keep at most max_new_tokens ids, cut after the first eos (kept) -> (ids, stop reason).

    stop: stop strings; when the decoded text reaches one before eos, the ids are cut after the
    token that completes it (kept) and the reason is "stop". decode: ids -> text (needed then).
    """
    ids = list(token_ids)[:max_new_tokens]
    end = ids.index(eos_id) if eos_id in ids else len(ids)
    cut = stop_index(ids[:end], stop, decode) if stop else None
    if cut is not None:
        return ids[: cut + 1], "stop"
    if end < len(ids):
        return ids[: end + 1], "eos"
    return ids, "length"


def stop_index(
    ids: Sequence[int], stop: Sequence[str], decode: Callable[[list[int]], str] | None
) -> int | None:
    """Index of the token whose decoding completes the first stop string, None if none does."""
    if decode is None:
        raise ValueError("stop strings need a decode function")
    ids = list(ids)
    if not any(s in decode(ids) for s in stop):
        return None
    lo, hi = 0, len(ids) - 1  # the shortest prefix ids[: i + 1] that contains a stop string
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in decode(ids[: mid + 1]) for s in stop):
            hi = mid
        else:
            lo = mid + 1
    return lo

