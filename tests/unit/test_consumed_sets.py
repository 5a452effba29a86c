"""Sets of consumed members (docs/algorithms.md, "Consumed sets"): an output a transition did not
read is not a member of its set; it is trained as a singleton of its own, credited the run's
unconsumed reward, and never shares the set's advantage.

By hand-computed values: a 3-member round whose vote read 2 members (one cut): the set's
ratio, advantage and clip over the 2 consumed members, and the cut member's singleton; then the
float64 reference, the micro-batch split and member/set order over batches that hold such
singletons, and the context's bookkeeping (errors, the in_set ablation, metrics).
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from conftest import make_episodes, prepare_full_step, random_logprob_pair
from test_objective_reference import reference_setwise_loss

import srpo
from srpo.batch import build_flat_batch, pack_sets
from srpo.objective import get_method, method_policy_loss
from srpo.rollout.runner import rollout_metrics
from srpo.types import ActiveSet, Episode, Member, Task
from srpo.workflows.base import EpisodeContext, Output

TASK = Task(task_id="t", prompt="2+2?", answer="4")
CLIP = {"clip_low": 0.01, "clip_high": 0.013}


def member(agent: str, length: int, stop: str = "eos") -> Member:
    return Member(agent, "p", [1, 2], list(range(3, 3 + length)), [1] * length, stop_reason=stop)


def hand_episodes(unconsumed: str) -> list[Episode]:
    """Two rollouts of one task. A: the vote read a1 (2 tokens) and a2 (4 tokens), right (R 1);
    a3 (3 tokens) was cut and left out of the vote. B: all three read, wrong (R 0).
    unconsumed "singleton": a3 is a set of its own credited 0; "in_set": a3 is in A's set."""
    a1, a2, a3 = member("d", 2), member("d", 4), member("d", 3, stop="length")
    if unconsumed == "singleton":
        sets_a = [ActiveSet((a1, a2), "round-1", "t", 0),
                  ActiveSet((a3,), "round-1:unconsumed", "t", 0, reward=0.0, unconsumed_from="round-1")]
    else:
        sets_a = [ActiveSet((a1, a2, a3), "round-1", "t", 0)]
    sets_b = [ActiveSet((member("d", 1), member("d", 2), member("d", 2)), "round-1", "t", 0)]
    return [Episode(TASK, "debate", sets_a, reward=1.0), Episode(TASK, "debate", sets_b, reward=0.0)]


# per-token log-ratios (new - old) of each member, in batch row order a1 a2 a3 b1 b2 b3
DELTAS = [[0.004, 0.002], [0.001] * 4, [0.02] * 3, [-0.02], [-0.02] * 2, [-0.02] * 2]


