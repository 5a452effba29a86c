"""The errors of checkpoints and exports: each names the file or the object that is wrong."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used to resume this run."""


class CorruptCheckpointError(CheckpointError):
    """A file of the checkpoint is missing, truncated or altered."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint does not belong to this run (config, policies, optimizers, shapes)."""
