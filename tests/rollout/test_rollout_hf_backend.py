"""The HF generate backend, the three policy layouts and every workflow end to end on a tiny
random model (outputs are noise; the records must still be right)."""

from __future__ import annotations

import pytest
import torch
from rollout_helpers import backend_requests, make_agents, make_tasks, reference_logprobs, tiny, tok  # noqa: F401 (fixtures)

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
from srpo.rollout.backends.protocol import finish_tokens
from srpo.tasks.math import MathReward
from srpo.workflows import build_workflow, list_workflows


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=10),
        SamplingParams(temperature=1.0, max_new_tokens=10),
        SamplingParams(temperature=0.0, max_new_tokens=10),  # greedy: raw logits (tau = 1)
    ],
)
@pytest.mark.parametrize("sampler", ["inverse_cdf", "multinomial"])
def test_sampling_logprobs_are_those_sampled_from(tiny, sampling, sampler):
    model, tok = tiny
    backend = HFGenerateBackend(PolicySet.shared(model, tok), sampler=sampler)
    reqs = backend_requests(tok, ["Hello there, agent.", "Hi", "What is 2 + 2?"], sampling)
    torch.manual_seed(0)
    gens = backend.generate("shared", reqs)
    for r, g in zip(reqs, gens):
        assert 1 <= len(g.token_ids) <= 10 and len(g.logprobs) == len(g.token_ids)
        assert (g.stop_reason == "eos") == (g.token_ids[-1] == tok.eos_token_id)
        ref = reference_logprobs(model, r.prompt_ids, g.token_ids, sampling)
        torch.testing.assert_close(torch.tensor(g.logprobs), ref, atol=1e-4, rtol=1e-4)


def test_greedy_batch_equals_one_by_one_and_chunking(tiny):
    """Left padding and chunking do not change what is generated."""
    model, tok = tiny
    sp = SamplingParams(temperature=0, max_new_tokens=8)
    reqs = backend_requests(tok, ["a", "a much longer prompt here", "mid size"], sp)
    together = HFGenerateBackend(PolicySet.shared(model, tok)).generate("shared", reqs)
    chunked_backend = HFGenerateBackend(PolicySet.shared(model, tok), max_batch_size=2)
    chunked = chunked_backend.generate("shared", reqs)
    alone = [HFGenerateBackend(PolicySet.shared(model, tok)).generate("shared", [r])[0] for r in reqs]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone] == [g.token_ids for g in chunked]
    assert chunked_backend.stats.calls == 1 and chunked_backend.stats.batches == 2


def test_stop_reasons_and_eos_kept():
    # eos = 2 is kept as the last response token; no eos -> "length"
    assert finish_tokens([5, 6, 2, 0, 0], 2, 10) == ([5, 6, 2], "eos")
    assert finish_tokens([2, 0, 0], 2, 10) == ([2], "eos")  # the empty answer: 1 token
    assert finish_tokens([5, 6, 7, 8], 2, 3) == ([5, 6, 7], "length")


def test_eos_biased_model_gives_one_token_empty_answers(tok):
    """A model that always says eos first: every response is the 1-token [eos], text ""."""
    model, tok = build_tiny_model(seed=0)

    def eos_first(module, inputs, logits):  # a huge eos logit everywhere
        logits = logits.clone()
        logits[..., tok.eos_token_id] += 1e4
        return logits

    handle = model.lm_head.register_forward_hook(eos_first)
    try:
        runner = RolloutRunner(make_agents(max_new_tokens=5),
                               HFGenerateBackend(PolicySet.shared(model, tok)), MathReward())
        eps = runner.run(make_tasks(2), build_workflow("parallel"), group_size=1).episodes
    finally:
        handle.remove()
    for e in eps:
        for s in e.transitions:
            for m in s.members:
                assert m.response_ids == [tok.eos_token_id] and m.text == "" and m.stop_reason == "eos"
        assert e.reward == 0.0


# ----------------------------------------------------------------- policies


