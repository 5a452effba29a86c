"""What runs inside transformers `generate` at each step for the hf engine: the recorder of
sampling-time log-probs, srpo's own inverse-CDF draw of the next token, and the stop-string
check. Each sees one step ([B, V] scores, or the ids so far); the recorder keeps one step's
scores alive, not all of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessor, StoppingCriteria


class SampledLogprobRecorder(LogitsProcessor):
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


class InverseCdfSampler(LogitsProcessor):
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


class StopStrings(StoppingCriteria):
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

