"""Generation backends: turn prompt token ids into response token ids (+ log-probs).

The runner hands a backend all pending requests of one policy in one call; the backend batches
them however it likes. A backend implements `GenerationBackend`:

    policies: PolicySet                     names + tokenizers (+ models) of its policies
    generate(policy, requests) -> [Generation, ...]   one per request, same order

Contract of a `Generation` (checked by the runner, errors name the agent):
  - token_ids: the response, >= 1 token. When the policy stopped by itself the eos token
    (`<|im_end|>`) is the LAST token and stop_reason == "eos" (kept so the model learns to
    stop); when the decoded response reached one of the request's stop strings
    (SamplingParams.stop) first, it ends with the token that completed it and stop_reason ==
    "stop"; otherwise stop_reason == "length" and there is no eos. An "empty" answer is the
    1-token response [eos].
  - logprobs: None, or one sampling-time log-prob per token (see HFGenerateBackend for which).

Built in: `HFGenerateBackend` (transformers `generate`) and `ScriptedBackend` (deterministic
text from a function, for tests). A vLLM backend only has to implement the same two members.
"""

from __future__ import annotations

import dataclasses

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

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


def check_training_backend(backend: Any) -> None:
    """Refuse a backend whose sampler is not the policy being trained. A backend says so with
    `samples_trained_policy() -> str | None`: None when it samples the trained weights exactly
    (up to float rounding), else why not (e.g. CTranslate2 int8: a quantized copy). A backend
    without the method is taken to sample the policy itself (hf, scripted)."""
    why = backend.samples_trained_policy() if hasattr(backend, "samples_trained_policy") else None
    if why is not None:
        raise ValueError(why)


def _check_requests(policy: str, requests: Sequence[GenerationRequest]) -> None:
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


class _StopStrings(StoppingCriteria):
    """Marks a row done once its generated tokens (after column `start`) contain a stop string.

    Only the last few tokens are decoded each step: a stop string of b bytes spans at most b
    tokens, and a row stops at the first step one appears.
    """

    def __init__(self, tokenizer: Any, stop: Sequence[str], start: int):
        self.tokenizer, self.stop, self.start = tokenizer, tuple(stop), start
        self.window = max(len(s.encode("utf-8")) for s in stop) + 1

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kw: Any) -> torch.Tensor:
        lo = max(self.start, input_ids.shape[1] - self.window)
        tails = self.tokenizer.batch_decode(input_ids[:, lo:].tolist(), skip_special_tokens=True)
        done = [any(s in t for s in self.stop) for t in tails]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


# --------------------------------------------------------------------------- HF generate


class _SampledLogprobRecorder(LogitsProcessor):
    """Records log p(sampled token) under the distribution it was sampled from.

    It runs LAST in the processor list, so the scores it sees are the ones HF samples from
    (after temperature / top-k / top-p). At step t it receives the ids sampled so far, so it
    gathers the token sampled at step t-1 from the scores it kept from step t-1; `finish`
    does the same for the last step. Only one step's scores are kept alive ([B, V]), instead of
    the [steps, B, V] that `output_scores=True` would hold.
    """

    def __init__(self) -> None:
        self.steps: list[torch.Tensor] = []  # each [B]
        self._prev: torch.Tensor | None = None  # [B, V] scores of the previous step
        self._prev_lse: torch.Tensor | None = None  # [B]

    def _take(self, sampled: torch.Tensor) -> None:
        assert self._prev is not None and self._prev_lse is not None
        picked = self._prev.gather(1, sampled.unsqueeze(1)).squeeze(1)
        self.steps.append(picked - self._prev_lse)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._prev is not None:
            self._take(input_ids[:, -1])
        self._prev = scores
        self._prev_lse = torch.logsumexp(scores.float(), dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:  # -> [B, steps]
        if self._prev is not None:
            self._take(sequences[:, -1])
            self._prev = self._prev_lse = None
        if not self.steps:
            return torch.zeros(sequences.shape[0], 0)
        return torch.stack(self.steps, dim=1).float().cpu()


class _InverseCdfSampler(LogitsProcessor):
    """Draws the next token itself and returns scores under which greedy decoding picks it.

    Exact sampling from softmax(scores) by inverse CDF: u ~ U(0, 1) times the total mass,
    token = first index whose cumulative probability exceeds u (float64 cumsum). Measured on
    [72, 49152] scores, 2 threads: 3.4 ms a step against 86 ms for the torch.multinomial that HF's
    sampling calls (21% of a default-job rollout). It runs after every warper and the log-prob
    recorder, so those see the distribution the token is drawn from; a token of probability 0
    (cut by top-k / top-p) is never drawn.
    """

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores.double(), dim=-1)  # [B, V]
        cdf = probs.cumsum(dim=-1)  # [B, V]
        u = torch.rand(scores.shape[0], 1, dtype=torch.float64, device=scores.device) * cdf[:, -1:]
        token = torch.searchsorted(cdf, u, right=True).clamp_(max=scores.shape[-1] - 1)  # [B, 1]
        forced = torch.full_like(scores, float("-inf"))
        return forced.scatter_(1, token, 0.0)


