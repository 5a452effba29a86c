"""Baselines as settings: each preset's grouping, advantages and aggregation on a known batch."""

import math

import pytest
import torch
from conftest import make_episodes, prepare_full_step

from srpo.batch import build_flat_batch
from srpo.objective import METHODS, get_method, method_policy_loss
from srpo.objective.methods import step_advantages, step_weights
from srpo.types import ActiveSet, Episode, Member, Task

A4 = 0.5 / (math.sqrt(1 / 3) + 1e-6)  # +-0.5 over unbiased std of [1, 1, 0, 0]
A2 = 0.5 / (math.sqrt(0.5) + 1e-6)  # +-0.5 over unbiased std of [1, 0]


def _member(agent, n=2):
    return Member(agent=agent, policy="shared", prompt_ids=[5, 6], response_ids=[7] * n, loss_mask=[1] * n)


def _episode(task, reward):
    """Two solvers in one set (turn 0, event "solve"), then an aggregator (turn 1, "aggregate")."""
    return Episode(
        task=task,
        workflow="parallel",
        transitions=[
            ActiveSet((_member("solver", 2), _member("solver", 3)), "solve", task.task_id, turn=0),
            ActiveSet((_member("aggregator", 1),), "aggregate", task.task_id, turn=1),
        ],
        reward=reward,
    )


@pytest.fixture
def batch():
    task = Task("t0", "q")
    return build_flat_batch([_episode(task, 1.0), _episode(task, 0.0)], pad_token_id=0)


def test_batch_layout(batch):
    # members: ep0 solver, solver, aggregator, ep1 solver, solver, aggregator
    assert batch.set_index.tolist() == [0, 0, 1, 2, 2, 3]
    assert batch.set_sizes.tolist() == [2, 1, 2, 1]
    assert batch.response_lengths.tolist() == [2, 3, 1, 2, 3, 1]
    assert batch.set_reward.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert batch.prompt_length == 2 and batch.input_ids.shape == (6, 2 + 3)
    # response right-padded at column P + t
    assert batch.input_ids[2].tolist() == [5, 6, 7, 0, 0]


def test_srpo_one_advantage_per_set_grouped_by_task(batch):
    # 4 sets in the task group with R = [1, 1, 0, 0] -> +-A4, shared by every member of a set
    adv = step_advantages(get_method("srpo"), batch)
    assert adv.member is None  # kept per set, never broadcast to members and collapsed back
    torch.testing.assert_close(adv.set, torch.tensor([A4, A4, -A4, -A4]))
    torch.testing.assert_close(adv.set[batch.set_index], torch.tensor([A4, A4, A4, -A4, -A4, -A4]))
    assert adv.unit.shape == (4,)


def test_srpo_task_event_grouping(batch):
    # group (task, event): solve sets [1, 0] and aggregate sets [1, 0] -> +-A2 each
    adv = step_advantages(get_method("srpo", group_keys=("task", "event")), batch)
    torch.testing.assert_close(adv.set[batch.set_index], torch.tensor([A2, A2, A2, -A2, -A2, -A2]))
    assert adv.num_groups == 2


def test_grpo_groups_by_task_and_agent(batch):
    # solvers [1, 1, 0, 0] -> +-A4 ; aggregators [1, 0] -> +-A2
    adv = step_advantages(get_method("grpo"), batch)
    torch.testing.assert_close(adv.member, torch.tensor([A4, A4, A2, -A4, -A4, -A2]))


def test_magrpo_joint_reward_same_value_to_every_agent(batch):
    # episodes [1, 0] -> +-A2 to every member of the episode
    adv = step_advantages(get_method("magrpo"), batch)
    torch.testing.assert_close(adv.set, torch.tensor([A2, A2, -A2, -A2]))  # the episode's value per set
    torch.testing.assert_close(adv.set[batch.set_index], torch.tensor([A2, A2, A2, -A2, -A2, -A2]))