def logprob_rows(batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(new, old) log-probs [M, T] float64: old 0, new the deltas on each member's tokens."""
    m, t = batch.response_mask.shape
    new = torch.zeros(m, t, dtype=torch.float64)
    for i, d in enumerate(DELTAS):
        new[i, : len(d)] = torch.tensor(d, dtype=torch.float64)
    return new, torch.zeros(m, t, dtype=torch.float64)


def test_a_cut_member_left_out_of_the_vote_is_its_own_singleton_by_hand():
    spec = get_method("srpo", **CLIP)
    batch = build_flat_batch(hand_episodes("singleton"), pad_token_id=0)
    # rows a1 a2 | a3 | b1 b2 b3: three sets, the singleton credited 0
    assert batch.set_index.tolist() == [0, 0, 1, 2, 2, 2]
    assert batch.set_reward.tolist() == [1.0, 0.0, 0.0]
    assert batch.set_event == ("round-1", "round-1:unconsumed", "round-1")
    new, old = logprob_rows(batch)
    filled, _ = prepare_full_step(spec, batch, old)
    # advantages: one group (the task), R = [1, 0, 0]: mean 1/3, unbiased std sqrt(1/3); they
    # are float32 (the batch's rewards), hence the relative tolerance of the gradients below
    std = math.sqrt(1 / 3)
    a_set, a_cut = (2 / 3) / (std + 1e-6), (-1 / 3) / (std + 1e-6)
    assert filled.set_advantages.tolist() == pytest.approx([a_set, a_cut, a_cut], abs=1e-6)
    # set A over its 2 consumed members: Lambda = (0.003 + 0.001) / 2 = 0.002, inside the range
    # the singleton a3: Lambda = 0.02 > 0.013, but A < 0: the min picks r * A (not clipped)
    # set B: Lambda = -0.02 < -0.01 with A < 0: clipped, J = 0.99 * A, no gradient
    r_a, r_cut = math.exp(0.002), math.exp(0.02)
    expected = -(r_a * a_set + r_cut * a_cut + 0.99 * a_cut) / 3
    theta = new.clone().requires_grad_(True)
    loss, metrics = method_policy_loss(spec, filled, theta)
    assert loss.item() == pytest.approx(expected, abs=1e-9)
    (grad,) = torch.autograd.grad(loss, theta)
    # d loss / d logprob of one token: -(1/S) * A * r / (|S| * L_m); B's members get none
    assert grad[0, :2].tolist() == pytest.approx([-a_set * r_a / (3 * 2 * 2)] * 2, rel=1e-6)
    assert grad[1, :4].tolist() == pytest.approx([-a_set * r_a / (3 * 2 * 4)] * 4, rel=1e-6)
    assert grad[2, :3].tolist() == pytest.approx([-a_cut * r_cut / (3 * 1 * 3)] * 3, rel=1e-6)
    assert grad[3:].abs().max().item() == 0.0
    # the cut member's gradient pushes its tokens down: it no longer shares A's positive credit
    assert grad[2, 0].item() > 0  # the loss rises with its log-prob: descent lowers it


def test_the_in_set_ablation_credits_the_cut_member_with_its_set_by_hand():
    spec = get_method("srpo", **CLIP)
    batch = build_flat_batch(hand_episodes("in_set"), pad_token_id=0)
    new, old = logprob_rows(batch)
    filled, _ = prepare_full_step(spec, batch, old)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # R = [1, 0]
    assert filled.set_advantages.tolist() == pytest.approx([a, -a], abs=1e-6)
    # set A of 3: Lambda = (0.003 + 0.001 + 0.02) / 3 = 0.008, inside the range
    r_a = math.exp(0.008)
    theta = new.clone().requires_grad_(True)
    loss, _ = method_policy_loss(spec, filled, theta)
    assert loss.item() == pytest.approx(-(r_a * a + 0.99 * -a) / 2, abs=1e-9)
    (grad,) = torch.autograd.grad(loss, theta)
    # the cut member a3 shares A's positive advantage: its tokens are pushed up
    assert grad[2, :3].tolist() == pytest.approx([-a * r_a / (2 * 3 * 3)] * 3, rel=1e-6)
    assert grad[2, 0].item() < 0


# ------------------------------------------------------------- batches holding unconsumed singletons


def with_unconsumed(episodes: list[Episode], seed: int = 0) -> list[Episode]:
    """The same episodes where, in about half of them, the last member of the first set was not
    read: it becomes a singleton of its own ("<event>:unconsumed", credited 0)."""
    rng = random.Random(seed)
    out = []
    for ep in episodes:
        first, *rest = ep.transitions
        if first.size > 1 and rng.random() < 0.5:
            kept = ActiveSet(first.members[:-1], first.event, first.task_id, first.turn, first.reward)
            cut = ActiveSet(first.members[-1:], f"{first.event}:unconsumed", first.task_id, first.turn,
                            reward=0.0, unconsumed_from=first.event)
            ep = Episode(ep.task, ep.workflow, [kept, cut, *rest], ep.reward, ep.reward_components)
        out.append(ep)
    assert any(not s.consumed for e in out for s in e.transitions)
    return out


def step(name: str = "srpo", seed: int = 0, **overrides):
    spec = get_method(name, **overrides)
    eps = with_unconsumed(make_episodes(num_tasks=3, group_size=4, set_sizes=(3, 1), seed=seed), seed)
    batch = build_flat_batch(eps, 0)
    m, t = batch.response_mask.shape
    base, old = random_logprob_pair(m, t, seed=seed, scale=0.15, dtype=torch.float64)
    filled, _ = prepare_full_step(spec, batch, old)
    return spec, filled, base.detach()


@pytest.mark.parametrize("reduction", ["mean", "pooled", "member_sum", "sum"])
def test_the_float64_reference_covers_batches_with_unconsumed_singletons(reduction):
    spec, batch, base = step(reduction=reduction, clip_low=0.05, clip_high=0.07)
    theta = base.clone().requires_grad_(True)
    loss, _ = srpo.setwise_policy_loss(theta, batch.old_logprobs, batch.response_mask, batch.set_index,
                                       batch.set_advantages, clip_low=0.05, clip_high=0.07,
                                       reduction=reduction)
    ref_theta = base.clone().requires_grad_(True)
    ref = reference_setwise_loss(ref_theta, batch.old_logprobs, batch.response_mask, batch.set_index,
                                 batch.set_advantages.double(), 0.05, 0.07, reduction)
    torch.testing.assert_close(loss, ref, rtol=0, atol=1e-12)
    (g,) = torch.autograd.grad(loss, theta)
    (g_ref,) = torch.autograd.grad(ref, ref_theta)
    torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["srpo", "grpo", "magrpo", "at_grpo"])
