"""Live progress of a run: rich bars on a terminal, one plain line a step everywhere else.

    with RunProgress() as progress:
        run = progress.bar("train", total=steps, completed=start_step)
        with progress.bar("rollout", total=episodes, transient=True) as bar:
            bar.update(completed=done, info="round 2")
        progress.line("step 1/40  reward ...")     # above the bars, or a plain line
        run.advance()

Bars are drawn only when stdout is an interactive terminal (not a pipe or a file, TERM is not
"dumb", and the CI environment variable is unset); SRPO_PROGRESS=bars or SRPO_PROGRESS=lines
forces either. Without bars nothing but the lines is written: no carriage returns, no escape
codes, so logs and CI keep exactly one line a step.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import TextIO


def bars_wanted(stream: TextIO | None = None) -> bool:
    """Whether to draw bars on `stream` (default stdout): see the module doc."""
    forced = os.environ.get("SRPO_PROGRESS", "").strip().lower()
    if forced in ("bars", "lines"):
        return forced == "bars"
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb" and not os.environ.get("CI")


class Bar:
    """One bar (a no-op without bars). `info` is free text shown after the counts."""

    def __init__(self, owner: RunProgress | None, task_id: int | None, transient: bool) -> None:
        self._owner, self._id, self._transient = owner, task_id, transient

    def update(self, *, completed: float | None = None, total: float | None = None,
               info: str | None = None, advance: float | None = None) -> None:
        if self._owner is None or self._owner._bars is None:
            return
        fields = {} if info is None else {"info": info}
        self._owner._bars.update(self._id, completed=completed, total=total, advance=advance, **fields)

    def advance(self, n: float = 1, info: str | None = None) -> None:
        self.update(advance=n, info=info)

    def close(self) -> None:
        if self._owner is not None and self._owner._bars is not None and self._transient:
            self._owner._bars.remove_task(self._id)
            self._owner = None

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def eta_seconds(elapsed: float, done: float, total: float | None) -> float | None:
    """Time left at the mean pace so far (done units in `elapsed` seconds); None when unknown.
    rich's own estimate averages over its last 30 s only, so units slower than that get none."""
    if total is None or done <= 0:
        return None
    return elapsed / done * max(total - done, 0.0)


def _EtaColumn():  # a rich column, built lazily: rich is imported only when bars are drawn
    from rich.progress import ProgressColumn
    from rich.text import Text

    class EtaColumn(ProgressColumn):
        def render(self, task) -> Text:
            done = task.completed - task.fields.get("first", 0)
            left = eta_seconds(
                task.elapsed or 0.0, done, None if task.total is None else task.total - task.fields.get("first", 0)
            )
            if left is None:
                return Text("eta -:--:--")
            m, sec = divmod(round(left), 60)
            return Text(f"eta {m // 60}:{m % 60:02d}:{sec:02d}")

    return EtaColumn()


class RunProgress:
    """The bars of one run (see the module doc). enabled=None: decide by `bars_wanted()`."""

    def __init__(self, *, enabled: bool | None = None, stream: TextIO | None = None) -> None:
        self._stream = stream  # None: sys.stdout at the time of each write
        self.enabled = bars_wanted(self.stream) if enabled is None else enabled
        self._bars = None

    @property
    def stream(self) -> TextIO:
        return sys.stdout if self._stream is None else self._stream

    def __enter__(self) -> RunProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            console = Console(file=self.stream, force_terminal=True, highlight=False)
            self._bars = Progress(
                TextColumn("{task.description:<10}"),
                BarColumn(bar_width=30),
                MofNCompleteColumn(),
                TextColumn("elapsed"),
                TimeElapsedColumn(),
                _EtaColumn(),
                TextColumn("{task.fields[info]}"),
                console=console,
                refresh_per_second=4,
            )
            self._bars.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None

    def bar(
        self,
        description: str,
        total: float | None = None,
        *,
        completed: float = 0,
        info: str = "",
        transient: bool = False,
    ) -> Bar:
        """A new bar; transient bars disappear when closed (phases), the others stay (the run)."""
        if self._bars is None:
            return Bar(None, None, transient)
        task = self._bars.add_task(description, total=total, completed=completed, info=info, first=completed)
        return Bar(self, task, transient)

    def line(self, text: str) -> None:
        """A line of the log: printed above the bars, or plainly (flushed) without them."""
        if self._bars is not None:
            self._bars.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, file=self.stream, flush=True)
