"""Set ids survive verl's DataProto and verl's own batching with the set-preserving layout:
no set is ever split across dp ranks, mini-batches or micro-batches, and the gradient summed
over micro-batches (averaged over ranks, as FSDP does) equals srpo's own loss on the same
batch, whatever order the rows arrive in. Configurations that would split sets raise."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

# "verl.trainer": a submodule only the real verl package has
pytest.importorskip("verl.trainer")

from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.engine.utils import prepare_micro_batches
from verl_helpers import make_rows, nested, padded, verl_config

import srpo
import srpo.integrations.verl.plugin
from srpo.integrations.verl import fields
from srpo.integrations.verl.advantage import RowSets, row_sets
from srpo.integrations.verl.batching import (
    PAD,
    check_set_preserving_config,
    layout_dataproto,
    plan_set_layout,
)
from srpo.integrations.verl.loss import set_ppo_loss
from srpo.integrations.verl.trainer import check_srpo_trainer_config

EOS = 2
WIDTH = 6


@pytest.fixture(scope="module")
def actor_cfg():
    return omega_conf_to_dataclass(verl_config().actor_rollout_ref.actor)


def _dataproto(rows):
    """What verl's trainer holds: one row per member, set metadata in non_tensor_batch."""
    return DataProto.from_dict(
        tensors={"row": torch.arange(len(rows))},
        non_tensors={
            "key": np.array([r.key for r in rows], dtype=object),
            "uid": np.array([r.uid for r in rows], dtype=object),
            "extra_fields": np.array([{fields.SET: int(r.set_key.rsplit("/", 1)[1])} for r in rows], dtype=object),
        },
    )


def _plan(data, *, dp, micro, k=1):
    keys = list(data.non_tensor_batch["key"])
    sets = fields.set_keys(keys, list(data.non_tensor_batch["extra_fields"]))
    groups = list(data.non_tensor_batch["uid"])
    return plan_set_layout(sets, groups, keys, dp_size=dp, micro_batch_rows=micro, num_mini_batches=k)


def _rank_tensordict(chunk: DataProto, rows, old, adv):
    """A dp rank's share as the engine worker receives it (verl's nested no-padding layout)."""
    idx = chunk.batch["row"].tolist()
    pad = chunk.non_tensor_batch["srpo_is_padding"].tolist()
    prompts = [[EOS] if p else rows[i].prompt for i, p in zip(idx, pad)]
    resps = [[EOS] if p else rows[i].response for i, p in zip(idx, pad)]
    masks = [[0] if p else rows[i].mask for i, p in zip(idx, pad)]
    olds = [[0.0] if p else old[i, : len(rows[i].response)].tolist() for i, p in zip(idx, pad)]
    advs = [[0.0] if p else adv[i, : len(rows[i].response)].tolist() for i, p in zip(idx, pad)]
    td = tu.get_tensordict({
        "prompts": nested(prompts, torch.long), "responses": nested(resps, torch.long),
        "response_mask": nested(masks, torch.long), "old_log_probs": nested(olds, torch.float64),
        "advantages": nested(advs, torch.float64), "row": torch.tensor([-1 if p else i for i, p in zip(idx, pad)]),
        fields.SET_INDEX: chunk.batch[fields.SET_INDEX], fields.STEP_SETS: chunk.batch[fields.STEP_SETS],
    })
    return td


def _model_log_probs(micro, theta):
    """log-probs as the engine's model output: flat over prompt+response tokens, the response
    ones (left-shifted by one) taken from theta[row]; padding rows get zeros."""
    parts = []
    for p, r, row in zip(micro["prompts"].unbind(), micro["responses"].unbind(), micro["row"].tolist()):
        resp = theta[row, : len(r)] if row >= 0 else torch.zeros(len(r), dtype=theta.dtype)
        parts += [torch.zeros(len(p) - 1, dtype=theta.dtype), resp, torch.zeros(1, dtype=theta.dtype)]
    return torch.cat(parts)