def prefill_shared_prompts(
    model: Any, input_ids: torch.Tensor, attention: torch.Tensor
) -> tuple[dict[str, Any], int] | None:
    """The KV cache of a left-padded batch's prompts, computed once per distinct prompt.

    input_ids, attention: [B, W] left-padded prompt rows (rows may repeat: G rollouts of one
    task share its prompt). Runs the model once over the distinct rows' first W - 1 columns and
    copies each one's cache to the rows that repeat it, so `generate` then feeds only the last
    prompt column (and computes the first step's scores itself, as without a cache). Rows hold
    exactly what a per-row prefill would give them (the same padding, positions and mask), up
    to float rounding of a smaller matmul. Returns ({generate's cache keyword: the cache},
    distinct rows), or None when no row repeats or the prompts are one column wide.

    Measured on SmolLM2-135M, 2 threads: the prefill of a 33-token prompt is 16% of generating 24
    tokens for 4 rows and 47% for 72 rows (the default job's round: 6 distinct prompts).
    """
    rows, width = input_ids.shape
    index: dict[tuple[int, ...], int] = {}  # prompt -> its distinct number
    distinct: list[int] = []  # [U] the first row of each distinct prompt
    source: list[int] = []  # [B] row -> distinct number
    for row, key in enumerate(map(tuple, input_ids.tolist())):
        if key not in index:
            index[key] = len(distinct)
            distinct.append(row)
        source.append(index[key])
    if len(distinct) == rows or width < 2:
        return None
    ids, mask = input_ids[distinct, :-1], attention[distinct, :-1]  # [U, W-1]
    # the positions generate gives a left-padded row: count of real tokens before it, pads at 0
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    # transformers 5.x names the cache `cache` (in outputs and generate's keywords); 4.x names
    # it `past_key_values`: read the name off the output and hand it back under that name
    name = "cache" if "cache" in out else "past_key_values"
    cache = out[name]
    cache.batch_select_indices(torch.tensor(source, device=input_ids.device))  # [U, ...] -> [B, ...]
    return {name: cache}, len(distinct)


