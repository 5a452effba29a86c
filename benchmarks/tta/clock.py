"""The training clock of benchmarks/time_to_accuracy.py, shared by every side (srpo in .venv,
the peers in their own environments: it imports nothing but the standard library).

Definitions (seconds, `time.perf_counter`):

    training seconds  T(now) = (now - t_start) - P(now)
                      t_start: the clock's start, just before the trainer's first step;
                      P(now): the seconds spent saving checkpoints so far (the clock is paused
                      while a checkpoint is written, so saving never counts as training)
    marks             after every optimizer step the trainer calls `after_step(step)`; which
                      step's state becomes the checkpoint of the nominal time k * every
                      (k = 1, 2, ...) and of the budget is the clock's mode:
      "after"         (the studies up to 2026-12-08) the first step end with T >= k * every is
                      saved (one save however many multiples a long step crossed), and the
                      step end where T >= budget, which stops training. Its T is past k * every
                      by up to one step: until a side's first save the comparison holds the
                      base model, so at equal time a side whose step happened to end later is
                      compared by an older state than the one it had (a phase of the step
                      lengths, not of learning).
      "before"        every step end's state is saved as the pending checkpoint (the previous
                      pending one discarded); when a step end crosses k * every (or the
                      budget), the pending one (the last step that ended before it) becomes the
                      mark, with "at" = the nominal time it stands for: the state each side
                      actually had at k * every, so equal-time comparisons at the nominal times
                      involve no phase. One save every step (the clock paused), one kept a mark.
    start-up seconds  process start (`started`, taken at import of the peer script or given)
                      to t_start: imports, model load, trainer construction

A mark lies at a step boundary, so its training seconds are off k * every by up to one step; the
curves use the mark's own T; "before" marks also carry "at", the nominal time they stand for.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class BudgetReached(Exception):
    """Raised by a side's step hook to leave its trainer's loop once T >= budget (after the
    last checkpoint was saved)."""


MARK_MODES = ("after", "before")


class TrainingClock:
    """Training seconds with pauses for checkpoints; `save(tag)` writes one checkpoint,
    `discard(tag)` deletes one (needed by the "before" mode, whose pending saves are replaced)."""

    def __init__(self, every: float, budget: float, save: Callable[[str], None], started: float | None = None,
                 marks: str = "after", discard: Callable[[str], None] | None = None):
        if every <= 0 or budget <= 0:
            raise ValueError(f"every and budget must be > 0 seconds, got {every} and {budget}")
        if marks not in MARK_MODES:
            raise ValueError(f"unknown mark mode {marks!r}; known: {MARK_MODES}")
        if marks == "before" and discard is None:
            raise ValueError("the 'before' mark mode replaces its pending saves: give discard(tag)")
        self.every, self.budget, self.save, self.discard = float(every), float(budget), save, discard
        self.mode = marks
        self.pending: dict | None = None  # "before": the last step end's saved state, not yet a mark
        self.done = False
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
        crossed the next mark or the budget ("before": promotes the pending one, then saves this
        step's state as the new pending one); True when the budget is reached (stop)."""
        self.steps = step
        t = self.seconds()
        done = t >= self.budget
        if t >= self.next_mark or done:
            if self.mode == "after":
                self.checkpoint(step, t)
            elif self.pending is not None:  # else no step ended since the last mark: its state holds
                # the nominal time the pending state stands for: the budget, or the last multiple crossed
                self._promote(self.budget if done else int(t // self.every) * self.every)
            # the next multiple of `every` strictly after t
            self.next_mark = (int(t // self.every) + 1) * self.every
        if self.mode == "before" and not done:
            self._save_pending(step, t)
        self.done = done
        return done

    def finish(self) -> None:
        """The trainer stopped before the budget (its data ran out): its last state is a
        checkpoint too ("after": saved now; "before": the pending one, standing for now)."""
        if self.done:
            return
        if self.mode == "after":
            if not self.marks or self.marks[-1]["step"] != self.steps:  # else the last step is saved already
                self.checkpoint(self.steps, self.seconds())
        elif self.pending is not None:
            self._promote(self.seconds())
        self.done = True

    def _save_pending(self, step: int, t: float) -> None:
        previous = self.pending
        tag = f"step{step:05d}"
        t0 = time.perf_counter()
        if previous is not None:
            self.discard(previous["tag"])
        self.save(tag)
        spent = time.perf_counter() - t0
        self.paused += spent
        self.pending = {"tag": tag, "step": step, "train_seconds": t, "save_seconds": spent}

    def _promote(self, at: float) -> None:
        self.marks.append({**self.pending, "at": float(at)})
        self.pending = None

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
                "save_seconds": self.paused, "steps": self.steps, "marks": self.marks, "mark_mode": self.mode}


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
