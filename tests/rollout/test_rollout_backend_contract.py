"""The GenerationBackend contract, run against every real backend (HF generate, CTranslate2)
on the tiny random models (llama and qwen2, byte tokenizer): what is sampled, the log-probs
recorded for it, stop reasons, batching, policies, weight updates. Outputs are noise; the
records must still be right."""

from __future__ import annotations

import pytest
import torch
from rollout_helpers import backend_requests, make_agents, make_tasks, reference_logprobs

from srpo.batch import build_flat_batch
from srpo.models import build_tiny_model
from srpo.objective.logprobs import response_logprobs
from srpo.rollout import (
    GenerationRequest,
    HFGenerateBackend,
    PolicySet,
    RolloutRunner,
    SamplingParams,
)
from srpo.tasks.math import MathReward
from srpo.workflows import build_workflow, list_workflows

BACKENDS = ["hf", "ctranslate2"]


def make_backend(kind: str, policies: PolicySet, **kw):
    if kind == "hf":
        return HFGenerateBackend(policies, **kw)
    pytest.importorskip("ctranslate2")
    from srpo.rollout.backends.ctranslate2 import CTranslate2Backend

    return CTranslate2Backend(policies, intra_threads=1, **kw)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny_arch(request):
    return build_tiny_model(request.param, seed=0)




PROMPTS = ["Hello there, agent.", "Hi", "What is 2 + 2?", "a much longer prompt, with more words"]


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=10),
        SamplingParams(temperature=1.0, max_new_tokens=10),
        SamplingParams(temperature=0.6, max_new_tokens=10),
        SamplingParams(temperature=1.0, top_p=0.8, max_new_tokens=10),
        SamplingParams(temperature=0.0, max_new_tokens=10),  # greedy: raw logits (tau = 1)
    ],
    ids=["t0.7-k20-p0.9", "t1", "t0.6", "t1-p0.8", "greedy"],
)
@pytest.mark.parametrize("kind", BACKENDS)
def test_sampling_logprobs_are_those_sampled_from(tiny_arch, kind, sampling):
    model, tok = tiny_arch
    backend = make_backend(kind, PolicySet.shared(model, tok))
    reqs = backend_requests(tok, PROMPTS, sampling)
    torch.manual_seed(0)
    gens = backend.generate("shared", reqs)
    for r, g in zip(reqs, gens):
        assert 1 <= len(g.token_ids) <= 10 and len(g.logprobs) == len(g.token_ids)
        assert (g.stop_reason == "eos") == (g.token_ids[-1] == tok.eos_token_id)
        ref = reference_logprobs(model, r.prompt_ids, g.token_ids, sampling)
        assert torch.isfinite(ref).all()  # every sampled token is in the support
        torch.testing.assert_close(torch.tensor(g.logprobs), ref, atol=1e-4, rtol=1e-4)
    assert backend.stats.calls == 1 and backend.stats.requests == len(reqs)
    assert backend.stats.generated_tokens == sum(len(g.token_ids) for g in gens)


@pytest.mark.parametrize("kind", BACKENDS)
def test_sampling_follows_the_distribution(kind):
    """Over many rows, the first sampled token's frequencies follow the recorded probabilities
    (temperature 0.5 and top-k 5 make a few tokens likely)."""
    model, tok = build_tiny_model(seed=3)
    backend = make_backend(kind, PolicySet.shared(model, tok))
    sp = SamplingParams(temperature=0.5, top_k=5, max_new_tokens=1)
    torch.manual_seed(0)
    gens = backend.generate("shared", backend_requests(tok, ["x y"] * 600, sp))
    first = torch.tensor([g.token_ids[0] for g in gens])
    probs = {}
    for g in gens:
        probs[g.token_ids[0]] = float(torch.tensor(g.logprobs[0]).exp())
    assert len(probs) <= 5 and abs(sum(probs.values()) - 1) < 0.5  # the tokens seen are top-k
    for token, p in probs.items():
        share = float((first == token).double().mean())
        assert abs(share - p) < 4 * (p * (1 - p) / 600) ** 0.5 + 1e-3, (token, share, p)