def _verl_step_grads(data_laid, layout, rows, theta, old, adv, actor_cfg, *, dp, micro):
    """Replays verl's cuts (dispatch chunk, make_iterator, prepare_micro_batches) and the worker
    loss; returns per mini-batch the theta gradient averaged over ranks, and what each
    micro-batch held (row keys)."""
    grads = [torch.zeros_like(theta) for _ in range(layout.num_mini_batches)]
    seen = []
    for chunk in data_laid.chunk(dp):  # dispatch: contiguous, equal
        td = _rank_tensordict(chunk, rows, old, adv)
        mb_rows = layout.mini_batch_rows // dp
        it = tu.make_iterator(td, mini_batch_size=mb_rows, epochs=1, seed=0, dataloader_kwargs={"shuffle": False})
        for k, mini in enumerate(it):
            tu.assign_non_tensor(mini, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro)
            micro_batches, _ = prepare_micro_batches(mini, same_micro_num_in_dp=True)
            for mb in micro_batches:
                tu.assign_non_tensor(mb, dp_size=dp, batch_num_tokens=None, global_batch_size=layout.mini_batch_rows)
                seen.append((k, mb["row"].tolist(), mb[fields.SET_INDEX].tolist()))
                loss, _ = set_ppo_loss(actor_cfg, {"log_probs": _model_log_probs(mb, theta)}, mb)
                if not loss.requires_grad:  # only padding rows here (a model's output would
                    assert float(loss) == 0.0  # still carry a graph; this replay's zeros do not)
                    continue
                (g,) = torch.autograd.grad(loss, theta, allow_unused=True)
                if g is not None:
                    grads[k] += g / dp  # FSDP averages gradients over ranks
    return grads, seen


def _reference(rows, set_ids, theta, old, adv_sets, row_set, subset=None):
    """srpo's own loss gradient over the rows of `subset` (all rows: None)."""
    keep = [i for i in range(len(rows)) if subset is None or row_set[i] in subset]
    uniq = sorted({row_set[i] for i in keep})
    local = torch.tensor([uniq.index(row_set[i]) for i in keep])
    mask = padded([rows[i].mask for i in keep], WIDTH, dtype=torch.bool)
    loss, _ = srpo.setwise_policy_loss(theta[keep], old[keep], mask, local, adv_sets[uniq],
                                       clip_low=0.01, clip_high=0.013)
    (g,) = torch.autograd.grad(loss, theta)
    return g


def _setup(seed=0, num_prompts=3, sessions=4, set_sizes=(3, 1)):
    rows = make_rows(num_prompts=num_prompts, sessions=sessions, set_sizes=set_sizes, seed=seed, max_resp=WIDTH)
    g = torch.Generator().manual_seed(seed)
    n = len(rows)
    old = -torch.rand(n, WIDTH, generator=g, dtype=torch.float64) * 2 - 0.1
    theta = (old + 0.01 * torch.randn(n, WIDTH, generator=g, dtype=torch.float64)).requires_grad_(True)
    set_ids = [r.set_key for r in rows]
    # advantages through verl's own compute_advantage on the DataProto, srpo estimator
    data = _dataproto(rows)
    data.batch["token_level_rewards"] = padded([[0.0] * (len(r.response) - 1) + [r.reward] for r in rows], WIDTH)
    data.batch["response_mask"] = padded([r.mask for r in rows], WIDTH, dtype=torch.long)
    with row_sets(RowSets(set_ids=set_ids)):
        data = compute_advantage(data, adv_estimator="srpo", config=verl_config().algorithm)
    adv = data.batch["advantages"].to(torch.float64)
    uniq = list(dict.fromkeys(set_ids))
    row_set = [uniq.index(s) for s in set_ids]
    set_r = torch.tensor([rows[set_ids.index(s)].reward for s in uniq])
    set_g = torch.tensor([int(rows[set_ids.index(s)].uid[1:]) for s in uniq])
    adv_sets = srpo.set_relative_advantages(set_r, set_g).to(torch.float64)
    # verl's DataProto advantage equals srpo's, set by set
    torch.testing.assert_close(adv[torch.arange(n), 0], adv_sets[row_set], rtol=0, atol=1e-6)
    return rows, data, theta, old, adv, adv_sets, row_set


