"""The `srpo_sync` verl trainer: verl 0.9.1's synchronous V1 trainer with set-preserving hooks.

Select it with `trainer.use_v1=True trainer.v1.trainer_mode=srpo_sync` (the plugin registers it
in every process that imports verl). It changes four steps of PPOTrainerSync and nothing else:

  _setup            installs the worker loss hook on the actor (set_loss_fn(set_ppo_loss)): verl's
                    ppo_loss with each micro-batch's set layout visible to the srpo policy loss;
  _balance_batch    replaces verl's sequence-length balancing (which reorders rows freely) with
                    the set-preserving layout of batching.py (whole sets per micro-batch, rank
                    and mini-batch; padding rows where needed) and writes srpo_set_index /
                    srpo_step_sets into the batch;
  _compute_advantage runs verl's advantage step with each row's set visible to the srpo
                    estimator (advantage.row_sets);
  _update_actor     sends the layout's mini-batch size (rows) to the workers, unshuffled.

Configurations under which sets could be split raise at construction
(batching.check_set_preserving_config): actor.shuffle, actor.use_dynamic_bsz, per-token reward
KL, rollout correction; also a critic, distillation, or a non-srpo loss / estimator.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.metric import reduce_metrics
from verl.utils.py_functional import rename_dict

from srpo.integrations.verl import ADV_ESTIMATORS, POLICY_LOSSES, TRAINER_MODE, fields
from srpo.integrations.verl.advantage import RowSets, config_get, row_sets
from srpo.integrations.verl.batching import (
    PAD,
    SetLayout,
    check_set_preserving_config,
    plan_set_layout,
)
from srpo.integrations.verl.loss import set_ppo_loss

logger = logging.getLogger(__name__)


def _listed(values: Any) -> list:
    """A NonTensorStack / list / array of per-row objects -> a Python list."""
    if hasattr(values, "tolist"):
        return list(values.tolist())
    return list(values)


def check_srpo_trainer_config(config: Any) -> None:
    """Everything srpo_sync needs from the verl config; raises ValueError naming what is wrong."""
    check_set_preserving_config(config)
    actor = config.actor_rollout_ref.actor
    loss_mode = config_get(actor.policy_loss, "loss_mode", "vanilla")
    problems = []
    if loss_mode not in POLICY_LOSSES:
        problems.append(f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode!r}: srpo_sync "
                        f"trains an srpo loss, one of {list(POLICY_LOSSES)}")
    if config.algorithm.adv_estimator not in ADV_ESTIMATORS:
        problems.append(f"algorithm.adv_estimator={config.algorithm.adv_estimator!r}: use one of "
                        f"{list(ADV_ESTIMATORS)}")
    if config_get(config.get("critic", {}), "enable", False):
        problems.append("a critic: SRPO has no value model (critic.enable=False)")
    if config_get(config.get("distillation", {}), "enabled", False):
        problems.append("distillation replaces the actor loss; it is not supported with srpo_sync")
    if problems:
        raise ValueError("srpo_sync trainer:\n  - " + "\n  - ".join(problems))


@register_trainer(TRAINER_MODE)
class SrpoSyncTrainer(PPOTrainerSync):
    """PPOTrainerSync whose batches keep active sets whole (module doc)."""

    # verl branches on trainer_mode == "sync" (replay buffer, refills, checkpoints); this
    # trainer is the sync trainer in all of those respects.
    @property
    def trainer_mode(self) -> str:
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:  # verl assigns the configured name
        pass

    def __init__(self, config: Any):
        check_srpo_trainer_config(config)
        super().__init__(config)
        self.srpo_layout: SetLayout | None = None

    # ------------------------------------------------------------------ hooks

    def _setup(self) -> None:
        super()._setup()
        actor_config = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
        self.actor_rollout_wg.set_loss_fn(partial(set_ppo_loss, config=actor_config))

    def _actor_dp_size(self) -> int:
        wg = self.actor_rollout_wg
        if "actor" not in wg._dispatch_info:
            wg._dispatch_info["actor"] = wg._query_dispatch_info("actor")
        return max(wg._dispatch_info["actor"]) + 1

    def _row_extras(self, batch: KVBatchMeta) -> tuple[list[dict], list[bool]]:
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        extras = [e or {} for e in _listed(data["extra_fields"])]
        padding = [bool(t.get("is_padding", False)) for t in batch.tags]
        return extras, padding

    def _balance_batch(self, batch: KVBatchMeta, metrics: dict, logging_prefix: str = "global_seqlen",
                       keep_minibatch: bool = False) -> KVBatchMeta:
        actor = self.config.actor_rollout_ref.actor
        extras, padding = self._row_extras(batch)
        sets = fields.set_keys(batch.keys, extras, padding)
        groups = [None if s is None else fields.session_of_key(k).rsplit("_", 1)[0]
                  for k, s in zip(batch.keys, sets)]
        layout = plan_set_layout(
            sets, groups, batch.keys, dp_size=self._actor_dp_size(),
            micro_batch_rows=int(actor.ppo_micro_batch_size_per_gpu),
            num_mini_batches=max(1, int(self.config.data.train_batch_size) // int(actor.ppo_mini_batch_size)),
        )
        pad_keys = [k for k, s in zip(batch.keys, sets) if s is None]
        short = layout.num_padding - len(pad_keys)
        if short > 0:  # verl's own synthetic no-op rows (zero response mask, tagged is_padding)
            before = set(batch.keys)
            batch = upsample_batch_to_divisible_size(batch, len(batch) + short, self.tokenizer.eos_token_id)
            pad_keys += [k for k in batch.keys if k not in before]
        pads = iter(pad_keys)
        real_keys = list(batch.keys)
        order = [next(pads) if i == PAD else real_keys[i] for i in layout.order]
        batch = batch.select_keys(order)
        n = len(order)
        tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id,
            fields=TensorDict({
                fields.SET_INDEX: torch.tensor(layout.set_index, dtype=torch.long),
                fields.STEP_SETS: torch.tensor(layout.step_sets, dtype=torch.float64),
            }, batch_size=n),
        )
        self.srpo_layout = layout
        metrics.update(layout.metrics())
        return batch

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        extras, padding = self._row_extras(batch)
        info = RowSets(
            set_ids=fields.set_keys(batch.keys, extras, padding),
            set_rewards=[None if p else e.get(fields.SET_REWARD) for e, p in zip(extras, padding)],
            events=[None if p else e.get(fields.EVENT) for e, p in zip(extras, padding)],
        )
        with row_sets(info):
            return super()._compute_advantage(batch, metrics)

    def _update_actor(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        layout = self.srpo_layout
        if layout is None or len(layout.order) != len(batch):
            raise RuntimeError("srpo_sync: the batch reaching the actor update was not laid out by "
                               "_balance_batch (set-preserving layout missing)")
        actor = self.config.actor_rollout_ref.actor
        rollout = self.config.actor_rollout_ref.rollout
        rows = layout.mini_batch_rows
        batch.extra_info.update({
            "calculate_entropy": bool(actor.calculate_entropy) or float(actor.entropy_coeff) != 0.0,
            "distillation_use_topk": False,
            "distillation_only": False,
            "global_batch_size": rows,
            "mini_batch_size": rows,  # one optimizer step = one laid-out mini-batch
            "epochs": int(actor.ppo_epochs),
            "seed": int(actor.data_loader_seed),
            "dataloader_kwargs": {"shuffle": False},
            "temperature": rollout.temperature,
        })
        output = self.actor_rollout_wg.update_actor(batch)
        # verl's own prefixing: ppo_loss already names some metrics "actor/..." (actor/pg_loss)
        out_metrics = rename_dict(output["metrics"], "actor/")
        if "actor/mfu" in out_metrics:
            out_metrics["perf/mfu/actor"] = out_metrics.pop("actor/mfu")
        metrics.update(reduce_metrics(out_metrics))
        return batch
