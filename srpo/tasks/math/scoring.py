"""Is an extracted answer equal to the gold answer? Exact numbers first, math-verify otherwise.

Fast path: when both strings are plain numbers (`answers.parse_number`), compare them exactly
as Decimals without math-verify (~14 ms a pair otherwise). Equal is decisive; two unequal
integers are decisive; unequal non-integers go on to math-verify, whose float rounding (6
digits) the fast path must not contradict.

Timeouts: math-verify's own timeouts use signal.alarm, which only works in the main thread. We
turn them off (parsing_timeout=None, timeout_seconds=None) and run each check in a daemon
thread that the caller waits on for `timeout_s` seconds, which works from any thread. A check
that overruns is reported as timed_out (never correct) and counted; its thread cannot be killed
and is left to finish in the background (daemon, so it never blocks interpreter exit;
`scoring_stats()["running_after_timeout"]` shows how many are still running). A thread pool
was not used because its workers are joined at exit: one stuck sympy call would hang shutdown.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from srpo.tasks.math.answers import parse_number

DEFAULT_TIMEOUT_S = 5.0


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
_stats = {"calls": 0, "numeric": 0, "math_verify": 0, "timeouts": 0, "running_after_timeout": 0}


def _count(key: str, delta: int = 1) -> None:
    with _stats_lock:
        _stats[key] += delta


def scoring_stats() -> dict[str, int]:
    """Process-wide counters: calls, numeric, math_verify, timeouts, running_after_timeout."""
    with _stats_lock:
        return dict(_stats)


def reset_scoring_stats() -> None:
    """Zero the counters except running_after_timeout (those threads are still alive)."""
    with _stats_lock:
        for key in ("calls", "numeric", "math_verify", "timeouts"):
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


def _call_with_timeout(fn: Callable[[], bool], timeout_s: float) -> object:
    """fn() in a daemon thread; its value, its exception re-raised here, or _TIMED_OUT."""
    done = threading.Event()
    box: dict[str, object] = {}
    abandoned = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller below
            box["error"] = e
        finally:
            done.set()
            if abandoned.is_set():
                _count("running_after_timeout", -1)

    thread = threading.Thread(target=target, name="srpo-math-verify", daemon=True)
    thread.start()
    if not done.wait(timeout_s):
        with _stats_lock:
            # Re-check under the lock: the thread may have finished between wait() and here.
            if not done.is_set():
                abandoned.set()
                _stats["running_after_timeout"] += 1
                return _TIMED_OUT
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]


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
    Exceptions raised by math-verify propagate (the reward names the task).
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
    outcome = _call_with_timeout(lambda: _math_verify_equal(gold, pred), timeout_s)
    if outcome is _TIMED_OUT:
        _count("timeouts")
        return ScoreResult(correct=False, timed_out=True, method="timeout")
    return ScoreResult(correct=bool(outcome), method="math_verify")