@pytest.mark.parametrize("dp,micro,k", [(1, 4, 1), (2, 4, 1), (2, 5, 2), (4, 3, 3)])
def test_verl_batching_keeps_sets_and_equals_srpo_loss(actor_cfg, dp, micro, k):
    rows, data, theta, old, adv, adv_sets, row_set = _setup()
    layout = _plan(data, dp=dp, micro=micro, k=k)
    laid = layout_dataproto(data, layout)
    assert len(laid) == layout.mini_batch_rows * k and len(laid) % dp == 0
    # set ids survived DataProto's reorder: every real position holds the row the layout says
    keys = list(laid.non_tensor_batch["key"])
    for pos, i in enumerate(layout.order):
        if i != PAD:
            assert keys[pos] == rows[i].key
    grads, seen = _verl_step_grads(laid, layout, rows, theta, old, adv, actor_cfg, dp=dp, micro=micro)
    # verl cut the batch into dp x k x J micro-batches of `micro` rows each
    assert len(seen) == dp * k * layout.slots_per_rank
    assert all(len(row_ids) == micro for _, row_ids, _ in seen)
    # no set split: each set's members all sit in one micro-batch
    sizes = {}
    for r in rows:
        sizes[r.set_key] = sizes.get(r.set_key, 0) + 1
    where = {}
    for n_mb, (_kk, row_ids, _sidx) in enumerate(seen):
        for row in row_ids:
            if row >= 0:
                assert where.setdefault(rows[row].set_key, n_mb) == n_mb, "a set was split"
    assert set(where) == set(sizes)
    # each optimizer mini-batch's gradient equals srpo's loss over exactly its sets
    mini_sets = [set() for _ in range(k)]
    for kk, row_ids, _ in seen:
        mini_sets[kk] |= {row_set[r] for r in row_ids if r >= 0}
    assert sum(len(s) for s in mini_sets) == len(set(row_set))
    for kk in range(k):
        ref = _reference(rows, None, theta, old, adv_sets, row_set, subset=mini_sets[kk])
        torch.testing.assert_close(grads[kk], ref, rtol=0, atol=1e-6)
    if k == 1:  # one optimizer step: srpo's loss on the whole batch
        torch.testing.assert_close(grads[0], _reference(rows, None, theta, old, adv_sets, row_set), rtol=0, atol=1e-6)


def test_layout_is_order_independent(actor_cfg):
    rows, data, theta, old, adv, _, _ = _setup(seed=3, set_sizes=(2, 2, 1))
    layout = _plan(data, dp=2, micro=4, k=2)
    perm = list(range(len(rows)))
    random.Random(1).shuffle(perm)
    shuffled = data.select_idxs(np.array(perm))
    layout2 = _plan(shuffled, dp=2, micro=4, k=2)
    keys = [None if i == PAD else rows[i].key for i in layout.order]
    keys2 = [None if i == PAD else shuffled.non_tensor_batch["key"][i] for i in layout2.order]
    assert keys == keys2 and layout.set_index == layout2.set_index
    g1, _ = _verl_step_grads(layout_dataproto(data, layout), layout, rows, theta, old, adv, actor_cfg, dp=2, micro=4)
    g2, _ = _verl_step_grads(layout_dataproto(shuffled, layout2), layout2, rows, theta, old, adv, actor_cfg,
                             dp=2, micro=4)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_sets_that_cannot_stay_whole_raise():
    _, data, *_ = _setup()
    with pytest.raises(ValueError, match="raise actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"):
        _plan(data, dp=1, micro=2)  # sets of 3 members, micro-batches of 2 rows
    with pytest.raises(ValueError, match="prompt groups cannot fill"):
        _plan(data, dp=1, micro=4, k=4)  # 3 prompt groups, 4 mini-batches


@pytest.mark.parametrize(
    "override,match",
    [
        ("actor_rollout_ref.actor.shuffle=True", "shuffle"),
        ("actor_rollout_ref.actor.use_dynamic_bsz=True", "use_dynamic_bsz"),
        ("algorithm.use_kl_in_reward=True", "use_kl_in_reward"),
    ],
)
def test_splitting_configs_raise(override, match):
    with pytest.raises(ValueError, match=match):
        check_set_preserving_config(verl_config(override))


def test_trainer_config_checks():
    check_srpo_trainer_config(verl_config())  # the srpo settings pass
    with pytest.raises(ValueError, match="loss_mode='vanilla'"):
        check_srpo_trainer_config(verl_config("actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"))
    with pytest.raises(ValueError, match="adv_estimator='grpo'"):
        check_srpo_trainer_config(verl_config("algorithm.adv_estimator=grpo"))


def test_worker_loss_without_layout_fields_raises(actor_cfg):
    td = tu.get_tensordict({"row": torch.arange(2)})
    with pytest.raises(RuntimeError, match="not laid out"):
        set_ppo_loss(actor_cfg, {"log_probs": torch.zeros(4)}, td)
