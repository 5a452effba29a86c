"""The registered srpo advantage estimator and policy losses give the values and gradients of
srpo's own functions on the same tensors (1e-6), with verl's real config objects."""

from __future__ import annotations

import numpy as np
import pytest
import torch

# "verl.trainer": a submodule only the real verl package has
pytest.importorskip("verl.trainer")

from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
from verl.utils.config import omega_conf_to_dataclass
from verl_helpers import verl_config

import srpo
import srpo.integrations.verl.plugin
from srpo.integrations.verl.advantage import RowSets, row_sets
from srpo.integrations.verl.loss import SetBatch, set_batch


@pytest.fixture(scope="module")
def cfg():
    return verl_config()


@pytest.fixture(scope="module")
def actor_cfg(cfg):
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def _rows():
    """8 rows: sets {0,1,2} {3} of prompt a/session 0, {4,5,6} {7} of prompt a/session 1."""
    set_ids = ["a0/0"] * 3 + ["a0/1"] + ["a1/0"] * 3 + ["a1/1"]
    uid = np.array(["a"] * 8, dtype=object)
    rewards = [1.0] * 4 + [0.0] * 4
    return set_ids, uid, rewards


def _token_rewards(rewards, width=5, lengths=None):
    lengths = lengths or [width] * len(rewards)
    r = torch.zeros(len(rewards), width)
    mask = torch.zeros(len(rewards), width)
    for i, (v, n) in enumerate(zip(rewards, lengths)):
        mask[i, :n] = 1
        r[i, n - 1] = v  # verl puts the outcome on the last response token
    return r, mask


def test_advantage_hand_checked(cfg):
    set_ids, uid, rewards = _rows()
    tlr, mask = _token_rewards(rewards, lengths=[5, 3, 4, 2, 5, 1, 2, 3])
    adv, ret = get_adv_estimator_fn("srpo")(
        token_level_rewards=tlr, response_mask=mask, index=uid, config=cfg.algorithm, set_ids=set_ids
    )
    # 4 sets in one group with returns 1, 1, 0, 0: mean 0.5, unbiased std sqrt(1/3)
    a = 0.5 / (3 ** -0.5 + 1e-6)
    expect = torch.tensor([a] * 4 + [-a] * 4).unsqueeze(-1) * mask
    torch.testing.assert_close(adv, expect, rtol=0, atol=1e-6)
    torch.testing.assert_close(ret, adv)
    # the same from srpo's public function on the 4 sets
    sets = srpo.set_relative_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 0, 0]))
    torch.testing.assert_close(adv[[0, 3, 4, 7], 0], sets, rtol=0, atol=1e-6)
    # rows as members (one value per row) would weigh the 3-member sets thrice: not what we give
    member = srpo.set_relative_advantages(torch.tensor(rewards), torch.zeros(8, dtype=torch.long))
    assert not torch.allclose(adv[:, 0], member, atol=1e-3)


def test_advantage_random_groups_matches_srpo(cfg):
    g = torch.Generator().manual_seed(0)
    set_ids, uids, rewards, set_r, set_g = [], [], [], [], []
    for p in range(5):
        for s in range(4):
            sizes = [3, 1] if p % 2 == 0 else [2, 2, 1]
            for t, k in enumerate(sizes):
                r = float(torch.randint(0, 3, (1,), generator=g)) / 2
                set_r.append(r)
                set_g.append(p)
                for _ in range(k):
                    set_ids.append(f"{p}_{s}/{t}")
                    uids.append(f"p{p}")
                    rewards.append(r)
    tlr, mask = _token_rewards(rewards)
    for name, scale in (("srpo", "std"), ("srpo", "none")):
        algo = dict(cfg.algorithm)
        algo["norm_adv_by_std_in_grpo"] = scale == "std"
        adv, _ = get_adv_estimator_fn(name)(
            token_level_rewards=tlr, response_mask=mask, index=np.array(uids, dtype=object),
            config=algo, set_ids=set_ids,
        )
        ref = srpo.set_relative_advantages(torch.tensor(set_r), torch.tensor(set_g), scale=scale)
        row_set = {k: i for i, k in enumerate(dict.fromkeys(set_ids))}
        expect = ref[torch.tensor([row_set[k] for k in set_ids])]
        torch.testing.assert_close(adv[:, 0], expect, rtol=0, atol=1e-6)


