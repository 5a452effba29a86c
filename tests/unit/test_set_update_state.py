"""The per-set record of the update (Lambda_S and the clipped share each active set gets in the
episode browser), which the loss returns from its own clip flags (method_loss(...).sets),
agrees with the loss's clip statistics, for every method."""

from __future__ import annotations

import pytest
import torch
from conftest import make_episodes, prepare_full_step

from srpo.batch import build_flat_batch
from srpo.objective import METHODS, get_method, method_policy_loss
from srpo.objective.methods import method_loss


@pytest.mark.parametrize("name", sorted(METHODS))
def test_the_clipped_share_of_each_set_adds_up_to_the_loss_clip_fraction(name):
    spec = get_method(name)
    b = build_flat_batch(make_episodes(seed=3), pad_token_id=0)
    old = -torch.rand(b.response_mask.shape, generator=torch.Generator().manual_seed(0))
    filled, _ = prepare_full_step(spec, b, old)
    # moves of about the method's clip range: some units are clipped, others not
    lp = old + 2 * spec.clip_high * torch.randn(old.shape, generator=torch.Generator().manual_seed(1))
    _, metrics = method_policy_loss(spec, filled, lp)
    out = method_loss(spec, filled, lp)
    state = out.sets
    assert out.metrics == metrics  # the same loss call
    assert state.log_ratio.shape == state.clipped.shape == state.units.shape == (b.num_sets,)
    frac = float((state.clipped * state.units).sum() / state.units.sum())
    assert frac == pytest.approx(metrics["clip/all/frac"], abs=1e-6)  # float32 shares
    assert 0 < frac < 1  # not a degenerate case: some sets clipped, some not
    assert float(state.log_ratio.mean()) == pytest.approx(metrics["set_ratio/all/log_mean"], abs=1e-9)
    assert bool(((state.clipped >= 0) & (state.clipped <= 1)).all())


def test_hand_computed_srpo_sets():
    # one task, G = 2 episodes of one singleton set each; rewards differ so A = [+a, -a] with a > 0
    spec = get_method("srpo")  # clip (1e-2, 1.3e-2) under the `mean` reduction
    b = build_flat_batch(make_episodes(num_tasks=1, group_size=2, set_sizes=(1,), seed=0), 0)
    old = torch.zeros(b.response_mask.shape)
    filled, _ = prepare_full_step(spec, b, old)
    filled.set_advantages = torch.tensor([1.0, -1.0])
    lp = old.clone()
    lp[0] += 0.02  # set 0: Lambda = 0.02, r = e^0.02 = 1.0202 > 1.013 with A > 0: clipped
    lp[1] += 0.02  # set 1: r > 1 but A < 0: the low side needs r < 0.99, so not clipped
    state = method_loss(spec, filled, lp).sets
    assert state.log_ratio.tolist() == pytest.approx([0.02, 0.02])
    assert state.clipped.tolist() == [1.0, 0.0]
    assert state.units.tolist() == [1.0, 1.0]