@pytest.mark.parametrize("kind", BACKENDS)
def test_greedy_batch_equals_one_by_one_and_chunking(tiny_arch, kind):
    """Padding, prompts of 1 token and chunking do not change what is generated."""
    model, tok = tiny_arch
    sp = SamplingParams(temperature=0, max_new_tokens=8)
    reqs = backend_requests(tok, ["a", "a much longer prompt here", "mid size", "b"], sp)
    together = make_backend(kind, PolicySet.shared(model, tok)).generate("shared", reqs)
    chunked_backend = make_backend(kind, PolicySet.shared(model, tok), max_batch_size=2)
    chunked = chunked_backend.generate("shared", reqs)
    alone = [make_backend(kind, PolicySet.shared(model, tok)).generate("shared", [r])[0] for r in reqs]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone] == [g.token_ids for g in chunked]
    assert chunked_backend.stats.calls == 1 and chunked_backend.stats.batches == 2


@pytest.mark.parametrize("kind", BACKENDS)
def test_greedy_agrees_with_hf_token_for_token(tiny_arch, kind):
    """float32: every backend's greedy outputs are HF generate's, token for token, and its
    log-probs HF's to float precision."""
    model, tok = tiny_arch
    sp = SamplingParams(temperature=0, max_new_tokens=16)
    texts = [f"Question {i}: what is {i} + {2 * i}? Answer briefly." for i in range(12)] + PROMPTS
    reqs = backend_requests(tok, texts, sp)
    ref = HFGenerateBackend(PolicySet.shared(model, tok)).generate("shared", reqs)
    got = make_backend(kind, PolicySet.shared(model, tok)).generate("shared", reqs)
    assert [g.token_ids for g in got] == [g.token_ids for g in ref]
    assert [g.stop_reason for g in got] == [g.stop_reason for g in ref]
    for a, b in zip(got, ref):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", BACKENDS)
def test_stop_strings_end_the_response_after_the_completing_token(tiny_arch, kind):
    """A stop string found in the decoded response ends it right after the token that completes
    it (kept), with stop_reason "stop"; a stop string never produced changes nothing."""
    model, tok = tiny_arch
    plain_sp = SamplingParams(temperature=0, max_new_tokens=12)
    reqs = backend_requests(tok, PROMPTS, plain_sp)
    backend = make_backend(kind, PolicySet.shared(model, tok))
    plain = backend.generate("shared", reqs)
    # a stop string taken from the middle of the first greedy response
    ids = plain[0].token_ids
    text = tok.decode(ids, skip_special_tokens=True)
    stop = text[4:6]
    stop_sp = plain_sp.replace(stop=(stop, "never-produced-string"))
    cut = backend.generate("shared", backend_requests(tok, PROMPTS, stop_sp))
    for full, g in zip(plain, cut):
        full_text = tok.decode(full.token_ids, skip_special_tokens=True)
        if stop in full_text:
            assert g.stop_reason == "stop"
            assert full.token_ids[: len(g.token_ids)] == g.token_ids  # a prefix of the full answer
            assert stop in tok.decode(g.token_ids, skip_special_tokens=True)
            assert stop not in tok.decode(g.token_ids[:-1], skip_special_tokens=True)
            assert len(g.logprobs) == len(g.token_ids)
        else:
            assert g.token_ids == full.token_ids and g.stop_reason == full.stop_reason
    assert cut[0].stop_reason == "stop"


@pytest.mark.parametrize("kind", BACKENDS)
def test_eos_is_kept_last_and_length_has_no_eos(kind):
    """Sampled at temperature 1 over many rows, some responses end with eos (kept, stop reason
    "eos"); the others have max_new_tokens tokens, none of them eos ("length")."""
    model, tok = build_tiny_model(seed=0)
    backend = make_backend(kind, PolicySet.shared(model, tok))
    sp = SamplingParams(temperature=1.0, max_new_tokens=48)
    torch.manual_seed(0)
    gens = backend.generate("shared", backend_requests(tok, [f"prompt {i}" for i in range(60)], sp))
    reasons = {g.stop_reason for g in gens}
    assert reasons == {"eos", "length"}
    for g in gens:
        if g.stop_reason == "eos":
            assert g.token_ids[-1] == tok.eos_token_id and tok.eos_token_id not in g.token_ids[:-1]
        else:
            assert len(g.token_ids) == 48 and tok.eos_token_id not in g.token_ids
        assert len(g.logprobs) == len(g.token_ids)


