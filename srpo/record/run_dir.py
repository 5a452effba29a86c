"""A run directory's rules: one writer at a time, and a config file the run must not destroy.

    lock = RunLock.acquire(run_dir)      # RunDirectoryBusy names the holder's pid if it is taken
    ...                                  # the run writes its files
    lock.release()                       # or the process ends: the kernel releases it

One writer. Two processes writing one directory interleave their metrics lines, rename each
other's temporary checkpoints and log every step twice. A run therefore holds an exclusive
`flock` on `RUN/.srpo.lock` for its whole life (taken before it reads or writes anything in the
directory, so a late `resume=true` is refused too). The kernel drops the lock when the process
dies, however it dies, so a killed run never leaves it stuck: the next `resume=true` takes it at
once. The file itself stays (it only holds the last holder's pid, for the message). flock is
advisory and local: processes on other machines sharing the directory over NFS are not excluded.

What a run finds there. A fresh run (resume=false) refuses a directory holding any of a run's
files (RUN_ARTIFACTS); resume=true continues from the newest complete checkpoint, verified
(markers, checksums, config fingerprint) before any work, or, when a run was killed before its
first checkpoint, starts again from step 0 (`resume_checkpoint`). `output_dir` may hold
"{time}", which gives every run of a preset its own directory (`resolve_run_dir`).

Symbolic links. srpo never writes through one (srpo.disk.open_no_follow), and `RunLock.acquire`
checks the directory once before taking the lock (`check_run_dir`): a link at any path a run
writes (the lock, config.yaml, metrics.jsonl, report.html, the checkpoints/eval/episodes/export/
plots/tensorboard/wandb folders and what they hold) is refused in one line naming it, so no file
outside the run is ever truncated, appended to or replaced. The output_dir itself may be a link
to an existing directory (runs kept on another disk, `runs -> /data/runs`): the run is written
into its target. A dangling link is refused, naming the missing target.

The run's config. A run writes its resolved config to `RUN/config.yaml` (`srpo train RUN`
reads it back). When that file is one a person wrote (comments, their own layout), the run
would replace it and lose them; `check_config_file` refuses that instead.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path
from typing import Any

import yaml

from srpo.config.errors import ConfigError
from srpo.config.yaml_reader import load_yaml, read_config_text
from srpo.disk import atomic_write_text, no_follow_opener, refuse_symlink
from srpo.record.checkpoint import (
    STATE_FILE,
    CheckpointError,
    CorruptCheckpointError,
    corrupt_checkpoint_message,
    latest_checkpoint,
    verify_checkpoint,
)

LOCK_FILE = ".srpo.lock"
CONFIG_FILE = "config.yaml"
# What a run writes into its directory: a fresh run (resume=false) refuses a directory holding any.
RUN_ARTIFACTS = ("metrics.jsonl", "checkpoints", "eval", "export", "episodes")
# Every path a run writes directly in its directory, and the folders whose entries it writes:
# none may be a symbolic link (check_run_dir).
RUN_FILES = (LOCK_FILE, CONFIG_FILE, "metrics.jsonl", "report.html")
RUN_FOLDERS = ("checkpoints", "eval", "episodes", "export", "plots", "tensorboard", "wandb")


class RunDirectoryBusy(ValueError):
    """Another live process holds the run directory's lock."""


