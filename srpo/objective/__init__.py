"""The SRPO objective and every baseline as settings of the same parts (see docs/algorithms.md)."""

from srpo.objective.advantages import group_index_from_keys, relative_advantages, set_relative_advantages
from srpo.objective.losses import setwise_policy_loss
from srpo.objective.methods import (
    METHODS,
    MethodSpec,
    get_method,
    method_policy_loss,
    prepare_step,
    with_step_weights,
)
from srpo.objective.reductions import REDUCTIONS, set_log_ratio

__all__ = [
    "METHODS",
    "MethodSpec",
    "REDUCTIONS",
    "get_method",
    "group_index_from_keys",
    "method_policy_loss",
    "prepare_step",
    "relative_advantages",
    "set_log_ratio",
    "set_relative_advantages",
    "setwise_policy_loss",
    "with_step_weights",
]
