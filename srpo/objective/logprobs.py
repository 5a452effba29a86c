"""Per-token log-probs and entropies of response tokens, without materialising full logits.

Batch layout (shared by the whole library)::

    input_ids       [M, P+T]  prompt LEFT-padded to P, response RIGHT-padded to T
    attention_mask  [M, P+T]  1 on real tokens, 0 on padding

For member m and response position t (target y = input_ids[m, P+t]) the policy's next-token
distribution comes from the decoder's hidden state h = hidden[m, P-1+t] and the output embedding
(lm_head) W:

    a      = W h                                  raw logits                      [V]
    s      = c * tanh(a / c)   if the config has final_logit_softcapping = c, else s = a
    z      = s / tau                              tau = sampling temperature
    lse    = log sum_j exp(z_j)
    logp_y = z_y - lse                            -> logprobs[m, t]
    H      = -sum_j p_j log p_j = lse - sum_j p_j z_j,  p = softmax(z)   -> entropy[m, t]

Why this module exists: V is 50k-150k, so float32 logits for M*T rows are gigabytes, and a
naive implementation keeps several copies alive for backward (logits, log_softmax output,
their gradients). Here the lm_head is applied to `chunk_size` rows at a time inside a custom
autograd.Function that keeps only h, y, lse and H for backward ([N, H] + 3 x [N]) and
*recomputes* each chunk's logits in backward, where the gradient w.r.t. the logits is formed
analytically, in place:

    d logp_y / d z = e_y - p
    d H      / d z = -p * (log p + H)
    so  dL/dz = g e_y - p * (g + k (log p + H))     with g = dL/dlogp_y, k = dL/dH
    dL/da = dL/dz * (1 - (s/c)^2) / tau   (softcap)      or      dL/dz / tau   (no softcap)

then pushed through the lm_head: for a plain nn.Linear directly (dh = d W, dW += d^T h, in
place), for any other head module (LoRA-wrapped, hooked, under autocast) by re-running it with
autograd on that chunk only. Tied embeddings just receive both gradients. Peak extra memory is
about 1-3 buffers of [chunk_size, V] float32 plus one [V, H] weight-gradient accumulator,
independent of M*T.

Why not the plain alternative, torch.utils.checkpoint(use_reentrant=False) around each chunk's
head -> softcap -> /tau -> log_softmax -> gather (+ entropy)? It is measurably worse in both
memory and time: under checkpoint, autograd keeps the recomputed chunk's log_softmax output (and
its exp, for the entropy) and allocates each [chunk, V] gradient separately, where the backward
here works in place. Full logits save the recomputation, but their memory grows with M*T.
Measured: docs/benchmarks.md, section 'Chunked log-probs against per-chunk checkpointing and full
logits (2026-12-01)'.

Padded response rows (attention_mask == 0) are skipped entirely (no lm_head work); they hold 0.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "LogprobsOutput",
    "response_logprobs",
    "response_logprobs_reference",
    "token_logprobs_from_hidden",
    "position_ids_from_mask",
    "distinct_rows",
    "logit_softcap_of",
]


class LogprobsOutput(NamedTuple):
    """logprobs: float32 [M, T] (or [N] for the row-level function); entropy: same or None."""

    logprobs: Tensor
    entropy: Tensor | None


# --------------------------------------------------------------------------------------------
# Validation and small helpers
# --------------------------------------------------------------------------------------------


def _validate_batch(input_ids: Tensor, attention_mask: Tensor, prompt_length: int) -> None:
    """Raise ValueError naming the problem if the batch does not follow the layout."""
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
        raise ValueError(f"input_ids must be a 2-D tensor [M, P+T], got {_shape(input_ids)}")
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    if not isinstance(attention_mask, Tensor) or attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask shape {_shape(attention_mask)} does not match input_ids shape "
            f"{tuple(input_ids.shape)}"
        )
    length = input_ids.shape[1]
    if isinstance(prompt_length, bool) or not isinstance(prompt_length, int):
        raise ValueError(f"prompt_length must be an int, got {type(prompt_length).__name__}")
    # P >= 1: the first response token is predicted from position P-1; T >= 1: something to score.
    if not 1 <= prompt_length <= length - 1:
        raise ValueError(
            f"prompt_length={prompt_length} out of range: need 1 <= prompt_length <= "
            f"{length - 1} (sequence length {length})"
        )
    _validate_padding(attention_mask, prompt_length)


def _validate_padding(attention_mask: Tensor, prompt_length: int) -> None:
    """Prompts must be left-padded and non-empty, responses right-padded.

    A right-padded prompt would silently shift every log-prob, so this is worth one sync.
    """
    mask = attention_mask.ne(0).to(torch.int8)  # [M, P+T]
    prompt, response = mask[:, :prompt_length], mask[:, prompt_length:]  # [M, P], [M, T]
    flags = torch.stack(
        [
            (prompt[:, 1:] < prompt[:, :-1]).any(),  # a 0 after a 1 in the prompt
            (response[:, 1:] > response[:, :-1]).any(),  # a 1 after a 0 in the response
            (response[:, 0] > prompt[:, -1]).any(),  # a response with nothing before it
        ]
    )
    right_padded_prompt, left_padded_response, empty_prompt = flags.tolist()  # one sync
    if right_padded_prompt:
        raise ValueError("prompts must be LEFT-padded: attention_mask has a 0 after a 1 in [:, :P]")
    if left_padded_response:
        raise ValueError(
            "responses must be RIGHT-padded: attention_mask has a 1 after a 0 in [:, P:]"
        )
    if empty_prompt:
        raise ValueError(
            "a member has a response but an empty prompt (attention_mask[:, P-1] == 0); "
            "the first response token needs at least one prompt token to condition on"
        )


def _validate_chunk_size(chunk_size: int) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")


def _validate_temperature(temperature: float) -> None:
    valid = isinstance(temperature, (int, float)) and math.isfinite(temperature)
    if not valid or temperature <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")


def _shape(x: Any) -> Any:
    return tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Position ids for left-padded rows: cumsum(mask) - 1, clamped at 0.  [M, L] -> [M, L]

    The first real token of every member gets position 0 whatever its left padding, so a
    member's log-probs do not depend on the batch it is in (RoPE sees the same positions).
    """
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def logit_softcap_of(config: Any) -> float | None:
    """The final-logit softcap c of a HF config (logits -> c * tanh(logits / c)), or None.

    Other post-lm_head transforms are refused rather than guessed: the same config name means
    different things in different models (`logits_scaling` divides in Granite but multiplies
    in HyperCLOVAX; Cohere multiplies by `logit_scale`). Use response_logprobs_reference, which
    calls the model's own forward, for those models.
    """
    configs = [config]
    text_config = getattr(config, "get_text_config", None)
    if callable(text_config) and text_config() is not config:
        configs.append(text_config())
    softcap = None
    for cfg in configs:
        for name in ("logits_scaling", "logit_scale"):
            value = getattr(cfg, name, None)
            if value is not None and value != 1:
                raise NotImplementedError(
                    f"config.{name}={value}: post-lm_head logit scaling is not supported by the "
                    "chunked log-prob path; use response_logprobs_reference for this model"
                )
        cap = getattr(cfg, "final_logit_softcapping", None)
        softcap = softcap if cap is None else float(cap)
    return softcap