def test_at_grpo_groups_by_turn_too():
    # one agent acting at two turns: (task, agent) pools both turns, (task, agent, turn) does not
    task = Task("t0", "q")

    def ep(r0, r1, reward):
        return Episode(task, "seq", [
            ActiveSet((_member("a"),), "x", "t0", turn=0, reward=r0),
            ActiveSet((_member("a"),), "x", "t0", turn=1, reward=r1),
        ], reward=reward)

    b = build_flat_batch([ep(1.0, 0.0, 0.0), ep(0.0, 1.0, 0.0)], 0)
    at = step_advantages(get_method("at_grpo"), b).member
    torch.testing.assert_close(at, torch.tensor([A2, -A2, -A2, A2]))  # per turn: [1, 0] and [0, 1]
    grpo = step_advantages(get_method("grpo"), b).member  # pooled [1, 0, 0, 1] -> +-A4
    torch.testing.assert_close(grpo, torch.tensor([A4, -A4, -A4, A4]))


def test_dr_mas_scales_by_agent_statistics():
    # Two tasks. Solver deviations from their (task, solver) means are pooled into one per-agent std.
    t0, t1 = Task("t0", "q"), Task("t1", "q")
    b = build_flat_batch([_episode(t0, 1.0), _episode(t0, 0.0), _episode(t1, 1.0), _episode(t1, 0.8)], 0)
    adv = step_advantages(get_method("dr_mas"), b).member
    # solvers: deviations t0: [.5, .5, -.5, -.5], t1: [.1, .1, -.1, -.1]
    #   std = sqrt((4*.25 + 4*.01) / 7) ; aggregators: t0 [.5, -.5], t1 [.1, -.1] -> sqrt((.5 + .02) / 3)
    s_std = math.sqrt((4 * 0.25 + 4 * 0.01) / 7) + 1e-6
    a_std = math.sqrt((0.5 + 0.02) / 3) + 1e-6
    expected = [0.5 / s_std] * 2 + [0.5 / a_std] + [-0.5 / s_std] * 2 + [-0.5 / a_std]
    expected += [0.1 / s_std] * 2 + [0.1 / a_std] + [-0.1 / s_std] * 2 + [-0.1 / a_std]
    torch.testing.assert_close(adv, torch.tensor(expected), atol=1e-5, rtol=1e-5)


def test_dr_grpo_has_no_std_scaling(batch):
    adv = step_advantages(get_method("dr_grpo"), batch)
    torch.testing.assert_close(adv.member, torch.tensor([0.5, 0.5, 0.5, -0.5, -0.5, -0.5]))


@pytest.mark.parametrize(
    "name, total",
    [("srpo", 1.0), ("gspo", 1.0), ("grpo", 1.0), ("dapo", 1.0), ("at_grpo", 1.0), ("dr_mas", 1.0),
     # MAGRPO sums each agent's own mean: 2 agents -> weights sum to 2
     ("magrpo", 2.0),
     # Dr. GRPO: sum over tokens / (M * C) with C = padded T = 3: (2+3+1)*2 / (6*3) = 12/18
     ("dr_grpo", 12 / 18)],
)
def test_aggregation_weights_total(batch, name, total):
    w = step_weights(get_method(name), batch)
    # every token of member m weighs w_m: the total is sum_m L_m w_m, also the sum of set weights
    assert (w.member * batch.response_lengths).sum().item() == pytest.approx(total, abs=1e-6)
    assert w.set.sum().item() == pytest.approx(total, abs=1e-6)


def test_srpo_set_weights_are_one_over_num_sets(batch):
    w = step_weights(get_method("srpo"), batch)
    torch.testing.assert_close(w.set, torch.full((4,), 0.25, dtype=torch.float64))
    # each token of a member of set S weighs 1 / (N_sets |S| L_m): member 0 (|S| = 2, L = 2) -> 1/16
    assert w.member[0].item() == pytest.approx(1 / 16)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_runs_through_one_dispatch_point(name):
    spec = get_method(name)
    b = build_flat_batch(make_episodes(seed=1), pad_token_id=0)
    old = -torch.rand(b.response_mask.shape, generator=torch.Generator().manual_seed(0))
    filled, adv_metrics = prepare_full_step(spec, b, old)
    lp = (old + 0.01 * torch.randn(old.shape, generator=torch.Generator().manual_seed(1))).requires_grad_(True)
    loss, metrics = method_policy_loss(spec, filled, lp)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
    assert lp.grad[~b.response_mask].abs().sum() == 0
    assert lp.grad.abs().sum() > 0
    assert "clip/all/frac" in metrics and "approx_kl" in metrics and "sets/k3/count" in adv_metrics