class RunLock:
    """An exclusive, kernel-released lock on one run directory (see the module docstring)."""

    def __init__(self, path: Path, fd: int, *, created: bool):
        self.path, self._fd, self._created = path, fd, created

    @classmethod
    def acquire(cls, run_dir: str | Path) -> RunLock:
        """Lock `run_dir` (created if missing) or raise RunDirectoryBusy naming the holder."""
        run_dir = Path(run_dir)
        check_run_dir(run_dir)
        created = not run_dir.exists()
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / LOCK_FILE
        if path.is_dir() and not path.is_symlink():
            raise ValueError(f"{path} is a directory, where a run keeps its lock file: srpo did not "
                             f"make it; remove it (rmdir) or choose another output_dir")
        while True:
            # never through a link: it would truncate and overwrite the link's target with our pid
            fd = no_follow_opener(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise RunDirectoryBusy(
                    f"{run_dir} is in use by another srpo process ({_holder(path)}): one process "
                    f"writes a run directory at a time; wait for it to end (a killed one frees it "
                    f"at once) or choose another output_dir"
                ) from None
            if _same_file(fd, path):
                break
            # a refused run removed the file between our open and our lock (discard below): the
            # lock we hold is on a file nobody else will open; take the one at the path instead
            os.close(fd)
        # the holder's pid, for the message above; written after the lock so no other holder races it
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(path, fd, created=created)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self, *, discard: bool = False) -> None:
        """Unlock (idempotent). The lock file stays (the next holder overwrites its pid), except
        with `discard`, for a run refused before it wrote anything: a directory this lock
        created and that holds nothing but the lock file is removed again, so a refused run
        leaves no trace. The file is unlinked while still locked (see acquire's check)."""
        if self._fd is None:
            return
        if discard and self._created and [p.name for p in self.path.parent.iterdir()] == [LOCK_FILE]:
            self.path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # someone put a file there meanwhile: keep it
                self.path.parent.rmdir()
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __del__(self) -> None:  # a Trainer dropped without train(): free the directory
        self.release()


