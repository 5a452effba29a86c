"""The vectorized losses against plain-loop references and finite differences; equivalences."""

import math

import pytest
import torch
from conftest import random_logprob_pair

import srpo
from srpo.objective.losses import UnitLossInputs, UnitLossSettings, unit_policy_loss
from srpo.objective.reductions import REDUCTIONS


def reference_setwise_loss(logprobs, old, mask, set_index, adv, clip_low, clip_high, reduction):
    """srpo.md, term by term, with Python loops (float64)."""
    num_sets = int(set_index.max()) + 1
    total = 0.0
    for s in range(num_sets):
        members = [m for m in range(logprobs.shape[0]) if int(set_index[m]) == s]
        sums, lengths = [], []
        for m in members:
            toks = [t for t in range(logprobs.shape[1]) if bool(mask[m, t])]
            sums.append(sum(logprobs[m, t] - old[m, t] for t in toks))
            lengths.append(len(toks))
        if reduction == "mean":
            lam = sum(x / L for x, L in zip(sums, lengths)) / len(members)
        elif reduction == "pooled":
            lam = sum(sums) / sum(lengths)
        elif reduction == "member_sum":
            lam = sum(x / L for x, L in zip(sums, lengths))
        else:
            lam = sum(sums)
        r = torch.exp(lam)
        a = adv[s]
        total = total + torch.minimum(r * a, torch.clamp(r, 1 - clip_low, 1 + clip_high) * a)
    return -total / num_sets


