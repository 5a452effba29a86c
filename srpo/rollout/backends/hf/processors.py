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
    """Draws the next token itself, records its log-prob, and returns scores under which greedy
    decoding picks it.

    Sampling from p = softmax(x) by inverse CDF, in two levels so that no [B, V] float64 work is
    done: e = exp(x - max x) in float32 (p up to its normalizer); the vocabulary cut into blocks
    of `block` tokens, each block's mass summed ([B, V / block]) and accumulated in float64;
    u ~ U(0, 1) times the total mass picks the block whose cumulative mass first exceeds u, and
    the float64 cumulative sum inside that one block ([B, block]) picks the token. The draw is
    the one a single float64 CDF over p gives (the same token for the same u, up to float32
    rounding of a block's mass at a boundary: tested). A token of probability 0 (cut by top-k /
    top-p) is never drawn. With record=True the log-prob of the drawn token under the scores it
    was drawn from, x_t - (max x + log sum e), is kept for each step (`finish`); the total mass
    is the last entry of the CDF, so recording costs no extra pass over the vocabulary.

    One pass of exp over [B, V] is the floor of an exact draw; every other [B, V] pass costs as
    much (memory-bound). So the scores are returned in place, with +inf at the drawn token (they
    are generate's own float32 copy of the step's logits, read by nothing after the processors
    but the greedy argmax), instead of a fresh [B, V] tensor of -inf with one 0 a row; and the
    recorder is this class, not a second processor with its own log-sum-exp. A row whose scores
    hold NaN or +inf is refused: nothing can be drawn from it.

    Measured (benchmarks/bench_token_draw.py): docs/benchmarks.md, section 'The token draw's
    passes over the vocabulary (2026-12-05, evening)'.
    """

    def __init__(self, block: int = 256, record: bool = False):
        self.block = block
        self.steps: list[torch.Tensor] | None = [] if record else None  # each [B] float32

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        rows, vocab = scores.shape
        x = scores.float()  # [B, V]; no copy: generate hands over float32 scores
        top = x.amax(dim=-1, keepdim=True)  # [B, 1]; NaN or +inf anywhere in a row shows here
        if not bool(torch.isfinite(top).all()):
            raise ValueError("the policy's next-token scores hold NaN or +inf (or a whole row is -inf): "
                             "no token can be drawn; the model's weights or inputs are not finite")
        mass = torch.sub(x, top).exp_()  # [B, V] in (0, 1], 0 for cut tokens
        pad = -vocab % self.block
        padded = torch.nn.functional.pad(mass, (0, pad)) if pad else mass  # [B, NB * K]
        blocks = padded.view(rows, -1, self.block)  # [B, NB, K]
        # block masses summed in float32 (a float64 sum would first copy all of p to float64)
        cdf = blocks.sum(dim=-1).double().cumsum(dim=-1)  # [B, NB] mass up to each block
        u = torch.rand(rows, 1, dtype=torch.float64, device=scores.device) * cdf[:, -1:]  # [B, 1]
        # u < total mass, so the first block whose cumulative mass exceeds u has mass > 0
        k = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.shape[1] - 1)  # [B, 1]
        before = torch.where(k > 0, cdf.gather(1, (k - 1).clamp(min=0)), 0.0)  # [B, 1]
        chosen = blocks.gather(1, k.unsqueeze(-1).expand(-1, -1, self.block)).squeeze(1)  # [B, K]
        inside = torch.searchsorted(chosen.double().cumsum(dim=-1), u - before, right=True)  # [B, 1]
        # rounding (the block's mass summed in another order) may put u - before at the block's
        # end: then take the block's last token of positive probability
        last = self.block - 1 - chosen.gt(0).flip(-1).int().argmax(dim=-1, keepdim=True)  # [B, 1]
        token = (k * self.block + torch.minimum(inside, last)).clamp_(max=vocab - 1)  # [B, 1]
        if self.steps is not None:  # log p(token) = x_t - max x - log(total mass)
            log_total = cdf[:, -1:].log().float()  # [B, 1]
            self.steps.append((x.gather(1, token) - top - log_total).squeeze(1))
        return scores.scatter_(1, token, float("inf"))  # the drawn token is the unique maximum

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:  # -> [B, steps]
        """The recorded log-probs, one column per generate step (rows that had finished hold the
        log-prob of a token generate replaced by padding: callers cut each row to its length)."""
        if not self.steps:
            return torch.zeros(sequences.shape[0], 0)
        out = torch.stack(self.steps, dim=1).float().cpu()
        self.steps = []
        return out


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

