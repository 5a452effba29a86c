"""The hf engine's own decode loop (rollout.hf.compact_finished): generate's greedy decoding on
the processors' scores, with the rows that have finished dropped from the batch.

transformers `generate` runs every row of a batch until the last one stops: a row that ended
at its 8th token is still run through the whole model for the 16 steps after. In the default
job's rollouts 20-45% of the rows end early (their mean length is 18-20 of 24 tokens), so that
is 17-25% of the decode's row-steps. This loop keeps a batch of live rows and, once enough of
them have finished, selects the live rows of the KV cache, the attention mask and the ids
(one copy of the cache, so not after every finished row: see `compact_when`).

    new, logprobs = decode_compacting(model, input_ids, attention, processors=[...], draw=sampler_or_None, ...)
    # new: [B, max_new_tokens] tokens, pad after a row's eos or stop; logprobs: [B, max_new_tokens]

What it computes is what `generate` computes for the same rows (the same prompt layout,
positions, mask and cache; tested token for token in float32): left-padded prompts, position
ids counting each row's real tokens, one new column a step. A row's log-prob at a step is
recorded while the row is live: by the draw (`InverseCdfSampler(record=True)`) when sampling,
else the log-softmax of the final scores at the greedy token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from srpo.rollout.backends.hf.processors import InverseCdfSampler

# compact once at least this share of the live rows has finished (one copy of the KV cache
# each time; measured on the default job's 216-row steps, docs/benchmarks.md)
COMPACT_SHARE = 0.25


def compact_when(finished: int, live: int) -> bool:
    """Whether to drop the finished rows now: when they are a quarter of the live batch."""
    return finished > 0 and finished >= COMPACT_SHARE * live


def _select_rows(cache: Any, rows: torch.Tensor) -> None:
    """Keep `rows` ([B'] indices) of every layer of a transformers cache, in place."""
    select = getattr(cache, "batch_select_indices", None)
    if select is None:
        raise TypeError(f"{type(cache).__name__} cannot select batch rows: rollout.hf.compact_finished "
                        "needs a transformers DynamicCache")
    select(rows)


def decode_compacting(
    model: Any,
    input_ids: torch.Tensor,
    attention: torch.Tensor,
    *,
    processors: Sequence[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]],
    draw: InverseCdfSampler | None,
    stop: Callable[[torch.Tensor], torch.Tensor] | None,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    record: bool,
    shared: tuple[str, Any] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Decode up to max_new_tokens for each left-padded prompt row, dropping finished rows.

    input_ids, attention: [B, W] left-padded prompts. processors: the warpers (temperature,
    top-k, top-p) applied in order to the step's float32 scores of the live rows. draw: the
    sampler that picks each token (it marks it as the maximum); None = greedy. stop(ids) -> [B']
    bool: a stop-string check of the live rows' ids so far (None: eos only). shared: (the
    cache's keyword, a cache of columns 0..W-2 for every row) from the shared prompt prefill;
    None = prefill here. Returns the new tokens [B, max_new_tokens] (pad after a row's end) and,
    with record, the log-prob of each under the scores it was drawn from (0 past a row's end).
    """
    rows = input_ids.shape[0]
    device = input_ids.device
    tokens = torch.full((rows, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logprobs = torch.zeros(rows, max_new_tokens, device=device) if record else None
    live = torch.arange(rows, device=device)  # [B'] original row of each live row
    ids, mask = input_ids, attention  # [B', W + t] of the live rows
    # generate's positions for a left-padded row: its real tokens counted from 0, pads at 1
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)  # [B, W]
    next_position = positions[:, -1] + 1  # [B']
    if shared is not None:  # the cache holds columns 0..W-2: feed the last prompt column
        name, cache = shared
        out = model(input_ids=ids[:, -1:], attention_mask=mask, position_ids=positions[:, -1:],
                    use_cache=True, logits_to_keep=1, **{name: cache})
    else:
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                    logits_to_keep=1)
        name = "cache" if "cache" in out else "past_key_values"  # transformers 5.x / 4.x
    cache = out[name]
    # [B'] finished, by row of the batch; a compaction drops every finished row, so done.sum()
    # counts the finished rows still in the batch
    done = torch.zeros(rows, dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
        scores = out.logits[:, -1, :].to(dtype=torch.float32, copy=True)  # [B', V]
        for processor in processors:
            scores = processor(ids, scores)
        if draw is not None:
            token = draw(ids, scores).argmax(dim=-1)  # [B'] the drawn token, marked +inf
            if record:
                picked = draw.steps.pop()  # [B'] its log-prob, recorded by the draw
        else:
            token = scores.argmax(dim=-1)
            if record:
                picked = scores.gather(1, token[:, None]).squeeze(1) - torch.logsumexp(scores, dim=-1)
        token = token.masked_fill(done, pad_id)  # finished rows (not yet dropped) add padding
        tokens[live, step] = token
        if record:
            logprobs[live, step] = picked.masked_fill(done, 0.0)
        ids = torch.cat([ids, token[:, None]], dim=1)
        mask = torch.cat([mask, (~done).to(mask.dtype)[:, None]], dim=1)
        ended = ~done & (token == eos_id)
        if stop is not None:
            ended |= ~done & stop(ids)
        done |= ended
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        if compact_when(int(done.sum()), len(live)):
            keep = (~done).nonzero().squeeze(1)  # [B''] live rows that go on
            _select_rows(cache, keep)
            live, ids, mask = live[keep], ids[keep], mask[keep]
            next_position, done = next_position[keep], done[keep]
        out = model(input_ids=ids[:, -1:], attention_mask=mask, position_ids=next_position[:, None],
                    use_cache=True, logits_to_keep=1, **{name: cache})
        next_position = next_position + 1
    return tokens, logprobs
