"""Drift warnings (srpo.record.drift): the first step a training cut share or top-answer share
reaches its threshold after starting below it, once per kind; the console line; the report's
copy recomputed from metrics.jsonl; the rollout metric they read."""

from __future__ import annotations

import pytest

from srpo.record.drift import CUT_SHARE_WARN, TOP_ANSWER_WARN, DriftWatch, drift_warnings
from srpo.rollout.runner import rollout_metrics
from srpo.types import ActiveSet, Episode, Member, Task


def rows(cut, top=None):
    return [{"step": i + 1, "loss": 0.0, "rollout/stop/length": c,
             **({} if top is None else {"rollout/answers/top_share": top[i]})} for i, c in enumerate(cut)]


def test_a_climb_past_the_threshold_warns_once_at_the_step_it_happens():
    (w,) = drift_warnings(rows([0.61, 0.66, 0.78, 0.85, 0.90]))
    assert (w.step, w.key, w.value, w.start) == (3, "rollout/stop/length", 0.78, 0.61)
    assert w.line().startswith("warning: step 3: 78% of the training outputs were cut")
    assert "(step 1: 61%; warned at 75%)" in w.line() and CUT_SHARE_WARN == 0.75


def test_a_run_that_starts_above_or_never_reaches_it_does_not_warn():
    assert drift_warnings(rows([0.80, 0.95, 1.0])) == []  # cut from the start: not a drift
    assert drift_warnings(rows([0.61, 0.74, 0.2])) == []


def test_both_kinds_and_the_step_by_step_watch_agree():
    rs = rows([0.5, 0.6, 0.8, 0.9], top=[0.1, 0.55, 0.6, 0.2])
    found = drift_warnings(rs)
    assert [(w.step, w.key) for w in found] == [(2, "rollout/answers/top_share"), (3, "rollout/stop/length")]
    assert TOP_ANSWER_WARN == 0.5
    watch = DriftWatch()
    assert [[w.step for w in watch.check(r)] for r in rs] == [[], [2], [3], []]


def member(stop="eos"):
    return Member("d", "p", [1], [2], [1], stop_reason=stop)


def test_rollout_metrics_give_the_top_answer_share_of_the_episodes():
    task = Task("t", "q", "4")
    eps = [Episode(task, "debate", [ActiveSet((member(),), "round-1", "t")], 0.0,
                   metadata={"extracted_answer": a}) for a in ("1", "1", "4", None)]
    assert rollout_metrics(eps)["answers/top_share"] == pytest.approx(2 / 4)
    plain = [Episode(task, "debate", [ActiveSet((member(),), "round-1", "t")], 0.0)]
    assert "answers/top_share" not in rollout_metrics(plain)  # no episode records an answer


def test_a_collapse_to_empty_outputs_warns():
    """chain_sum seed 0 of the untuned benchmark (2026-12-06): empty outputs 0 -> 46% of 216 by
    step 15; the warning fires at the first step at or past 25%."""
    from srpo.record.drift import EMPTY_SHARE_WARN

    rs = [{"step": i + 1, "loss": 0.0, "rollout/members/empty_share": v}
          for i, v in enumerate([0.0, 0.005, 0.03, 0.12, 0.54, 0.46])]
    (w,) = drift_warnings(rs)
    assert (w.step, w.key, EMPTY_SHARE_WARN) == (5, "rollout/members/empty_share", 0.25)
    assert "collapsing to saying nothing" in w.line()