def _decoder_and_head(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """The backbone (returns last_hidden_state, final norm applied) and the lm_head of a HF LM."""
    get_decoder = getattr(model, "get_decoder", None)
    get_head = getattr(model, "get_output_embeddings", None)
    if not (callable(get_decoder) and callable(get_head)):
        raise TypeError(
            f"{type(model).__name__} has no get_decoder()/get_output_embeddings(); "
            "expected a Hugging Face causal LM"
        )
    decoder, head = get_decoder(), get_head()
    if head is None or decoder is model:
        raise TypeError(f"could not split {type(model).__name__} into a decoder and an lm_head")
    if any(isinstance(m, nn.Dropout) and m.p > 0 and m.training for m in head.modules()):
        # The head is re-run in backward; dropout would draw a different mask there.
        raise ValueError("lm_head contains active dropout; chunked recomputation needs it off")
    return decoder, head


# --------------------------------------------------------------------------------------------
# Chunk math (all float32, in place where the buffer is ours)
# --------------------------------------------------------------------------------------------


def _tempered_logits_(raw: Tensor, temperature: float, softcap: float | None) -> Tensor:
    """z = softcap(raw) / tau, in place on a float32 buffer.  [n, V] -> [n, V]"""
    if softcap is not None:
        raw.div_(softcap).tanh_().mul_(softcap)
    if temperature != 1.0:
        raw.div_(temperature)
    return raw


def _chunk_forward(
    head: nn.Module,
    h: Tensor,  # [n, H]
    y: Tensor,  # [n]
    temperature: float,
    softcap: float | None,
    with_entropy: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(logp_y [n], lse [n], H [n] or None) for one chunk; the logits die at return.

    Written in place so that, without entropy, the chunk costs a single [n, V] buffer
    (torch.logsumexp would allocate a second one).
    """
    z = head(h).float()  # [n, V]; a copy only if the head is not float32
    z = _tempered_logits_(z, temperature, softcap)
    z_y = z.gather(1, y[:, None]).squeeze(1)  # [n]
    z_max = z.amax(dim=-1, keepdim=True)  # [n, 1]
    x = z.sub_(z_max)  # [n, V] x = z - max, in place
    entropy = None
    if with_entropy:
        e = x.exp()  # [n, V]
        sum_e = e.sum(dim=-1)  # [n]
        # p = e / sum_e and log p = x - log sum_e, so H = -sum p log p
        #   = log sum_e - sum_j e_j x_j / sum_e
        entropy = sum_e.log() - e.mul_(x).sum(dim=-1) / sum_e
        del e
    else:
        sum_e = x.exp_().sum(dim=-1)  # [n]
    lse = z_max.squeeze(1) + sum_e.log()  # [n]
    return z_y - lse, lse, entropy


def _chunk_grad_logits(
    logits: Tensor,  # [n, V] the head's output, any float dtype (overwritten if float32)
    y: Tensor,  # [n]
    lse: Tensor,  # [n]
    entropy: Tensor | None,  # [n]
    g: Tensor,  # [n] dL/dlogp_y
    k: Tensor | None,  # [n] dL/dH, None when entropy gets no gradient
    temperature: float,
    softcap: float | None,
) -> Tensor:
    """dL/dlogits for one chunk, formed in as few [n, V] buffers as possible.  -> [n, V]"""
    z = _tempered_logits_(logits.detach().float(), temperature, softcap)  # [n, V]
    # Softcap needs z again for its derivative, so log p goes to a fresh buffer then.
    logp = (z - lse[:, None]) if softcap is not None else z.sub_(lse[:, None])  # [n, V]
    g_col = g[:, None]  # [n, 1]
    if k is None:
        d = logp.exp_().mul_(-g_col)  # -g p
    else:
        p = logp.exp()  # [n, V]
        d = logp.add_(entropy[:, None]).mul_(k[:, None]).add_(g_col).mul_(p).neg_()
        del p  # -p (g + k (log p + H))
    d.scatter_add_(1, y[:, None], g_col)  # + g e_y
    if softcap is not None:
        # s = c tanh(a/c) and z = s/tau, so tanh(a/c) = z tau / c and ds/da = 1 - tanh^2.
        d.mul_(z.mul_(temperature / softcap).square_().neg_().add_(1.0))
    if temperature != 1.0:
        d.div_(temperature)
    return d.to(logits.dtype)


class _ChunkedLogprobs(torch.autograd.Function):
    """Row-chunked lm_head + log-softmax that recomputes each chunk's logits in backward.

    Inputs: h [N, H], y [N], head module, options, *head parameters (so autograd routes their
    gradients, tied embeddings included). Outputs: logp_y [N] float32, H [N] float32 (zeros and
    non-differentiable when with_entropy is False).
    """

    @staticmethod
    def forward(ctx, h, y, head, chunk_size, temperature, softcap, with_entropy, *params):
        n_rows = h.shape[0]
        logp_y = torch.empty(n_rows, dtype=torch.float32, device=h.device)  # [N]
        lse = torch.empty_like(logp_y)  # [N]
        entropy = torch.zeros_like(logp_y)  # [N]
        for start in range(0, n_rows, chunk_size):
            rows = slice(start, start + chunk_size)
            lp, ls, ent = _chunk_forward(head, h[rows], y[rows], temperature, softcap, with_entropy)
            logp_y[rows], lse[rows] = lp, ls
            if ent is not None:
                entropy[rows] = ent
        if not with_entropy:
            ctx.mark_non_differentiable(entropy)
        ctx.save_for_backward(h, y, lse, entropy)
        ctx.head, ctx.chunk_size, ctx.temperature = head, chunk_size, temperature
        ctx.softcap, ctx.with_entropy, ctx.n_params = softcap, with_entropy, len(params)
        # Backward re-runs the head; it must see the same autocast state as this forward did.
        device_type = h.device.type
        ctx.autocast = (
            device_type,
            torch.is_autocast_enabled(device_type),
            torch.get_autocast_dtype(device_type),
        )
        ctx.set_materialize_grads(False)
        return logp_y, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logp, grad_entropy):
        h, y, lse, entropy = ctx.saved_tensors
        head = ctx.head
        params = tuple(head.parameters())
        if len(params) != ctx.n_params:
            raise RuntimeError("lm_head parameters changed between forward and backward")
        if not ctx.with_entropy:
            grad_entropy = None
        if grad_logp is None and grad_entropy is None:
            return (None,) * (7 + ctx.n_params)
        if grad_logp is None:
            grad_logp = torch.zeros_like(lse)
        need_h = ctx.needs_input_grad[0]
        wanted = [i for i, need in enumerate(ctx.needs_input_grad[7:]) if need]
        grad_h = torch.zeros_like(h) if need_h else None  # [N, H]
        grad_params = _GradSum(len(params))
        device_type, autocast_on, autocast_dtype = ctx.autocast
        plain_linear = _is_plain_linear(head, autocast_on)

        for start in range(0, h.shape[0], ctx.chunk_size):
            rows = slice(start, start + ctx.chunk_size)
            h_chunk = h[rows]  # [n, H]
            k = grad_entropy[rows] if grad_entropy is not None else None

            def grad_logits(logits: Tensor, rows: slice = rows, k: Tensor | None = k) -> Tensor:  # [n, V] -> [n, V]
                return _chunk_grad_logits(
                    logits, y[rows], lse[rows], entropy[rows], grad_logp[rows], k,
                    ctx.temperature, ctx.softcap,
                )  # fmt: skip

            if plain_linear:
                # logits = h W^T + b, so dh = d W, dW = d^T h, db = sum_rows d: no graph needed,
                # and dW accumulates in place across chunks (no [V, H] temporary per chunk).
                weight, bias = head.weight, head.bias
                d_logits = grad_logits(F.linear(h_chunk, weight, bias))  # [n, V]
                if need_h:
                    grad_h[rows] = d_logits @ weight  # [n, H]
                for i in wanted:
                    if params[i] is weight:
                        grad_params.addmm(i, d_logits.t(), h_chunk)  # [V, H]
                    else:
                        grad_params.add(i, d_logits.sum(0))  # [V] bias
                del d_logits
                continue

            # Any other head (LoRA-wrapped, hooked, autocast): rebuild this chunk's graph and let
            # autograd push dL/dlogits through it.
            h_leaf = h_chunk.detach().requires_grad_(need_h)
            with torch.enable_grad(), torch.autocast(
                device_type, dtype=autocast_dtype, enabled=autocast_on
            ):
                logits = head(h_leaf)  # [n, V]
            inputs = ([h_leaf] if need_h else []) + [params[i] for i in wanted]
            if not inputs:
                continue
            grads = torch.autograd.grad(logits, inputs, grad_logits(logits), allow_unused=True)
            del logits  # free this chunk's [n, V] buffers before the next one
            if need_h:
                grad_h[rows] = grads[0]
                grads = grads[1:]
            for i, grad in zip(wanted, grads):
                grad_params.add(i, grad)
        return (grad_h, None, None, None, None, None, None, *grad_params.grads)


def _is_plain_linear(head: nn.Module, autocast_on: bool) -> bool:
    """An untouched nn.Linear (no hooks, no patched forward, plain parameters, no autocast).

    Only then is writing its backward as two matmuls guaranteed to equal autograd's.
    """
    module_hooks = nn.modules.module
    return (
        type(head) is nn.Linear
        and not autocast_on
        and not (head._forward_hooks or head._forward_pre_hooks)
        and not (module_hooks._global_forward_hooks or module_hooks._global_forward_pre_hooks)
        and "forward" not in vars(head)
        and all(type(p) is nn.Parameter for p in head.parameters())
    )


class _GradSum:
    """Sums per-chunk parameter gradients, in place once it owns the buffer.

    Accumulating with `a = a + g` would allocate a fresh [V, H] per chunk (GBs for a 7B head).
    """

    def __init__(self, n: int) -> None:
        self.grads: list[Tensor | None] = [None] * n
        self._owned = [False] * n

    def add(self, i: int, grad: Tensor | None) -> None:
        if grad is None:
            return
        if self.grads[i] is None:
            self.grads[i] = grad  # may be autograd's own buffer: do not write into it
        elif self._owned[i]:
            self.grads[i].add_(grad)
        else:
            self.grads[i], self._owned[i] = self.grads[i] + grad, True

    def addmm(self, i: int, a: Tensor, b: Tensor) -> None:
        if self.grads[i] is None:
            self.grads[i], self._owned[i] = a @ b, True
        else:
            self.grads[i].addmm_(a, b)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def token_logprobs_from_hidden(
    hidden: Tensor,
    targets: Tensor,
    lm_head: nn.Module,
    *,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    softcap: float | None = None,
    with_entropy: bool = False,
) -> LogprobsOutput:
    """Row-level core: log p(targets[i] | hidden[i]) through `lm_head`, chunk by chunk.

    hidden [N, H] (any float dtype, may require grad), targets [N] int64 token ids.
    Returns logprobs float32 [N] and, if with_entropy, entropy float32 [N] of the tempered
    (and softcapped) next-token distribution. Never holds more than `chunk_size` rows of logits;
    gradients reach `hidden` and every parameter of `lm_head`. See the module docstring.
    """
    _validate_chunk_size(chunk_size)
    _validate_temperature(temperature)
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(
            f"hidden must be [N, H] and targets [N], got {_shape(hidden)} and {_shape(targets)}"
        )
    if softcap is not None and not softcap > 0:
        raise ValueError(f"softcap must be > 0 or None, got {softcap!r}")
    params = tuple(lm_head.parameters())
    logp, entropy = _ChunkedLogprobs.apply(
        hidden, targets.long(), lm_head, chunk_size, float(temperature), softcap, with_entropy,
        *params,
    )  # fmt: skip
    return LogprobsOutput(logp, entropy if with_entropy else None)


def distinct_rows(rows: Tensor) -> tuple[list[int], Tensor]:
    """The first index of each distinct row of [M, W], and [M] each row's distinct number."""
    index: dict[tuple[int, ...], int] = {}
    first: list[int] = []
    source: list[int] = []
    for i, key in enumerate(map(tuple, rows.tolist())):
        if key not in index:
            index[key] = len(first)
            first.append(i)
        source.append(index[key])
    return first, torch.tensor(source, dtype=torch.long, device=rows.device)


def _shared_prompt_hidden(decoder: nn.Module, input_ids: Tensor, attention_mask: Tensor,
                          prompt_length: int) -> Tensor | None:
    """[M, T, H] the hidden states that predict the response tokens, each distinct prompt run once.

    The members of one task share their prompt (G rollouts x the agents of a set reading the same
    request), and prompts are most of a short-answer batch's tokens. So: the decoder runs the U
    distinct prompts [U, P] with its KV cache on, the cache and the last prompt position's hidden
    state are gathered to the M rows (an index_select, whose backward sums the rows' gradients
    into the prompt's), and the responses' first T-1 tokens run on that cache [M, T-1] with the
    full [M, P+T-1] mask and the same positions as one pass (position_ids_from_mask). Each row
    sees exactly the keys, values, positions and mask of the one-pass forward, so the result
    differs only by float rounding of other matmul shapes. Returns None when no prompt repeats.
    """
    n_members, length = input_ids.shape
    prompts = torch.cat([input_ids[:, :prompt_length], attention_mask[:, :prompt_length].long()], dim=1)
    first, source = distinct_rows(prompts)  # U rows, [M]
    if len(first) == n_members:
        return None
    mask = attention_mask[first, :prompt_length]  # [U, P]
    out = decoder(input_ids=input_ids[first, :prompt_length], attention_mask=mask,
                  position_ids=position_ids_from_mask(mask), use_cache=True)
    # transformers 5 names the cache `cache`, 4.x `past_key_values`: read it off the output
    name = "cache" if "cache" in out else "past_key_values"
    cache = out[name]
    last = out[0][:, -1:].index_select(0, source)  # [M, 1, H] predicts response token 0
    if length - prompt_length == 1:
        return last
    cache.batch_select_indices(source)  # [U, heads, P, d] -> [M, heads, P, d] in every layer
    full = attention_mask[:, : length - 1]  # [M, P+T-1]
    rest = decoder(input_ids=input_ids[:, prompt_length : length - 1], attention_mask=full,
                   position_ids=position_ids_from_mask(full)[:, prompt_length:], use_cache=True,
                   **{name: cache})
    return torch.cat([last, rest[0]], dim=1)  # [M, T, H]


def response_logprobs(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    prompt_length: int,
    *,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prompts: bool = False,
) -> LogprobsOutput:
    """Per-token log-probs (and entropy) of the response tokens of a HF causal LM.

    Args:
        model: a Hugging Face causal LM (get_decoder() + get_output_embeddings()).
        input_ids: [M, P+T] int64, prompts left-padded to P, responses right-padded to T.
        attention_mask: [M, P+T], 0 on padding.
        prompt_length: P.
        chunk_size: rows (response tokens) per lm_head chunk; bounds the [rows, V] buffers.
        temperature: tau, logits are divided by it (after any softcap), as at sampling time.
        with_entropy: also return the entropy of the full next-token distribution.
        share_prompts: run each distinct prompt (ids and padding) through the decoder once and
            the responses on its KV cache (_shared_prompt_hidden); the same values up to float
            rounding, gradients included. Needs the decoder's cache in the forward, so not under
            activation checkpointing (whose recomputation would append to the cache again).

    Returns:
        LogprobsOutput(logprobs [M, T] float32, entropy [M, T] float32 or None), with
        logprobs[m, t] = log p(input_ids[m, P+t] | input_ids[m, :P+t]) computed from hidden
        position P-1+t; padded response positions hold 0 (callers mask them).

    Raises:
        ValueError: malformed batch or options. NotImplementedError: the model scales its
        logits after the lm_head in a way this path does not reproduce (see logit_softcap_of).
    """
    _validate_batch(input_ids, attention_mask, prompt_length)
    _validate_chunk_size(chunk_size)
    _validate_temperature(temperature)
    decoder, head = _decoder_and_head(model)
    softcap = logit_softcap_of(model.config)
    n_members, length = input_ids.shape
    n_response = length - prompt_length  # T

    # [M, T, H]: the hidden state at position P-1+t, which predicts response token t
    hidden = _shared_prompt_hidden(decoder, input_ids, attention_mask, prompt_length) if share_prompts else None
    if hidden is None:
        outputs = decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
        )
        hidden = outputs[0]  # [M, P+T, H] last_hidden_state, final norm applied
        hidden = hidden[:, prompt_length - 1 : length - 1]  # [M, T, H]
    targets = input_ids[:, prompt_length:]  # [M, T]
    real = attention_mask[:, prompt_length:].ne(0).reshape(-1)  # [M*T]

    # Only real response rows go through the head: padding costs no lm_head FLOPs or memory.
    rows = real.nonzero().squeeze(1)  # [N]
    hidden_rows = hidden.reshape(n_members * n_response, -1).index_select(0, rows)  # [N, H]
    target_rows = targets.reshape(-1).index_select(0, rows)  # [N]
    logp_rows, entropy_rows = token_logprobs_from_hidden(
        hidden_rows, target_rows, head,
        chunk_size=chunk_size, temperature=temperature, softcap=softcap, with_entropy=with_entropy,
    )  # fmt: skip

    def scatter(values: Tensor) -> Tensor:  # [N] -> [M, T], zeros on padding
        flat = values.new_zeros(n_members * n_response)
        return flat.index_copy(0, rows, values).view(n_members, n_response)

    entropy = scatter(entropy_rows) if entropy_rows is not None else None
    return LogprobsOutput(scatter(logp_rows), entropy)


def response_logprobs_reference(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    prompt_length: int,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> LogprobsOutput:
    """Plain full-logits version of response_logprobs, for tests and benchmarks.

    Materialises float32 logits [M, T, V] via the model's own forward (so any logit softcap or
    scaling the model applies is included). Padded response positions hold whatever the model
    gives (finite).
    """
    _validate_batch(input_ids, attention_mask, prompt_length)
    _validate_temperature(temperature)
    n_response = input_ids.shape[1] - prompt_length  # T
    outputs = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
        logits_to_keep=n_response + 1,  # positions P-1 .. P+T-1
    )
    logits = outputs.logits[:, :-1].float()  # [M, T, V] from positions P-1 .. P+T-2
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)  # [M, T, V]
    targets = input_ids[:, prompt_length:]  # [M, T]
    logprobs = logp_all.gather(-1, targets[..., None]).squeeze(-1)  # [M, T]
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None  # [M, T]
    return LogprobsOutput(logprobs, entropy)
