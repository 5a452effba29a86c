"""Input checks shared by every loss and advantage function.

Bad input raises ValueError naming the problem; nothing returns NaN silently.
"""

from __future__ import annotations

import torch
from torch import Tensor


def as_bool_mask(mask: Tensor, like: Tensor, name: str = "mask") -> Tensor:
    """Accepts a bool or 0/1 mask of the same shape as `like`; returns a bool tensor."""
    if mask.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(mask.shape)} but log-probs have {tuple(like.shape)}")
    if mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point() or mask.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(f"{name} must be bool or 0/1 valued")
        return mask != 0
    raise ValueError(f"{name} has unsupported dtype {mask.dtype}")


def check_logprob_pair(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Checks [M, T] log-prob tensors and returns the bool mask.

    Non-finite values are only an error on response tokens (inside the mask): padding may hold
    anything, and the losses never let it reach the result (they use torch.where, not a product).
    """
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [M, T], got shape {tuple(logprobs.shape)}")
    if old_logprobs.shape != logprobs.shape:
        raise ValueError(
            f"old_logprobs has shape {tuple(old_logprobs.shape)} but logprobs has {tuple(logprobs.shape)}"
        )
    mask = as_bool_mask(mask, logprobs)
    lengths = mask.sum(dim=-1)  # [M]
    if logprobs.shape[0] == 0:
        raise ValueError("empty batch: logprobs has no member (M = 0)")
    empty = (lengths == 0).nonzero().flatten()
    if empty.numel():
        raise ValueError(
            f"member(s) {empty[:8].tolist()} have no response token (empty mask row): "
            "an empty generation cannot be scored"
        )
    for name, t in (("logprobs", logprobs), ("old_logprobs", old_logprobs)):
        bad = ~torch.isfinite(t.detach()) & mask
        if bool(bad.any()):
            rows = bad.any(dim=-1).nonzero().flatten()[:8].tolist()
            raise ValueError(f"{name} has NaN/inf on response tokens of member(s) {rows}")
    return mask


def check_set_index(set_index: Tensor, num_members: int, num_sets: int | None = None) -> int:
    """Checks a member->set index and returns the number of sets S.

    Every set 0..S-1 must have at least one member; S defaults to max(set_index) + 1.
    """
    if set_index.dim() != 1 or set_index.shape[0] != num_members:
        raise ValueError(
            f"set_index must be [M] = [{num_members}], got shape {tuple(set_index.shape)}"
        )
    if set_index.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"set_index must be an integer tensor, got {set_index.dtype}")
    if bool((set_index < 0).any()):
        raise ValueError("set_index has negative entries")
    inferred = int(set_index.max()) + 1
    if num_sets is None:
        num_sets = inferred
    elif inferred > num_sets:
        raise ValueError(f"set_index has entry {inferred - 1} out of range for {num_sets} sets")
    counts = torch.bincount(set_index, minlength=num_sets)
    empty = (counts == 0).nonzero().flatten()
    if empty.numel():
        raise ValueError(f"set(s) {empty[:8].tolist()} have no member (set_index skips them)")
    return num_sets


def check_finite_vector(values: Tensor, name: str, length: int | None = None) -> None:
    if values.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
    if length is not None and values.shape[0] != length:
        raise ValueError(f"{name} has {values.shape[0]} entries, expected {length}")
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        raise ValueError(f"{name} has NaN/inf at positions {bad.nonzero().flatten()[:8].tolist()}")


def check_clip(clip_low: float, clip_high: float, name: str = "clip") -> None:
    """A clip range (1 - low, 1 + high); `name` is the settings' prefix the message names."""
    if not (0.0 <= clip_low < 1.0):
        raise ValueError(f"{name}_low must be in [0, 1), got {clip_low}")
    if not clip_high >= 0.0:
        raise ValueError(f"{name}_high must be >= 0, got {clip_high}")
