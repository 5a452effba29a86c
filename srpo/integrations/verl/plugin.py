"""The `verl.plugins` entry point (pyproject.toml): verl imports it in every process that
imports verl (driver, TaskRunner, every Ray worker), so srpo's parts are registered wherever
verl looks them up:

    algorithm.adv_estimator                       srpo | srpo_event   (advantage.py)
    actor_rollout_ref.actor.policy_loss.loss_mode srpo | srpo_pooled | srpo_member_sum | srpo_sum
                                                  | srpo_seq          (loss.py)
    trainer.v1.trainer_mode                       srpo_sync           (trainer.py; needs TransferQueue)

The functions registered are srpo's own adapters around srpo.set_relative_advantages and
srpo.setwise_policy_loss, not copies. verl swallows plugin import errors (debug log only), so a
failure here is also logged as a warning.
"""

from __future__ import annotations

import importlib.util
import logging

logger = logging.getLogger("srpo.integrations.verl")


def register() -> None:
    """Register the advantage estimators, policy losses and (when possible) the trainer."""
    from verl.trainer.ppo.core_algos import (
        ADV_ESTIMATOR_REGISTRY,
        register_adv_est,
        register_policy_loss,
    )

    from srpo.integrations.verl.advantage import (
        set_relative_advantage,
        set_relative_advantage_by_event,
    )
    from srpo.integrations.verl.loss import POLICY_LOSS_FNS

    for name, fn in (("srpo", set_relative_advantage), ("srpo_event", set_relative_advantage_by_event)):
        if ADV_ESTIMATOR_REGISTRY.get(name) is not fn:
            register_adv_est(name)(fn)
    for name, fn in POLICY_LOSS_FNS.items():
        register_policy_loss(name)(fn)
    if importlib.util.find_spec("transfer_queue") is None:
        logger.info("srpo: TransferQueue is not installed, so verl's V1 trainer (and srpo_sync) "
                    "is unavailable; the estimator and losses are registered")
        return
    import srpo.integrations.verl.trainer  # noqa: F401  (registers trainer mode srpo_sync)


try:
    register()
except Exception as e:  # verl would hide this at debug level
    logger.warning("srpo verl plugin failed to register: %s: %s", type(e).__name__, e)
    raise
