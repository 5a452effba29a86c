"""Hand-computed values of the SRPO objective: reductions, both clip sides, gradients at r = 1."""

import math

import pytest
import torch

import srpo
from srpo.objective.reductions import set_log_ratio


def _two_sets():
    """Set 0 = {a, b}, set 1 = {c}.

    a: L=2, deltas [0.1, 0.3] (sum 0.4);  b: L=1, delta [0.5];  c: L=4, deltas 0.2 each (sum 0.8).
    Padding positions hold garbage (99) that must never be read.
    """
    delta = torch.tensor(
        [
            [0.1, 0.3, 99.0, 99.0],
            [0.5, 99.0, 99.0, 99.0],
            [0.2, 0.2, 0.2, 0.2],
        ],
        dtype=torch.float64,
    )
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    set_index = torch.tensor([0, 0, 1])
    return delta, mask, set_index


@pytest.mark.parametrize(
    "reduction, expected",
    [
        # mean:       set0 = (1/2) * (0.4/2 + 0.5/1) = 0.5 * 0.7 = 0.35 ; set1 = 0.8/4 = 0.2
        ("mean", [0.35, 0.2]),
        # pooled:     set0 = (0.4 + 0.5) / (2 + 1) = 0.3             ; set1 = 0.8/4 = 0.2
        ("pooled", [0.3, 0.2]),
        # member_sum: set0 = 0.4/2 + 0.5/1 = 0.7                     ; set1 = 0.2
        ("member_sum", [0.7, 0.2]),
        # sum:        set0 = 0.4 + 0.5 = 0.9                          ; set1 = 0.8
        ("sum", [0.9, 0.8]),
    ],
)
def test_event_reductions_hand_values(reduction, expected):
    delta, mask, set_index = _two_sets()
    lam = set_log_ratio(delta, mask, set_index, 2, reduction)
    torch.testing.assert_close(lam, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)


def _single_set_loss(lam: float, adv: float, clip_low: float, clip_high: float, lengths=(2, 3)):
    """One set whose members' deltas are all `lam`, so Lambda_S = lam under `mean`."""
    t = max(lengths)
    old = torch.zeros(len(lengths), t, dtype=torch.float64)
    new = torch.full_like(old, lam).requires_grad_(True)
    mask = torch.zeros(len(lengths), t, dtype=torch.bool)
    for i, L in enumerate(lengths):
        mask[i, :L] = True
    loss, metrics = srpo.setwise_policy_loss(
        new, old, mask, torch.zeros(len(lengths), dtype=torch.long), torch.tensor([adv], dtype=torch.float64),
        clip_low=clip_low, clip_high=clip_high,
    )
    loss.backward()
    return loss.item(), new.grad, metrics


def test_clip_high_side_binds_for_positive_advantage():
    # r = 1.5 > 1 + 0.2, A = +1: J = min(1.5 * 1, 1.2 * 1) = 1.2 -> loss = -1.2, no gradient.
    loss, grad, m = _single_set_loss(math.log(1.5), 1.0, 0.2, 0.2)
    assert loss == pytest.approx(-1.2, abs=1e-12)
    assert torch.count_nonzero(grad) == 0
    assert m["clip/all/frac_high"] == 1.0 and m["clip/all/frac_low"] == 0.0


def test_high_ratio_not_clipped_for_negative_advantage():
    # r = 1.5, A = -1: J = min(-1.5, -1.2) = -1.5 -> loss = 1.5 (unclipped).
    # dloss/dLambda = -A * r = 1.5; with `mean`, member m's tokens get 1.5 / (|S| * L_m):
    #   member 0 (L=2): 1.5 / (2 * 2) = 0.375 ; member 1 (L=3): 1.5 / (2 * 3) = 0.25
    loss, grad, m = _single_set_loss(math.log(1.5), -1.0, 0.2, 0.2)
    assert loss == pytest.approx(1.5, abs=1e-12)
    torch.testing.assert_close(grad[0, :2], torch.full((2,), 0.375, dtype=torch.float64))
    torch.testing.assert_close(grad[1, :3], torch.full((3,), 0.25, dtype=torch.float64))
    assert grad[0, 2] == 0  # padding gets no gradient
    assert m["clip/all/frac"] == 0.0


def test_clip_low_side_binds_for_negative_advantage():
    # r = 0.5 < 1 - 0.2, A = -1: J = min(-0.5, -0.8) = -0.8 -> loss = 0.8, no gradient.
    loss, grad, m = _single_set_loss(math.log(0.5), -1.0, 0.2, 0.2)
    assert loss == pytest.approx(0.8, abs=1e-12)
    assert torch.count_nonzero(grad) == 0
    assert m["clip/all/frac_low"] == 1.0 and m["clip/all/frac_high"] == 0.0


