"""The policies as a run records them: the modules a checkpoint holds, and the trained policies
exported as plain Hugging Face folders at the end of a run."""

from __future__ import annotations

from pathlib import Path

import torch

from srpo.record.checkpoint import export_policy
from srpo.rollout.policies import PolicySet


def checkpointed_models(policies: PolicySet) -> dict[str, torch.nn.Module]:
    """The modules a checkpoint holds: separate policies by name; a shared model or a LoRA base
    (with all its adapters) once, as "model"."""
    if policies.kind == "separate":
        return {n: policies[n].model for n in policies.names}
    return {"model": policies.models()[0]}


def export_policies(policies: PolicySet, run_dir: Path) -> list[Path]:
    """Each trained policy as a plain Hugging Face folder under RUN/export/<policy>."""
    out = []
    for name in policies.names:
        p = policies[name]
        out.append(export_policy(p.model, p.tokenizer, run_dir / "export" / name, adapter=p.adapter, overwrite=True))
    return out
