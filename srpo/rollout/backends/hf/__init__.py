"""The hf backend (`rollout.backend: hf`, the config default): transformers `generate`.

Its section, `rollout.hf`:

    sampler: inverse_cdf     # how a sampled token is drawn: srpo's own inverse-CDF draw (~2 ms
                             # against 67-86 ms a step on 72 x 49k scores) or "multinomial" (HF's
                             # torch.multinomial); the same distribution, other random draws
    share_prefill: true      # prefill each distinct prompt of a generate batch once and copy its
                             # KV cache to the rows that repeat it (G rollouts of a task, debaters
                             # of one role); the same tokens and log-probs up to float rounding
    merge_lora: false        # LoRA policies generate from a copy with the adapter merged into
                             # the base (one matmul a layer instead of three), re-merged in place
                             # after every optimizer step; the same policy up to float rounding
    compact_finished: false  # srpo's own decode loop: rows that have finished leave the batch
                             # (a quarter of it at a time) instead of running to the longest
                             # row's end; generate's computation for every live row

It samples the policy being trained itself (no `samples_trained_policy` needed). The backend is
HFGenerateBackend (.backend); the per-step processors and the shared prefill are .processors and
.prefill.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from srpo.rollout.backends import BackendSettings, BackendSpec
from srpo.rollout.backends.hf.backend import SAMPLERS, HFGenerateBackend
from srpo.rollout.backends.hf.prefill import prefill_shared_prompts


class HFSettings(BackendSettings):
    """`rollout.hf`: the hf backend's own settings (module doc)."""

    sampler: str = "inverse_cdf"  # "inverse_cdf" (srpo's own draw) | "multinomial" (HF's)
    share_prefill: bool = True  # one prefill per distinct prompt of a batch (docs/training.md)
    merge_lora: bool = False  # generate from a merged copy of each LoRA policy (docs/training.md)
    compact_finished: bool = False  # drop finished rows from the batch (docs/training.md)

    @field_validator("sampler")
    @classmethod
    def _sampler(cls, sampler: str) -> str:
        if sampler not in SAMPLERS:
            raise ValueError(f"must be one of {list(SAMPLERS)}, got {sampler!r}")
        return sampler


def build(cfg: Any, policies: Any) -> HFGenerateBackend:
    """The hf backend of a config (srpo.config.Config) over these policies."""
    own = cfg.rollout.settings_of("hf")
    return HFGenerateBackend(policies, max_batch_size=cfg.rollout.max_batch_size,
                             record_logprobs=cfg.rollout.record_logprobs, sampler=own.sampler,
                             share_prefill=own.share_prefill, merge_lora=own.merge_lora,
                             compact_finished=own.compact_finished)


BACKEND = BackendSpec(
    name="hf",
    description="transformers generate (the config default; any model transformers loads)",
    build=build,
    settings=HFSettings,
)

__all__ = ["BACKEND", "HFGenerateBackend", "HFSettings", "build", "prefill_shared_prompts"]
