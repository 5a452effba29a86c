"""Log-probs of mixed-policy batches: right adapter per member, gradients reach every policy."""

import torch

from srpo.batch import build_flat_batch
from srpo.models import build_tiny_model
from srpo.objective.logprobs import response_logprobs_reference
from srpo.rollout.policies import PolicySet
from srpo.train.forward import batch_logprobs
from srpo.types import ActiveSet, Episode, Member, Task


def _batch(policies=("solver", "aggregator")):
    task = Task("t0", "q")
    g = torch.Generator().manual_seed(0)

    def member(policy, n, p=4):
        ids = torch.randint(3, 200, (n + p,), generator=g).tolist()
        return Member(agent=policy, policy=policy, prompt_ids=ids[:p], response_ids=ids[p:], loss_mask=[1] * n)

    # one set mixing both policies (a debate round between agents with their own adapters); the
    # second policy's member is longer on both sides, so the first policy's rows are trimmed of
    # left and right padding for their forward pass
    sets = [
        ActiveSet((member(policies[0], 3), member(policies[-1], 5, p=9)), "round", "t0", turn=0),
        ActiveSet((member(policies[0], 2),), "final", "t0", turn=1),
    ]
    return build_flat_batch([Episode(task, "w", sets, reward=1.0)], pad_token_id=0)


def test_lora_members_use_their_own_adapter_and_both_get_gradients():
    model, tok = build_tiny_model(seed=0)
    policies = PolicySet.lora(model, tok, ["solver", "aggregator"], rank=4, init_lora_weights=False)
    batch = _batch()
    out = batch_logprobs(policies, batch, chunk_size=5)
    peft_model = policies["solver"].model
    for i, name in enumerate(batch.member_policy):
        peft_model.set_adapter(name)
        with torch.no_grad():
            ref = response_logprobs_reference(
                peft_model, batch.input_ids[i : i + 1], batch.attention_mask[i : i + 1], batch.prompt_length
            ).logprobs[0]
        mask = batch.response_mask[i]
        torch.testing.assert_close(out.logprobs[i][mask], ref[mask], atol=1e-5, rtol=1e-5)
    # restore training flags the way batch_logprobs left them, then backprop through both policies
    for n, p in peft_model.named_parameters():
        p.requires_grad_("lora_" in n)
    out = batch_logprobs(policies, batch)
    (out.logprobs * batch.response_mask).sum().backward()
    grads = dict.fromkeys(("solver", "aggregator"), 0.0)
    for n, p in peft_model.named_parameters():
        for name in grads:
            if f".{name}." in n and p.grad is not None:
                grads[name] += float(p.grad.abs().sum())
    assert grads["solver"] > 0 and grads["aggregator"] > 0


def test_shared_policy_matches_reference_and_keeps_member_order():
    model, tok = build_tiny_model(seed=1)
    policies = PolicySet.shared(model, tok)
    batch = _batch(policies=("shared",))
    out = batch_logprobs(policies, batch, with_entropy=True)
    ref = response_logprobs_reference(
        model, batch.input_ids, batch.attention_mask, batch.prompt_length, with_entropy=True
    )
    mask = batch.response_mask
    torch.testing.assert_close(out.logprobs[mask], ref.logprobs[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.entropy[mask], ref.entropy[mask], atol=1e-5, rtol=1e-5)
