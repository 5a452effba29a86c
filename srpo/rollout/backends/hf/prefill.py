"""Shared prompt prefill for the hf engine (rollout.hf.share_prefill): the KV cache of each
distinct prompt of a generate batch computed once and copied to the rows that repeat it."""

from __future__ import annotations

from typing import Any

import torch

from srpo.objective.logprobs import distinct_rows


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
    distinct, source = distinct_rows(input_ids)  # [U] first row of each distinct prompt, [B] row -> its number
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
    cache.batch_select_indices(source)  # [U, ...] -> [B, ...]
    return {name: cache}, len(distinct)
