"""SIGINT and SIGTERM of a `srpo` command: one line saying where it stopped, exit 130 / 143.

    with handling_interrupts():          # srpo.cli.main only: library code keeps Python's defaults
        ...                              # Ctrl-C or `kill PID` raises Interrupted here

Both signals raise `Interrupted`, a KeyboardInterrupt carrying the signal number, so SIGTERM takes
the path Ctrl-C takes: every `finally` and `except BaseException` on the way runs (temporary
files removed, the run directory's lock released) and the command prints one line naming where it
stopped instead of a traceback, then exits 128 + the signal number (130, 143).

Why not Python's own SIGINT handler: it raises KeyboardInterrupt wherever the main thread is.
When that is inside a `__del__` method (or a weakref or gc callback, e.g. a regex object freed
during start-up) Python cannot propagate it: it prints "Exception ignored in ..." and carries on,
and the run went on to exit 0 as if never interrupted. Here a `sys.unraisablehook` sees when an
Interrupted was swallowed like that and sends the signal again from a short-lived thread, so the
handler raises once more moments later at the main thread's next bytecode, outside the finalizer
(and again, should that land in one too). Once raised, further signals are recorded but not
raised: a second Ctrl-C cannot cut short the cleanup the first one started (SIGKILL still ends
the process at once, and a killed run resumes as exactly as an interrupted one).

Signals during the interpreter's own start-up, before `srpo.cli.main` runs (importing srpo and
torch, a second or two), still meet Python's defaults.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
RESEND_AFTER_S = 0.05


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; `signum` says which, `exit_code` is 128 + it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __reduce__(self):
        return (Interrupted, (self.signum,))


class _Guard:
    def __init__(self) -> None:
        self.signum: int | None = None  # the first signal received
        self.raised = False  # an Interrupted is on its way up: later signals are only recorded
        self.previous_hook = sys.unraisablehook

    def handler(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        if self.raised:
            return
        self.raised = True
        raise Interrupted(self.signum)

    def unraisable(self, unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, Interrupted):  # swallowed in a finalizer: raise it again
            self.raised = False
            timer = threading.Timer(RESEND_AFTER_S, os.kill, (os.getpid(), unraisable.exc_value.signum))
            timer.daemon = True
            timer.start()
            return
        self.previous_hook(unraisable)


@contextlib.contextmanager
def handling_interrupts() -> Iterator[_Guard | None]:
    """Within: SIGINT and SIGTERM raise Interrupted (module docstring). Outside the main thread
    (where signal handlers cannot be set) it does nothing. The previous handlers come back at exit."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    guard = _Guard()
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, guard.handler)
    sys.unraisablehook = guard.unraisable
    try:
        yield guard
    finally:
        sys.unraisablehook = guard.previous_hook
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def interrupt_behind(error: BaseException) -> Interrupted | None:
    """The Interrupted that `error` replaced, if any. A signal that lands inside a C++ writer
    (torch.save's, mid-checkpoint) raises Interrupted there, and the writer's cleanup then fails
    with an error of its own (RuntimeError: "unexpected pos ..."), raised while the Interrupted
    was being handled: the interrupt is still what stopped the run, so the command says so."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, Interrupted):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None
