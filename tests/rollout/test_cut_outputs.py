"""Outputs cut by the token budget in training: train.overlong_penalty (srpo.rollout.overlong:
a cut output charges its episode, and a transition with its own reward charges its set) and
train.cut_answers: none (a cut output states no answer: out of the vote, scored as ""), by
hand-computed values; evaluation never sees either; bad values are refused with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest
from rollout_helpers import make_tasks, scripted_runner, tok  # noqa: F401 (tok is a fixture)

from srpo.build import build_rollout
from srpo.config import ConfigError, load_config
from srpo.record.evaluate import greedy_runner
from srpo.rollout.overlong import apply_overlong_penalty, check_penalty, cut_share
from srpo.rollout.runner import rollout_metrics
from srpo.types import ActiveSet, Member
from srpo.workflows import Continue, Request, build_workflow

SMOKE = Path(__file__).resolve().parents[2] / "srpo" / "presets" / "smoke.yaml"

# The byte tokenizer makes one token a character, so with max_new_tokens=16 the checker's
# 40-character reply is cut at 16 tokens ("4 is my answer a", no eos: stop_reason "length");
# its last number is still 4, so every member's answer scores correct.
LONG = "4 is my answer after a long long while.."
SHORT = "\\boxed{4}"


def script(req):
    return LONG if req.agent == "checker" else SHORT


def debate(**params):
    return build_workflow("debate", {"debaters": ["debater", "checker", "debater"], "rounds": 1,
                                     **params})


def member(stop_reason: str) -> Member:
    return Member("a", "p", [1], [2, 3], [1, 1], stop_reason=stop_reason)


def test_cut_share_counts_length_stops_only():
    assert cut_share([member("length"), member("eos"), member("stop"), member("length")]) == 0.5
    assert cut_share([member("eos")]) == 0.0
    with pytest.raises(ValueError, match="at least one output"):
        cut_share([])


def test_episode_reward_charged_for_its_cut_share(tok):
    runner, _ = scripted_runner(tok, script, max_new_tokens=16)
    plain = runner.run(make_tasks(2), debate(), group_size=2).episodes
    runner.overlong_penalty = check_penalty(0.6)
    shaped = runner.run(make_tasks(2), debate(), group_size=2).episodes
    for p, s in zip(plain, shaped):
        stops = [m.stop_reason for m in s.transitions[0].members]
        assert stops == ["eos", "length", "eos"]
        # correct 1.0 + format 0.1 (scripted_runner's MathReward), no overlong component
        assert p.reward_components == pytest.approx({"correct": 1.0, "format": 0.1})
        # -0.6 * 1/3 = -0.2; 1.1 - 0.2 = 0.9
        assert s.reward_components == pytest.approx({"correct": 1.0, "format": 0.1,
                                                     "overlong": -0.2})
        assert s.reward == pytest.approx(0.9)
        assert s.set_returns() == pytest.approx([0.9])


def test_transition_with_its_own_reward_is_charged_for_its_members(tok):
    runner, _ = scripted_runner(tok, script, max_new_tokens=16, overlong_penalty=0.6)
    ep = runner.run(make_tasks(1), debate(credit="debaters"), group_size=1).episodes[0]
    # credit "debaters": mean of the 3 members' own rewards = 1.1; one of 3 cut: 1.1 - 0.2
    assert ep.transitions[0].reward == pytest.approx(0.9)
    assert ep.metadata["debaters_credit_r1"] == pytest.approx(1.1)  # the workflow's own credit
    assert ep.reward_components["overlong"] == pytest.approx(-0.2)


def test_apply_charges_every_transition_by_its_own_share():
    sets = [ActiveSet((member("length"), member("length")), "round-1", "t", 0, reward=1.0),
            ActiveSet((member("eos"), member("length")), "round-2", "t", 1, reward=None)]
    out = apply_overlong_penalty({"correct": 1.0}, sets, 0.4)
    # 3 of 4 outputs cut: -0.4 * 0.75 = -0.3; round-1 (2 of 2 cut): 1.0 - 0.4 = 0.6
    assert out == pytest.approx({"correct": 1.0, "overlong": -0.3})
    assert sets[0].reward == pytest.approx(0.6) and sets[1].reward is None
    with pytest.raises(ValueError, match="already has a component named 'overlong'"):
        apply_overlong_penalty({"overlong": 1.0}, sets, 0.4)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), True, "0.5"])
def test_runner_refuses_a_bad_penalty(tok, bad):
    with pytest.raises((ValueError, TypeError), match="overlong penalty"):
        scripted_runner(tok, script, overlong_penalty=bad)


@pytest.mark.parametrize("value,match", [("-1", ">= 0"), (".inf", "finite"), (".nan", "finite")])
def test_config_refuses_a_bad_penalty(value, match):
    with pytest.raises(ConfigError, match=f"train.overlong_penalty.*{match}"):
        load_config(SMOKE, [f"train.overlong_penalty={value}"])


def test_training_runner_gets_it_evaluation_does_not():
    runner, _ = build_rollout(load_config(SMOKE, ["train.overlong_penalty=0.5"]))
    assert runner.overlong_penalty == 0.5
    evaluator = greedy_runner(runner, seed=0)
    assert evaluator.overlong_penalty == 0.0
    assert evaluator.answer_key is runner.answer_key  # majority votes read answers, as in training
    assert build_rollout(load_config(SMOKE))[0].overlong_penalty == 0.0


# ----------------------------------------------------------------- train.cut_answers: none


def wrong_debater(req):
    """The checker is cut at 16 tokens with 4 (right) as its last number; the debater finishes
    with a wrong boxed 5."""
    return LONG if req.agent == "checker" else "\\boxed{5}"


def test_cut_outputs_do_not_vote_and_score_as_no_answer(tok):
    wf = build_workflow("debate", {"debaters": ["checker", "checker", "debater"], "rounds": 1})
    scored, _ = scripted_runner(tok, wrong_debater, max_new_tokens=16)
    ep = scored.run(make_tasks(1), wf).episodes[0]
    # "score": the two cut checkers outvote the debater; the winner's cut text reads 4: 1.0 + 0.1
    assert [m.stop_reason for m in ep.transitions[0].members] == ["length", "length", "eos"]
    assert ep.metadata["votes"] == 2 and ep.reward == pytest.approx(1.1)
    silent, _ = scripted_runner(tok, wrong_debater, max_new_tokens=16, cut_answers="none")
    ep = silent.run(make_tasks(1), wf).episodes[0]
    # "none": only the debater votes; boxed 5 is wrong but formatted: 0.0 + 0.1
    assert ep.metadata["votes"] == 1 and ep.metadata["extracted_answer"] == "5"
    assert ep.reward_components == pytest.approx({"correct": 0.0, "format": 0.1})
    # the vote read the debater only: the set is {debater}; each cut checker is a singleton of
    # its own, credited the unconsumed reward (0), and keeps what it generated
    sets = [(s.event, s.agents, s.reward) for s in ep.transitions]
    assert sets == [("round-1", ("debater",), None), ("round-1:unconsumed", ("checker",), 0.0),
                    ("round-1:unconsumed", ("checker",), 0.0)]
    assert ep.transitions[1].members[0].text == LONG[:16]
    assert ep.set_returns() == pytest.approx([0.1, 0.0, 0.0])


def test_all_cut_scores_nothing(tok):
    wf = build_workflow("debate", {"debaters": ["checker"] * 3, "rounds": 1})
    runner, _ = scripted_runner(tok, wrong_debater, max_new_tokens=16, cut_answers="none")
    ep = runner.run(make_tasks(1), wf).episodes[0]
    assert ep.metadata["votes"] == 0 and ep.metadata["extracted_answer"] is None
    assert ep.reward_components == {"correct": 0.0, "format": 0.0}
    # per-member credit: each cut member's own answer is "" too
    wf = build_workflow("debate", {"debaters": ["checker", "debater", "debater"], "rounds": 1,
                                   "credit": "debaters"})
    ep = runner.run(make_tasks(1), wf).episodes[0]
    # the set is the two debaters the vote read: (0.1 + 0.1) / 2; the cut checker is a singleton
    assert ep.transitions[0].agents == ("debater", "debater")
    assert ep.transitions[0].reward == pytest.approx((0.1 + 0.1) / 2)
    assert [(s.agents, s.reward) for s in ep.transitions[1:]] == [(("checker",), 0.0)]
    # every member cut: the vote read nothing, so the episode has the 3 singletons only
    wf = build_workflow("debate", {"debaters": ["checker"] * 3, "rounds": 1, "credit": "debaters"})
    ep = runner.run(make_tasks(1), wf).episodes[0]
    assert [(s.size, s.unconsumed_from) for s in ep.transitions] == [(1, "round-1")] * 3


class CutThenFinish:
    """One solver output: its first generation is cut, an observation is appended and its
    continuation finishes; the flag is read after each generation."""

    name = "cut-then-finish"
    description = "a continued output (test)"
    agents = ("solver",)

    def __init__(self):
        self.seen: list[bool] = []

    def run(self, task, ctx):
        out = yield Request("solver", task.prompt)
        self.seen.append(out.no_answer)
        ctx.observe(out, " <tool>ok</tool> ")
        out = yield Continue(out)
        self.seen.append(out.no_answer)
        ctx.transition("solve", [out])
        return ctx.score(out)


def test_no_answer_follows_the_latest_generation(tok):
    def reply(req):
        seen = tok.decode(list(req.prompt_ids))
        return "\\boxed{4}" if "<tool>" in seen else LONG

    runner, _ = scripted_runner(tok, reply, max_new_tokens=16, cut_answers="none")
    wf = CutThenFinish()
    ep = runner.run(make_tasks(1), wf).episodes[0]
    assert wf.seen == [True, False]
    assert ep.reward_components == pytest.approx({"correct": 1.0, "format": 0.1})


def test_cut_answers_setting_is_checked_and_kept_out_of_evaluation():
    with pytest.raises(ConfigError, match=r"train.cut_answers must be one of \['score', 'none'\]"):
        load_config(SMOKE, ["train.cut_answers=drop"])
    runner, _ = build_rollout(load_config(SMOKE, ["train.cut_answers=none"]))
    assert runner.cut_answers == "none"
    assert greedy_runner(runner, seed=0).cut_answers == "score"
    assert build_rollout(load_config(SMOKE))[0].cut_answers == "score"
    with pytest.raises(ValueError, match="cut_answers must be one of"):
        type(runner)(runner.agents, runner.backend, runner.reward_fn, cut_answers="drop")


def test_own_credit_gives_each_answer_its_own_set_and_reward(tok):
    """debate credit "own" (per-output credit): each read answer is a set of 1 credited its own
    reward; the cut one is a singleton credited the unconsumed reward; the episode keeps the vote."""
    wf = build_workflow("debate", {"debaters": ["checker", "debater", "debater"], "rounds": 1,
                                   "credit": "own"})
    runner, _ = scripted_runner(tok, wrong_debater, max_new_tokens=16, cut_answers="none")
    ep = runner.run(make_tasks(1), wf).episodes[0]
    # checker cut (unread, 0); each debater's boxed 5 is wrong but formatted: 0.0 + 0.1
    assert [(s.event, s.agents, s.reward) for s in ep.transitions] == [
        ("round-1:unconsumed", ("checker",), 0.0), ("round-1", ("debater",), pytest.approx(0.1)),
        ("round-1", ("debater",), pytest.approx(0.1))]
    assert ep.reward == pytest.approx(0.1)  # the vote of the two debaters
    # in_set: the cut answer is a set of its own too, credited its own reward (that of "": 0)
    runner.unconsumed = "in_set"
    ep = runner.run(make_tasks(1), wf).episodes[0]
    assert [(s.event, s.agents, s.reward) for s in ep.transitions] == [
        ("round-1", ("checker",), 0.0), ("round-1", ("debater",), pytest.approx(0.1)),
        ("round-1", ("debater",), pytest.approx(0.1))]
    # two rounds: round 1's answers are each a set too (all read by round 2)
    wf = build_workflow("debate", {"debaters": ["debater", "debater"], "rounds": 2, "credit": "own"})
    ep = runner.run(make_tasks(1), wf).episodes[0]
    assert [(s.event, s.size) for s in ep.transitions] == [("round-1", 1)] * 2 + [("round-2", 1)] * 2


def test_in_set_keeps_the_sets_and_credits_srpo_had_before_consumed_sets(tok):
    """train.unconsumed: in_set (the default) gives exactly the old sets: every answer in the
    vote's set, in generation order, and a per-debater credit over all of them."""
    wf = build_workflow("debate", {"debaters": ["checker", "debater", "debater"], "rounds": 1,
                                   "credit": "debaters"})
    runner, _ = scripted_runner(tok, wrong_debater, max_new_tokens=16, cut_answers="none",
                                unconsumed="in_set")
    ep = runner.run(make_tasks(1), wf).episodes[0]
    assert [(s.event, s.agents) for s in ep.transitions] == [("round-1", ("checker", "debater", "debater"))]
    assert ep.transitions[0].reward == pytest.approx((0.0 + 0.1 + 0.1) / 3)
    assert rollout_metrics([ep])["members/unconsumed_share"] == 0.0
    # and it is the default of the runner and of the config
    assert type(runner)(runner.agents, runner.backend, runner.reward_fn).unconsumed == "in_set"
    assert load_config(SMOKE).train.unconsumed == "in_set"
