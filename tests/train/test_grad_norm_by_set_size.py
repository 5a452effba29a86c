"""train.grad_norm_by_set_size: grad/k{K}/norm is the norm of the gradient of the loss over the
sets of size K alone, and logging it changes neither the loss nor the update."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from srpo.batch import build_flat_batch
from srpo.config import load_config
from srpo.objective import prepare_step
from srpo.train.trainer import Trainer
from srpo.train.update import GradientBySize, skipped_sets

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "srpo" / "presets" / "smoke.yaml")  # parallel k=3: sets of 3 and of 1
QUIET = ["checkpoint.plots=false", "checkpoint.export=false", "checkpoint.tensorboard=false", "eval.size=0",
         "group_size=3", "train.tasks_per_step=8", "train.grad_clip=0"]


def _trainer_and_batch(tmp_path: Path, *extra: str):
    cfg = load_config(SMOKE, [f"output_dir={tmp_path}", *QUIET, *extra])
    trainer = Trainer(cfg)
    grads: list[torch.Tensor] = []  # the gradient of each optimizer step
    trainer.optimizers["shared"].register_step_pre_hook(
        lambda *_: grads.append(torch.cat([p.grad.flatten() for p in trainer.params["shared"]]).clone()))
    batch, _ = prepare_step(trainer.spec, build_flat_batch(trainer.sampler.rollout(0), trainer.pad_id), None)
    return trainer, batch, grads


def test_the_norm_per_set_size_is_that_of_the_sizes_own_gradient(tmp_path):
    trainer, batch, grads = _trainer_and_batch(tmp_path / "by_size", "train.grad_norm_by_set_size=true")
    state = {k: v.clone() for k, v in trainer.policies.models()[0].state_dict().items()}
    skipped = skipped_sets(batch, trainer.cfg.train).tolist()
    sizes = batch.set_sizes.tolist()
    assert {sizes[s] for s in range(batch.num_sets) if not skipped[s]} == {1, 3}  # both sizes train
    metrics = trainer.update(batch, skipped=skipped)
    by_size = {k: metrics[f"grad/k{k}/norm"] for k in (1, 3)}
    assert all(v > 1e-4 for v in by_size.values())
    total = grads[0]
    # the same batch's update restricted to one size's sets (the others skipped: their weights
    # stay those of the full step) is that size's gradient; its norm is what was logged
    parts = []
    for k in (1, 3):
        trainer.policies.models()[0].load_state_dict(state)
        only_k = [skipped[s] or sizes[s] != k for s in range(batch.num_sets)]
        alone = trainer.update(batch, skipped=only_k)
        parts.append(grads[-1])
        assert alone["grad_norm/shared"] == pytest.approx(by_size[k], rel=1e-4)
        assert float(parts[-1].norm()) == pytest.approx(by_size[k], rel=1e-4)
    torch.testing.assert_close(parts[0] + parts[1], total, rtol=0, atol=1e-6)  # the sizes add up


def _off_policy_update(tmp_path: Path, *extra: str):
    """Step 0's update at 2 epochs x 2 minibatches: (gradients of its 4 optimizer steps, metrics)."""
    trainer, batch, grads = _trainer_and_batch(tmp_path, "train.epochs=2", "train.minibatches=2", *extra)
    skipped = skipped_sets(batch, trainer.cfg.train).tolist()
    batch.old_logprobs = trainer.updater.old_and_ref_logprobs(
        batch, [s for s in range(batch.num_sets) if not skipped[s]])[0]
    return grads, trainer.update(batch, skipped=skipped)


def test_logging_it_changes_neither_the_loss_nor_the_update(tmp_path):
    # one trainer at a time: the minibatch split shuffles with the global RNG, which each
    # Trainer seeds when it starts
    g_plain, m_plain = _off_policy_update(tmp_path / "plain")
    g_by, m_by = _off_policy_update(tmp_path / "by", "train.grad_norm_by_set_size=true")
    assert not any(k.startswith("grad/") for k in m_plain)
    assert {"grad/k1/norm", "grad/k3/norm"} <= set(m_by)
    assert m_by["loss"] == pytest.approx(m_plain["loss"], abs=1e-6)
    assert len(g_plain) == len(g_by) == 4
    torch.testing.assert_close(g_by[0], g_plain[0], rtol=0, atol=1e-6)  # same weights, same sets
    for a, b in zip(g_by[1:], g_plain[1:]):  # AdamW amplifies float-order differences (see
        torch.testing.assert_close(a, b, rtol=0, atol=5e-5)  # test_skip_zero_advantage)


def test_gradient_by_size_reads_what_each_part_added():
    """Two parts of one loss, backward one after the other: each reading is that part's own
    gradient norm (torch.autograd.grad of the part alone)."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(5, 3))
    b = torch.nn.Parameter(torch.randn(3))
    x1, x2 = torch.randn(4, 5), torch.randn(7, 5)
    part1 = lambda: ((x1 @ w + b) ** 2).sum()
    part2 = lambda: (x2 @ w).tanh().sum()  # b gets no gradient from it
    expected = [torch.cat([g.flatten() for g in torch.autograd.grad(f(), [w, b], allow_unused=True,
                                                                     materialize_grads=True)]).norm()
                for f in (part1, part2)]
    reader = GradientBySize({"p": [w, b]})
    part1().backward()
    first = reader.since_last()
    part2().backward()
    second = reader.since_last()
    assert first == pytest.approx(float(expected[0]), rel=1e-6)
    assert second == pytest.approx(float(expected[1]), rel=1e-6)
    assert reader.since_last() == 0.0  # nothing added since
