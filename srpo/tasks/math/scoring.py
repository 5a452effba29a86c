"""Is an extracted answer equal to the gold answer? Exact numbers first, math-verify otherwise.

Fast path: when both strings are plain numbers (`answers.parse_number`), compare them exactly
as Decimals without math-verify (~14 ms a pair otherwise). Equal is decisive; two unequal
integers are decisive; unequal non-integers go on to math-verify, whose float rounding (6
digits) the fast path must not contradict.

Timeouts: math-verify's own timeouts use signal.alarm, which only works in the main thread, and
cannot stop a long C call. We turn them off (parsing_timeout=None, timeout_seconds=None) and
run every check in one child process (`MathVerifyProcess`, a fresh interpreter started on first
use) that the caller waits on for `timeout_s` seconds, from any thread. A
check that overruns is reported as timed_out (never correct) and counted, and the child is
killed and replaced on the next check. A thread could not be killed: an abandoned sympy check
(a gcd of huge integers inside `simplify`) kept running in a training process for 36 CPU
minutes and, holding the GIL inside one long C call, stalled the training thread beside it.
Requests and replies cross the pipes as JSON lines, never pickles.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from srpo.tasks.math.answers import parse_number

DEFAULT_TIMEOUT_S = 5.0
START_TIMEOUT_S = 120.0  # the child's start: a fresh interpreter importing srpo and math-verify


@dataclass(frozen=True)
class ScoreResult:
    """Outcome of one comparison.

    correct: the prediction equals the gold answer (always False when timed_out).
    timed_out: the symbolic check overran its time limit.
    method: "numeric" (fast path) | "math_verify" | "none" (no prediction) | "timeout".
    """

    correct: bool
    timed_out: bool = False
    method: str = ""


_stats_lock = threading.Lock()
_stats = {"calls": 0, "numeric": 0, "math_verify": 0, "timeouts": 0, "verifier_starts": 0}


def _count(key: str, delta: int = 1) -> None:
    with _stats_lock:
        _stats[key] += delta


def scoring_stats() -> dict[str, int]:
    """Process-wide counters: calls, numeric, math_verify, timeouts, verifier_starts (child
    processes started: the first, and one after each timeout)."""
    with _stats_lock:
        return dict(_stats)


def reset_scoring_stats() -> None:
    """Zero every counter."""
    with _stats_lock:
        for key in _stats:
            _stats[key] = 0


def _as_math(text: str) -> str:
    """math-verify only parses LaTeX inside $...$, \\(...\\), \\[...\\] or \\boxed{}."""
    if "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text:
        return text
    return f"${text}$"


_math_verify_import_lock = threading.Lock()
_math_verify_module = None


def _import_math_verify():
    global _math_verify_module
    if _math_verify_module is not None:
        return _math_verify_module
    with _math_verify_import_lock:  # first import from several threads at once is not safe
        try:
            import math_verify
            from math_verify import grader, parser
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "math-verify is required to score LaTeX answers: pip install 'srpo[math]'"
            ) from e
        # We disable its signal-based timeouts on purpose and enforce our own, so its one-time
        # "you must provide the logic for timeout interruption yourself" warning is moot.
        grader.TIMEOUT_WARNING_SHOWN = True
        parser.TIMEOUT_WARNING_SHOWN = True
        _math_verify_module = math_verify
        return math_verify


def _math_verify_equal(gold: str, pred: str) -> bool:
    """verify(parse(gold), parse(pred)) with math-verify's signal timeouts off (thread-safe)."""
    mv = _import_math_verify()
    gold_parsed = mv.parse(_as_math(gold), parsing_timeout=None)
    pred_parsed = mv.parse(_as_math(pred), parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(mv.verify(gold_parsed, pred_parsed, timeout_seconds=None))


_TIMED_OUT = object()


class MathVerifyError(RuntimeError):
    """math-verify raised in the child process; the message is the child's `Type: message`."""


def _resolve(name: str) -> Callable[[str, str], bool]:
    """"module:function" -> the function."""
    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


def serve(check: str) -> None:
    """The child's loop (`python -c ...`, started by MathVerifyProcess): import math-verify, say
    ready, then answer each request line [gold, pred] on stdin with one line {"value": bool} or
    {"error": "Type: message"} until stdin closes. Anything else printing to stdout is sent to
    stderr, so the protocol's lines stay its own."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    fn = _resolve(check)
    _import_math_verify()
    out.write('{"ready": true}\n')
    for line in sys.stdin:
        gold, pred = json.loads(line)
        try:
            reply = {"value": bool(fn(gold, pred))}
        except Exception as e:  # handed to the parent, which raises it
            reply = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")


class MathVerifyProcess:
    """math-verify checks in one child process, killed and replaced when a check overruns.

    check: "module:function", the comparison the child runs (`_math_verify_equal` unless a test
    gives another; the child gets this process's sys.path to import it). The child is a fresh
    `python -c` process, not a multiprocessing one: spawn would import the caller's main script
    again, and a script without an `if __name__ == "__main__"` guard would start training again
    in the child. Thread-safe: checks are serialized by a lock (one child), which is what the
    GIL made of the old threads anyway."""

    def __init__(self, check: str = "srpo.tasks.math.scoring:_math_verify_equal") -> None:
        self.check = check
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None

    def _start(self) -> None:
        code = ("import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
                "from srpo.tasks.math.scoring import serve; serve(sys.argv[2])")
        proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(sys.path), self.check],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._proc = proc
        if self._read_line(START_TIMEOUT_S) is None:
            self.stop()
            raise MathVerifyError(f"the math-verify process did not start within {START_TIMEOUT_S:.0f} s")
        _count("verifier_starts")

    def _read_line(self, timeout_s: float) -> str | None:
        """The child's next line, or None when none came within timeout_s (or it exited)."""
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout_s)
        line = self._proc.stdout.readline() if ready else ""
        return line or None

    def stop(self) -> None:
        """Kill the child (a check that overran, or the end of a test); the next check starts one."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for f in (self._proc.stdin, self._proc.stdout):
                f.close()
        self._proc = None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def compare(self, gold: str, pred: str, timeout_s: float) -> object:
        """check(gold, pred) within timeout_s seconds (the child's start not counted): its
        value, MathVerifyError for an exception there, or _TIMED_OUT (the child is killed)."""
        with self._lock:
            if not self.alive():
                self.stop()
                self._start()
            try:
                self._proc.stdin.write(json.dumps([gold, pred]) + "\n")
                self._proc.stdin.flush()
            except OSError as e:  # the child died (killed from outside, out of memory)
                self.stop()
                raise MathVerifyError(f"the math-verify process died before a check ({e!r})") from e
            line = self._read_line(timeout_s)
            if line is None:
                died = not self.alive()
                self.stop()
                if died:
                    raise MathVerifyError("the math-verify process died during a check")
                return _TIMED_OUT
        reply = json.loads(line)
        if "error" in reply:
            raise MathVerifyError(reply["error"])
        return reply["value"]


_verifier = MathVerifyProcess()


def score_answer(
    gold: str,
    pred: str | None,
    *,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    fast_path: bool = True,
) -> ScoreResult:
    """Compare an extracted prediction with the gold answer.

    gold: the reference answer ("42", "\\frac{1}{2}", "$x=2$"); bare LaTeX is wrapped in $...$.
    pred: the extracted answer, or None when nothing was extracted (scored incorrect).
    timeout_s: wall-clock limit of the math-verify check; None runs it inline with no limit
        (only for trusted inputs). Safe to call from the main thread and from worker threads.
    fast_path: compare plain numbers exactly without math-verify (turn off to test it).
    An exception raised by math-verify is raised here as MathVerifyError with its type and
    message (the reward names the task).
    """
    if not isinstance(gold, str):
        raise TypeError(f"gold answer must be a str, got {type(gold).__name__}")
    _count("calls")
    if pred is None or not pred.strip():
        return ScoreResult(correct=False, method="none")

    if fast_path:
        g, p = parse_number(gold), parse_number(pred)
        if (g is not None and p is not None
                and (g == p or (g == g.to_integral_value() and p == p.to_integral_value()))):
            _count("numeric")
            return ScoreResult(correct=bool(g == p), method="numeric")

    _count("math_verify")
    if timeout_s is None:
        return ScoreResult(correct=_math_verify_equal(gold, pred), method="math_verify")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0 or None, got {timeout_s}")
    outcome = _verifier.compare(gold, pred, timeout_s)
    if outcome is _TIMED_OUT:
        _count("timeouts")
        return ScoreResult(correct=False, timed_out=True, method="timeout")
    return ScoreResult(correct=bool(outcome), method="math_verify")