def test_separate_models_per_role(tok):
    m1, t1 = build_tiny_model(seed=1)
    m2, t2 = build_tiny_model(seed=2)
    policies = PolicySet.separate({"solver_model": (m1, t1), "agg_model": (m2, t2)})
    agents = make_agents(dict.fromkeys(("solver",), "solver_model") | {"aggregator": "agg_model"},
                         max_new_tokens=4, temperature=0)
    agents = [a for a in agents if a.name in ("solver", "aggregator")]
    runner = RolloutRunner(agents, HFGenerateBackend(policies), MathReward())
    (ep,) = runner.run(make_tasks(1), build_workflow("parallel", {"k": 2})).episodes
    assert [m.policy for m in ep.transitions[0].members] == ["solver_model"] * 2
    assert ep.transitions[1].members[0].policy == "agg_model"
    assert runner.backend.stats.calls_by_policy == {"solver_model": 1, "agg_model": 1}
    # each member's sampling log-probs come from its own model
    for s, model in ((ep.transitions[0], m1), (ep.transitions[1], m2)):
        m = s.members[0]
        ref = reference_logprobs(model, m.prompt_ids, m.response_ids, SamplingParams(temperature=0))
        torch.testing.assert_close(torch.tensor(m.sampling_logprobs), ref, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="distinct model objects"):
        PolicySet.separate({"a": (m1, t1), "b": (m1, t1)})


def test_lora_adapter_per_role_switches_and_restores_flags(tok):
    pytest.importorskip("peft")
    base, tok = build_tiny_model(seed=0)
    policies = PolicySet.lora(base, tok, ["solver", "judge"], rank=4, init_lora_weights=False)
    model = policies["solver"].model
    model.train()
    flags_before = {n: p.requires_grad for n, p in model.named_parameters()}
    sp = SamplingParams(temperature=0, max_new_tokens=6)
    backend = HFGenerateBackend(policies)
    prompt = backend_requests(tok, ["What is 3 + 4?"], sp, policy="solver")[0]
    out = {}
    for name in ("solver", "judge", "solver"):
        req = GenerationRequest("a", name, (), prompt.prompt_ids, sp)
        (g,) = backend.generate(name, [req])
        model.set_adapter(name)  # reference under the same adapter
        ref = reference_logprobs(model, req.prompt_ids, g.token_ids, sp)
        torch.testing.assert_close(torch.tensor(g.logprobs), ref, atol=1e-4, rtol=1e-4)
        out.setdefault(name, g.logprobs)
    assert out["solver"] != out["judge"]  # random adapters: different policies
    # generation leaves the trainer's state alone: train mode and requires_grad flags
    model.set_adapter("solver")
    for n, p in model.named_parameters():
        p.requires_grad_(flags_before[n])
    backend.generate("judge", [GenerationRequest("a", "judge", (), prompt.prompt_ids, sp)])
    assert model.training
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags_before


def test_merged_lora_copy_generates_the_policy_and_follows_its_updates(tok):
    """rollout.hf.merge_lora: a LoRA policy generates from a merged copy, the same policy up to
    float rounding (greedy tokens equal, log-probs close); the copy is rebuilt after the
    policy's weights change, and only then."""
    pytest.importorskip("peft")
    base, tok = build_tiny_model(seed=0)
    policies = PolicySet.lora(base, tok, ["solver", "judge"], rank=4, init_lora_weights=False)
    sp = SamplingParams(temperature=0, max_new_tokens=8)
    reqs = backend_requests(tok, ["What is 3 + 4?", "Name a colour."], sp, policy="judge")
    plain, merged = HFGenerateBackend(policies), HFGenerateBackend(policies, merge_lora=True)

    def both():
        a, b = plain.generate("judge", reqs), merged.generate("judge", reqs)
        for x, y in zip(a, b):
            assert x.token_ids == y.token_ids
            torch.testing.assert_close(torch.tensor(y.logprobs), torch.tensor(x.logprobs), atol=1e-4, rtol=1e-4)
        return a

    first = both()
    both()
    assert merged.merged.merges == 1  # weights unchanged: the copy is reused
    with torch.no_grad():  # an "optimizer step" on the judge's adapter
        for n, p in policies.models()[0].named_parameters():
            if "lora_B.judge" in n:
                p.add_(0.5)
    second = both()
    assert merged.merged.merges == 2 and [g.token_ids for g in second] != [g.token_ids for g in first]
    assert policies.models()[0].peft_config  # the live model is still the peft model


