"""Majority vote over agents' final answers (debate's last round, routed experts)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from srpo.workflows.base import Output

AnswerKey = Callable[[str], "str | None"]


def math_answer_key(text: str) -> str | None:
    """The extracted final answer (srpo.tasks.math), whitespace-normalized; None if absent."""
    from srpo.tasks.math.answers import extract_answer

    found = extract_answer(text)
    return None if found is None else "".join(found.split())


def majority(outputs: Sequence[Output], key: AnswerKey = math_answer_key) -> tuple[Output, int]:
    """(the output carrying the most common answer, its vote count).

    Ties go to the answer given first (in `outputs` order); outputs without an answer do not
    vote; if none has one, the first output is returned with 0 votes.
    """
    if not outputs:
        raise ValueError("majority() needs at least one output")
    keys = [key(o.text) for o in outputs]
    counts: dict[str, int] = {}
    for k in keys:
        if k is not None:
            counts[k] = counts.get(k, 0) + 1
    if not counts:
        return outputs[0], 0
    best = max(counts.values())
    winner = next(k for k in keys if k is not None and counts[k] == best)
    return outputs[keys.index(winner)], best
