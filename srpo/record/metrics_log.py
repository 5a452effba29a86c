"""The metrics log of a run: `RUN/metrics.jsonl` (the record), TensorBoard and W&B (views).

Each `log(step, metrics)` appends one JSON object `{"step": N, "<key>": value, ...}` to
`RUN/metrics.jsonl` and fsyncs it, so a killed run loses at most the line being written. Several
lines may share a step (train metrics, then eval metrics of the same step); steps never go back.

Non-finite values. JSON has no NaN or inf, so such a value is written as null and its kind is
kept in the line's `"_nonfinite"` field, e.g. `{"step": 3, "loss": null, "_nonfinite": {"loss":
"nan"}}`; `read_metrics` turns it back into float("nan"). The run goes on; each key warns once
(`RuntimeWarning`) and `MetricsLogger.nonfinite_counts` counts every occurrence. TensorBoard and
W&B receive the non-finite float itself.

Resume. `MetricsLogger.resume(step)` drops the lines of steps > `step` (work that is being
redone after loading checkpoint `step`; optionally also lines of `step` logged after that
checkpoint, such as a final evaluation), so a resumed run's metrics.jsonl equals the
uninterrupted run's; TensorBoard is told to purge those steps too (`purge_step`). Log every
metric of step N before saving checkpoint N for this to hold. W&B cannot rewrite history: it
ignores the redone steps it already has.
"""

from __future__ import annotations

import importlib.util
import json
import math
import numbers
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from srpo.disk import atomic_write_text, open_no_follow
from srpo.jsonl import dumps_line, split_lines

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
_NONFINITE = "_nonfinite"
_RESERVED = ("step", _NONFINITE)


def _metrics_path(run_dir: str | Path) -> Path:
    path = Path(run_dir)
    return path if path.suffix == ".jsonl" else path / METRICS_FILE


def _decode(record: dict[str, Any]) -> dict[str, Any]:
    for key, kind in record.pop(_NONFINITE, {}).items():
        record[key] = float(kind)  # "nan", "inf", "-inf"
    return record


def _parse(data: str | bytes, path: Path) -> tuple[list[dict[str, Any]], int]:
    """Records of a metrics file as stored, and the byte length of its complete lines.

    Every record is written with its newline in one write, so text after the last newline is a
    line cut by a kill mid-write: it is left out with a warning. A bad complete line (not JSON,
    not a record, not UTF-8) is corruption and raises a ValueError naming the file and the line.
    """
    text = _text(data, path)
    lines, tail = split_lines(text)  # "\n" only (srpo.jsonl)
    if tail:
        warnings.warn(
            f"{path}: ignoring its truncated last line {len(lines) + 1} ({tail[:60]!r}); the run "
            f"was probably killed while writing it",
            RuntimeWarning,
            stacklevel=3,
        )
    records = []
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
        except ValueError as e:
            raise ValueError(
                f"{path}: line {i + 1} is not valid JSON ({e}): {line[:80]!r}"
            ) from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise ValueError(f"{path}: line {i + 1} is not a metrics record: {line[:80]!r}")
        records.append(record)
    return records, len(text.encode(errors="surrogateescape")) - len(tail.encode(errors="surrogateescape"))


def _text(data: str | bytes, path: Path) -> str:
    """The file's bytes as text; a byte that is not UTF-8 (srpo writes UTF-8 only) is an error
    naming the file and the line."""
    if isinstance(data, str):
        return data
    end = data.rfind(b"\n") + 1  # a cut last line may end inside a character: kept as escapes
    try:
        return data[:end].decode() + data[end:].decode(errors="surrogateescape")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(
            f"{path}: line {line} is not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start}): "
            f"the file was altered or written by something else"
        ) from None


