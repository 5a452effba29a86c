"""Chunked response log-probs vs. the full-logits reference, on tiny random HF models."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import transformers

from srpo.objective.logprobs import (
    logit_softcap_of,
    position_ids_from_mask,
    response_logprobs,
    response_logprobs_reference,
    token_logprobs_from_hidden,
)

VOCAB = 1000
ATOL = 1e-5
PAD_ID = 0
# (prompt, response) lengths per member: real left padding (prompts) and right padding (responses).
LENGTHS = [(5, 4), (2, 6), (7, 1), (3, 3)]


def _tiny_config(kind: str):
    common = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        # Larger than the default 0.02 so next-token distributions are far from uniform.
        initializer_range=0.2,
    )
    if kind == "llama":
        return transformers.LlamaConfig(**common, tie_word_embeddings=False)
    if kind == "llama_tied":
        return transformers.LlamaConfig(**common, tie_word_embeddings=True)
    if kind == "gemma2_softcap":
        # Softcap small enough that tanh is far from linear on these logits.
        return transformers.Gemma2Config(
            **common, head_dim=16, final_logit_softcapping=2.0, attn_implementation="eager"
        )
    raise ValueError(kind)


def _tiny_model(kind: str):
    torch.manual_seed(0)
    config = _tiny_config(kind)
    is_gemma = kind.startswith("gemma2")
    model_cls = transformers.Gemma2ForCausalLM if is_gemma else transformers.LlamaForCausalLM
    model = model_cls(config).float().eval()
    if kind == "llama_tied":
        assert model.lm_head.weight is model.model.embed_tokens.weight
    return model


@pytest.fixture(scope="module", autouse=True)
def _single_thread():
    """Tiny matmuls: one thread is faster, and avoids spin-wait slowdowns on a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=["llama", "llama_tied", "gemma2_softcap"])
def model(request):
    return _tiny_model(request.param)


@pytest.fixture(scope="module")
def llama():
    return _tiny_model("llama")


