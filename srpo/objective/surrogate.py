"""The clipped surrogate, elementwise over whatever the ratio unit is (set, sequence or token).

    r = exp(clamp(Lambda, -max_log_ratio, max_log_ratio))
    J = min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A)

A unit is clipped (gets no gradient) exactly when the min picks the constant clipped term:
r > 1 + eps_high with A > 0 ("high" side), or r < 1 - eps_low with A < 0 ("low" side).
When the clamp fires the unit also gets no gradient (clamp is flat there); that is the guard
that keeps exp finite for extreme log-ratios, and it is counted.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

DEFAULT_MAX_LOG_RATIO = 20.0


class SurrogateOut(NamedTuple):
    objective: Tensor  # J, same shape as the log-ratio; differentiable
    ratio: Tensor  # r (detached)
    clipped_low: Tensor  # bool: r < 1 - eps_low and A < 0
    clipped_high: Tensor  # bool: r > 1 + eps_high and A > 0
    clamped: Tensor  # bool: |Lambda| > max_log_ratio


def clipped_surrogate(
    log_ratio: Tensor,
    advantages: Tensor,
    clip_low: float,
    clip_high: float,
    max_log_ratio: float = DEFAULT_MAX_LOG_RATIO,
) -> SurrogateOut:
    """Elementwise PPO-style clipped objective; `advantages` broadcasts against `log_ratio`."""
    clamped = log_ratio.detach().abs() > max_log_ratio
    ratio = torch.exp(log_ratio.clamp(-max_log_ratio, max_log_ratio))
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages
    objective = torch.minimum(unclipped, clipped)
    r = ratio.detach()
    return SurrogateOut(
        objective=objective,
        ratio=r,
        clipped_low=(r < 1.0 - clip_low) & (advantages < 0),
        clipped_high=(r > 1.0 + clip_high) & (advantages > 0),
        clamped=clamped,
    )