def test_microbatch_split_stays_exact_with_unconsumed_singletons(name):
    spec, batch, base = step(name)
    theta = torch.zeros_like(base, requires_grad=True)
    loss, _ = method_policy_loss(spec, batch, base + theta)
    (grad,) = torch.autograd.grad(loss, theta)
    theta_mb = torch.zeros_like(base, requires_grad=True)
    groups = pack_sets(batch, batch.input_ids.shape[1] * 3)
    assert len(groups) > 3
    total = 0.0
    for ids in groups:
        rows = torch.isin(batch.set_index, torch.tensor(ids)).nonzero().flatten()
        part, _ = method_policy_loss(spec, batch.select_sets(ids), (base + theta_mb)[rows])
        part.backward()
        total = total + part.detach()
    torch.testing.assert_close(total, loss.detach(), rtol=0, atol=1e-9)
    torch.testing.assert_close(theta_mb.grad, grad, rtol=0, atol=1e-9)


def test_member_and_set_order_do_not_matter_with_unconsumed_singletons():
    _, batch, base = step(reduction="mean")
    kw = dict(clip_low=0.05, clip_high=0.07, reduction="mean")
    adv, old, mask, sets = batch.set_advantages.double(), batch.old_logprobs, batch.response_mask, batch.set_index
    theta = base.clone().requires_grad_(True)
    loss, _ = srpo.setwise_policy_loss(theta, old, mask, sets, adv, **kw)
    (grad,) = torch.autograd.grad(loss, theta)
    g = torch.Generator().manual_seed(1)
    perm = torch.randperm(batch.num_members, generator=g)  # members shuffled inside and across sets
    relabel = torch.randperm(batch.num_sets, generator=g)  # and the sets renumbered
    theta2 = base[perm].clone().requires_grad_(True)
    loss2, _ = srpo.setwise_policy_loss(theta2, old[perm], mask[perm], relabel[sets[perm]],
                                        adv[relabel.argsort()], **kw)
    (grad2,) = torch.autograd.grad(loss2, theta2)
    torch.testing.assert_close(loss2, loss, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad2, grad[perm], rtol=0, atol=1e-12)


# ------------------------------------------------------------- the context's bookkeeping


def context(unconsumed: str = "singleton", reward: float = 0.0) -> tuple[EpisodeContext, list[Output]]:
    ctx = EpisodeContext(TASK, "wf", rollout_index=0, seed=0, reward_fn=lambda t, s: 0.0,
                         tokenize=lambda p, s: [1], unconsumed=unconsumed, unconsumed_reward=reward)
    outs = [Output("d", "p", (), [1], [5 + i, 6], [1, 1], [-0.5, -0.5], index=i) for i in range(3)]
    ctx.outputs.extend(outs)
    return ctx, outs


def test_transition_records_the_read_outputs_and_a_singleton_per_unread_one():
    ctx, (a, b, c) = context(reward=-0.25)
    aset = ctx.transition("vote", [a, c], unread=[b])
    assert aset is ctx.transitions[0] and aset.size == 2 and aset.consumed
    single = ctx.transitions[1]
    assert (single.event, single.size, single.reward, single.unconsumed_from, single.turn) == (
        "vote:unconsumed", 1, -0.25, "vote", 0)
    assert b.consumed_by == "vote:unconsumed" and a.consumed_by == "vote"
    # nothing read: only the singletons
    ctx, outs = context()
    assert ctx.transition("vote", [], unread=outs) is None
    assert [s.event for s in ctx.transitions] == ["vote:unconsumed"] * 3