def test_advantage_by_event_and_context(cfg):
    set_ids, uid, rewards = _rows()
    events = ["solve"] * 3 + ["aggregate"] + ["solve"] * 3 + ["aggregate"]
    tlr, mask = _token_rewards(rewards)
    with row_sets(RowSets(set_ids=set_ids, events=events)):
        adv, _ = get_adv_estimator_fn("srpo_event")(
            token_level_rewards=tlr, response_mask=mask, index=uid, config=cfg.algorithm
        )
    # groups (a, solve) = {1, 0} and (a, aggregate) = {1, 0}: +-1/sqrt(2)/(std) each
    a = 0.5 / (2 ** -0.5 + 1e-6)
    torch.testing.assert_close(adv[:, 0], torch.tensor([a] * 4 + [-a] * 4), rtol=0, atol=1e-6)
    # per-set returns (ActiveSet.reward) override the token rewards; padding rows get 0
    with row_sets(RowSets(set_ids=set_ids[:7] + [None], set_rewards=[2.0] * 3 + [0.0] * 4 + [None])):
        adv2, _ = get_adv_estimator_fn("srpo")(
            token_level_rewards=tlr, response_mask=mask, index=uid, config=cfg.algorithm
        )
    ref = srpo.set_relative_advantages(torch.tensor([2.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long))
    torch.testing.assert_close(adv2[:, 0], torch.cat([ref[[0, 0, 0, 1, 2, 2, 2]], torch.zeros(1)]), rtol=0, atol=1e-6)


def test_advantage_without_sets_raises(cfg):
    tlr, mask = _token_rewards([1.0, 0.0])
    with pytest.raises(ValueError, match="needs each row's active set"):
        get_adv_estimator_fn("srpo")(token_level_rewards=tlr, response_mask=mask,
                                     index=np.array(["a", "a"], dtype=object), config=cfg.algorithm)
    with pytest.raises(ValueError, match="disagree"):
        get_adv_estimator_fn("srpo")(token_level_rewards=tlr, response_mask=mask,
                                     index=np.array(["a", "a"], dtype=object), set_ids=["s", "s"])


def _loss_inputs(seed=0, m=7, t=6):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(m, t, generator=g, dtype=torch.float64) * 3 - 0.1
    logp = (old + 0.02 * torch.randn(m, t, generator=g, dtype=torch.float64)).requires_grad_(True)
    lengths = [6, 2, 4, 5, 1, 3, 6]
    mask = torch.zeros(m, t, dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    mask[2, 1] = False  # an observation token
    set_index = torch.tensor([0, 0, 0, 1, 2, 2, 3])
    set_adv = torch.tensor([0.7, -1.1, 0.4, -0.2], dtype=torch.float64)
    return logp, old, mask, set_index, set_adv


@pytest.mark.parametrize("mode,reduction", [("srpo", "mean"), ("srpo_pooled", "pooled"),
                                             ("srpo_member_sum", "member_sum"), ("srpo_sum", "sum")])
@pytest.mark.parametrize("dp,step_sets", [(1, 4.0), (2, 10.0)])
def test_set_loss_matches_srpo(actor_cfg, mode, reduction, dp, step_sets):
    logp, old, mask, set_index, set_adv = _loss_inputs()
    adv_rows = (set_adv[set_index].unsqueeze(-1) * mask).to(torch.float32)
    # global set ids in the step (any integers) and one padding row appended
    glob = set_index * 3 + 5
    pad = torch.full((1, logp.shape[1]), -1.0, dtype=logp.dtype)
    logp_b = torch.cat([logp, pad.requires_grad_(False)])
    with set_batch(SetBatch(set_index=torch.cat([glob, torch.tensor([-1])]),
                            step_sets=torch.full((8,), step_sets), dp_size=dp)):
        loss, metrics = get_policy_loss_fn(mode)(
            old_log_prob=torch.cat([old, pad]), log_prob=logp_b,
            advantages=torch.cat([adv_rows, torch.zeros(1, logp.shape[1])]),
            response_mask=torch.cat([mask, torch.zeros(1, logp.shape[1], dtype=torch.bool)]),
            loss_agg_mode="token-mean", config=actor_cfg,
        )
    (grad,) = torch.autograd.grad(loss, logp)
    ref_loss, _ = srpo.setwise_policy_loss(logp, old, mask, set_index, set_adv, clip_low=0.01,
                                           clip_high=0.013, reduction=reduction)
    (ref_grad,) = torch.autograd.grad(ref_loss, logp)
    scale = 4.0 / (step_sets / dp)  # the micro-batch's share of the step's set mean, times dp
    torch.testing.assert_close(loss, ref_loss * scale, rtol=0, atol=1e-6)
    torch.testing.assert_close(grad, ref_grad * scale, rtol=0, atol=1e-6)
    assert metrics["srpo/policy/loss"] == pytest.approx(float(loss.detach()), abs=1e-9)


def test_clip_binds_with_verl_clip_settings(actor_cfg):
    """The clip range is read from the actor config (clip_ratio_low/high): a set whose ratio
    left [1 - 0.01, 1 + 0.013] with the advantage's sign gets no gradient."""
    logp, old, mask, set_index, set_adv = _loss_inputs()
    with torch.no_grad():
        logp[set_index == 0] += 0.05  # set 0 (A > 0): r_S = e^0.05 > 1.013
    adv_rows = (set_adv[set_index].unsqueeze(-1) * mask).to(torch.float32)
    with set_batch(SetBatch(set_index=set_index, step_sets=torch.full((7,), 4.0))):
        loss, _ = get_policy_loss_fn("srpo")(old_log_prob=old, log_prob=logp, advantages=adv_rows,
                                             response_mask=mask, config=actor_cfg)
    (grad,) = torch.autograd.grad(loss, logp)
    assert float(grad[set_index == 0].abs().sum()) == 0.0
    assert float(grad[set_index == 1].abs().sum()) > 0.0


def test_seq_approximation_is_member_gspo_with_set_advantages(actor_cfg):
    logp, old, mask, set_index, set_adv = _loss_inputs()
    adv_rows = (set_adv[set_index].unsqueeze(-1) * mask).to(torch.float32)
    loss, _ = get_policy_loss_fn("srpo_seq")(old_log_prob=old, log_prob=logp, advantages=adv_rows,
                                             response_mask=mask, config=actor_cfg)
    (grad,) = torch.autograd.grad(loss, logp)
    m = logp.shape[0]
    ref_loss, _ = srpo.setwise_policy_loss(logp, old, mask, torch.arange(m), set_adv[set_index],
                                           clip_low=0.01, clip_high=0.013, reduction="mean")
    (ref_grad,) = torch.autograd.grad(ref_loss, logp)
    torch.testing.assert_close(loss, ref_loss, rtol=0, atol=1e-6)
    torch.testing.assert_close(grad, ref_grad, rtol=0, atol=1e-6)
    # and it is not the set loss when sets have several members
    set_loss, _ = srpo.setwise_policy_loss(logp, old, mask, set_index, set_adv, clip_low=0.01,
                                           clip_high=0.013)
    assert abs(float(set_loss) - float(ref_loss)) > 1e-4


def test_set_loss_fails_loudly(actor_cfg):
    logp, old, mask, set_index, set_adv = _loss_inputs()
    adv_rows = (set_adv[set_index].unsqueeze(-1) * mask).to(torch.float32)
    kw = {"old_log_prob": old, "log_prob": logp, "advantages": adv_rows, "response_mask": mask, "config": actor_cfg}
    with pytest.raises(RuntimeError, match="srpo_sync"):
        get_policy_loss_fn("srpo")(**kw)  # no set layout: never a silent member-level loss
    with set_batch(SetBatch(set_index=set_index, step_sets=torch.full((7,), 4.0))):
        with pytest.raises(ValueError, match="rollout-correction"):
            get_policy_loss_fn("srpo")(**kw, rollout_is_weights=torch.ones_like(old))
        bad = adv_rows.clone()
        bad[1] *= 2  # two members of set 0 with different advantages
        with pytest.raises(ValueError, match="different advantages"):
            get_policy_loss_fn("srpo")(**{**kw, "advantages": bad})