@pytest.mark.parametrize("kind", BACKENDS)
def test_identical_greedy_requests_share_one_row(kind):
    model, tok = build_tiny_model(seed=0)
    sp = SamplingParams(temperature=0, max_new_tokens=6)
    reqs = backend_requests(tok, ["same", "other", "same", "same"], sp)
    backend = make_backend(kind, PolicySet.shared(model, tok))
    gens = backend.generate("shared", reqs)
    assert gens[0].token_ids == gens[2].token_ids == gens[3].token_ids
    assert gens[0] is not gens[2] and gens[0].token_ids is not gens[2].token_ids
    alone = make_backend(kind, PolicySet.shared(model, tok)).generate("shared", [reqs[1]])[0]
    assert gens[1].token_ids == alone.token_ids


@pytest.mark.parametrize("kind", BACKENDS)
def test_requests_of_another_policy_are_refused(kind):
    model, tok = build_tiny_model(seed=0)
    backend = make_backend(kind, PolicySet.shared(model, tok))
    reqs = backend_requests(tok, ["x"], SamplingParams(max_new_tokens=2), policy="other")
    with pytest.raises(ValueError, match="names policy 'other'"):
        backend.generate("shared", reqs)


# ----------------------------------------------------------------- policies


@pytest.mark.parametrize("kind", BACKENDS)
def test_separate_models_per_role(kind):
    m1, t1 = build_tiny_model(seed=1)
    m2, t2 = build_tiny_model("qwen2", seed=2)
    policies = PolicySet.separate({"solver_model": (m1, t1), "agg_model": (m2, t2)})
    agents = make_agents({"solver": "solver_model", "aggregator": "agg_model"},
                         max_new_tokens=4, temperature=0)
    agents = [a for a in agents if a.name in ("solver", "aggregator")]
    runner = RolloutRunner(agents, make_backend(kind, policies), MathReward())
    (ep,) = runner.run(make_tasks(1), build_workflow("parallel", {"k": 2})).episodes
    assert runner.backend.stats.calls_by_policy == {"solver_model": 1, "agg_model": 1}
    for s, model in ((ep.transitions[0], m1), (ep.transitions[1], m2)):
        m = s.members[0]
        ref = reference_logprobs(model, m.prompt_ids, m.response_ids, SamplingParams(temperature=0))
        torch.testing.assert_close(torch.tensor(m.sampling_logprobs), ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", BACKENDS)
def test_lora_adapter_per_role(kind):
    """Each adapter is its own policy (random adapters: they differ); generating leaves the
    model's train mode and requires_grad flags as they were."""
    pytest.importorskip("peft")
    base, tok = build_tiny_model(seed=0)
    policies = PolicySet.lora(base, tok, ["solver", "judge"], rank=4, init_lora_weights=False)
    model = policies["solver"].model
    model.train()
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    sp = SamplingParams(temperature=0, max_new_tokens=6)
    backend = make_backend(kind, policies)
    prompt = backend_requests(tok, ["What is 3 + 4?"], sp, policy="solver")[0].prompt_ids
    out = {}
    for name in ("solver", "judge", "solver"):
        (g,) = backend.generate(name, [GenerationRequest("a", name, (), prompt, sp)])
        model.set_adapter(name)
        ref = reference_logprobs(model, prompt, g.token_ids, sp)
        model.set_adapter("solver")
        for n, p in model.named_parameters():
            p.requires_grad_(flags[n])
        torch.testing.assert_close(torch.tensor(g.logprobs), ref, atol=1e-4, rtol=1e-4)
        out.setdefault(name, g.logprobs)
    assert out["solver"] != out["judge"]
    backend.generate("judge", [GenerationRequest("a", "judge", (), prompt, sp)])
    assert model.training
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags


# ----------------------------------------------------------------- weights change


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("layout", ["shared", "lora"])
def test_generation_follows_in_place_weight_updates(kind, layout):
    """After an optimizer step changes the weights in place, the next generation comes from
    the new weights (HF generate's greedy output on the updated model), with no call between."""
    model, tok = build_tiny_model(seed=0)
    if layout == "lora":
        pytest.importorskip("peft")
        policies = PolicySet.lora(model, tok, ["shared"], rank=4)
    else:
        policies = PolicySet.shared(model, tok)
    live = policies["shared"].model
    backend = make_backend(kind, policies)
    sp = SamplingParams(temperature=0, max_new_tokens=10)
    reqs = backend_requests(tok, PROMPTS, sp)
    before = backend.generate("shared", reqs)
    params = [p for p in live.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=0.05)
    ids = torch.tensor([list(reqs[0].prompt_ids) + before[0].token_ids])
    for _ in range(3):  # push the first answer's tokens down: the greedy answers change
        opt.zero_grad()
        live(ids).logits.float().log_softmax(-1)[0, :-1].gather(1, ids[0, 1:, None]).sum().backward()
        opt.step()
    after = backend.generate("shared", reqs)
    ref = HFGenerateBackend(policies).generate("shared", reqs)
    assert [g.token_ids for g in after] == [g.token_ids for g in ref]
    assert [g.token_ids for g in after] != [g.token_ids for g in before]
    for a, b in zip(after, ref):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=1e-4)
    if kind == "ctranslate2":
        assert backend.stats.syncs == 2
        backend.generate("shared", reqs)  # nothing changed: no conversion
        assert backend.stats.syncs == 2