@pytest.mark.parametrize("base_dtype", [torch.float32, torch.bfloat16])
def test_a_merged_copy_is_re_merged_in_place_bit_equal_to_a_fresh_merge(base_dtype):
    """After an adapter update the copy is rewritten in place (no deep copy of the model), with
    exactly the weights a fresh peft merge gives; a change to a base weight rebuilds it."""
    import copy

    from srpo.models import build_tiny_model
    from srpo.rollout.backends.hf.merged import MergedLoraCopies

    base, tok = build_tiny_model(dtype=base_dtype)
    policies = PolicySet.lora(base, tok, ["solver", "judge"], rank=4, init_lora_weights=False)
    model = policies.models()[0]
    copies = MergedLoraCopies()

    def fresh(adapter: str) -> dict[str, torch.Tensor]:
        return copy.deepcopy(model).merge_and_unload(adapter_names=[adapter]).state_dict()

    def assert_current(adapter: str) -> None:
        got = copies.model_for(policies[adapter]).state_dict()
        want = fresh(adapter)
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want), adapter

    assert_current("judge")
    assert_current("solver")
    assert (copies.merges, copies.rebuilds) == (2, 2)
    judge_copy = copies.model_for(policies["judge"])
    for _step in range(2):  # "optimizer steps" on both adapters
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_" in n:
                    p.add_(torch.randn_like(p) * 0.1)
        assert_current("judge")
        assert_current("solver")
    assert copies.rebuilds == 2 and copies.merges == 6  # re-merged in place, never rebuilt
    assert copies.model_for(policies["judge"]) is judge_copy
    with torch.no_grad():  # a base weight changes (a resumed base, say): a new copy
        model.get_base_model().model.embed_tokens.weight.add_(1.0)
    assert_current("judge")
    assert copies.rebuilds == 3 and copies.model_for(policies["judge"]) is not judge_copy


def test_a_dora_adapter_is_rebuilt_not_re_merged_in_place():
    """DoRA merges as a rescaled W + delta, not W + get_delta_weight: its copy is rebuilt by
    peft's own merge after every update, and still equals a fresh merge."""
    import copy

    from peft import LoraConfig, get_peft_model

    from srpo.models import build_tiny_model
    from srpo.rollout.backends.hf.merged import MergedLoraCopies
    from srpo.rollout.policies import Policy

    base, tok = build_tiny_model()
    model = get_peft_model(base, LoraConfig(r=4, target_modules="all-linear", use_dora=True,
                                            init_lora_weights=False), adapter_name="solver")
    policy = Policy("solver", model, tok, adapter="solver")
    copies = MergedLoraCopies()
    for _ in range(2):
        got = copies.model_for(policy).state_dict()
        want = copy.deepcopy(model).merge_and_unload(adapter_names=["solver"]).state_dict()
        assert all(torch.equal(got[k], want[k]) for k in want)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_" in n:
                    p.add_(0.05)
    assert copies.rebuilds == 2 and copies.merges == 2


def test_the_head_sees_contiguous_inputs_while_generating_and_no_hook_after(tiny):
    """transformers slices hidden[:, -1:, :] before lm_head; a strided input makes torch's CPU
    linear copy the head weight per row (HFGenerateBackend's contiguous_head_input)."""
    model, tok = tiny
    head = model.get_output_embeddings()
    seen = []
    probe = head.register_forward_hook(lambda module, args, out: seen.append(args[0].is_contiguous()))
    try:
        sp = SamplingParams(temperature=0, max_new_tokens=4)
        HFGenerateBackend(PolicySet.shared(model, tok)).generate("shared", backend_requests(tok, ["1 + 2?", "a b"], sp))
    finally:
        probe.remove()
    assert seen and all(seen)
    assert not head._forward_pre_hooks  # removed after the call: training keeps its fast path


def test_bf16_policies_generate_under_autocast(tok):
    """compute_dtype bfloat16: generation runs in bf16 (the log-probs differ from float32's by
    rounding only), and the model's own weights are left as they were."""
    base, tok = build_tiny_model(seed=0)
    policies = PolicySet.shared(base, tok)
    sp = SamplingParams(temperature=0, max_new_tokens=6)
    reqs = backend_requests(tok, ["What is 3 + 4?"], sp)
    (g32,) = HFGenerateBackend(policies).generate("shared", reqs)
    policies.compute_dtype = "bfloat16"
    (g16,) = HFGenerateBackend(policies).generate("shared", reqs)
    n = min(len(g16.logprobs), len(g32.logprobs))
    diff = (torch.tensor(g16.logprobs[:n]) - torch.tensor(g32.logprobs[:n])).abs().max()
    assert 0 < float(diff) < 0.05  # bf16 computed (not bit-equal), and close
    assert {p.dtype for p in base.parameters()} == {torch.float32}


# ----------------------------------------------------------------- end to end


# the search workflows need a retriever (tests/search/test_search_workflows.py runs them end to
# end), the testbed's cover workflow its cover tasks (tests/testbed trains it on a tiny model)
@pytest.mark.parametrize("name", [n for n, _ in list_workflows()
                                  if not n.startswith("search_") and n != "cover"])
