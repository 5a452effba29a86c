"""What a run sets up around its policies: its fingerprint, the KL reference, the pad id,
activation checkpointing. (Seeds: srpo.train.seeds; what a checkpoint holds and the export of
the trained policies: srpo.record.policies.)"""

from __future__ import annotations

import copy

from srpo.config import Config, to_dict
from srpo.record.run_identity import resume_fingerprint
from srpo.rollout.policies import PolicySet


def fingerprint_of(cfg: Config) -> str:
    """The checkpoint fingerprint of a config (srpo.record.run_identity)."""
    return resume_fingerprint(to_dict(cfg))


def shared_pad_token_id(policies: PolicySet) -> int:
    """The one pad token id of every policy's tokenizer (the batch has one padding)."""
    ids = {policies[n].tokenizer.pad_token_id for n in policies.names}
    if None in ids or len(ids) != 1:
        raise ValueError(f"all policies need one shared pad token id, got {sorted(map(str, ids))}")
    return ids.pop()


def build_reference(policies: PolicySet) -> PolicySet | None:
    """Frozen copies for the KL penalty. LoRA needs none: the base with adapters off is it."""
    if policies.kind == "lora":
        return None
    copies = {}
    for name in policies.names:
        p = policies[name]
        m = copy.deepcopy(p.model).eval()
        for q in m.parameters():
            q.requires_grad_(False)
        copies[name] = (m, p.tokenizer)
    if policies.kind == "shared":
        (m, tok), = copies.values()
        return PolicySet.shared(m, tok, name=policies.names[0]).with_compute_of(policies)
    return PolicySet.separate(copies).with_compute_of(policies)


def enable_activation_checkpointing(policies: PolicySet) -> None:
    """Recompute activations in the backward (memory, not math)."""
    for model in policies.models():
        # non-reentrant: works with frozen inputs (LoRA) without enable_input_require_grads;
        # HF applies it in train mode only, so rollouts and no-grad passes are unaffected
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
