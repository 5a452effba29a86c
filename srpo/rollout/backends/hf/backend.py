"""The hf engine's backend: transformers `model.generate`, batching every request of one policy
(the contract of srpo.rollout.backends.protocol). What runs inside each generate step is
srpo.rollout.backends.hf.processors; the shared prompt prefill is .prefill."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import torch
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from srpo.rollout.agents import SamplingParams
from srpo.rollout.backends.hf.decode import decode_compacting
from srpo.rollout.backends.hf.merged import MergedLoraCopies
from srpo.rollout.backends.hf.prefill import prefill_shared_prompts
from srpo.rollout.backends.hf.processors import (
    InverseCdfSampler,
    SampledLogprobRecorder,
    StopStrings,
)
from srpo.rollout.backends.protocol import (
    BackendStats,
    Generation,
    GenerationRequest,
    check_backend_args,
    check_requests,
    finish_tokens,
)
from srpo.rollout.policies import PolicySet

SAMPLERS = ("inverse_cdf", "multinomial")


def contiguous_head_input(model: Any) -> Any:
    """A pre-hook on the model's lm_head that makes its input contiguous, for the duration of one
    generate call (returns its handle; None when the model has no output embedding).

    transformers computes the logits of the last position as lm_head(hidden[:, -1:, :]), a
    strided slice; torch's CPU linear cannot fold a non-contiguous 3-D input into one matmul and
    broadcasts the weight into a batched matmul instead: a [rows, H, V] copy of the head
    (measured: 2.1 s and 1.8 GB for 32 rows of SmolLM2 in bfloat16, 0.23 s in float32, against
    0.011 / 0.039 s contiguous). Removed after the call: the trainer's chunked log-probs take a
    faster path for a head without hooks (srpo.objective.logprobs)."""
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if head is None:
        return None
    return head.register_forward_pre_hook(lambda module, args: (args[0].contiguous(), *args[1:]))


class HFGenerateBackend:
    """transformers `model.generate`, batching every request of one policy.

    Requests of one call are grouped by sampling settings (HF applies one setting per batch)
    and, when a group exceeds `max_batch_size` rows, sorted by prompt length and cut into chunks;
    each chunk is one left-padded `generate` call (pad `<|endoftext|>`, attention mask; eos
    `<|im_end|>`). Unchunked, rows keep the request order.

    Sampling-time log-probs (record_logprobs=True): log-softmax of the scores the token was
    drawn from, i.e. after temperature, top-k and top-p, exactly as HF samples. Those warpers are
    passed as our own processors (HF's built-in ones are turned off) so that what runs after
    them sees the final scores: our own inverse-CDF sampler (`InverseCdfSampler`, which draws
    the token, records its log-prob from the same pass over the vocabulary, and hands HF scores
    on which it decodes "greedily"; HF's torch.multinomial took 67-86 ms a step on [72, 49152]
    scores), or, with sampler="multinomial" or greedy decoding, `SampledLogprobRecorder`.
    Greedy decoding (temperature 0) records the log-softmax of the raw logits (temperature 1).
    Processors that the model's own generation_config turns on (e.g. a repetition_penalty) run
    before ours, so the recorded log-probs stay those sampled from.
    The trainer recomputes the ratio's old log-probs with its own forward pass at the member's
    temperature (and refuses top-k / top-p / greedy sampling in training); these feed the
    train/inference mismatch diagnostic.

    compact_finished: generate with srpo's own decode loop, which drops the rows that have
    finished from the batch (srpo.rollout.backends.hf.decode) instead of running them to the
    longest row's end; the same computation per live row (tested token for token against
    `generate` in float32). It applies srpo's own processors only (temperature, top-k, top-p, the
    draw), not those a model's generation_config would add; HF's multinomial sampler keeps HF's
    loop.

    Generation runs in the policies' compute precision (PolicySet.compute: bf16 autocast when
    model.dtype resolves to bfloat16). merge_lora: a LoRA policy generates from a merged copy
    of itself, rebuilt after every change of its weights (srpo.rollout.backends.hf.merged).
    """

    def __init__(
        self,
        policies: PolicySet,
        *,
        max_batch_size: int | None = None,
        record_logprobs: bool = True,
        sampler: str = "inverse_cdf",
        share_prefill: bool = False,
        merge_lora: bool = False,
        compact_finished: bool = False,
    ):
        check_backend_args("HFGenerateBackend", policies, max_batch_size)
        self.policies = policies
        self.max_batch_size = max_batch_size
        self.record_logprobs = record_logprobs
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler must be 'inverse_cdf' or 'multinomial', got {sampler!r}")
        self.sampler = sampler
        self.share_prefill = share_prefill
        # LoRA policies generate from a merged copy (srpo.rollout.backends.hf.merged)
        self.merged = MergedLoraCopies() if merge_lora else None
        self.compact_finished = compact_finished
        self.stats = BackendStats()

    def generate(self, policy: str, requests: Sequence[GenerationRequest]) -> list[Generation]:
        check_requests(policy, requests)
        self.stats.add_call(policy, len(requests))
        out: list[Generation | None] = [None] * len(requests)
        by_sampling: dict[SamplingParams, list[int]] = {}
        for i, r in enumerate(requests):
            by_sampling.setdefault(r.sampling, []).append(i)
        start = time.perf_counter()
        with self.policies.activated(policy) as pol, self.policies.compute():
            model = self.merged.model_for(pol) if self.merged is not None and pol.adapter else pol.model
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
                        model, pol.tokenizer, [requests[i].prompt_ids for i in chunk], sampling
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
        warpers = []
        if not sampling.greedy:
            if sampling.temperature != 1.0:
                warpers.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_k > 0:
                warpers.append(TopKLogitsWarper(top_k=sampling.top_k))
            if sampling.top_p < 1.0:
                warpers.append(TopPLogitsWarper(top_p=sampling.top_p))
        own_draw = not sampling.greedy and self.sampler == "inverse_cdf"
        # srpo's own decode loop drops finished rows (srpo.rollout.backends.hf.decode); it draws
        # with the inverse-CDF sampler or greedily, so HF's multinomial keeps HF's loop
        compacting = self.compact_finished and (sampling.greedy or own_draw)
        # the draw records its own log-probs; otherwise (greedy, multinomial) a recorder runs
        # last in generate's processors (srpo's decode loop records greedy log-probs itself)
        draw = InverseCdfSampler(record=self.record_logprobs) if own_draw else None
        recorder = (SampledLogprobRecorder() if self.record_logprobs and draw is None and not compacting
                    else None)
        processors = LogitsProcessorList([*warpers, *(p for p in (recorder, draw) if p is not None)])
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
            stopping.append(StopStrings(tokenizer, sampling.stop, width))
        device = next(model.parameters()).device
        # eval mode while generating: in train mode a gradient-checkpointed model generates
        # without its KV cache (measured ~7x slower); the caller's mode is restored after
        was_training = model.training
        model.eval()
        head_hook = contiguous_head_input(model)
        try:
            with torch.inference_mode():
                input_ids, attention = input_ids.to(device), attention.to(device)
                shared = prefill_shared_prompts(model, input_ids, attention) if self.share_prefill else None
                if shared is not None:
                    self.stats.prefill_rows_shared += len(prompts) - shared[1]
                if compacting:
                    new, logprobs = decode_compacting(
                        model, input_ids, attention, processors=warpers, draw=draw,
                        stop=(lambda ids: stopping(ids, None)) if sampling.stop else None,
                        max_new_tokens=sampling.max_new_tokens, eos_id=eos_id, pad_id=pad_id,
                        record=self.record_logprobs,
                        shared=next(iter(shared[0].items())) if shared is not None else None,
                    )
                    new = new.cpu()
                    logprobs = logprobs.cpu() if logprobs is not None else None
                else:
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
            if head_hook is not None:
                head_hook.remove()
        if not compacting:
            new = sequences[:, width:].cpu()
            logger = draw if draw is not None else recorder
            logprobs = logger.finish(sequences) if self.record_logprobs and logger is not None else None
        gens = []
        for i in range(len(prompts)):
            ids, reason = finish_tokens(
                new[i].tolist(), eos_id, sampling.max_new_tokens, stop=sampling.stop,
                decode=lambda x: tokenizer.decode(x, skip_special_tokens=True),
            )
            lps = logprobs[i, : len(ids)].tolist() if logprobs is not None else None
            gens.append(Generation(token_ids=ids, logprobs=lps, stop_reason=reason))
        return gens