def _random_sets(seed=0, m=9, t=6):
    g = torch.Generator().manual_seed(seed)
    logprobs, old = random_logprob_pair(m, t, seed=seed)
    lengths = torch.randint(1, t + 1, (m,), generator=g)
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)
    set_index = torch.tensor([0, 0, 0, 1, 2, 2, 3, 3, 3])[:m]
    adv = torch.randn(int(set_index.max()) + 1, generator=g, dtype=torch.float64)
    return logprobs, old, mask, set_index, adv


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("clip", [(0.2, 0.28), (0.05, 0.05)])
def test_matches_plain_loop_reference_forward_and_backward(reduction, clip):
    for seed in range(3):
        logprobs, old, mask, set_index, adv = _random_sets(seed)
        loss, _ = srpo.setwise_policy_loss(
            logprobs, old, mask, set_index, adv, clip_low=clip[0], clip_high=clip[1], reduction=reduction
        )
        (grad,) = torch.autograd.grad(loss, logprobs)
        ref_in = logprobs.detach().clone().requires_grad_(True)
        ref = reference_setwise_loss(ref_in, old, mask, set_index, adv, clip[0], clip[1], reduction)
        (ref_grad,) = torch.autograd.grad(ref, ref_in)
        torch.testing.assert_close(loss, ref, rtol=0, atol=1e-12)
        torch.testing.assert_close(grad, ref_grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gradient_matches_finite_differences(reduction):
    # Small log-ratios and wide clips keep every set away from a kink, where the loss is smooth.
    logprobs, old, mask, set_index, adv = _random_sets(seed=7)
    logprobs = (old + 0.01 * (logprobs.detach() - old)).requires_grad_(True)

    def f(lp):
        return srpo.setwise_policy_loss(
            lp, old, mask, set_index, adv, clip_low=0.5, clip_high=0.5, reduction=reduction
        )[0]

    assert torch.autograd.gradcheck(f, (logprobs,), eps=1e-6, atol=1e-8)


def gspo_reference(logprobs, old, mask, adv, clip_low, clip_high):
    """GSPO: per response s_i = exp(mean_t delta_i,t); loss = -(1/G) sum_i min(s_i A_i, clip(s_i) A_i)."""
    terms = []
    for i in range(logprobs.shape[0]):
        d = (logprobs[i] - old[i])[mask[i]]
        s = torch.exp(d.mean())
        terms.append(torch.minimum(s * adv[i], torch.clamp(s, 1 - clip_low, 1 + clip_high) * adv[i]))
    return -torch.stack(terms).mean()


def test_singleton_sets_with_mean_equal_gspo():
    logprobs, old, mask, _, _ = _random_sets(seed=3)
    # Per-member log-ratios of +-1e-3 (beyond GSPO's 3e-4/4e-4 clip) or small, plus token noise:
    # member 1 (A < 0, r < 1 - 3e-4) is clipped low, member 5 (A > 0, r > 1 + 4e-4) clipped high.
    offsets = 1e-3 * torch.tensor([1, -1, 1, -1, 0.1, 1, -1, 0.2, -0.1], dtype=torch.float64)
    noise = 1e-5 * (logprobs.detach() - old)
    logprobs = (old + offsets.unsqueeze(1) + noise).requires_grad_(True)
    adv = torch.linspace(-1.5, 1.5, logprobs.shape[0], dtype=torch.float64)
    loss, m = srpo.setwise_policy_loss(
        logprobs, old, mask, torch.arange(logprobs.shape[0]), adv, clip_low=3e-4, clip_high=4e-4
    )
    (grad,) = torch.autograd.grad(loss, logprobs)
    ref_in = logprobs.detach().clone().requires_grad_(True)
    ref = gspo_reference(ref_in, old, mask, adv, 3e-4, 4e-4)
    (ref_grad,) = torch.autograd.grad(ref, ref_in)
    assert 0 < m["clip/all/frac"] < 1  # both clipped and unclipped members are exercised
    torch.testing.assert_close(loss, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=0, atol=1e-12)


def test_gspo_preset_is_singleton_srpo():
    """The sequence ratio unit (GSPO preset) equals setwise_policy_loss on singleton sets."""
    logprobs, old, mask, set_index, _ = _random_sets(seed=4)
    m = logprobs.shape[0]
    member_adv = torch.linspace(-1, 1, m, dtype=torch.float64)
    weights = 1.0 / (m * mask.sum(-1).double())  # member_mean: each token of m weighs 1 / (M L_m)
    x = UnitLossInputs(logprobs, old, mask, set_index, int(set_index.max()) + 1, member_adv, weights)
    loss = unit_policy_loss("sequence", x, UnitLossSettings(0.2, 0.2)).loss
    ref, _ = srpo.setwise_policy_loss(logprobs, old, mask, torch.arange(m), member_adv, clip_low=0.2, clip_high=0.2)
    torch.testing.assert_close(loss, ref, rtol=0, atol=1e-12)


def test_sum_reduction_is_the_joint_sequence_likelihood_ratio():
    # r_S(sum) = prod_{m in S} pi_theta(y_m) / prod_{m in S} pi_old(y_m), computed from probabilities.
    logprobs, old, mask, set_index, _ = _random_sets(seed=5)
    lam = srpo.objective.set_log_ratio(logprobs.detach() - old, mask, set_index, 4, "sum")
    for s in range(4):
        rows = (set_index == s).nonzero().flatten()
        p_new = math.prod(math.exp(float(logprobs.detach()[m, t]))
                          for m in rows for t in range(mask.shape[1]) if mask[m, t])
        p_old = math.prod(math.exp(float(old[m, t])) for m in rows for t in range(mask.shape[1]) if mask[m, t])
        assert math.exp(float(lam[s])) == pytest.approx(p_new / p_old, rel=1e-10)


def grpo_token_reference(logprobs, old, mask, adv, clip_low, clip_high):
    """GRPO: -(1/G) sum_i (1/|o_i|) sum_t min(r_it A_i, clip(r_it) A_i)."""
    per_seq = []
    for i in range(logprobs.shape[0]):
        r = torch.exp((logprobs[i] - old[i])[mask[i]])
        per_seq.append(torch.minimum(r * adv[i], torch.clamp(r, 1 - clip_low, 1 + clip_high) * adv[i]).mean())
    return -torch.stack(per_seq).mean()


def test_token_unit_matches_grpo_reference():
    logprobs, old, mask, set_index, _ = _random_sets(seed=6)
    m = logprobs.shape[0]
    member_adv = torch.linspace(-1, 1, m, dtype=torch.float64)
    weights = 1.0 / (m * mask.sum(-1).double())  # seq_mean_token_mean: 1 / (M L_m) per token
    x = UnitLossInputs(logprobs, old, mask, set_index, int(set_index.max()) + 1, member_adv, weights)
    loss, metrics, _ = unit_policy_loss("token", x, UnitLossSettings(0.2, 0.28))
    (grad,) = torch.autograd.grad(loss, logprobs)
    ref_in = logprobs.detach().clone().requires_grad_(True)
    ref = grpo_token_reference(ref_in, old, mask, member_adv, 0.2, 0.28)
    (ref_grad,) = torch.autograd.grad(ref, ref_in)
    torch.testing.assert_close(loss, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=0, atol=1e-12)
    assert 0 < metrics["clip/all/frac"] < 1
