"""Diagnostics: hand-computed values of the pure metric functions."""

import math

import pytest
import torch

from srpo.objective.diagnostics import (
    approx_kl_old_new,
    kl_k3,
    ratio_clip_metrics,
    response_length_metrics,
    reward_metrics,
    set_log_ratio_metrics,
    set_metrics,
)


def test_k3_hand_value_and_small_ratios_are_not_rounded_away():
    # d = log q - log p = -0.5: e^-0.5 + 0.5 - 1 = 0.1065306597
    assert float(kl_k3(torch.tensor([0.0]), torch.tensor([-0.5]))) == pytest.approx(0.1065306597)
    # d = 1e-4 everywhere: k3 = e^d - d - 1 ~ d^2/2 = 5e-9, which float32 arithmetic rounds to 0
    old = torch.zeros(2, 3)
    new = old + 1e-4
    kl = approx_kl_old_new(old, new, torch.ones(2, 3, dtype=torch.bool))
    assert kl == pytest.approx(5e-9, rel=1e-3)


def test_token_unit_metrics_ignore_padding_and_split_by_set_size():
    # member 0 in a set of 2, member 1 in a set of 1; member 1's last token is padding (999)
    lr = torch.tensor([[0.1, 0.3], [-0.2, 999.0]])
    valid = torch.tensor([[True, True], [True, False]])
    r = torch.exp(lr.clamp(-20, 20))
    lo = torch.tensor([[False, False], [True, True]])
    hi = torch.tensor([[False, True], [False, True]])
    m = ratio_clip_metrics(lr, r, lo, hi, lr.abs() > 20, torch.tensor([[2], [1]]), valid=valid)
    # k2 tokens: [0.1, 0.3] -> mean 0.2, std sqrt(0.02) ; k1 tokens: [-0.2]
    assert m["ratio/k2/log_mean"] == pytest.approx(0.2)
    assert m["ratio/k2/log_std"] == pytest.approx(math.sqrt(0.02))
    assert m["ratio/k1/log_mean"] == pytest.approx(-0.2) and m["ratio/k1/log_std"] == 0.0
    assert m["ratio/all/log_mean"] == pytest.approx(0.2 / 3)
    # clipped: k2 one of 2 tokens (high), k1 one of 1 (low); the padded token counts nowhere
    assert m["clip/k2/frac_high"] == 0.5 and m["clip/k1/frac_low"] == 1.0
    assert m["clip/all/frac"] == pytest.approx(2 / 3)
    assert m["ratio/clamp_count"] == 0.0  # the 999 is padding


def test_set_and_episode_metrics():
    m = set_metrics(torch.tensor([3, 1, 3]), torch.tensor([0.5, -1.0, -1.5]))
    assert m["sets/k3/count"] == 2 and m["sets/k1/count"] == 1 and m["sets/all/count"] == 3
    assert m["adv/k3/abs_mean"] == pytest.approx(1.0) and m["adv/all/abs_mean"] == pytest.approx(1.0)
    s = set_log_ratio_metrics(torch.tensor([0.2, 0.4, -0.1]), torch.tensor([3, 3, 1]))
    assert s["set_ratio/k3/log_mean"] == pytest.approx(0.3) and s["set_ratio/k1/log_std"] == 0.0
    r = reward_metrics([1.0, 0.0, 0.5])
    assert r["reward/mean"] == pytest.approx(0.5) and r["reward/std"] == pytest.approx(0.5)
    lm = response_length_metrics([4, 6, 10], ["a", "a", "b"])
    assert lm["length/a/mean"] == 5.0 and lm["length/b/max"] == 10.0 and lm["length/all/mean"] == pytest.approx(20 / 3)
    with pytest.raises(ValueError, match="lengths but"):
        response_length_metrics([1, 2], ["a"])
