"""Invariances: micro-batches that keep sets whole, member order inside a set, set order."""

import pytest
import torch
from conftest import make_episodes, prepare_full_step, random_logprob_pair

import srpo
from srpo.batch import build_flat_batch, pack_sets
from srpo.objective import METHODS, get_method, method_policy_loss
from srpo.objective.reductions import REDUCTIONS


def _step(name, seed=0, **overrides):
    spec = get_method(name, **overrides)
    batch = build_flat_batch(make_episodes(num_tasks=3, group_size=4, set_sizes=(3, 1, 2), seed=seed), 0)
    m, t = batch.response_mask.shape
    # "Parameters": a per-token offset theta, so logprobs = old + theta + noise depends on a leaf.
    base, old = random_logprob_pair(m, t, seed=seed, scale=0.15, dtype=torch.float64)
    filled, _ = prepare_full_step(spec, batch, old)
    return spec, filled, base.detach()


def _full_and_micro(spec, batch, base, max_tokens, **loss_kwargs):
    theta = torch.zeros_like(base, requires_grad=True)
    loss_full, _ = method_policy_loss(spec, batch, base + theta, **loss_kwargs)
    (g_full,) = torch.autograd.grad(loss_full, theta)

    theta_mb = torch.zeros_like(base, requires_grad=True)
    groups = pack_sets(batch, max_tokens)
    total = 0.0
    for ids in groups:
        micro = batch.select_sets(ids)
        rows = torch.isin(batch.set_index, torch.tensor(ids)).nonzero().flatten()
        loss, _ = method_policy_loss(spec, micro, (base + theta_mb)[rows], **loss_kwargs)
        loss.backward()
        total = total + loss.detach()
    return loss_full.detach(), g_full, total, theta_mb.grad, len(groups)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_microbatch_split_keeping_sets_whole_gives_same_loss_and_gradient(name):
    spec, batch, base = _step(name)
    row_cost = batch.input_ids.shape[1]
    for budget in (row_cost * 3, row_cost * 7, row_cost * 1000):
        loss, grad, loss_mb, grad_mb, n_micro = _full_and_micro(spec, batch, base, budget)
        torch.testing.assert_close(loss_mb, loss, rtol=0, atol=1e-6)
        torch.testing.assert_close(grad_mb, grad, rtol=0, atol=1e-6)
        if budget == row_cost * 3:
            assert n_micro > 5  # the split really happened


