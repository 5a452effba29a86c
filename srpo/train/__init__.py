"""Training infrastructure: run-directory checkpoints, the metrics log and its plots."""

from srpo.train.checkpoint import (
    CheckpointError,
    CheckpointMismatchError,
    CorruptCheckpointError,
    TrainState,
    config_fingerprint,
    export_policy,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from srpo.train.metrics_log import MetricsLogger, read_metrics

__all__ = [
    "CheckpointError",
    "CheckpointMismatchError",
    "CorruptCheckpointError",
    "MetricsLogger",
    "TrainState",
    "config_fingerprint",
    "export_policy",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "read_metrics",
    "save_checkpoint",
]
