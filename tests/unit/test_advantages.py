"""Set-relative advantages: hand-computed values, degenerate groups, Dr. MAS scaling, bad input."""

import math

import pytest
import torch

import srpo
from srpo.objective.advantages import group_index_from_keys, relative_advantages


def test_std_scaled_hand_values():
    # group 0 = [1, 0, 0, 1]: mean 0.5, deviations +-0.5,
    #   unbiased std = sqrt(4 * 0.25 / 3) = sqrt(1/3) = 0.577350 -> A = +-0.5 / 0.577350 = +-0.866025
    # group 1 = [2] (one set) -> 0 ; group 2 = [3, 3] (zero variance) -> 0
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 3.0, 3.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 2, 2])
    a = srpo.set_relative_advantages(rewards, groups)
    s = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    torch.testing.assert_close(a, torch.tensor([s, -s, -s, s, 0.0, 0.0, 0.0]))
    res = relative_advantages(rewards, groups)
    assert res.num_groups == 3 and res.degenerate_groups == 2


def test_std_matches_torch_std_default():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(12, generator=g, dtype=torch.float64)
    groups = torch.tensor([0] * 5 + [1] * 7)
    a = srpo.set_relative_advantages(rewards, groups)
    for k in (0, 1):
        r = rewards[groups == k]
        torch.testing.assert_close(a[groups == k], (r - r.mean()) / (r.std() + 1e-6))


def test_no_scaling_is_mean_centered():
    # group 0 = [1, 0, 0, 1] -> [0.5, -0.5, -0.5, 0.5]; group 1 = [0.2, 0.8] -> [-0.3, 0.3]
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.2, 0.8], dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    a = srpo.set_relative_advantages(rewards, groups, scale="none")
    torch.testing.assert_close(a, torch.tensor([0.5, -0.5, -0.5, 0.5, -0.3, 0.3], dtype=torch.float64))


def test_equal_rewards_give_exact_zero_even_with_rounding():
    # 0.1 * 3 / 3 is not exactly 0.1 in float: degenerate groups are detected exactly, not by a tolerance.
    a = srpo.set_relative_advantages(torch.tensor([0.1, 0.1, 0.1]), torch.tensor([0, 0, 0]))
    assert torch.equal(a, torch.zeros(3))


def test_group_index_from_keys_first_appearance():
    idx = group_index_from_keys([("t1", "a"), ("t0", "a"), ("t1", "a"), ("t1", "b")])
    assert idx.tolist() == [0, 1, 0, 2]


def test_separate_scale_groups_dr_mas_style():
    # centers: [1, 0] -> mean 0.5 ; [3, 1] -> mean 2.  deviations [0.5, -0.5, 1, -1]
    # one scale group: std = sqrt((0.25 + 0.25 + 1 + 1) / 3) = sqrt(2.5 / 3) = 0.912871
    rewards = torch.tensor([1.0, 0.0, 3.0, 1.0], dtype=torch.float64)
    res = relative_advantages(rewards, torch.tensor([0, 0, 1, 1]), scale_index=torch.tensor([0, 0, 0, 0]))
    std = math.sqrt(2.5 / 3) + 1e-6
    torch.testing.assert_close(
        res.advantages, torch.tensor([0.5, -0.5, 1.0, -1.0], dtype=torch.float64) / std
    )


@pytest.mark.parametrize(
    "rewards, groups, match",
    [
        (torch.tensor([1.0, float("nan")]), torch.tensor([0, 0]), "NaN/inf"),
        (torch.tensor([1.0, float("inf")]), torch.tensor([0, 0]), "NaN/inf"),
        (torch.tensor([1.0, 0.0]), torch.tensor([0, 0, 1]), "group_index"),
        (torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), "integer"),
        (torch.tensor([1.0, 0.0]), torch.tensor([0, -1]), "negative"),
        (torch.tensor([[1.0, 0.0]]), torch.tensor([0]), "1-D"),
    ],
)
def test_bad_input(rewards, groups, match):
    with pytest.raises(ValueError, match=match):
        srpo.set_relative_advantages(rewards, groups)


def test_unknown_scale():
    with pytest.raises(ValueError, match="unknown advantage scale"):
        srpo.set_relative_advantages(torch.tensor([1.0]), torch.tensor([0]), scale="mad")
