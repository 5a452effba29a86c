"""Shared prompt prefill (HFGenerateBackend(share_prefill=True), rollout.hf.share_prefill): G rollouts of one prompt get
the KV cache of one prefill. It must generate what the unshared backend generates: the same
tokens (greedy, and sampled from the same random stream) and the same sampling log-probs."""

from __future__ import annotations

import pytest
import torch
from rollout_helpers import backend_requests, reference_logprobs, tiny, tok  # noqa: F401

from srpo.models import build_tiny_model
from srpo.rollout import HFGenerateBackend, PolicySet, SamplingParams
from srpo.rollout.backends.hf import prefill_shared_prompts

# repeated prompts of different lengths (left padding differs per row), a 1-token prompt and
# one that occurs once
TEXTS = ["What is 2 + 3?", "Hi", "What is 2 + 3?", "A much longer prompt, with more words in it.",
         "Hi", "What is 2 + 3?", "x", "A much longer prompt, with more words in it.", "x"]


def _generate(model, tokenizer, texts, sampling, *, share, seed=0, **kw):
    backend = HFGenerateBackend(PolicySet.shared(model, tokenizer), share_prefill=share, **kw)
    torch.manual_seed(seed)
    return backend, backend.generate("shared", backend_requests(tokenizer, texts, sampling))


@pytest.mark.parametrize("model_kind", ["llama", "qwen2"])
@pytest.mark.parametrize("sampling", [SamplingParams(max_new_tokens=12, temperature=0.0),
                                      SamplingParams(max_new_tokens=12, temperature=1.0),
                                      SamplingParams(max_new_tokens=12, temperature=0.7)],
                         ids=["greedy", "T1", "T0.7"])
def test_shared_prefill_generates_what_the_unshared_backend_generates(model_kind, sampling):
    model, tokenizer = build_tiny_model(model_kind, seed=0)
    _, plain = _generate(model, tokenizer, TEXTS, sampling, share=False)
    backend, shared = _generate(model, tokenizer, TEXTS, sampling, share=True)
    for p, s in zip(plain, shared):
        assert s.token_ids == p.token_ids
        assert s.stop_reason == p.stop_reason
        torch.testing.assert_close(torch.tensor(s.logprobs), torch.tensor(p.logprobs), atol=1e-4, rtol=0)
    if not sampling.greedy:  # greedy requests of one prompt are generated once anyway
        assert backend.stats.prefill_rows_shared == len(TEXTS) - len(set(TEXTS))


def test_shared_prefill_logprobs_are_those_of_the_model(tiny):
    model, tokenizer = tiny
    sampling = SamplingParams(max_new_tokens=10, temperature=1.0)
    _, gens = _generate(model, tokenizer, TEXTS, sampling, share=True)
    for text, g in zip(TEXTS, gens):
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        ref = reference_logprobs(model, prompt, g.token_ids, sampling)
        torch.testing.assert_close(torch.tensor(g.logprobs), ref, atol=1e-4, rtol=0)


def test_the_shared_cache_equals_each_rows_own_prefill(tiny):
    model, tokenizer = tiny
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):], mask[i, width - len(r):] = torch.tensor(r), 1
    with torch.no_grad():
        kwargs, distinct = prefill_shared_prompts(model, ids, mask)
        (cache,) = kwargs.values()
        assert distinct == len(set(TEXTS))
        pos = (mask[:, :-1].cumsum(-1) - 1).masked_fill(mask[:, :-1] == 0, 0)
        own = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=pos, use_cache=True)
        own = own["cache"] if "cache" in own else own["past_key_values"]
    for layer_shared, layer_own in zip(cache.layers, own.layers):
        real = mask[:, None, :-1, None].bool()  # [B, 1, W-1, 1]: the real (unpadded) positions
        for a, b in ((layer_shared.keys, layer_own.keys), (layer_shared.values, layer_own.values)):
            assert a.shape == b.shape
            torch.testing.assert_close(a.masked_fill(~real, 0), b.masked_fill(~real, 0), atol=1e-5, rtol=0)