def test_every_workflow_end_to_end_on_a_tiny_model(tiny, name):
    model, tok = tiny
    runner = RolloutRunner(make_agents(max_new_tokens=6), HFGenerateBackend(PolicySet.shared(model, tok)),
                           MathReward(), seed=0)
    torch.manual_seed(0)
    result = runner.run(make_tasks(2), build_workflow(name), group_size=2)
    eps = result.episodes
    assert len(eps) == 4 and result.stats["generated_tokens"] > 0
    for e in eps:
        assert e.transitions and all(s.size >= 1 for s in e.transitions)
        for s in e.transitions:
            for m in s.members:
                assert 1 <= len(m.response_ids) <= 6
                assert m.stop_reason in ("eos", "length")
                assert len(m.sampling_logprobs) == len(m.response_ids)
                assert all(lp <= 0 for lp in m.sampling_logprobs)
        if name == "routed":  # a random model never writes a valid route: fallback + penalty
            assert e.metadata["route_invalid"] == 1 and e.reward_components["route_penalty"] == -0.5
    batch = build_flat_batch(eps, pad_token_id=tok.pad_token_id)
    assert batch.num_sets == sum(len(e.transitions) for e in eps)


def test_sampling_logprobs_match_the_training_forward(tiny):
    """The train/inference mismatch on CPU float32 is ~0: recorded sampling log-probs equal the
    trainer's recomputation on the flat batch (same temperature, no top-k/top-p)."""
    model, tok = tiny
    runner = RolloutRunner(make_agents(max_new_tokens=8, temperature=0.8),
                           HFGenerateBackend(PolicySet.shared(model, tok)), MathReward())
    torch.manual_seed(1)
    eps = runner.run(make_tasks(2), build_workflow("parallel", {"k": 2}), group_size=2).episodes
    batch = build_flat_batch(eps, pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        lp = response_logprobs(model, batch.input_ids, batch.attention_mask, batch.prompt_length,
                               temperature=0.8).logprobs
    mask = batch.response_mask
    torch.testing.assert_close(lp[mask], batch.sampling_logprobs[mask], atol=2e-4, rtol=1e-4)


def test_identical_greedy_requests_are_generated_once(tiny):
    """n debaters with one role at evaluation send identical greedy prompts: one row each."""
    model, tok = tiny
    sp = SamplingParams(temperature=0, max_new_tokens=6)
    reqs = backend_requests(tok, ["same", "other", "same", "same"], sp)
    backend = HFGenerateBackend(PolicySet.shared(model, tok))
    rows_seen = []
    original = backend._generate_batch

    def spy(model_, tok_, prompts, sampling):
        rows_seen.append(len(prompts))
        return original(model_, tok_, prompts, sampling)

    backend._generate_batch = spy
    gens = backend.generate("shared", reqs)
    assert rows_seen == [2]  # "same" once, "other" once
    assert gens[0].token_ids == gens[2].token_ids == gens[3].token_ids
    assert gens[0] is not gens[2]  # independent records
    alone = HFGenerateBackend(PolicySet.shared(model, tok)).generate("shared", [reqs[1]])[0]
    assert gens[1].token_ids == alone.token_ids
    # sampled requests are never merged
    rows_seen.clear()
    backend.generate("shared",
                     backend_requests(tok, ["same", "same"], SamplingParams(temperature=1.0, max_new_tokens=4)))
    assert rows_seen == [2]


def test_generation_runs_in_eval_mode_and_restores_the_callers_mode(tiny):
    """A model left in train mode (e.g. gradient-checkpointed for the update) would generate
    without its KV cache; the backend switches to eval mode for generate and back after."""
    model, tok = tiny
    seen_modes = []
    original = model.generate

    def spy(*args, **kwargs):
        seen_modes.append(model.training)
        return original(*args, **kwargs)

    model.generate = spy
    try:
        sp = SamplingParams(temperature=0, max_new_tokens=4)
        backend = HFGenerateBackend(PolicySet.shared(model, tok))
        model.train()
        backend.generate("shared", backend_requests(tok, ["a b"], sp))
        assert seen_modes == [False] and model.training is True
        model.eval()
        backend.generate("shared", backend_requests(tok, ["c d"], sp))
        assert seen_modes == [False, False] and model.training is False
    finally:
        del model.generate


def test_a_model_folders_repetition_penalty_does_not_change_what_is_sampled(tiny):
    """Sampling-time log-probs assume plain temperature sampling: a repetition_penalty from a
    model's generation_config (Qwen2.5 ships one) must not leak into generate."""
    model, tok = tiny
    sp = SamplingParams(temperature=0, max_new_tokens=10)
    reqs = backend_requests(tok, ["a a a a", "b b b"], sp)
    plain = HFGenerateBackend(PolicySet.shared(model, tok)).generate("shared", reqs)
    saved = model.generation_config.repetition_penalty
    model.generation_config.repetition_penalty = 5.0
    try:
        penalized = HFGenerateBackend(PolicySet.shared(model, tok)).generate("shared", reqs)
    finally:
        model.generation_config.repetition_penalty = saved
    assert [g.token_ids for g in penalized] == [g.token_ids for g in plain]


def test_the_inverse_cdf_sampler_draws_from_softmax_of_the_scores():
    """The backend draws tokens itself (HF's torch.multinomial cost 21% of a rollout): the draws
    follow softmax(scores), and a token cut to -inf (top-k / top-p) is never drawn."""
    from srpo.rollout.backends.hf.processors import InverseCdfSampler

    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    scores = probs.log().expand(20_000, 5).contiguous()  # 20,000 independent rows, one draw each
    forced = InverseCdfSampler()(torch.zeros(20_000, 1, dtype=torch.long), scores)
    assert forced is scores  # in place: generate's own copy of the step's scores
    assert bool((forced.isposinf().sum(dim=-1) == 1).all())  # exactly one drawn token a row
    counts = torch.bincount(forced.argmax(dim=-1), minlength=5).double() / 20_000
    # binomial std at p = 0.5 and n = 20,000 is 0.0035: 4 std
    torch.testing.assert_close(counts, probs.double(), rtol=0, atol=0.014)
    assert counts[4] == 0


@pytest.mark.parametrize("vocab, block", [(49152, 256), (259, 256), (1000, 64), (7, 4)])
def test_the_blocked_inverse_cdf_draws_the_token_of_one_float64_cdf(vocab, block):
    """Two levels (block masses, then a cumulative sum inside one block) pick the token that one
    float64 cumulative sum over softmax(scores) picks for the same uniform draw, with a vocabulary
    that is not a multiple of the block and with -inf (top-k) tokens at block ends."""
    from srpo.rollout.backends.hf.processors import InverseCdfSampler

    gen = torch.Generator().manual_seed(vocab)
    agree = total = 0
    for trial in range(20):
        scores = torch.randn(64, vocab, generator=gen) * (1 + trial % 6)
        scores[:, -1] = float("-inf")  # cut tokens at the end of the vocabulary and of a block
        scores[:, block - 1 :: block] = float("-inf")
        torch.manual_seed(trial)
        sampler = InverseCdfSampler(block=block, record=True)
        drawn = sampler(torch.zeros(64, 1, dtype=torch.long), scores.clone())
        assert bool((drawn.isposinf().sum(dim=-1) == 1).all())
        token = drawn.argmax(dim=-1)  # [B]
        # the recorded log-prob is log_softmax(scores) at the drawn token
        recorded = sampler.finish(torch.zeros(64, 1, dtype=torch.long))  # [B, 1]
        expected = torch.log_softmax(scores.double(), dim=-1).gather(1, token[:, None])
        torch.testing.assert_close(recorded.double(), expected, atol=2e-5, rtol=1e-5)
        assert bool(torch.isfinite(scores.gather(1, token[:, None])).all())  # never a cut token
        torch.manual_seed(trial)
        u = torch.rand(64, 1, dtype=torch.float64)  # the sampler's own draw
        cdf = torch.softmax(scores.float(), dim=-1).double().cumsum(dim=-1)
        reference = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1)
        agree += int((token == reference).sum())
        total += 64
    assert agree >= total - 2, (agree, total)  # a boundary may round the other way


def test_the_sampler_refuses_scores_it_cannot_draw_from():
    from srpo.rollout.backends.hf.processors import InverseCdfSampler

    ids = torch.zeros(2, 1, dtype=torch.long)
    for bad in (float("nan"), float("inf")):
        scores = torch.zeros(2, 10)
        scores[1, 3] = bad
        with pytest.raises(ValueError, match="NaN or \\+inf"):
            InverseCdfSampler()(ids, scores)
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        InverseCdfSampler()(ids, torch.full((2, 10), float("-inf")))


def test_an_unknown_sampler_is_refused(tiny):
    with pytest.raises(ValueError, match="sampler must be 'inverse_cdf' or 'multinomial'"):
        HFGenerateBackend(PolicySet.shared(*tiny), sampler="gumbel")