def _member_tokens(lengths, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [
        (torch.randint(1, VOCAB, (p,), generator=gen), torch.randint(1, VOCAB, (t,), generator=gen))
        for p, t in lengths
    ]


def _pack(members):
    """[(prompt [p], response [t])] -> input_ids, attention_mask [M, P+T], P (library layout)."""
    P = max(len(p) for p, _ in members)
    T = max(len(r) for _, r in members)
    ids = torch.full((len(members), P + T), PAD_ID, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for m, (prompt, response) in enumerate(members):
        ids[m, P - len(prompt) : P] = prompt
        mask[m, P - len(prompt) : P] = 1
        ids[m, P : P + len(response)] = response
        mask[m, P : P + len(response)] = 1
    return ids, mask, P


@pytest.fixture(scope="module")
def batch():
    return _pack(_member_tokens(LENGTHS))


def _response_mask(mask, P):
    return mask[:, P:].bool()  # [M, T]


def _param_grads(model, run, weights, entropy_weights=None):
    """Grads of sum(logprobs * w * mask) (+ sum(entropy * w2 * mask)) w.r.t. all parameters."""
    model.zero_grad(set_to_none=True)
    out, rmask = run()
    loss = (out.logprobs * weights * rmask).sum()
    if entropy_weights is not None:
        loss = loss + (out.entropy * entropy_weights * rmask).sum()
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


# ------------------------------------------------------------------------------------------------
# Forward
# ------------------------------------------------------------------------------------------------


CHUNK_SIZES = [1, 7, 4096]  # one row per chunk, a ragged last chunk, everything in one chunk


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_forward_matches_reference(model, batch, temperature):
    ids, mask, P = batch
    rmask = _response_mask(mask, P)
    with torch.no_grad():
        ref = response_logprobs_reference(
            model, ids, mask, P, temperature=temperature, with_entropy=True
        )
        # Sanity: the distributions are not uniform, so the comparison means something.
        assert ref.entropy[rmask].max() < torch.log(torch.tensor(float(VOCAB))) - 0.1
        for chunk_size in CHUNK_SIZES:
            out = response_logprobs(
                model, ids, mask, P, chunk_size=chunk_size, temperature=temperature,
                with_entropy=True,
            )  # fmt: skip
            assert out.logprobs.shape == out.entropy.shape == ids[:, P:].shape
            assert out.logprobs.dtype == out.entropy.dtype == torch.float32
            torch.testing.assert_close(out.logprobs[rmask], ref.logprobs[rmask], atol=ATOL, rtol=0)
            torch.testing.assert_close(out.entropy[rmask], ref.entropy[rmask], atol=ATOL, rtol=0)
            assert torch.isfinite(out.logprobs).all() and torch.isfinite(out.entropy).all()


def test_without_entropy_returns_none_and_same_logprobs(llama, batch):
    ids, mask, P = batch
    with torch.no_grad():
        plain = response_logprobs(llama, ids, mask, P, chunk_size=5)
        full = response_logprobs(llama, ids, mask, P, chunk_size=5, with_entropy=True)
    assert plain.entropy is None
    torch.testing.assert_close(plain.logprobs, full.logprobs, atol=0, rtol=0)


def test_softcap_is_applied():
    model = _tiny_model("gemma2_softcap")
    assert logit_softcap_of(model.config) == 2.0
    ids, mask, P = _pack(_member_tokens(LENGTHS))
    rmask = _response_mask(mask, P)
    with torch.no_grad():
        out = response_logprobs(model, ids, mask, P)
        model.config.final_logit_softcapping = None
        try:
            uncapped = response_logprobs(model, ids, mask, P)
        finally:
            model.config.final_logit_softcapping = 2.0
    # The cap changes the result, so the forward-vs-reference test above really covers it.
    assert (out.logprobs - uncapped.logprobs)[rmask].abs().max() > 1e-2


# ------------------------------------------------------------------------------------------------
# Backward
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_entropy", [False, True])
def test_parameter_grads_match_reference(model, batch, with_entropy):
    ids, mask, P = batch
    rmask = _response_mask(mask, P)
    gen = torch.Generator().manual_seed(2)
    # Scaled like a token-mean loss so gradients are O(1) and atol is meaningful in float32.
    n_tokens = rmask.sum()
    weights = torch.randn(rmask.shape, generator=gen) / n_tokens  # [M, T]
    entropy_weights = torch.randn(rmask.shape, generator=gen) / n_tokens if with_entropy else None
    temperature = 0.8

    def run(fn, **kw):
        return lambda: (
            fn(model, ids, mask, P, temperature=temperature, with_entropy=with_entropy, **kw),
            rmask,
        )

    want = _param_grads(model, run(response_logprobs_reference), weights, entropy_weights)
    head = model.get_output_embeddings().weight
    head_name = next(n for n, p in model.named_parameters() if p is head)
    for chunk_size in CHUNK_SIZES:
        got = _param_grads(
            model, run(response_logprobs, chunk_size=chunk_size), weights, entropy_weights
        )
        assert got.keys() == want.keys()
        for name in want:
            torch.testing.assert_close(
                got[name], want[name], atol=ATOL, rtol=0, msg=f"{name} chunk_size={chunk_size}"
            )
        # Both the backbone and the output embedding receive gradient.
        assert any(g.abs().sum() > 0 for n, g in got.items() if "layers" in n)
        assert got[head_name].abs().sum() > 0


def test_hidden_grads_match_plain_autograd():
    """Row-level core vs. a direct log_softmax, including gradient w.r.t. hidden and a bias."""
    torch.manual_seed(3)
    head = torch.nn.Linear(16, 50, bias=True)
    hidden = torch.randn(23, 16, requires_grad=True)
    targets = torch.randint(0, 50, (23,))
    g, k = torch.randn(23), torch.randn(23)
    for softcap in (None, 1.5):
        out = token_logprobs_from_hidden(
            hidden, targets, head, chunk_size=4, temperature=1.3, softcap=softcap, with_entropy=True
        )
        inputs = [hidden, *head.parameters()]
        got = torch.autograd.grad((out.logprobs * g + out.entropy * k).sum(), inputs)

        z = head(hidden)
        if softcap is not None:
            z = softcap * torch.tanh(z / softcap)
        logp = torch.log_softmax(z / 1.3, dim=-1)
        ref_lp = logp.gather(1, targets[:, None]).squeeze(1)
        ref_ent = -(logp.exp() * logp).sum(-1)
        want = torch.autograd.grad((ref_lp * g + ref_ent * k).sum(), inputs)
        torch.testing.assert_close(out.logprobs, ref_lp, atol=ATOL, rtol=0)
        torch.testing.assert_close(out.entropy, ref_ent, atol=ATOL, rtol=0)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=ATOL, rtol=0)


class _LoraLikeHead(torch.nn.Module):
    """Frozen base projection plus a trainable low-rank update: not a plain nn.Linear."""

    def __init__(self, hidden: int, vocab: int, rank: int = 3) -> None:
        super().__init__()
        self.base = torch.nn.Linear(hidden, vocab, bias=False).requires_grad_(False)
        self.lora_a = torch.nn.Parameter(torch.randn(rank, hidden) * 0.3)
        self.lora_b = torch.nn.Parameter(torch.randn(vocab, rank) * 0.3)

    def forward(self, x):
        return self.base(x) + (x @ self.lora_a.t()) @ self.lora_b.t()


def test_generic_head_path_matches_plain_autograd():
    torch.manual_seed(4)
    head = _LoraLikeHead(16, 50)
    hidden = torch.randn(19, 16, requires_grad=True)
    targets = torch.randint(0, 50, (19,))
    g, k = torch.randn(19), torch.randn(19)
    trainable = [hidden, head.lora_a, head.lora_b]
    out = token_logprobs_from_hidden(
        hidden, targets, head, chunk_size=5, temperature=0.9, softcap=2.0, with_entropy=True
    )
    got = torch.autograd.grad((out.logprobs * g + out.entropy * k).sum(), trainable)
    logp = torch.log_softmax(2.0 * torch.tanh(head(hidden) / 2.0) / 0.9, dim=-1)
    ref = (logp.gather(1, targets[:, None]).squeeze(1) * g - (logp.exp() * logp).sum(-1) * k).sum()
    for a, b in zip(got, torch.autograd.grad(ref, trainable)):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    assert head.base.weight.grad is None  # frozen parameters get nothing


def test_hooked_lm_head_takes_generic_path(batch):
    """A forward hook on the lm_head disables the nn.Linear shortcut; grads still match."""
    model = _tiny_model("llama_tied")
    ids, mask, P = batch
    rmask = _response_mask(mask, P)
    weights = torch.randn(rmask.shape, generator=torch.Generator().manual_seed(5)) / rmask.sum()
    calls = []
    handle = model.lm_head.register_forward_hook(lambda *_: calls.append(1))
    try:
        got = _param_grads(
            model,
            lambda: (
                response_logprobs(model, ids, mask, P, chunk_size=4, with_entropy=True),
                rmask,
            ),
            weights, weights,
        )  # fmt: skip
    finally:
        handle.remove()
    n_chunks = -(-int(rmask.sum()) // 4)
    assert len(calls) == 2 * n_chunks  # forward and backward both ran the (hooked) module
    want = _param_grads(
        model,
        lambda: (response_logprobs_reference(model, ids, mask, P, with_entropy=True), rmask),
        weights, weights,
    )  # fmt: skip
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=ATOL, rtol=0, msg=name)


def test_forward_saves_no_vocab_sized_tensor(llama, batch):
    """What autograd keeps for backward never has a vocabulary-sized dimension (no logits)."""
    ids, mask, P = batch

    def saved_last_dims(fn, **kw):
        dims = []

        def pack(t):
            dims.append(t.shape[-1] if t.dim() else 0)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(llama, ids, mask, P, with_entropy=True, **kw)
        return dims

    assert VOCAB in saved_last_dims(response_logprobs_reference)  # the hook does see logits
    assert VOCAB not in saved_last_dims(response_logprobs, chunk_size=3)


# ------------------------------------------------------------------------------------------------
# Padding / batch invariance and layout
# ------------------------------------------------------------------------------------------------


def test_member_result_independent_of_batch(model):
    members = _member_tokens(LENGTHS)
    ids, mask, P = _pack(members)
    with torch.no_grad():
        batched = response_logprobs(model, ids, mask, P, chunk_size=3, with_entropy=True)
        # A different companion set (reversed order, one member dropped) must not matter either.
        others = list(reversed(members[1:]))
        ids2, mask2, P2 = _pack(others)
        batched2 = response_logprobs(model, ids2, mask2, P2, chunk_size=5, with_entropy=True)
        for m, (prompt, response) in enumerate(members):
            alone_ids = torch.cat([prompt, response])[None]  # [1, p+t], no padding at all
            alone = response_logprobs(
                model, alone_ids, torch.ones_like(alone_ids), len(prompt), with_entropy=True
            )
            t = len(response)
            close = dict(atol=ATOL, rtol=0)
            torch.testing.assert_close(batched.logprobs[m, :t], alone.logprobs[0], **close)
            torch.testing.assert_close(batched.entropy[m, :t], alone.entropy[0], **close)
            if m >= 1:
                m2 = len(others) - m  # position of member m in the reversed list
                torch.testing.assert_close(
                    batched2.logprobs[m2, :t], alone.logprobs[0], atol=ATOL, rtol=0
                )


def test_empty_response_member_and_padding_values(llama):
    members = _member_tokens([(4, 3), (2, 0), (3, 5)])
    ids, mask, P = _pack(members)
    rmask = _response_mask(mask, P)
    hidden_param = llama.model.layers[0].mlp.up_proj.weight
    out = response_logprobs(llama, ids, mask, P, chunk_size=2, with_entropy=True)
    assert torch.isfinite(out.logprobs).all() and torch.isfinite(out.entropy).all()
    assert (out.logprobs[~rmask] == 0).all() and (out.logprobs[rmask] < 0).all()
    (out.logprobs * rmask).sum().backward()
    assert torch.isfinite(hidden_param.grad).all() and hidden_param.grad.abs().sum() > 0
    llama.zero_grad(set_to_none=True)


def test_all_padding_responses_still_backpropagate(llama):
    ids, mask, P = _pack(_member_tokens([(3, 0), (2, 0)]))
    ids = torch.cat([ids, torch.full((2, 2), PAD_ID)], dim=1)  # T = 2, all padding
    mask = torch.cat([mask, torch.zeros(2, 2, dtype=mask.dtype)], dim=1)
    out = response_logprobs(llama, ids, mask, P)
    assert out.logprobs.shape == (2, 2) and (out.logprobs == 0).all()
    out.logprobs.sum().backward()  # connected graph, zero gradient
    llama.zero_grad(set_to_none=True)


def test_position_ids_from_mask():
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
    expected = torch.tensor([[0, 0, 0, 1, 2, 2], [0, 1, 2, 3, 3, 3]])
    assert torch.equal(position_ids_from_mask(mask), expected)


# ------------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------------


def _shift_prompt_right(mask, P):
    """Right-pad the prompts instead of left-padding them (a layout error)."""
    mask = mask.clone()
    for row in mask:
        n = int(row[:P].sum())
        row[:P] = 0
        row[:n] = 1
    return mask


@pytest.mark.parametrize(
    "mutate, kwargs, match",
    [
        (lambda i, m, P: (i, m[:, :-1], P), {}, "attention_mask shape"),
        (lambda i, m, P: (i[0], m[0], P), {}, "2-D"),
        (lambda i, m, P: (i.float(), m, P), {}, "integer"),
        (lambda i, m, P: (i, m, 0), {}, "prompt_length=0 out of range"),
        (lambda i, m, P: (i, m, i.shape[1]), {}, "out of range"),
        (lambda i, m, P: (i, m, float(P)), {}, "prompt_length must be an int"),
        (lambda i, m, P: (i, m, P), {"chunk_size": 0}, "chunk_size"),
        (lambda i, m, P: (i, m, P), {"chunk_size": -3}, "chunk_size"),
        (lambda i, m, P: (i, m, P), {"temperature": 0.0}, "temperature"),
        (lambda i, m, P: (i, m, P), {"temperature": float("nan")}, "temperature"),
        (lambda i, m, P: (i, _shift_prompt_right(m, P), P), {}, "LEFT-padded"),
        (lambda i, m, P: (i, torch.cat([m[:, :P], m[:, P:].flip(1)], 1), P), {}, "RIGHT-padded"),
    ],
)
def test_value_errors(llama, batch, mutate, kwargs, match):
    ids, mask, P = mutate(*batch)
    with pytest.raises(ValueError, match=match):
        response_logprobs(llama, ids, mask, P, **kwargs)


def test_empty_prompt_is_rejected(llama):
    ids = torch.randint(1, VOCAB, (1, 6))
    mask = torch.tensor([[0, 0, 0, 1, 1, 1]])
    with pytest.raises(ValueError, match="empty prompt"):
        response_logprobs(llama, ids, mask, 3)


def test_unsupported_logit_scaling_is_refused(llama, batch, monkeypatch):
    with pytest.raises(NotImplementedError, match="logits_scaling"):
        logit_softcap_of(SimpleNamespace(logits_scaling=8.0))
    assert logit_softcap_of(SimpleNamespace(logit_scale=1.0, final_logit_softcapping=30)) == 30.0
    monkeypatch.setattr(llama.config, "logit_scale", 0.5, raising=False)
    with pytest.raises(NotImplementedError, match="logit_scale"):
        response_logprobs(llama, *batch)


# ------------------------------------------------------------------------------------------------
# Shared prompts (share_prompts=True): each distinct prompt runs once, the responses on its cache
# ------------------------------------------------------------------------------------------------


def _shared_prompt_batch(response_lengths=(4, 1, 6, 2, 3, 5, 1)):
    """3 distinct prompts (lengths 5, 2, 7: different left padding) repeated across 7 members
    with their own responses, and one prompt that appears once."""
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, VOCAB, (n,), generator=gen) for n in (5, 2, 7)]
    members = [(prompts[i % 3], torch.randint(1, VOCAB, (t,), generator=gen))
               for i, t in enumerate(response_lengths)]
    members.append((torch.randint(1, VOCAB, (4,), generator=gen), torch.randint(1, VOCAB, (3,), generator=gen)))
    return _pack(members)


