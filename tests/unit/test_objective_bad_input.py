"""Bad input to the losses raises ValueError naming the problem; extreme ratios stay finite."""

import pytest
import torch

import srpo
from srpo.objective import get_method
from srpo.objective.reductions import REDUCTIONS


def _good():
    lp = torch.zeros(3, 4, requires_grad=True)
    old = torch.zeros(3, 4)
    mask = torch.ones(3, 4, dtype=torch.bool)
    return lp, old, mask, torch.tensor([0, 0, 1]), torch.tensor([1.0, -1.0])


def _call(lp, old, mask, idx, adv, **kw):
    kw.setdefault("clip_low", 0.2)
    kw.setdefault("clip_high", 0.2)
    return srpo.setwise_policy_loss(lp, old, mask, idx, adv, **kw)


def test_good_input_runs():
    loss, _ = _call(*_good())
    assert torch.isfinite(loss)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda a: a.__setitem__(1, torch.zeros(3, 5)), "old_logprobs has shape"),
        (lambda a: a.__setitem__(2, torch.ones(3, 5, dtype=torch.bool)), "mask has shape"),
        (lambda a: a.__setitem__(0, torch.zeros(12, requires_grad=True)), r"logprobs must be \[M, T\]"),
        (lambda a: a.__setitem__(3, torch.tensor([0, 0])), r"set_index must be \[M\]"),
        (lambda a: a.__setitem__(3, torch.tensor([0, 0, 2])), r"set\(s\) \[1\] have no member"),
        (lambda a: a.__setitem__(3, torch.tensor([0, -1, 1])), "negative"),
        (lambda a: a.__setitem__(3, torch.tensor([0.0, 0.0, 1.0])), "integer"),
        (lambda a: a.__setitem__(4, torch.tensor([1.0])), "advantages has 1 entries, expected 2"),
        (lambda a: a.__setitem__(4, torch.tensor([1.0, float("nan")])), "advantages has NaN/inf"),
        (lambda a: a[2].__setitem__((1, slice(None)), False), r"member\(s\) \[1\] have no response token"),
        (lambda a: a.__setitem__(2, torch.full((3, 4), 2)), "0/1"),
    ],
)
def test_malformed_input_raises(mutate, match):
    args = list(_good())
    mutate(args)
    with pytest.raises(ValueError, match=match):
        _call(*args)


@pytest.mark.parametrize("which", ["logprobs", "old_logprobs"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_logprobs_on_response_tokens_raise(which, value):
    lp, old, mask, idx, adv = _good()
    target = old if which == "old_logprobs" else lp.detach().clone()
    target[2, 1] = value
    if which == "logprobs":
        lp = target.requires_grad_(True)
    with pytest.raises(ValueError, match=rf"{which} has NaN/inf on response tokens of member\(s\) \[2\]"):
        _call(lp, old, mask, idx, adv)


def test_non_finite_padding_is_ignored():
    # -inf in a padded position (outside the mask) must not reach the loss or gradient.
    lp, old, mask, idx, adv = _good()
    mask[0, 3] = False
    lp = lp.detach().clone()
    lp[0, 3] = float("-inf")
    lp.requires_grad_(True)
    loss, _ = _call(lp, old, mask, idx, adv)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()


def test_unknown_reduction_and_method():
    with pytest.raises(ValueError, match="unknown event reduction 'avg'"):
        _call(*_good(), reduction="avg")
    with pytest.raises(ValueError, match="unknown method 'ppo'"):
        get_method("ppo")
    with pytest.raises(ValueError, match="unknown event reduction"):
        get_method("srpo", reduction="median")
    with pytest.raises(ValueError, match="unknown method setting"):
        get_method("srpo", clip=0.2)


def test_bad_clip():
    with pytest.raises(ValueError, match="clip_low"):
        _call(*_good(), clip_low=1.5)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_extreme_log_ratios_give_finite_loss_and_gradient(reduction, sign):
    # |delta| = 50 per token over 1,000 tokens: Lambda reaches 50,000 under `sum`.
    m, t = 4, 1000
    old = torch.zeros(m, t)
    lp = torch.full((m, t), sign * 50.0, requires_grad=True)
    mask = torch.ones(m, t, dtype=torch.bool)
    for adv in (torch.tensor([2.0, -2.0]), torch.tensor([-2.0, 2.0])):
        loss, metrics = _call(lp, old, mask, torch.tensor([0, 0, 1, 1]), adv, reduction=reduction)
        (grad,) = torch.autograd.grad(loss, lp)
        assert torch.isfinite(loss) and torch.isfinite(grad).all()
        assert metrics["ratio/clamp_count"] == 2.0  # both sets hit the guard and it is counted