def check_metrics_file(run_dir: str | Path) -> None:
    """Raise a ValueError naming the file and the line if a run's metrics log has a damaged
    complete line (`resume=true` checks this before any work; a cut last line is fine). A
    symbolic link there is left to the writer, which refuses it without reading it."""
    path = _metrics_path(run_dir)
    if path.is_file() and not path.is_symlink():
        try:
            _parse(path.read_bytes(), path)
        except ValueError as e:
            raise ValueError(f"{e}; delete or mend that line to resume") from None


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All records of `RUN/metrics.jsonl` (or of a .jsonl path), in file order.

    Non-finite values come back as floats; a truncated last line is ignored with a warning.
    """
    path = _metrics_path(run_dir)
    if not path.is_file():
        raise FileNotFoundError(f"no metrics log at {path}")
    return [_decode(r) for r in _parse(path.read_bytes(), path)[0]]


def _as_float(key: str, value: Any) -> float:
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:  # torch / numpy scalars
        value = value.item()
    if not isinstance(value, numbers.Real):
        raise TypeError(f"metric {key!r} must be a real number, got {type(value).__name__}")
    return float(value)


class MetricsLogger:
    """Append-only metrics of one run (see the module docstring for the file format).

    run_dir: the run directory (created if missing); the log is `run_dir/metrics.jsonl`.
    tensorboard: also write scalars to `run_dir/tensorboard/` (needs the tensorboard package).
    wandb: None/False for off; True, or a dict of `wandb.init` keyword arguments, for on. Asking
        for it without the wandb package installed raises ModuleNotFoundError here.
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        tensorboard: bool = True,
        wandb: bool | Mapping[str, Any] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self.nonfinite_counts: dict[str, int] = {}
        if tensorboard and importlib.util.find_spec("tensorboard") is None:
            raise ModuleNotFoundError(
                "tensorboard=True needs the tensorboard package: pip install tensorboard "
                "(or pass tensorboard=False)",
                name="tensorboard",
            )
        if wandb and importlib.util.find_spec("wandb") is None:
            raise ModuleNotFoundError(
                "wandb logging was requested but the wandb package is not installed: "
                "pip install wandb (or leave wandb off)",
                name="wandb",
            )
        self._tensorboard = tensorboard
        self._tb = None  # created on first use, or by resume() with a purge step
        self._wandb = None
        if wandb:
            import wandb as wandb_module

            kwargs = dict(wandb) if isinstance(wandb, Mapping) else {}
            kwargs.setdefault("dir", str(self.run_dir))
            self._wandb = wandb_module.init(**kwargs)
        self._last_step = -1
        self._file = None
        self._open()

    def _open(self) -> None:
        """Open for appending, cutting off a partial last line left by a killed writer. Never
        through a symbolic link (srpo.disk.SymlinkRefused): it would cut or extend its target."""
        if os.path.lexists(self.path):
            with open_no_follow(self.path, "r+b") as f:
                data = f.read()
                records, good = _parse(data, self.path)
                if good < len(data):
                    f.truncate(good)
                    os.fsync(f.fileno())
            self._last_step = max((r["step"] for r in records), default=-1)
        self._file = open_no_follow(self.path, "a")

    def _writer(self, purge_step: int | None = None):
        if self._tb is None and self._tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / TENSORBOARD_DIR), purge_step=purge_step)
        return self._tb

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Append the metrics of `step` (non-decreasing; see `resume` to go back)."""
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        if step < self._last_step:
            raise ValueError(
                f"step {step} < last logged step {self._last_step} in {self.path}; after "
                f"loading a checkpoint call resume(checkpoint_step) first"
            )
        values = {}
        for key, value in metrics.items():
            if not isinstance(key, str) or key in _RESERVED:
                raise ValueError(f"invalid metric name {key!r} (reserved: {_RESERVED})")
            values[key] = _as_float(key, value)
        record: dict[str, Any] = {"step": step}
        nonfinite = {}
        for key, value in values.items():
            if math.isfinite(value):
                record[key] = value
            else:
                record[key] = None
                nonfinite[key] = str(value)  # "nan" | "inf" | "-inf", as float() reads back
                self._count_nonfinite(key, value, step)
        if nonfinite:
            record[_NONFINITE] = nonfinite
        self._file.write(dumps_line(record))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._last_step = step

        if (tb := self._writer()) is not None:
            for key, value in values.items():
                tb.add_scalar(key, value, step)
            tb.flush()
        if self._wandb is not None:
            self._wandb.log(values, step=step)

    def _count_nonfinite(self, key: str, value: float, step: int) -> None:
        count = self.nonfinite_counts.get(key, 0) + 1
        self.nonfinite_counts[key] = count
        if count == 1:
            warnings.warn(
                f"metric {key!r} is {value} at step {step}; logged as null with "
                f"_nonfinite={{{key!r}: {str(value)!r}}} (further occurrences are only counted "
                f"in MetricsLogger.nonfinite_counts)",
                RuntimeWarning,
                stacklevel=3,
            )

    def resume(self, step: int, *, logged_after_checkpoint: Callable[[dict[str, Any]], bool] | None = None) -> int:
        """Drop the lines of steps > `step` (redone after loading checkpoint `step`), and the
        lines of `step` itself for which `logged_after_checkpoint(record)` is True (work done
        after checkpoint `step` was written, e.g. a final evaluation, that will be redone).
        step = -1 drops every line (a run restarted from step 0).

        The kept lines are written to a temp file and swapped in with os.replace, so a kill
        here leaves either the old or the new file. Returns the number of lines dropped.
        """
        self._file.close()
        records, _ = _parse(self.path.read_bytes(), self.path)  # _open cut any partial line
        redone = logged_after_checkpoint or (lambda record: False)
        kept = [r for r in records if r["step"] < step or (r["step"] == step and not redone(_decode(dict(r))))]
        atomic_write_text(self.path, "".join(dumps_line(r) for r in kept))
        self._last_step = max((r["step"] for r in kept), default=-1)
        self._file = open_no_follow(self.path, "a")
        if self._tensorboard:
            if self._tb is not None:
                self._tb.close()
                self._tb = None
            self._writer(purge_step=step + 1)
        return len(records) - len(kept)

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
