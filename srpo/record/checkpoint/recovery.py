"""What is left after a failure, in one line for a user: the newest intact checkpoint of a run
(every file's checksum verified), the message for a corrupt checkpoint (which one to move aside,
from which step a resume continues) and the hint that ends a full disk's message."""

from __future__ import annotations

from pathlib import Path

from srpo.record.checkpoint.errors import CheckpointError
from srpo.record.checkpoint.layout import _step_of, latest_checkpoint, list_checkpoints
from srpo.record.checkpoint.verify import verify_checkpoint


def newest_intact_checkpoint(run_dir: str | Path, *, below_step: int | None = None) -> Path | None:
    """The newest complete checkpoint whose files all pass `verify_checkpoint` (optionally only
    those of steps < below_step), or None."""
    for ckpt in reversed(list_checkpoints(run_dir)):
        if below_step is not None and _step_of(ckpt) >= below_step:
            continue
        try:
            verify_checkpoint(ckpt)
        except CheckpointError:
            continue
        return ckpt
    return None


def corrupt_checkpoint_message(ckpt: Path, error: CheckpointError) -> str:
    """One line for a user: what is wrong with `ckpt`, and which intact checkpoint is left."""
    previous = newest_intact_checkpoint(ckpt.parent.parent, below_step=_step_of(ckpt))
    hint = (f"the newest intact checkpoint is {previous}: move {ckpt.name} aside (e.g. "
            f"mv {ckpt} {ckpt}.corrupt) and resume again to continue from step {_step_of(previous)}"
            if previous is not None else "no older intact checkpoint is left: start the run again")
    return f"checkpoint {ckpt} is unusable: {error}. {hint}"


def disk_full_hint(run_dir: str | Path) -> str:
    """What a full disk left intact in a run and how to continue, for the end of its message."""
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        return ("the run has no complete checkpoint yet: free space, then start it again "
                "(resume=true starts it from step 0)")
    try:
        verify_checkpoint(ckpt)
    except CheckpointError as e:
        return corrupt_checkpoint_message(ckpt, e)
    return (f"the newest intact checkpoint is {ckpt} (unchanged): free space, then run again with "
            f"resume=true to continue from it")