@pytest.mark.parametrize("name", sorted(METHODS))
def test_microbatch_split_stays_exact_with_truncated_importance_weights(name):
    """tis_cap > 0: each unit's weight comes from its own rows, so the split stays exact."""
    import dataclasses

    spec, batch, base = _step(name, seed=2)
    noise = torch.randn(batch.old_logprobs.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    batch = dataclasses.replace(batch, sampling_logprobs=batch.old_logprobs - 0.3 * noise)  # a sampler mu != pi_old
    loss, grad, loss_mb, grad_mb, n_micro = _full_and_micro(spec, batch, base, batch.input_ids.shape[1] * 3,
                                                            tis_cap=1.5)
    plain, _, _, _, _ = _full_and_micro(spec, batch, base, batch.input_ids.shape[1] * 3)
    assert n_micro > 5 and float(abs(plain - loss)) > 1e-4  # split, and the weights changed the loss
    torch.testing.assert_close(loss_mb, loss, rtol=0, atol=1e-6)
    torch.testing.assert_close(grad_mb, grad, rtol=0, atol=1e-6)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_srpo_microbatch_split_for_every_reduction(reduction):
    spec, batch, base = _step("srpo", seed=1, reduction=reduction)
    loss, grad, loss_mb, grad_mb, _ = _full_and_micro(spec, batch, base, batch.input_ids.shape[1] * 4)
    torch.testing.assert_close(loss_mb, loss, rtol=0, atol=1e-6)
    torch.testing.assert_close(grad_mb, grad, rtol=0, atol=1e-6)


def test_public_loss_with_normalizer_is_microbatch_invariant():
    logprobs, old = random_logprob_pair(10, 5, seed=2)
    mask = torch.ones(10, 5, dtype=torch.bool)
    mask[::3, 3:] = False
    set_index = torch.tensor([0, 0, 1, 2, 2, 2, 3, 4, 4, 5])
    adv = torch.linspace(-1, 1, 6, dtype=torch.float64)
    full, _ = srpo.setwise_policy_loss(logprobs, old, mask, set_index, adv, clip_low=0.1, clip_high=0.1)
    (g_full,) = torch.autograd.grad(full, logprobs)
    parts, total = [(0, 1), (2, 3, 4), (5,)], 0.0
    grad = torch.zeros_like(logprobs)
    for sets in parts:
        rows = torch.isin(set_index, torch.tensor(sets)).nonzero().flatten()
        local = torch.unique(set_index[rows], return_inverse=True)[1]
        lp = logprobs.detach()[rows].clone().requires_grad_(True)
        loss, _ = srpo.setwise_policy_loss(
            lp, old[rows], mask[rows], local, adv[list(sets)], clip_low=0.1, clip_high=0.1, loss_normalizer=6
        )
        loss.backward()
        grad[rows] += lp.grad
        total = total + loss.detach()
    torch.testing.assert_close(total, full.detach(), rtol=0, atol=1e-6)
    torch.testing.assert_close(grad, g_full, rtol=0, atol=1e-6)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_member_and_set_order_do_not_matter(reduction):
    logprobs, old = random_logprob_pair(9, 6, seed=3)
    g = torch.Generator().manual_seed(3)
    lengths = torch.randint(1, 7, (9,), generator=g)
    mask = torch.arange(6).unsqueeze(0) < lengths.unsqueeze(1)
    set_index = torch.tensor([0, 0, 0, 1, 2, 2, 3, 3, 3])
    adv = torch.tensor([0.7, -0.2, 1.3, -1.1], dtype=torch.float64)
    kw = dict(clip_low=0.1, clip_high=0.15, reduction=reduction)
    loss, _ = srpo.setwise_policy_loss(logprobs, old, mask, set_index, adv, **kw)
    (grad,) = torch.autograd.grad(loss, logprobs)
    # shuffle members (inside and across sets) and relabel sets 0..3 -> 3..0
    perm = torch.randperm(9, generator=g)
    relabel = torch.tensor([3, 2, 1, 0])
    lp2 = logprobs.detach()[perm].clone().requires_grad_(True)
    loss2, _ = srpo.setwise_policy_loss(
        lp2, old[perm], mask[perm], relabel[set_index[perm]], adv[relabel.argsort()], **kw
    )
    (grad2,) = torch.autograd.grad(loss2, lp2)
    torch.testing.assert_close(loss2, loss, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad2, grad[perm], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_member_order_inside_sets_does_not_matter_for_any_method(name):
    spec = get_method(name)
    episodes = make_episodes(num_tasks=2, group_size=3, set_sizes=(4, 1), seed=5)
    reversed_eps = make_episodes(num_tasks=2, group_size=3, set_sizes=(4, 1), seed=5)
    for ep in reversed_eps:
        for aset in ep.transitions:
            aset.members = tuple(reversed(aset.members))
    results = []
    for eps in (episodes, reversed_eps):
        batch = build_flat_batch(eps, 0)
        m, t = batch.response_mask.shape
        old = torch.full((m, t), -1.0, dtype=torch.float64)
        # log-ratio = a function of the member's own tokens, so it travels with the member
        lp = old + 0.05 * torch.sin(batch.input_ids[:, batch.prompt_length :].double())
        filled, _ = prepare_full_step(spec, batch, old)
        loss, _ = method_policy_loss(spec, filled, lp)
        results.append(loss.detach())
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=1e-12)
