"""Majority vote over agents' final answers (debate's last round, routed experts); what
counts as the same answer is the task pack's answer key (ctx.answer_key)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from srpo.workflows.base import Output

AnswerKey = Callable[[str], "str | None"]


def majority(outputs: Sequence[Output], key: AnswerKey) -> tuple[Output, int]:
    """(the output carrying the most common answer, its vote count).

    key: (text) -> the answer it states, normalized, or None; workflows pass ctx.answer_key
    (the task pack's: math extracts the final answer, search its <answer>).

    Ties go to the answer given first (in `outputs` order); outputs without an answer (key
    None, or marked `no_answer`: cut by the token budget under train.cut_answers: none) do not
    vote; if none has one, the first output is returned with 0 votes.
    """
    if not outputs:
        raise ValueError("majority() needs at least one output")
    keys = [None if o.no_answer else key(o.text) for o in outputs]
    counts: dict[str, int] = {}
    for k in keys:
        if k is not None:
            counts[k] = counts.get(k, 0) + 1
    if not counts:
        return outputs[0], 0
    best = max(counts.values())
    winner = next(k for k in keys if k is not None and counts[k] == best)
    return outputs[keys.index(winner)], best


def split_voters(outputs: Sequence[Output]) -> tuple[list[Output], list[Output]]:
    """(the outputs a majority vote reads, those it does not): an output marked `no_answer`
    (cut by the token budget under train.cut_answers: none) states no answer, so the vote
    does not consume it; a workflow passes the second list as `unread` to ctx.transition.
    An output whose text states no answer the key can read is still read (the vote looked at
    it and found nothing), so it stays a voter."""
    return [o for o in outputs if not o.no_answer], [o for o in outputs if o.no_answer]
