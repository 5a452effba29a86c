"""rollout.hf.compact_finished: srpo's own decode loop, which drops finished rows from the batch,
computes what transformers `generate` computes for every row (tiny random Llama, float32)."""

from __future__ import annotations

import pytest
import torch
from rollout_helpers import backend_requests, reference_logprobs, tiny, tok  # noqa: F401

from srpo.rollout import HFGenerateBackend, PolicySet, SamplingParams
from srpo.rollout.backends.hf import decode as decode_module

PROMPTS = ["a", "a much longer prompt here", "mid size", "What is 2 + 2?", "Hello there, agent.",
           "xyz", "one two three four", "q"]


def _generate(model, tok, sampling, *, compact, share_prefill=False, seed=0, prompts=PROMPTS, repeat=1):
    backend = HFGenerateBackend(PolicySet.shared(model, tok), compact_finished=compact,
                                share_prefill=share_prefill)
    reqs = backend_requests(tok, [p for p in prompts for _ in range(repeat)], sampling)
    torch.manual_seed(seed)
    return reqs, backend.generate("shared", reqs)


@pytest.fixture
def count_compactions(monkeypatch):
    """Counts the row selections of the decode loop (each one a compaction)."""
    calls = []
    select = decode_module._select_rows

    def counted(cache, rows):
        calls.append(len(rows))
        select(cache, rows)

    monkeypatch.setattr(decode_module, "_select_rows", counted)
    return calls


def _stops_that_end_rows_at_different_steps(model, tok, sampling):
    """Stop strings taken from what the tiny model generates, so that rows end early and at
    different steps (the random model rarely says eos)."""
    _, plain = _generate(model, tok, sampling, compact=False)
    texts = [tok.decode(g.token_ids, skip_special_tokens=True) for g in plain]
    # the 3rd and 5th generated character of a few rows
    return sorted({t[i] for t in texts[:4] for i in (2, 4) if len(t) > i and t[i].strip()})


@pytest.mark.parametrize("share_prefill", [False, True])
def test_greedy_tokens_and_logprobs_equal_generate_while_rows_leave_the_batch(tiny, count_compactions, share_prefill):
    model, tok = tiny
    base = SamplingParams(temperature=0, max_new_tokens=16)
    stops = _stops_that_end_rows_at_different_steps(model, tok, base)
    assert stops
    sp = SamplingParams(temperature=0, max_new_tokens=16, stop=tuple(stops))
    _, plain = _generate(model, tok, sp, compact=False, share_prefill=share_prefill, repeat=2)
    _, compacted = _generate(model, tok, sp, compact=True, share_prefill=share_prefill, repeat=2)
    assert count_compactions, "no row left the batch: the test does not exercise compaction"
    lengths = {len(g.token_ids) for g in plain}
    assert len(lengths) > 1 and min(lengths) < 16  # rows end at different steps
    for a, b in zip(plain, compacted):
        assert b.token_ids == a.token_ids and b.stop_reason == a.stop_reason
        torch.testing.assert_close(torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=1e-5, rtol=1e-5)


def test_sampled_tokens_equal_generate_until_a_row_leaves(tiny, monkeypatch):
    """With compaction held off, the loop is generate's: the same draws, the same tokens."""
    model, tok = tiny
    monkeypatch.setattr(decode_module, "COMPACT_SHARE", 2.0)  # never compact
    sp = SamplingParams(temperature=0.8, top_k=30, max_new_tokens=12)
    _, plain = _generate(model, tok, sp, compact=False, seed=3)
    _, compacted = _generate(model, tok, sp, compact=True, seed=3)
    for a, b in zip(plain, compacted):
        assert b.token_ids == a.token_ids and b.stop_reason == a.stop_reason
        torch.testing.assert_close(torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=1.0, max_new_tokens=16),
                                      SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=16)])
def test_sampled_logprobs_are_those_sampled_from_after_compaction(tiny, count_compactions, sampling):
    model, tok = tiny
    # sampled bytes of the random model: any of these letters ends a row, at random steps
    sp = SamplingParams(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
                        max_new_tokens=16, stop=tuple("etaoinsr"))
    reqs, gens = _generate(model, tok, sp, compact=True, seed=1, repeat=3)
    assert count_compactions
    for r, g in zip(reqs, gens):
        assert 1 <= len(g.token_ids) <= 16 and len(g.logprobs) == len(g.token_ids)
        ref = reference_logprobs(model, r.prompt_ids, g.token_ids, sp)
        torch.testing.assert_close(torch.tensor(g.logprobs), ref, atol=1e-4, rtol=1e-4)


def test_compaction_waits_for_a_quarter_of_the_batch():
    assert not decode_module.compact_when(0, 8)
    assert not decode_module.compact_when(1, 8)
    assert decode_module.compact_when(2, 8)
    assert decode_module.compact_when(1, 1)


def test_the_multinomial_sampler_keeps_generates_loop(tiny, count_compactions):
    model, tok = tiny
    backend = HFGenerateBackend(PolicySet.shared(model, tok), compact_finished=True, sampler="multinomial")
    reqs = backend_requests(tok, PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=8, stop=("e", "a")))
    gens = backend.generate("shared", reqs)
    assert len(gens) == len(reqs) and not count_compactions
