"""Truncated importance sampling (srpo.objective.tis): hand-computed weights at each ratio unit,
the loss they weight, and the micro-batch split staying exact with them."""

from __future__ import annotations

import math

import pytest
import torch

from srpo.objective.losses import UnitLossInputs, UnitLossSettings, unit_policy_loss
from srpo.objective.tis import tis_metrics, truncated_is_weights

# two sets: set 0 = members 0 (2 tokens) and 1 (3 tokens); set 1 = member 2 (1 token)
MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
SET_INDEX = torch.tensor([0, 0, 1])
OLD = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5], [-1.0, 0.0, 0.0]])
# log mu = log pi_old - delta, with delta (the log-ratio log pi_old - log mu) per token:
DELTA = torch.tensor([[0.2, -0.4, 9.0], [0.1, 0.3, 0.8], [1.5, 7.0, 7.0]])  # padding holds junk
SAMPLED = OLD - DELTA


def _w(unit: str, cap: float = 2.0, reduction: str = "mean"):
    return truncated_is_weights(unit, OLD, SAMPLED, MASK, SET_INDEX, 2, cap=cap, reduction=reduction)


def test_token_weights_by_hand():
    w = _w("token")
    expected = torch.tensor([[math.exp(0.2), math.exp(-0.4), 0.0],
                             [math.exp(0.1), math.exp(0.3), 2.0],  # e^0.8 = 2.23 > cap 2
                             [2.0, 0.0, 0.0]])  # e^1.5 = 4.48 > cap; padding weighs 0
    torch.testing.assert_close(w.weights, expected)
    assert w.truncated.tolist() == [[False, False, False], [False, False, True], [True, False, False]]
    m = tis_metrics(w)
    assert m["mismatch/is_truncated"] == pytest.approx(2 / 6)
    assert m["mismatch/is_weight"] == pytest.approx(float(expected.sum()) / 6)


def test_sequence_weights_by_hand():
    w = _w("sequence")
    # member means of delta: (0.2 - 0.4) / 2 = -0.1; (0.1 + 0.3 + 0.8) / 3 = 0.4; 1.5 -> capped
    torch.testing.assert_close(w.weights, torch.tensor([math.exp(-0.1), math.exp(0.4), 2.0]))
    assert w.truncated.tolist() == [False, False, True]


@pytest.mark.parametrize("reduction, lam0", [
    ("mean", (-0.1 + 0.4) / 2),             # mean of the members' means
    ("pooled", (0.2 - 0.4 + 0.1 + 0.3 + 0.8) / 5),  # token mean over the set
    ("member_sum", -0.1 + 0.4),             # the members' means, summed (no 1/|S|)
    ("sum", 1.0),                           # all tokens' sum: e^1.0 = 2.72 > cap 2
])
def test_set_weights_use_the_sets_own_reduction(reduction, lam0):
    w = _w("set", reduction=reduction)
    expected0 = min(math.exp(lam0), 2.0)
    torch.testing.assert_close(w.weights, torch.tensor([expected0, 2.0]))  # set 1: Lambda = 1.5
    assert w.truncated.tolist() == [math.exp(lam0) > 2.0, True]


def test_cap_below_one_is_refused():
    with pytest.raises(ValueError, match="cap must be >= 1"):
        _w("token", cap=0.5)
    with pytest.raises(ValueError, match="unknown ratio unit"):
        _w("episode")


def _loss(unit: str, is_weights=None, logprobs=None, rows=slice(None), sets=None):
    lp = (OLD + 0.05).clone().requires_grad_(True) if logprobs is None else logprobs
    per_set = unit == "set"
    adv = torch.tensor([1.0, -0.5]) if per_set else torch.tensor([1.0, 1.0, -0.5])
    weights = torch.tensor([0.5, 0.5]) if per_set else torch.tensor([0.1, 0.1, 0.2])
    x = UnitLossInputs(lp, OLD, MASK, SET_INDEX, 2, adv, weights, is_weights)
    return unit_policy_loss(unit, x, UnitLossSettings(0.2, 0.2)), lp


@pytest.mark.parametrize("unit", ["token", "sequence", "set"])
def test_weights_of_one_leave_the_loss_unchanged(unit):
    ones = torch.ones_like(_w(unit).weights)
    plain, lp0 = _loss(unit)
    weighted, lp1 = _loss(unit, ones)
    assert float(plain.loss.detach()) == float(weighted.loss.detach())
    plain.loss.backward(), weighted.loss.backward()
    assert torch.equal(lp0.grad, lp1.grad)


def test_set_unit_loss_by_hand():
    """r_S inside the clip: J_S = r_S A_S; loss = -sum_S w_S tis_S r_S A_S."""
    w = _w("set").weights  # [S]
    out, lp = _loss("set", w)
    lam = torch.tensor([0.05, 0.05])  # every token moved by +0.05: Lambda_S = 0.05 under mean
    expected = -(torch.tensor([0.5, 0.5]) * w * lam.exp() * torch.tensor([1.0, -0.5])).sum()
    torch.testing.assert_close(out.loss, expected)
    out.loss.backward()
    # dLoss/dlogp of a token of member m in set S = -w_S tis_S A_S r_S / (|S| L_m)
    g = -0.5 * float(w[0]) * 1.0 * math.exp(0.05) / (2 * 2)
    assert float(lp.grad[0, 0]) == pytest.approx(g, rel=1e-6)
    assert float(lp.grad[0, 2]) == 0.0  # padding gets nothing


def test_token_unit_loss_by_hand():
    w = _w("token").weights  # [M, T]
    out, _ = _loss("token", w)
    r = math.exp(0.05)
    adv = torch.tensor([1.0, 1.0, -0.5])[:, None]
    tok_w = torch.tensor([0.1, 0.1, 0.2])[:, None]
    expected = -(torch.where(MASK, tok_w * w * r * adv, torch.zeros(()))).sum()
    torch.testing.assert_close(out.loss, expected)


def test_shape_of_the_weights_is_checked():
    with pytest.raises(ValueError, match=r"is_weights must be finite with shape \(2,\)"):
        _loss("set", torch.ones(3))
    with pytest.raises(ValueError, match="is_weights must be finite"):
        _loss("sequence", torch.tensor([1.0, float("nan"), 1.0]))


def test_the_config_checks_the_cap_and_its_log_probs():
    from pathlib import Path

    from srpo.config import ConfigError, load_config

    smoke = str(Path(__file__).resolve().parents[2] / "srpo" / "presets" / "smoke.yaml")
    assert load_config(smoke, ["train.tis_cap=2.0"]).train.tis_cap == 2.0
    with pytest.raises(ConfigError, match=r"train.tis_cap must be 0 \(off\) or >= 1"):
        load_config(smoke, ["train.tis_cap=0.5"])
    with pytest.raises(ConfigError, match="train.tis_cap needs rollout.record_logprobs: true"):
        load_config(smoke, ["train.tis_cap=2.0", "rollout.record_logprobs=false"])