def test_low_ratio_not_clipped_for_positive_advantage():
    # r = 0.5, A = +1: J = min(0.5, 0.8) = 0.5 -> loss = -0.5; dloss/dLambda = -A r = -0.5
    #   member 0 (L=2): -0.5 / 4 = -0.125 ; member 1 (L=3): -0.5 / 6
    loss, grad, _ = _single_set_loss(math.log(0.5), 1.0, 0.2, 0.2)
    assert loss == pytest.approx(-0.5, abs=1e-12)
    torch.testing.assert_close(grad[0, :2], torch.full((2,), -0.125, dtype=torch.float64))
    torch.testing.assert_close(grad[1, :3], torch.full((3,), -0.5 / 6, dtype=torch.float64))


def test_asymmetric_clip():
    # eps_low = 0.1, eps_high = 0.3. r = 1.25 < 1.3 with A = 2: unclipped, J = 2.5.
    loss, grad, m = _single_set_loss(math.log(1.25), 2.0, 0.1, 0.3)
    assert loss == pytest.approx(-2.5, abs=1e-12)
    assert m["clip/all/frac"] == 0.0
    # r = 0.85 < 1 - 0.1 = 0.9 with A = -2: clipped low, J = min(-1.7, -1.8) = -1.8.
    loss, grad, m = _single_set_loss(math.log(0.85), -2.0, 0.1, 0.3)
    assert loss == pytest.approx(1.8, abs=1e-12)
    assert m["clip/all/frac_low"] == 1.0
    assert torch.count_nonzero(grad) == 0


def test_gradient_at_ratio_one_is_advantage_over_set_size_and_length():
    # At r_S = 1 the gradient of -(1/N) sum J_S w.r.t. token log-prob (m, t) is
    #   -A_S / (N_sets * |S| * L_m).
    # Sets: {a (L=2), b (L=1)} with A = 0.6 ; {c (L=4)} with A = -1.2 ; N_sets = 2.
    #   a: -0.6 / (2*2*2) = -0.075 ; b: -0.6 / (2*2*1) = -0.15 ; c: 1.2 / (2*1*4) = 0.15
    _, mask, set_index = _two_sets()
    old = torch.zeros(3, 4, dtype=torch.float64)
    new = old.clone().requires_grad_(True)
    loss, _ = srpo.setwise_policy_loss(
        new, old, mask, set_index, torch.tensor([0.6, -1.2], dtype=torch.float64), clip_low=0.2, clip_high=0.2
    )
    # loss = -(1/2) * (0.6 * 1 + (-1.2) * 1) = 0.3
    assert loss.item() == pytest.approx(0.3, abs=1e-12)
    loss.backward()
    expected = torch.tensor(
        [[-0.075, -0.075, 0, 0], [-0.15, 0, 0, 0], [0.15, 0.15, 0.15, 0.15]], dtype=torch.float64
    )
    torch.testing.assert_close(new.grad, expected, rtol=0, atol=1e-12)


def test_loss_normalizer_scales_the_loss():
    # Same two sets as above with the micro-batch seeing them as 2 of a 5-set step:
    # loss = -(0.6 - 1.2) / 5 = 0.12
    _, mask, set_index = _two_sets()
    old = torch.zeros(3, 4, dtype=torch.float64)
    loss, _ = srpo.setwise_policy_loss(
        old.clone(), old, mask, set_index, torch.tensor([0.6, -1.2], dtype=torch.float64),
        clip_low=0.2, clip_high=0.2, loss_normalizer=5,
    )
    assert loss.item() == pytest.approx(0.12, abs=1e-12)


def test_metrics_per_set_size():
    delta, mask, set_index = _two_sets()
    delta = torch.where(mask, delta, torch.zeros_like(delta))
    old = torch.zeros_like(delta)
    _, m = srpo.setwise_policy_loss(
        delta.clone(), old, mask, set_index, torch.tensor([1.0, 1.0], dtype=torch.float64),
        clip_low=0.2, clip_high=0.2,
    )
    # Lambda (mean) = [0.35, 0.2]; set 0 has 2 members, set 1 has 1.
    assert m["ratio/k2/log_mean"] == pytest.approx(0.35)
    assert m["ratio/k1/log_mean"] == pytest.approx(0.2)
    assert m["ratio/all/log_mean"] == pytest.approx(0.275)
    assert m["ratio/all/log_std"] == pytest.approx(math.sqrt(2 * 0.075**2))
    # r0 = e^0.35 = 1.419 > 1.2 (A > 0): clipped; r1 = e^0.2 = 1.221 > 1.2: clipped too.
    assert m["clip/all/frac_high"] == 1.0
    assert m["ratio/k2/mean"] == pytest.approx(math.exp(0.35))
    assert m["ratio/clamp_count"] == 0.0