def test_nothing_is_shared_without_a_repeated_prompt(tiny):
    model, tokenizer = tiny
    ids = torch.tensor([[1, 2, 3], [1, 2, 4]])
    assert prefill_shared_prompts(model, ids, torch.ones_like(ids)) is None
    one_column = torch.tensor([[5], [5]])
    assert prefill_shared_prompts(model, one_column, torch.ones_like(one_column)) is None
    backend, _ = _generate(model, tokenizer, ["a", "b"], SamplingParams(max_new_tokens=3, temperature=1.0), share=True)
    assert backend.stats.prefill_rows_shared == 0


def test_shared_prefill_with_chunked_batches(tiny):
    """Chunks sort rows by prompt length: a prompt's copies may fall in different chunks; each
    chunk shares what repeats inside it, and the result is the unshared backend's."""
    model, tokenizer = tiny
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    _, plain = _generate(model, tokenizer, TEXTS, sampling, share=False, max_batch_size=4)
    backend, shared = _generate(model, tokenizer, TEXTS, sampling, share=True, max_batch_size=4)
    assert [g.token_ids for g in shared] == [g.token_ids for g in plain]
    assert backend.stats.batches == 3 and backend.stats.prefill_rows_shared > 0


def test_generate_feeds_only_the_last_prompt_column_after_a_shared_prefill(tiny):
    """The cache is used, not recomputed: the model sees the distinct prompts' first W-1 columns
    once, then generate's first forward is one column wide."""
    model, tokenizer = tiny
    widths: list[tuple[int, int]] = []
    hook = model.model.register_forward_pre_hook(
        lambda module, args, kwargs: widths.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        texts = ["What is 2 + 3?"] * 4 + ["Hi"] * 2
        _generate(model, tokenizer, texts, SamplingParams(max_new_tokens=3, temperature=1.0), share=True)
    finally:
        hook.remove()
    width = len(tokenizer(texts[0], add_special_tokens=False)["input_ids"])
    assert widths[0] == (2, width - 1)  # the 2 distinct prompts, all but the last column
    assert widths[1] == (6, 1)  # generate's first step: every row, the last prompt column


def test_the_setting_reaches_the_hf_backend_and_is_refused_elsewhere():
    from pathlib import Path

    from srpo.build import build_backend
    from srpo.config import Config, ConfigError, from_dict, load_config, to_dict

    smoke = Path(__file__).resolve().parents[2] / "srpo" / "presets" / "smoke.yaml"
    model, tokenizer = build_tiny_model(seed=0)
    policies = PolicySet.shared(model, tokenizer)
    assert load_config(smoke).rollout.hf.share_prefill is True  # the default: on (the hf backend's)
    assert build_backend(load_config(smoke), policies).share_prefill is True
    assert build_backend(load_config(smoke, ["rollout.hf.share_prefill=false"]), policies).share_prefill is False
    assert build_backend(load_config(smoke, ["rollout.hf.share_prefill=true"]), policies).share_prefill is True
    # a setting of the hf backend with another backend selected is an error, not a setting ignored
    for value in ("true", "false"):
        with pytest.raises(ConfigError, match="rollout.hf holds settings of the backend 'hf', but "
                                              "rollout.backend is 'ctranslate2'"):
            load_config(smoke, [f"rollout.hf.share_prefill={value}", "rollout.backend=ctranslate2"])
    # the old key names its new place
    with pytest.raises(ConfigError, match=r"rollout\.share_prefill is now rollout\.hf\.share_prefill"):
        load_config(smoke, ["rollout.share_prefill=true"])
    # switching to ctranslate2 (which has no shared prefill) drops the hf section, and a resolved
    # config written by a run loads again (a run's config.yaml, resume)
    for extra in ([], ["rollout.max_batch_size=4"]):
        cfg = load_config(smoke, [*extra, "rollout.backend=ctranslate2"])
        assert "hf" not in to_dict(cfg)["rollout"]
        again = from_dict(Config, to_dict(cfg))
        assert again == cfg and to_dict(again) == to_dict(cfg)
