"""The member trust region of the set surrogate (srpo_mtr; srpo.objective.member_trust) and the
member-spread diagnostics: hand-computed values, a plain-loop reference forward and backward,
and the config checks."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import random_logprob_pair

from srpo.objective import get_method
from srpo.objective.diagnostics import member_spread_metrics
from srpo.objective.losses import UnitLossInputs, UnitLossSettings, unit_policy_loss
from srpo.objective.member_trust import MemberClip, members_past_bound
from srpo.objective.reductions import REDUCTIONS


def _set_loss(logprobs, old, mask, set_index, adv, *, clip=(0.01, 0.013), member_clip=None, reduction="mean"):
    num_sets = int(set_index.max()) + 1
    x = UnitLossInputs(logprobs, old, mask, set_index, num_sets, adv,
                       torch.full((num_sets,), 1.0 / num_sets, dtype=logprobs.dtype))
    cfg = UnitLossSettings(clip[0], clip[1], reduction, member_clip=member_clip)
    return unit_policy_loss("set", x, cfg)


def test_a_member_past_the_bound_on_its_advantage_side_stops_by_hand():
    # one set of two one-token members, A = +1: member 0 ran to +0.05 (> log 1.013 = 0.0129),
    # member 1 is at -0.04; Lambda_S = 0.005 is inside the set's clip range
    old = torch.tensor([[-1.0], [-2.0]], dtype=torch.float64)
    lp = (old + torch.tensor([[0.05], [-0.04]], dtype=torch.float64)).requires_grad_(True)
    mask = torch.ones(2, 1, dtype=torch.bool)
    sidx, adv = torch.tensor([0, 0]), torch.tensor([1.0], dtype=torch.float64)
    plain = _set_loss(lp, old, mask, sidx, adv)
    mtr = _set_loss(lp, old, mask, sidx, adv, member_clip=MemberClip(0.01, 0.013))
    # the value is the set's: -w A exp(Lambda_S), w = 1
    assert float(plain.loss.detach()) == pytest.approx(-math.exp(0.005), abs=1e-12)
    assert float(mtr.loss.detach()) == pytest.approx(float(plain.loss.detach()), abs=1e-15)
    (g_plain,) = torch.autograd.grad(plain.loss, lp)
    (g_mtr,) = torch.autograd.grad(mtr.loss, lp)
    # dLoss/dlogp_m = -A exp(Lambda_S) / |S| for every member of the plain set surrogate
    torch.testing.assert_close(g_plain, torch.full((2, 1), -math.exp(0.005) / 2, dtype=torch.float64))
    torch.testing.assert_close(g_mtr, torch.tensor([[0.0], [-math.exp(0.005) / 2]], dtype=torch.float64))
    assert mtr.metrics["members/stopped_share"] == pytest.approx(0.5)
    assert mtr.metrics["members/escaping_share"] == pytest.approx(0.5)  # member 0
    assert mtr.metrics["members/outside_share"] == pytest.approx(1.0)  # both: -0.04 < log(0.99)
    assert mtr.metrics["members/spread/inside"] == pytest.approx(0.045)  # RMS of +-0.045
    assert "members/spread/clipped" not in mtr.metrics


def test_the_side_is_the_advantage_s():
    lr = torch.tensor([0.5, 0.5, -0.5, -0.5, 0.0])
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0])
    # up and A > 0: stopped; up and A < 0: pushed back down, not stopped; down and A < 0: stopped
    assert members_past_bound(lr, adv, 0.2, 0.2).tolist() == [True, False, False, True, False]
    # a zero advantage never stops (it has no gradient anyway)
    assert members_past_bound(lr, torch.zeros(5), 0.2, 0.2).tolist() == [False] * 5


def reference_mtr_loss(logprobs, old, mask, set_index, adv, clip, member_clip, reduction):
    """The set surrogate with the member trust region, term by term (float64 loops): a stopped
    member's token log-ratios enter Lambda_S as constants."""
    num_sets = int(set_index.max()) + 1
    total = 0.0
    for s in range(num_sets):
        sums, lengths = [], []
        for m in (m for m in range(logprobs.shape[0]) if int(set_index[m]) == s):
            deltas = [logprobs[m, t] - old[m, t] for t in range(logprobs.shape[1]) if bool(mask[m, t])]
            lbar = float(sum(d.detach() for d in deltas)) / len(deltas)
            stop = (adv[s] > 0 and lbar > math.log(1 + member_clip[1])) or (
                adv[s] < 0 and lbar < math.log(1 - member_clip[0]))
            sums.append(sum(d.detach() if stop else d for d in deltas))
            lengths.append(len(deltas))
        k = len(sums)
        lam = {"mean": sum(x / n for x, n in zip(sums, lengths)) / k, "pooled": sum(sums) / sum(lengths),
               "member_sum": sum(x / n for x, n in zip(sums, lengths)), "sum": sum(sums)}[reduction]
        r = torch.exp(lam)
        total = total + torch.minimum(r * adv[s], torch.clamp(r, 1 - clip[0], 1 + clip[1]) * adv[s])
    return -total / num_sets


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("member_clip", [(0.05, 0.05), (0.2, 0.3)])
def test_matches_the_plain_loop_reference_forward_and_backward(reduction, member_clip):
    stopped_any = False
    for seed in range(4):
        g = torch.Generator().manual_seed(seed)
        lp, old = random_logprob_pair(9, 5, seed=seed, scale=0.2)
        lengths = torch.randint(1, 6, (9,), generator=g)
        mask = torch.arange(5).unsqueeze(0) < lengths.unsqueeze(1)
        sidx = torch.tensor([0, 0, 0, 1, 2, 2, 3, 3, 3])
        adv = torch.randn(4, generator=g, dtype=torch.float64)
        clip = (0.3, 0.4)  # wide, so that most sets are inside and the member bound is what acts
        out = _set_loss(lp, old, mask, sidx, adv, clip=clip, member_clip=MemberClip(*member_clip),
                        reduction=reduction)
        ref = reference_mtr_loss(lp, old, mask, sidx, adv, clip, member_clip, reduction)
        (g_out,) = torch.autograd.grad(out.loss, lp)
        (g_ref,) = torch.autograd.grad(ref, lp)
        torch.testing.assert_close(out.loss, ref, rtol=0, atol=1e-12)
        torch.testing.assert_close(g_out, g_ref, rtol=0, atol=1e-12)
        stopped_any |= out.metrics.get("members/stopped_share", 0.0) > 0
    assert stopped_any  # the cases exercise the bound


