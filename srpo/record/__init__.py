"""What a run records: everything `srpo train` writes and reads back, apart from the loop.

    checkpoint/     checkpoints (atomic, verified, resumable), the exported policies
    run_dir         the run directory's rules: one writer (its lock), the run's config file
    run_identity    which config fields a resume may change
    metrics_log     RUN/metrics.jsonl (and TensorBoard, W&B), rewound on resume
    episodes_log    RUN/episodes/step-N.jsonl.gz: the episode browser's records
    evaluate        greedy held-out accuracy (EvalResult) and RUN/eval/<label>.json
    accuracy        the Wilson interval of an accuracy and the paired McNemar test
    heldout         the evaluation of a run: its console line and files
    progress        bars on a terminal, plain lines otherwise; console: a step's line
    drift           the warnings of a run that drifts (cut answers, one constant answer)
    plots, report/  RUN/plots/*.png and RUN/report.html
    recorder        `Recorder`: the one object the training loop calls (begin / step / end),
                    which owns the rank-0 rule

The loop (srpo.train) calls a Recorder; nothing here imports srpo.train.
"""

from srpo.record.checkpoint import (
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
from srpo.record.metrics_log import MetricsLogger, read_metrics

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