# ----------------------------------------------------------------- end to end


@pytest.mark.parametrize("name", [n for n, _ in list_workflows()
                                  if not n.startswith("search_") and n != "cover"])
def test_every_workflow_end_to_end_on_ctranslate2(name):
    pytest.importorskip("ctranslate2")
    model, tok = build_tiny_model(seed=0)
    runner = RolloutRunner(make_agents(max_new_tokens=6),
                           make_backend("ctranslate2", PolicySet.shared(model, tok)), MathReward(), seed=0)
    torch.manual_seed(0)
    result = runner.run(make_tasks(2), build_workflow(name), group_size=2)
    eps = result.episodes
    assert len(eps) == 4 and result.stats["generated_tokens"] > 0
    for e in eps:
        for s in e.transitions:
            for m in s.members:
                assert 1 <= len(m.response_ids) <= 6
                assert len(m.sampling_logprobs) == len(m.response_ids)
                assert all(lp <= 0 for lp in m.sampling_logprobs)
    batch = build_flat_batch(eps, pad_token_id=tok.pad_token_id)
    assert batch.num_sets == sum(len(e.transitions) for e in eps)


@pytest.mark.parametrize("kind", BACKENDS)
def test_sampling_logprobs_match_the_training_forward(kind):
    """float32: the recorded sampling log-probs equal the trainer's recomputation on the flat
    batch (same temperature): the train/inference mismatch is ~0."""
    model, tok = build_tiny_model(seed=0)
    runner = RolloutRunner(make_agents(max_new_tokens=8, temperature=0.8),
                           make_backend(kind, PolicySet.shared(model, tok)), MathReward())
    torch.manual_seed(1)
    eps = runner.run(make_tasks(2), build_workflow("parallel", {"k": 2}), group_size=2).episodes
    batch = build_flat_batch(eps, pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        lp = response_logprobs(model, batch.input_ids, batch.attention_mask, batch.prompt_length,
                               temperature=0.8).logprobs
    mask = batch.response_mask
    torch.testing.assert_close(lp[mask], batch.sampling_logprobs[mask], atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", BACKENDS)
def test_same_seed_same_samples(kind):
    model, tok = build_tiny_model(seed=0)
    sp = SamplingParams(temperature=1.0, max_new_tokens=8)
    runs = []
    for _ in range(2):
        torch.manual_seed(5)
        backend = make_backend(kind, PolicySet.shared(model, tok))
        runs.append([g.token_ids for g in backend.generate("shared", backend_requests(tok, PROMPTS, sp))])
    assert runs[0] == runs[1]
