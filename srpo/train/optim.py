"""Which parameters each policy trains, and its optimizer and schedule.

    shared    one model, all its parameters, one optimizer
    separate  one optimizer per model
    lora      one base model (frozen) + one adapter per policy, one optimizer per adapter

A frozen policy (train.frozen_policies) acts in rollouts but has no trainable parameters and no
optimizer: its weights stay those it started from.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from srpo.rollout.policies import PolicySet


def policy_parameters(
    policies: PolicySet, frozen: Sequence[str] = ()
) -> dict[str, list[torch.nn.Parameter]]:
    """Trainable parameters of each policy not in `frozen`; sets requires_grad accordingly (a
    LoRA base and every frozen policy's parameters get requires_grad False)."""
    unknown = sorted(set(frozen) - set(policies.names))
    if unknown:
        raise ValueError(f"frozen policies {unknown} are not policies of this run: {list(policies.names)}")
    if set(frozen) >= set(policies.names):
        raise ValueError(f"every policy is frozen ({list(frozen)}): nothing to train")
    out: dict[str, list[torch.nn.Parameter]] = {}
    for name in policies.names:
        policy = policies[name]
        if policy.adapter is None:
            params = list(policy.model.parameters())
        else:
            tag = f".{policy.adapter}."
            params = [p for n, p in policy.model.named_parameters() if "lora_" in n and tag in n]
            if not params:
                raise ValueError(f"policy {name!r}: no LoRA parameters found for adapter {policy.adapter!r}")
        out[name] = params
    trainable = {id(p) for name, ps in out.items() if name not in frozen for p in ps}
    for model in policies.models():
        for p in model.parameters():
            p.requires_grad_(id(p) in trainable)
    return {name: ps for name, ps in out.items() if name not in frozen}


def build_optimizers(
    params: dict[str, list[torch.nn.Parameter]],
    *,
    lr: float,
    policy_lr: dict[str, float],
    weight_decay: float,
    betas: tuple[float, float],
    warmup_steps: int,
) -> tuple[dict[str, torch.optim.Optimizer], dict[str, torch.optim.lr_scheduler.LRScheduler]]:
    """AdamW per policy with a linear warm-up then constant learning rate."""
    unknown = sorted(set(policy_lr) - set(params))
    if unknown:
        raise ValueError(f"train.policy_lr names unknown policies {unknown}; policies: {sorted(params)}")
    optimizers, schedulers = {}, {}
    for name, ps in params.items():
        opt = torch.optim.AdamW(ps, lr=policy_lr.get(name, lr), weight_decay=weight_decay, betas=betas)
        optimizers[name] = opt
        schedulers[name] = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0
        )
    return optimizers, schedulers