@pytest.mark.parametrize("with_entropy", [False, True])
def test_shared_prompts_give_the_one_pass_values_and_gradients(model, with_entropy):
    ids, mask, P = _shared_prompt_batch()
    rmask = _response_mask(mask, P)
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(rmask.shape, generator=gen)
    w2 = torch.randn(rmask.shape, generator=gen) if with_entropy else None
    outs, grads = [], []
    for share in (False, True):
        def run(share=share):
            out = response_logprobs(model, ids, mask, P, chunk_size=7, temperature=0.7,
                                    with_entropy=with_entropy, share_prompts=share)
            outs.append(out)
            return out, rmask
        grads.append(_param_grads(model, run, w, w2))
    plain, shared = outs
    torch.testing.assert_close(shared.logprobs, plain.logprobs, rtol=0, atol=ATOL)
    assert (shared.logprobs[~rmask] == 0).all()
    if with_entropy:
        torch.testing.assert_close(shared.entropy, plain.entropy, rtol=0, atol=ATOL)
    for name, g in grads[0].items():  # every parameter, the embeddings of the prompts' tokens too
        assert float(g.abs().max()) > 0, name
        # float32 sums in another order: entries up to ~35 (the tied embedding) differ by ~1e-6 of the largest
        scale = max(1.0, float(g.abs().max()))
        torch.testing.assert_close(grads[1][name], g, rtol=1e-4, atol=ATOL * scale, msg=name)