class HFGenerateBackend:
    """transformers `model.generate`, batching every request of one policy.

    Requests of one call are grouped by sampling settings (HF applies one setting per batch)
    and, when a group exceeds `max_batch_size` rows, sorted by prompt length and cut into chunks;
    each chunk is one left-padded `generate` call (pad `<|endoftext|>`, attention mask; eos
    `<|im_end|>`). Unchunked, rows keep the request order.

    Sampling-time log-probs (record_logprobs=True): log-softmax of the scores the token was
    drawn from, i.e. after temperature, top-k and top-p, exactly as HF samples. Those warpers are
    passed as our own processors (HF's built-in ones are turned off) so that a recorder can run
    after them; the token is then drawn by our own inverse-CDF sampler (`_InverseCdfSampler`,
    25x faster than HF's torch.multinomial on a 49k vocabulary) and HF decodes "greedily" on
    it. Greedy decoding (temperature 0) records the log-softmax of the raw logits
    (temperature 1). Processors that the model's own generation_config turns on (e.g. a
    repetition_penalty) run before ours, so the recorded log-probs stay those sampled from.
    The trainer recomputes the ratio's old log-probs with its own forward pass at the member's
    temperature (and refuses top-k / top-p / greedy sampling in training); these feed the
    train/inference mismatch diagnostic.
    """

    def __init__(
        self,
        policies: PolicySet,
        *,
        max_batch_size: int | None = None,
        record_logprobs: bool = True,
        sampler: str = "inverse_cdf",
        share_prefill: bool = False,
    ):
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 or None, got {max_batch_size}")
        for name in policies.names:
            if policies[name].model is None:
                raise ValueError(f"HFGenerateBackend: policy {name!r} has no model")
        self.policies = policies
        self.max_batch_size = max_batch_size
        self.record_logprobs = record_logprobs
        if sampler not in ("inverse_cdf", "multinomial"):
            raise ValueError(f"sampler must be 'inverse_cdf' or 'multinomial', got {sampler!r}")
        self.sampler = sampler
        self.share_prefill = share_prefill
        self.stats = BackendStats()

    def generate(self, policy: str, requests: Sequence[GenerationRequest]) -> list[Generation]:
        _check_requests(policy, requests)
        self.stats.add_call(policy, len(requests))
        out: list[Generation | None] = [None] * len(requests)
        by_sampling: dict[SamplingParams, list[int]] = {}
        for i, r in enumerate(requests):
            by_sampling.setdefault(r.sampling, []).append(i)
        start = time.perf_counter()
        with self.policies.activated(policy) as pol:
            for sampling, rows in by_sampling.items():
                duplicates: dict[int, int] = {}  # row -> the identical row generated for it
                if sampling.greedy:
                    # Greedy decoding is deterministic: identical prompts (e.g. n debaters with
                    # one role at evaluation) are generated once and the result shared.
                    first: dict[tuple[int, ...], int] = {}
                    for i in rows:
                        duplicates[i] = first.setdefault(tuple(requests[i].prompt_ids), i)
                    rows = [i for i in rows if duplicates[i] == i]
                size = self.max_batch_size or len(rows)
                if size < len(rows):  # chunked: similar lengths together, less padding
                    rows = sorted(rows, key=lambda i: len(requests[i].prompt_ids))
                for c in range(0, len(rows), size):
                    chunk = rows[c : c + size]
                    gens = self._generate_batch(
                        pol.model, pol.tokenizer, [requests[i].prompt_ids for i in chunk], sampling
                    )
                    for i, g in zip(chunk, gens):
                        out[i] = g
                    self.stats.batches += 1
                for i, j in duplicates.items():
                    if i != j:
                        out[i] = dataclasses.replace(out[j], token_ids=list(out[j].token_ids))
        self.stats.seconds += time.perf_counter() - start
        self.stats.generated_tokens += sum(len(g.token_ids) for g in out if g is not None)
        return out  # type: ignore[return-value]

    def _generate_batch(
        self, model: Any, tokenizer: Any, prompts: Sequence[Sequence[int]], sampling: SamplingParams
    ) -> list[Generation]:
        pad_id, eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
        if pad_id is None or eos_id is None:
            raise ValueError("the tokenizer must define pad and eos tokens")
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: every prompt ends at column width-1
            input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[i, width - len(p) :] = 1
        processors = LogitsProcessorList()
        if not sampling.greedy:
            if sampling.temperature != 1.0:
                processors.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_k > 0:
                processors.append(TopKLogitsWarper(top_k=sampling.top_k))
            if sampling.top_p < 1.0:
                processors.append(TopPLogitsWarper(top_p=sampling.top_p))
        recorder = _SampledLogprobRecorder() if self.record_logprobs else None
        if recorder is not None:
            processors.append(recorder)
        own_draw = not sampling.greedy and self.sampler == "inverse_cdf"
        if own_draw:  # draws the token; HF then decodes "greedily" on its choice
            processors.append(_InverseCdfSampler())
        config = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            # HF's own warpers are off (temperature 1, no top-k/top-p): ours above do the same
            # thing in the same order and let the recorder see the final scores; the token is
            # drawn by our sampler, or by HF's multinomial
            do_sample=not sampling.greedy and not own_draw,
            num_beams=1,
            **({"temperature": 1.0, "top_k": 0, "top_p": 1.0} if not sampling.greedy and not own_draw else {}),
            # what the trainer's log-probs assume: no penalty a model folder's generation_config
            # may carry (Qwen2.5's sets repetition_penalty 1.05)
            repetition_penalty=1.0,
            eos_token_id=eos_id,
            pad_token_id=pad_id,
            bos_token_id=tokenizer.bos_token_id,
            use_cache=True,
        )
        stopping = StoppingCriteriaList()
        if sampling.stop:
            stopping.append(_StopStrings(tokenizer, sampling.stop, width))
        device = next(model.parameters()).device
        # eval mode while generating: in train mode a gradient-checkpointed model generates
        # without its KV cache (measured ~7x slower); the caller's mode is restored after
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                input_ids, attention = input_ids.to(device), attention.to(device)
                shared = prefill_shared_prompts(model, input_ids, attention) if self.share_prefill else None
                if shared is not None:
                    self.stats.prefill_rows_shared += len(prompts) - shared[1]
                sequences = model.generate(
                    input_ids=input_ids,
                    attention_mask=attention,
                    generation_config=config,
                    logits_processor=processors,
                    stopping_criteria=stopping,
                    **(shared[0] if shared is not None else {}),
                )
        finally:
            model.train(was_training)
        new = sequences[:, width:].cpu()
        logprobs = recorder.finish(sequences) if recorder is not None else None
        gens = []
        for i in range(len(prompts)):
            ids, reason = finish_tokens(
                new[i].tolist(), eos_id, sampling.max_new_tokens, stop=sampling.stop,
                decode=lambda x: tokenizer.decode(x, skip_special_tokens=True),
            )
            lps = logprobs[i, : len(ids)].tolist() if logprobs is not None else None
            gens.append(Generation(token_ids=ids, logprobs=lps, stop_reason=reason))
        return gens


# --------------------------------------------------------------------------- scripted

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
        _check_requests(policy, requests)
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
