"""The training clock of benchmarks/time_to_accuracy.py, shared by every side (srpo in .venv,
the peers in their own environments: it imports nothing but the standard library).

Definitions (seconds, `time.perf_counter`):

    training seconds  T(now) = (now - t_start) - P(now)
                      t_start: the clock's start, just before the trainer's first step;
                      P(now): the seconds spent saving checkpoints so far (the clock is paused
                      while a checkpoint is written, so saving never counts as training)
    marks             after every optimizer step the trainer calls `after_step(step)`; a
                      checkpoint is saved at the first step end with T >= k * every for each
                      k = 1, 2, ... (one save however many multiples a long step crossed), and
                      at the step end where T >= budget, which stops training
    start-up seconds  process start (`started`, taken at import of the peer script or given)
                      to t_start: imports, model load, trainer construction

A mark therefore lies at a step boundary, so its training seconds are a little past k * every
(by at most one step); the curves use the mark's own T, never the nominal k * every.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class BudgetReached(Exception):
    """Raised by a side's step hook to leave its trainer's loop once T >= budget (after the
    last checkpoint was saved)."""


class TrainingClock:
    """Training seconds with pauses for checkpoints; `save(tag)` writes one checkpoint."""

    def __init__(self, every: float, budget: float, save: Callable[[str], None], started: float | None = None):
        if every <= 0 or budget <= 0:
            raise ValueError(f"every and budget must be > 0 seconds, got {every} and {budget}")
        self.every, self.budget, self.save = float(every), float(budget), save
        self.started = time.perf_counter() if started is None else started
        self.t_start: float | None = None
        self.paused = 0.0
        self.next_mark = self.every
        self.marks: list[dict] = []
        self.steps = 0

    def start(self) -> None:
        """The training clock starts now (the start-up ends)."""
        self.t_start = time.perf_counter()

    @property
    def startup_seconds(self) -> float:
        return (self.t_start if self.t_start is not None else time.perf_counter()) - self.started

    def seconds(self) -> float:
        """T(now): training seconds so far (0 before start())."""
        if self.t_start is None:
            return 0.0
        return time.perf_counter() - self.t_start - self.paused

    def after_step(self, step: int) -> bool:
        """Call after optimizer step number `step` (1-based) ends. Saves a checkpoint when T
        crossed the next mark or the budget; True when the budget is reached (stop)."""
        self.steps = step
        t = self.seconds()
        done = t >= self.budget
        if t >= self.next_mark or done:
            self.checkpoint(step, t)
            # the next multiple of `every` strictly after t
            self.next_mark = (int(t // self.every) + 1) * self.every
        return done

    def checkpoint(self, step: int, t: float) -> None:
        """Save the checkpoint of step `step` at training time t, with the clock paused."""
        tag = f"step{step:05d}"
        t0 = time.perf_counter()
        self.save(tag)
        spent = time.perf_counter() - t0
        self.paused += spent
        self.marks.append({"tag": tag, "step": step, "train_seconds": t, "save_seconds": spent})

    def record(self) -> dict:
        """What a side reports: start-up, training seconds, steps and its marks."""
        return {"startup_seconds": self.startup_seconds, "train_seconds": self.seconds(),
                "save_seconds": self.paused, "steps": self.steps, "marks": self.marks}


class PhaseTimer:
    """Seconds a trainer spends in each phase of its own step, from wrapping its methods.

    `wrap(obj, "method", "phase")` replaces obj.method (on the instance) with a timed call. Time
    is exclusive: a wrapped call made inside another wrapped call counts for its own phase and is
    subtracted from the caller's, so the phases never overlap and their sum is at most the
    training seconds; the rest (the trainer's loop, optimizer steps it does not route through a
    wrapped method, data loading) is `other` in `record`. Checkpoint saves run outside every
    wrapped call (the clock's `after_step` is called between steps), so they are in no phase.
    Single-threaded trainers only (one stack of open calls).
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._open: list[list] = []  # [phase, start, seconds of the wrapped calls nested inside]

    def wrap(self, obj: object, method: str, phase: str) -> None:
        inner = getattr(obj, method)

        def timed(*args, **kwargs):
            self._open.append([phase, time.perf_counter(), 0.0])
            try:
                return inner(*args, **kwargs)
            finally:
                name, start, nested = self._open.pop()
                total = time.perf_counter() - start
                self.seconds[name] = self.seconds.get(name, 0.0) + total - nested
                self.calls[name] = self.calls.get(name, 0) + 1
                if self._open:
                    self._open[-1][2] += total

        setattr(obj, method, timed)

    def record(self, train_seconds: float) -> dict:
        """{phase: seconds} with `other` = train_seconds minus every phase's seconds, and the
        number of calls of each phase."""
        phases = dict(self.seconds)
        phases["other"] = train_seconds - sum(self.seconds.values())
        return {"phases": phases, "phase_calls": dict(self.calls)}