def test_shared_prompts_with_one_token_responses_and_no_repeat(llama):
    # T = 1: only the prompts' last hidden states are needed (no second pass)
    ids, mask, P = _shared_prompt_batch(response_lengths=(1, 1, 1, 1))
    plain = response_logprobs(llama, ids, mask, P)
    shared = response_logprobs(llama, ids, mask, P, share_prompts=True)
    torch.testing.assert_close(shared.logprobs, plain.logprobs, rtol=0, atol=ATOL)
    # no prompt repeats: the one-pass forward itself
    ids, mask, P = _pack(_member_tokens(LENGTHS))
    assert torch.equal(response_logprobs(llama, ids, mask, P, share_prompts=True).logprobs,
                       response_logprobs(llama, ids, mask, P).logprobs)


def test_shared_prompts_under_bf16_autocast(llama):
    ids, mask, P = _shared_prompt_batch()
    rmask = _response_mask(mask, P)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = response_logprobs(llama, ids, mask, P, share_prompts=False)
        shared = response_logprobs(llama, ids, mask, P, share_prompts=True)
    assert shared.logprobs.dtype == torch.float32
    # bf16 matmuls of other shapes round differently; the gap stays at bf16's scale
    gap = (shared.logprobs - plain.logprobs)[rmask].abs().max()
    assert float(gap) < 0.05