def test_the_in_set_ablation_keeps_unread_outputs_in_the_set_in_generation_order():
    ctx, (a, b, c) = context("in_set")
    aset = ctx.transition("vote", [c, a], unread=[b])
    assert len(ctx.transitions) == 1 and [o.consumed_by for o in (a, b, c)] == ["vote"] * 3
    assert [m.response_ids[0] for m in aset.members] == [5, 6, 7]  # a, b, c: generation order
    ctx, (a, b, c) = context("in_set")
    aset = ctx.transition("vote", [c, a])  # nothing unread: the order as given
    assert [m.response_ids[0] for m in aset.members] == [7, 5]


def test_an_output_read_and_unread_or_unread_twice_is_an_error():
    ctx, (a, b, c) = context()
    with pytest.raises(ValueError, match="listed twice"):
        ctx.transition("vote", [a], unread=[a])
    ctx.transition("vote", [a], unread=[b])
    with pytest.raises(ValueError, match="already consumed by event 'vote:unconsumed'"):
        ctx.transition("next", [b])
    with pytest.raises(ValueError, match="at least one output"):
        ctx.transition("empty", [], unread=[])
    with pytest.raises(ValueError, match="unconsumed must be one of"):
        context("drop")
    with pytest.raises(ValueError, match="unconsumed_reward must be finite"):
        context(reward=float("nan"))


def test_an_unconsumed_set_holds_one_output_with_its_own_reward():
    with pytest.raises(ValueError, match="exactly that output and has its own reward"):
        ActiveSet((member("d", 1), member("d", 1)), "x:unconsumed", "t", unconsumed_from="x", reward=0.0)
    with pytest.raises(ValueError, match="exactly that output and has its own reward"):
        ActiveSet((member("d", 1),), "x:unconsumed", "t", unconsumed_from="x")


def test_rollout_metrics_log_the_unconsumed_share_per_event():
    eps = hand_episodes("singleton")
    m = rollout_metrics(eps)
    # 1 of 6 outputs unread; of round-1's 6 outputs, 1
    assert m["members/unconsumed_share"] == pytest.approx(1 / 6)
    assert m["members/unconsumed_share/round-1"] == pytest.approx(1 / 6)
    assert m["event/round-1:unconsumed"] == 1.0 and m["sets/size_1"] == 1.0
    assert rollout_metrics(hand_episodes("in_set"))["members/unconsumed_share"] == 0.0


def test_grouped_by_consumed_the_singletons_are_centered_apart_by_hand():
    """group_keys [task, consumed]: the cut member's singleton forms a group of its own (one
    reward: degenerate, A = 0: trained on nothing), and the consumed sets are centered without
    it: R = [1, 0] -> +-0.5 / (std 0.7071)."""
    spec = get_method("srpo", group_keys=["task", "consumed"], **CLIP)
    batch = build_flat_batch(hand_episodes("singleton"), pad_token_id=0)
    assert batch.set_consumed == (True, False, True)
    new, old = logprob_rows(batch)
    filled, metrics = prepare_full_step(spec, batch, old)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert filled.set_advantages.tolist() == pytest.approx([a, 0.0, -a], abs=1e-6)
    assert metrics["adv/degenerate_groups"] == 1.0
    theta = new.clone().requires_grad_(True)
    loss, _ = method_policy_loss(spec, filled, theta)
    (grad,) = torch.autograd.grad(loss, theta)
    assert grad[2].abs().max().item() == 0.0  # the cut member: no gradient
    # a batch with no unconsumed set records none, and the key is constant there
    assert build_flat_batch(hand_episodes("in_set"), pad_token_id=0).set_consumed is None
    # the flag follows select_sets
    assert batch.select_sets([1, 2]).set_consumed == (False, True)
    # member-level methods can group by it too
    grpo = get_method("grpo", group_keys=["task", "agent", "consumed"])
    member_adv = prepare_full_step(grpo, batch, old)[0].member_advantages
    assert member_adv[2].item() == 0.0
