"""What a run prints while it trains: phase times, the step line, the update's micro-batch bar.

    timer = PhaseTimer()
    with timer("rollout"): ...                       # time/rollout in the step's metrics
    progress.line(step_line(step, steps, metrics, timer))
    counter = MicroBatchCounter(bar, optimizer_steps=epochs * minibatches)
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from srpo.record.progress import Bar


class PhaseTimer:
    """Wall time of each named phase of a step: `with timer("rollout"): ...`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        return {f"time/{k}": v for k, v in self.seconds.items()}


def step_line(step: int, steps: int, m: dict[str, Any], timer: PhaseTimer) -> str:
    """The one line a step prints: reward, loss, gradient norm, clip share, KL, speed, phases."""
    phases = " ".join(f"{k} {v:.1f}s" for k, v in timer.seconds.items())
    # the loss of an on-policy step is ~0 by construction (ratio 1, advantages centered within
    # each group: loss = -sum_S w_S A_S); its gradient is not, hence the gradient norm beside it
    grads = [v for k, v in m.items() if k.startswith("grad_norm/")]
    grad = f"{sum(grads) / len(grads):.3f}" if grads else "-"
    return (f"step {step}/{steps}  reward {m.get('reward/mean', float('nan')):.3f}  "
            f"loss {m.get('loss', float('nan')):+.4f}  grad {grad}  clip {m.get('clip/all/frac', 0.0):.3f}  "
            f"kl {m.get('approx_kl', 0.0):.2e}  gen {m['throughput/gen_tokens_per_s']:.0f} tok/s  [{phases}]")


class MicroBatchCounter:
    """The update's progress bar: micro-batches done of (so far + this step's x the steps left)."""

    def __init__(self, bar: Bar, *, optimizer_steps: int):
        self.bar, self.optimizer_steps = bar, optimizer_steps
        self.steps_done = self.micro_done = 0

    def plan(self, micro_batches: int) -> None:
        left = self.optimizer_steps - self.steps_done  # the later steps guessed like this one
        self.bar.update(total=self.micro_done + micro_batches * left or None)

    def micro_batch_done(self, j: int, micro_batches: int) -> None:
        self.micro_done += 1
        self.bar.update(completed=self.micro_done,
                        info=f"optimizer step {self.steps_done + 1}/{self.optimizer_steps}, "
                             f"micro-batch {j + 1}/{micro_batches}")

    def step_done(self) -> None:
        self.steps_done += 1


def write_report_or_say_why(run_dir: Path) -> None:
    """RUN/report.html. A run directory the report cannot read (a file damaged after it was
    written) does not undo a finished run: one line says why, and `srpo report RUN` retries."""
    from srpo.record.report import ReportError, write_report

    try:
        print(f"report: {write_report(run_dir)}", flush=True)
    except ReportError as e:
        print(f"report: not written ({e}); the run itself is complete: fix the file and run "
              f"`srpo report {run_dir}`", file=sys.stderr, flush=True)
