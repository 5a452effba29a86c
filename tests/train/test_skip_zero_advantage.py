"""Sets whose advantage is exactly 0 are left out of the old-log-prob pass and the update's
forward and backward: the loss, the gradient and therefore the updated weights are those of the
full computation, for every method and event reduction."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from srpo.batch import build_flat_batch
from srpo.config import load_config
from srpo.objective import METHODS, prepare_step
from srpo.objective import logprobs as logprobs_module
from srpo.objective.methods import informative_sets
from srpo.train import update as update_module
from srpo.train.trainer import Trainer
from srpo.train.update import skipped_sets

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "srpo" / "presets" / "smoke.yaml")
QUIET = ["checkpoint.plots=false", "checkpoint.export=false", "checkpoint.tensorboard=false", "eval.size=0"]
CASES = [(m, None) for m in sorted(METHODS)] + [("srpo", r) for r in ("pooled", "member_sum", "sum")]


def _one_update(tmp_path: Path, method: str, reduction: str | None, skip: bool, *extra: str):
    """The trainer's step 0 (rollout, advantages, old log-probs of the computed sets, update):
    (the gradient of each optimizer step, update metrics, share of sets skipped)."""
    settings = f"{{reduction: {reduction}}}" if reduction else "{}"
    cfg = load_config(SMOKE, [f"output_dir={tmp_path / f'{method}-{reduction}-{skip}'}", *QUIET,
                              f"train.method={method}", f"train.method_settings={settings}",
                              "train.epochs=2", "train.minibatches=2", "group_size=3", "train.tasks_per_step=8",
                              f"train.skip_zero_advantage={str(skip).lower()}", *extra])
    trainer = Trainer(cfg)
    grads: list[torch.Tensor] = []  # the gradient each optimizer step applies (after clipping)
    trainer.optimizers["shared"].register_step_pre_hook(
        lambda *_: grads.append(torch.cat([p.grad.flatten() for p in trainer.params["shared"]]).clone()))
    batch = build_flat_batch(trainer.sampler.rollout(0), trainer.pad_id)
    batch, _ = prepare_step(trainer.spec, batch, None)
    skipped = skipped_sets(batch, trainer.cfg.train)
    old, ref, _ = trainer.updater.old_and_ref_logprobs(batch, [s for s in range(batch.num_sets) if not skipped[s]])
    batch.old_logprobs, batch.ref_logprobs = old, ref
    metrics = trainer.update(batch)
    return grads, metrics, float(skipped.float().mean())


@pytest.mark.parametrize("method, reduction", CASES)
def test_skipping_zero_advantage_sets_changes_neither_the_loss_nor_the_update(tmp_path, method, reduction):
    g_skip, m_skip, share = _one_update(tmp_path, method, reduction, True)
    g_full, m_full, share_full = _one_update(tmp_path, method, reduction, False)
    assert 0 < share < 1  # some groups degenerate, some not: the test exercises both
    assert share_full == 0.0 and m_full["update/skipped_set_share"] == 0.0
    assert m_skip["update/skipped_set_share"] == pytest.approx(share)
    assert m_skip["update/optimizer_steps"] == m_full["update/optimizer_steps"] == 4
    assert m_skip["loss"] == pytest.approx(m_full["loss"], abs=1e-6)
    assert len(g_skip) == len(g_full) == 4
    assert max(float(g.abs().max()) for g in g_full) > 1e-4  # real gradients
    # 2 epochs x 2 minibatches, the same sets in each. The first optimizer step sees the same
    # weights in both runs: its gradient must agree to 1e-6. After it, AdamW turns float-level
    # differences of near-zero gradient entries (summation order of other micro-batch shapes)
    # into parameter differences of up to lr, so later gradients agree to a looser bound.
    torch.testing.assert_close(g_skip[0], g_full[0], rtol=0, atol=1e-6)
    for skip, full in zip(g_skip[1:], g_full[1:]):
        torch.testing.assert_close(skip, full, rtol=0, atol=5e-5)


def test_a_step_whose_groups_are_all_degenerate_computes_nothing_and_still_logs(tmp_path, monkeypatch):
    # every reward 0 (no component weighs anything): every group is degenerate, every advantage 0
    zero_reward = ["task.reward={correct_weight: 0.0, format_weight: 0.0, format_rule: any}"]
    calls = []
    real = update_module.batch_logprobs  # the one forward of the old-log-prob pass and the update
    monkeypatch.setattr(update_module, "batch_logprobs", lambda *a, **k: calls.append(1) or real(*a, **k))
    g_skip, m_skip, share = _one_update(tmp_path, "srpo", None, True, *zero_reward)
    assert share == 1.0 and calls == []  # no forward at all: neither old log-probs nor update
    g_full, m_full, _ = _one_update(tmp_path, "srpo", None, False, *zero_reward)
    assert calls  # the full computation ran forwards
    assert m_skip["loss"] == m_full["loss"] == 0.0 and m_skip["update/skipped_set_share"] == 1.0
    assert m_skip["update/skipped_token_share"] == 1.0
    # the optimizer still steps, with the exact zero gradient the full computation gives
    assert len(g_skip) == len(g_full) == 4
    for skip, full in zip(g_skip, g_full):
        assert float(full.abs().max()) == 0.0 and torch.equal(skip, full)


def test_nothing_is_skipped_with_a_kl_or_entropy_term(tmp_path):
    for extra in ("train.kl_beta=0.1", "train.entropy_alpha=0.01"):
        cfg = load_config(SMOKE, [f"output_dir={tmp_path / extra}", *QUIET, extra, "group_size=3",
                                  "train.tasks_per_step=8"])
        trainer = Trainer(cfg)
        batch, _ = prepare_step(trainer.spec, build_flat_batch(trainer.sampler.rollout(0), trainer.pad_id), None)
        assert not bool(informative_sets(batch).all())  # there are zero-advantage sets...
        assert not bool(skipped_sets(batch, trainer.cfg.train).any())  # ...and none is skipped


def test_activation_checkpointing_gives_the_same_gradients(tmp_path):
    """train.activation_checkpointing recomputes activations in the backward: memory, not math."""
    g_plain, m_plain, _ = _one_update(tmp_path / "plain", "srpo", None, True)
    g_ckpt, m_ckpt, _ = _one_update(tmp_path / "ckpt", "srpo", None, True, "train.activation_checkpointing=true")
    assert m_ckpt["loss"] == pytest.approx(m_plain["loss"], abs=1e-7)
    for a, b in zip(g_ckpt, g_plain):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_shared_prompt_forward_gives_the_same_update(tmp_path, monkeypatch):
    """train.share_prompt_forward runs each distinct prompt once: fewer forward tokens, the same
    loss and gradients as running every member whole."""
    shared_calls, prompt_passes = [], []
    real = update_module.batch_logprobs
    monkeypatch.setattr(update_module, "batch_logprobs",
                        lambda *a, **k: shared_calls.append(k["share_prompts"]) or real(*a, **k))
    real_hidden = logprobs_module._shared_prompt_hidden
    monkeypatch.setattr(logprobs_module, "_shared_prompt_hidden",
                        lambda *a: prompt_passes.append(real_hidden(*a)) or prompt_passes[-1])
    g_whole, m_whole, _ = _one_update(tmp_path / "whole", "srpo", None, True, "train.share_prompt_forward=false")
    assert shared_calls and not any(shared_calls)
    shared_calls.clear()
    g_shared, m_shared, _ = _one_update(tmp_path / "shared", "srpo", None, True)  # the default
    assert shared_calls and all(shared_calls)
    assert any(h is not None for h in prompt_passes)  # the group's members did share their prompt
    assert m_shared["loss"] == pytest.approx(m_whole["loss"], abs=1e-7)
    assert len(g_shared) == len(g_whole) == 4
    for a, b in zip(g_shared, g_whole):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    # under activation checkpointing every row runs whole (a recomputed layer cannot rebuild a cache)
    shared_calls.clear()
    _one_update(tmp_path / "ckpt", "srpo", None, True, "train.activation_checkpointing=true")
    assert shared_calls and not any(shared_calls)