def test_kl_and_entropy_terms(batch):
    spec = get_method("srpo")
    old = torch.full(batch.response_mask.shape, -1.0)
    filled, _ = prepare_full_step(spec, batch, old)
    filled.ref_logprobs = torch.full_like(old, -1.5)
    lp = old.clone().requires_grad_(True)
    base, _ = method_policy_loss(spec, filled, lp)
    ent = torch.full_like(old, 2.0)
    loss, m = method_policy_loss(spec, filled, lp, entropy=ent, kl_beta=0.1, entropy_alpha=0.01)
    # k3 with d = ref - logp = -0.5: e^-0.5 + 0.5 - 1 = 0.106531 on every token; weights sum to 1
    k3 = math.exp(-0.5) + 0.5 - 1
    assert m["kl_ref"] == pytest.approx(k3, rel=1e-5)
    assert m["entropy_bonus"] == pytest.approx(2.0, rel=1e-5)
    assert loss.item() == pytest.approx(base.item() + 0.1 * k3 - 0.01 * 2.0, rel=1e-5)
    with pytest.raises(ValueError, match="ref_logprobs"):
        filled.ref_logprobs = None
        method_policy_loss(spec, filled, lp, kl_beta=0.1)


def test_spec_validation():
    with pytest.raises(ValueError, match="cannot be grouped by 'agent'"):
        get_method("srpo", group_keys=("task", "agent"))
    with pytest.raises(ValueError, match="set- or episode-level advantages"):
        get_method("srpo", advantage_unit="member")
    assert get_method("srpo", reduction="sum").clip_high == 0.65  # reduction-specific default
    assert get_method("srpo").clip_low == 1e-2


def test_empty_generation_is_rejected_when_batching():
    task = Task("t0", "q")
    empty = Member(agent="solver", policy="p", prompt_ids=[1], response_ids=[2], loss_mask=[0])
    ep = Episode(task, "w", [ActiveSet((empty,), "solve", "t0")], reward=1.0)
    with pytest.raises(ValueError, match="agent 'solver'.*no generated token"):
        build_flat_batch([ep], 0)


def test_nan_reward_is_rejected():
    with pytest.raises(ValueError, match="non-finite reward"):
        Episode(Task("t0", "q"), "w", [ActiveSet((_member("a"),), "x", "t0")], reward=float("nan"))


def test_step_and_loss_metrics_values(batch):
    spec = get_method("grpo")
    old = torch.zeros(batch.response_mask.shape)
    filled, m = prepare_full_step(spec, batch, old)
    # episode rewards [1, 0]: mean 0.5, unbiased std sqrt(0.5)
    assert m["reward/mean"] == pytest.approx(0.5) and m["reward/std"] == pytest.approx(math.sqrt(0.5))
    # solver lengths 2, 3, 2, 3; aggregator 1, 1
    assert m["length/solver/mean"] == pytest.approx(2.5) and m["length/aggregator/max"] == 1.0
    assert m["sets/k2/count"] == 2 and m["sets/k1/count"] == 2 and m["sets/all/count"] == 4
    # every token of member 0 (set 0) moves by +0.3, everything else 0:
    # Lambda(mean) of set 0 = (1/2)(0.3 + 0) = 0.15, set 2 = 0 -> set_ratio/k2/log_mean = 0.075
    lp = old.clone()
    lp[0] += 0.3
    _, lm = method_policy_loss(spec, filled, lp)
    assert lm["set_ratio/k2/log_mean"] == pytest.approx(0.075)
    assert lm["set_ratio/k1/log_mean"] == pytest.approx(0.0)
    # GRPO's own unit is the token: 2 of 12 response tokens have delta 0.3 -> mean 0.05
    assert lm["ratio/all/log_mean"] == pytest.approx(0.3 * 2 / 12)


def test_group_keys_from_a_yaml_list_become_a_tuple_and_are_checked():
    """method_settings: {group_keys: [task, event]} in a config (a list) works like the tuple."""
    from srpo.config import load_config

    cfg = load_config(None, ["train.method_settings={group_keys: [task, event]}"], check_machine=False)
    spec = get_method("srpo", **cfg.train.method_settings)
    assert spec.group_keys == ("task", "event") and spec == get_method("srpo", group_keys=("task", "event"))
    assert get_method("srpo", group_keys="task").group_keys == ("task",)
    with pytest.raises(ValueError, match="cannot be grouped by 'agent'"):
        get_method("srpo", group_keys=["task", "agent"])