def test_a_range_no_member_reaches_is_the_plain_set_loss():
    lp, old = random_logprob_pair(9, 5, seed=3, scale=0.05)
    mask = torch.ones(9, 5, dtype=torch.bool)
    sidx = torch.tensor([0, 0, 0, 1, 2, 2, 3, 3, 3])
    adv = torch.tensor([1.0, -0.5, 0.7, -2.0], dtype=torch.float64)
    plain = _set_loss(lp, old, mask, sidx, adv, clip=(0.3, 0.3))
    wide = _set_loss(lp, old, mask, sidx, adv, clip=(0.3, 0.3), member_clip=MemberClip(0.99, 100.0))
    assert wide.metrics["members/stopped_share"] == 0.0
    (a,) = torch.autograd.grad(plain.loss, lp)
    (b,) = torch.autograd.grad(wide.loss, lp)
    assert torch.equal(a, b) and torch.equal(plain.loss, wide.loss)


def test_member_spread_metrics_by_hand():
    # set 0 (clipped): members at 0.1, 0.3; set 1 (inside, A < 0): -0.2, 0.0, 0.2; set 2: singleton
    lbar = torch.tensor([0.1, 0.3, -0.2, 0.0, 0.2, 5.0])
    sidx = torch.tensor([0, 0, 1, 1, 1, 2])
    m = member_spread_metrics(lbar, sidx, 3, torch.tensor([True, False, False]),
                              torch.tensor([1.0, -1.0, 1.0]), 0.1, 0.1)
    assert m["members/spread/clipped"] == pytest.approx(0.1)
    assert m["members/spread/inside"] == pytest.approx(math.sqrt(0.08 / 3))
    # inside members of multi-member sets: -0.2 (outside, below, A < 0: escaping), 0.0, 0.2 (outside, above)
    assert m["members/outside_share"] == pytest.approx(2 / 3)
    assert m["members/escaping_share"] == pytest.approx(1 / 3)
    assert "members/stopped_share" not in m
    assert member_spread_metrics(lbar[:1], sidx[:1], 1, torch.tensor([False]), torch.tensor([1.0]), 0.1, 0.1) == {}


def test_the_preset_and_its_config_checks():
    spec = get_method("srpo_mtr")
    assert spec.ratio_unit == "set" and spec.member_clip is not None
    assert get_method("srpo").member_clip is None
    with pytest.raises(ValueError, match="both member_clip_low and member_clip_high"):
        get_method("srpo", member_clip_low=0.1)
    with pytest.raises(ValueError, match="no set ratio"):
        get_method("grpo", member_clip_low=0.1, member_clip_high=0.1)
    with pytest.raises(ValueError, match="member_clip_low must be in"):
        get_method("srpo_mtr", member_clip_low=1.0, member_clip_high=0.1)