def check_run_dir(run_dir: str | Path) -> None:
    """Refuse symbolic links where a run writes (module docstring), once, before it starts.

    run_dir itself may be a link to an existing directory; a dangling one, or a path that is not
    a directory, is refused in one line. Raises SymlinkRefused (a ValueError) or ValueError.
    """
    run_dir = Path(run_dir)
    if run_dir.is_symlink() and not run_dir.exists():
        raise ValueError(
            f"output_dir {run_dir} is a symbolic link to {os.readlink(run_dir)}, which does not "
            f"exist: create that directory or choose another output_dir"
        )
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"output_dir {run_dir} exists and is not a directory: choose another output_dir")
    if not run_dir.is_dir():
        return
    for name in RUN_FILES:
        refuse_symlink(run_dir / name)
    for name in RUN_FOLDERS:
        folder = run_dir / name
        refuse_symlink(folder, "a folder of the run")
        if folder.is_dir():
            for entry in folder.iterdir():
                refuse_symlink(entry, "a file of the run")


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _holder(path: Path, wait_s: float = 1.0) -> str:
    """The lock holder's pid, for a refusal's message. The holder writes it just after taking
    the lock, so a run refused in between reads an empty file: read again for up to wait_s
    (only a refused run gets here) before saying it is unknown."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            pid = path.read_text().strip()
        except OSError:
            pid = ""
        if pid.isdigit():
            return f"pid {pid}"
        if time.monotonic() >= deadline:
            return "pid unknown"
        time.sleep(0.01)


def _is_srpo_written(path: Path) -> bool:
    """True for a config.yaml srpo wrote: exactly `yaml.safe_dump` of its own content, so
    rewriting it loses nothing (no comments, no layout of a person's). Read with the config
    loader's bounds: whatever sits in an output_dir cannot hang or exhaust the check."""
    try:
        text = read_config_text(path)
        data = load_yaml(text, str(path))
    except (ConfigError, OSError):
        return False
    return isinstance(data, dict) and yaml.safe_dump(data, sort_keys=False) == text


def check_config_file(run_dir: str | Path) -> None:
    """Refuse a run that would overwrite a hand-written RUN/config.yaml (e.g. `srpo train RUN`
    with a config file whose output_dir is its own folder): its comments would be lost."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file() or _is_srpo_written(path):
        return
    raise ValueError(
        f"{path} was not written by srpo (it has comments or its own layout), and this run would "
        f"replace it with its resolved config: keep your config outside the output_dir (e.g. "
        f"srpo/presets/), or set another output_dir"
    )


def write_config(run_dir: str | Path, config: dict[str, Any]) -> Path:
    """RUN/config.yaml, the resolved config, written atomically (a kill or a full disk leaves
    the previous file, never half of one: `srpo train RUN resume=true` reads it)."""
    return atomic_write_text(Path(run_dir) / CONFIG_FILE, yaml.safe_dump(config, sort_keys=False))


def resolve_run_dir(output_dir: str, *, resume: bool) -> str:
    """The run's directory: "{time}" in output_dir becomes the start time (YYYYmmdd-HHMMSS)."""
    if resume and "{time}" in output_dir:
        raise ValueError("resume=true needs the run's actual output_dir, not a {time} template")
    return output_dir.replace("{time}", time.strftime("%Y%m%d-%H%M%S"))


def resume_checkpoint(run_dir: Path, *, resume: bool, fingerprint: str, resumable_fields: tuple[str, ...],
                      config: dict[str, Any] | None = None) -> Path | None:
    """The checkpoint to resume from, verified before any work (None: start at step 0).

    resume=false refuses a directory that already holds a run's files; resume=true takes the
    newest complete checkpoint, refusing a damaged one or one another config wrote (only
    `resumable_fields` may change between the two), or None when the run has none.
    config: this launch's resolved config; a refusal then names the fields that differ from the
    run's RUN/config.yaml (a setting a newer srpo added shows as absent in the run's).
    """
    if not resume:
        found = [n for n in RUN_ARTIFACTS if (run_dir / n).exists()]
        if found:
            raise ValueError(
                f"{run_dir} already holds a run ({', '.join(found)}); pass resume=true to "
                f"continue it (from its newest checkpoint, or from step 0 if it has none) or "
                f"choose another output_dir"
            )
        return None
    from srpo.record.metrics_log import check_metrics_file

    check_metrics_file(run_dir)  # a damaged line, refused before any work (not when appending)
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        return None
    try:
        meta = verify_checkpoint(ckpt)
        _check_data_state(ckpt, meta["data_state"])
    except CheckpointError as e:
        raise CheckpointError(corrupt_checkpoint_message(ckpt, e)) from None
    if meta.get("config_fingerprint") != fingerprint:
        raise ValueError(
            f"checkpoint {ckpt} was written by another config (fingerprint "
            f"{meta.get('config_fingerprint')} != {fingerprint})"
            f"{_differences_line(run_dir, config, resumable_fields)}; "
            f"only {', '.join(resumable_fields)} may change when resuming"
        )
    return ckpt


def _check_data_state(ckpt: Path, data_state: dict[str, Any]) -> None:
    """The trainer's data position in a checkpoint's marker (what `Trainer._state` saves)."""
    step = data_state.get("next_step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CorruptCheckpointError(
            f"{ckpt / STATE_FILE} is not a marker srpo wrote (its 'data_state' has no "
            f"'next_step' step number): it was altered or written by something else"
        )


def _differences_line(run_dir: Path, config: dict[str, Any] | None, skip: tuple[str, ...]) -> str:
    """ ", differing in: a: x -> y, ..." against the run's config.yaml, or "" when that cannot be said."""
    from srpo.record.run_identity import config_differences

    path = run_dir / CONFIG_FILE
    if config is None or not path.is_file():
        return ""
    try:
        written = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return ""
    if not isinstance(written, dict):
        return ""
    diffs = config_differences(written, config, skip=skip)
    if not diffs:
        return ""
    more = f" (and {len(diffs) - 8} more)" if len(diffs) > 8 else ""
    return f", differing from {path.name} in: {'; '.join(diffs[:8])}{more}"


def rewind_logs(run_dir: Path, logger: Any, step: int, checkpoint: Path | None, *, main: bool) -> str:
    """Drops what a resumed run logged after its checkpoint at `step` (the lines of later steps,
    and a final evaluation logged after it: they are redone), or, with no checkpoint, all of
    it (the run starts over at step 0). logger: the run's MetricsLogger. Returns the line to print."""
    from srpo.record import episodes_log

    if checkpoint is not None:
        logger.resume(step, logged_after_checkpoint=lambda row: "loss" not in row)
    else:
        logger.resume(-1)
    if main:
        episodes_log.drop_steps_after(run_dir, step)
    if checkpoint is not None:
        return f"resumed from {checkpoint} at step {step}"
    return (
        f"resume=true: {run_dir} has no complete checkpoint; starting from step 0 (the log of the "
        "interrupted run is discarded)"
    )
