"""train.frozen_policies: a frozen policy acts in rollouts but is never updated. Its weights stay
bit for bit those it started from, it has no optimizer (nor a checkpoint file for one), sets
written only by frozen policies are left out of the update, and every other policy gets the
gradient it would get with nothing frozen."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import get_peft_model_state_dict

from srpo.batch import build_flat_batch
from srpo.config import ConfigError, load_config
from srpo.objective import prepare_step
from srpo.train.trainer import Trainer
from srpo.train.update import frozen_sets, skipped_sets

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "srpo" / "presets" / "smoke.yaml")
# parallel k=3: the solvers' set is written by `shared`, the aggregator's by `aggregator`
LORA = ["policies.kind=lora", "policies.names=[shared, aggregator]", "agents.aggregator.policy=aggregator",
        "policies.lora.rank=4"]
QUIET = ["checkpoint.plots=false", "checkpoint.tensorboard=false", "checkpoint.export=false", "eval.size=0"]


def _adapter(trainer: Trainer, name: str) -> dict[str, torch.Tensor]:
    model = trainer.policies[name].model
    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(model, adapter_name=name).items()}


def test_a_frozen_policy_keeps_its_weights_and_has_no_optimizer(tmp_path):
    run = tmp_path / "run"
    cfg = load_config(SMOKE, [f"output_dir={run}", "train.steps=2", "checkpoint.every=1", *LORA, *QUIET,
                              "train.frozen_policies=[shared]"])
    trainer = Trainer(cfg)
    before = {n: _adapter(trainer, n) for n in ("shared", "aggregator")}
    assert set(trainer.optimizers) == {"aggregator"}
    assert not any(p.requires_grad for n, p in trainer.policies["shared"].model.named_parameters()
                   if ".shared." in n)
    trainer.train()
    after = {n: _adapter(trainer, n) for n in ("shared", "aggregator")}
    assert all(torch.equal(before["shared"][k], after["shared"][k]) for k in before["shared"])
    assert any(not torch.equal(before["aggregator"][k], after["aggregator"][k]) for k in before["aggregator"])
    ckpt = max((run / "checkpoints").glob("step-*"))
    assert (ckpt / "optim-aggregator.pt").exists() and not (ckpt / "optim-shared.pt").exists()
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert '"grad_norm/aggregator"' in lines[-1] and '"grad_norm/shared"' not in lines[-1]


def _first_step_gradient(tmp_path: Path, *extra: str):
    """The aggregator's gradient at the trainer's step 0 and the share of sets skipped."""
    cfg = load_config(SMOKE, [f"output_dir={tmp_path}", *LORA, *QUIET, "group_size=3", "train.tasks_per_step=8",
                              "train.skip_zero_advantage=false", *extra])
    trainer = Trainer(cfg)
    grads: list[torch.Tensor] = []
    trainer.optimizers["aggregator"].register_step_pre_hook(
        lambda *_: grads.append(torch.cat([p.grad.flatten() for p in trainer.params["aggregator"]]).clone()))
    batch = build_flat_batch(trainer.sampler.rollout(0), trainer.pad_id)
    batch, _ = prepare_step(trainer.spec, batch, None)
    skipped = skipped_sets(batch, trainer.cfg.train)
    metrics = trainer.update(batch)
    return grads, skipped, batch, metrics


def test_the_trained_policy_gets_the_gradient_it_gets_with_nothing_frozen(tmp_path):
    g_frozen, skipped, batch, metrics = _first_step_gradient(tmp_path / "frozen", "train.frozen_policies=[shared]")
    g_all, skipped_all, _, _ = _first_step_gradient(tmp_path / "all")
    solvers = torch.tensor([batch.member_policy[int(batch.set_index.tolist().index(s))] == "shared"
                            for s in range(batch.num_sets)])
    assert solvers.any() and (~solvers).any()
    assert torch.equal(skipped, solvers) and not skipped_all.any()  # exactly the solvers' sets
    assert metrics["update/skipped_set_share"] == pytest.approx(float(solvers.float().mean()))
    assert "grad_norm/shared" not in metrics
    assert len(g_frozen) == len(g_all) == 1 and float(g_all[0].abs().max()) > 1e-5
    torch.testing.assert_close(g_frozen[0], g_all[0], rtol=0, atol=1e-6)


def test_frozen_sets_counts_every_member_of_a_set():
    from srpo.batch import FlatBatch

    class Fake:  # only what frozen_sets reads
        num_sets = 3
        set_index = torch.tensor([0, 0, 1, 1, 2])
        set_sizes = torch.tensor([2, 2, 1])
        member_policy = ("a", "a", "a", "b", "b")
        device = torch.device("cpu")

    fake: FlatBatch = Fake()  # type: ignore[assignment]
    assert frozen_sets(fake, ["a"]).tolist() == [True, False, False]  # set 1 mixes a and b
    assert frozen_sets(fake, ["b"]).tolist() == [False, False, True]
    assert frozen_sets(fake, []).tolist() == [False, False, False]


@pytest.mark.parametrize("extra, message", [
    (["train.frozen_policies=[nobody]"], "unknown policy 'nobody'"),
    (["train.frozen_policies=[shared, aggregator]"], "freezes every policy"),
    (["train.frozen_policies=[shared, shared]"], "names a policy twice"),
    (["train.frozen_policies=[shared]", "train.policy_lr={shared: 1.0e-4}"], "is frozen"),
])
def test_a_bad_frozen_policies_setting_is_an_error_that_names_it(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message):
        load_config(SMOKE, [f"output_dir={tmp_path}", *LORA, *extra])
