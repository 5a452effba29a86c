"""Every built-in workflow with a scripted (deterministic) policy: the recorded active sets match
the workflow's definition (sizes, agents, event keys), rewards are right, batching is per policy
per round, and the episodes feed the objective's batch and advantage grouping unchanged."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from rollout_helpers import default_script, make_tasks, scripted_runner, tok  # noqa: F401 (fixtures)

from srpo.batch import build_flat_batch
from srpo.objective import get_method, prepare_step
from srpo.rollout import rollout_metrics
from srpo.workflows import build_workflow, parse_plan

# MathReward(correct_weight=1.0, format_weight=0.1, format_rule="any") on "\boxed{4}" with gold
# "4": correct = 1 and format = 1 -> components {"correct": 1.0, "format": 0.1}, total 1.1.
FULL = {"correct": 1.0, "format": 0.1}

# (workflow, params, expected [(event, agents)] of each episode)
CASES = [
    ("single", {}, [("answer", ("solver",))]),
    ("pipeline", {}, [("solve", ("solver",)), ("verify", ("verifier",)), ("revise", ("reviser",))]),
    ("parallel", {"k": 3}, [("solve", ("solver",) * 3), ("aggregate", ("aggregator",))]),
    ("parallel", {"solvers": ["arithmetic_expert", "algebra_expert"]},
     [("solve", ("arithmetic_expert", "algebra_expert")), ("aggregate", ("aggregator",))]),
    ("debate", {"debaters": ["debater", "checker", "debater"], "rounds": 3},
     [(f"round-{r}", ("debater", "checker", "debater")) for r in (1, 2, 3)]),
    ("planner", {}, [("plan", ("planner",)), ("work", ("worker", "worker"))]),
    ("planner", {"workers": ["worker"] * 3, "merger": "aggregator"},
     [("plan", ("planner",)), ("work", ("worker",) * 3), ("merge", ("aggregator",))]),
    ("routed", {}, [("route", ("router",)), ("experts", ("algebra_expert", "checker"))]),
    ("routed", {"aggregator": "aggregator"},
     [("route", ("router",)), ("experts", ("algebra_expert", "checker")),
      ("aggregate", ("aggregator",))]),
]


@pytest.mark.parametrize("name,params,expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_active_sets_match_the_workflow(tok, name, params, expected):
    runner, backend = scripted_runner(tok)
    tasks = make_tasks(3)
    result = runner.run(tasks, build_workflow(name, params), group_size=2)
    eps = result.episodes
    assert len(eps) == 6
    # task-major order, G rollouts each, rollout index recorded
    assert [e.task.task_id for e in eps] == ["t0", "t0", "t1", "t1", "t2", "t2"]
    assert [e.metadata["rollout_index"] for e in eps] == [0, 1, 0, 1, 0, 1]
    for e in eps:
        assert e.workflow == name
        assert [(s.event, s.agents) for s in e.transitions] == expected
        assert [s.turn for s in e.transitions] == list(range(len(expected)))
        assert all(s.task_id == e.task.task_id for s in e.transitions)
        comps = dict(FULL, route_penalty=0.0) if name == "routed" else FULL
        assert e.reward_components == pytest.approx(comps)
        assert e.reward == pytest.approx(sum(comps.values()))
        for s in e.transitions:
            for m in s.members:
                assert m.response_ids[-1] == tok.eos_token_id and m.stop_reason == "eos"
                assert m.loss_mask == [1] * len(m.response_ids)
                # prompt = the agent's chat: its system prompt, then the user turn
                prompt = tok.decode(m.prompt_ids)
                assert prompt.startswith(f"<|im_start|>system\nYou are the {m.agent}.<|im_end|>")
                assert prompt.endswith("<|im_start|>assistant\n")
    # one backend call per round (all episodes and roles share the one policy)
    assert result.stats["generate_calls"] == result.stats["rounds"] == _rounds(name, params)


def _rounds(name, params):
    return {"single": 1, "pipeline": 3, "parallel": 2, "debate": params.get("rounds", 2),
            "planner": 2 + bool(params.get("merger")), "routed": 2 + bool(params.get("aggregator"))}[name]


@pytest.mark.parametrize("name,params,expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_one_batched_call_per_policy_per_round(tok, name, params, expected):
    runner, backend = scripted_runner(tok)
    runner.run(make_tasks(3), build_workflow(name, params), group_size=2)
    assert len(backend.calls) == _rounds(name, params)
    for (policy, agents), (_event, set_agents) in zip(backend.calls, expected):
        assert policy == "shared"
        assert Counter(agents) == Counter({a: 6 * n for a, n in Counter(set_agents).items()})


def test_separate_policies_get_one_call_each_per_round(tok):
    policy_of = {"router": "router_policy", "algebra_expert": "math", "checker": "check"}
    runner, backend = scripted_runner(
        tok, policies=("shared", "router_policy", "math", "check"), policy_of=policy_of
    )
    eps = runner.run(make_tasks(2), build_workflow("routed"), group_size=3).episodes
    assert backend.calls == [
        ("router_policy", ["router"] * 6),
        ("math", ["algebra_expert"] * 6),
        ("check", ["checker"] * 6),
    ]
    members = eps[0].transitions[1].members
    assert [(m.agent, m.policy) for m in members] == [("algebra_expert", "math"), ("checker", "check")]


def test_rewards_follow_the_final_answer(tok):
    # parallel: solvers answer 3, 4, 5; the aggregator's answer alone is scored.
    def script(req):
        if req.agent == "aggregator":
            return "\\boxed{5}" if "1 + 4" in req.messages[-1]["content"] else "\\boxed{4}"
        return "\\boxed{3}"

    runner, _ = scripted_runner(tok, script)
    eps = runner.run(make_tasks(2), build_workflow("parallel"), group_size=1).episodes
    assert [e.reward for e in eps] == pytest.approx([1.1, 0.1])  # t1's aggregator says 5: wrong
    assert [e.metadata["extracted_answer"] for e in eps] == ["4", "5"]
    assert eps[0].metadata["answer_agent"] == "aggregator"


def test_debate_scores_the_majority_of_the_last_round(tok):
    # last round: debaters say 7, 4, 4 -> majority 4 (correct); first round all wrong.
    def script(req):
        content = req.messages[-1]["content"]
        if "previous answer" not in content:
            return "\\boxed{9}"
        return "\\boxed{7}" if req.messages[0]["content"] == "You are the checker." else "\\boxed{4}"

    runner, _ = scripted_runner(tok, script)
    wf = build_workflow("debate", {"debaters": ["checker", "debater", "debater"], "rounds": 2})
    (ep,) = runner.run(make_tasks(1), wf).episodes
    assert ep.reward == pytest.approx(1.1)
    assert ep.metadata["votes"] == 2
    texts = [[m.text for m in s.members] for s in ep.transitions]
    assert texts == [["\\boxed{9}"] * 3, ["\\boxed{7}", "\\boxed{4}", "\\boxed{4}"]]


def test_debate_round_prompts_show_the_other_agents(tok):
    seen = []

    def script(req):
        seen.append(req.messages[-1]["content"])
        return f"\\boxed{{{len(seen)}}}"

    runner, _ = scripted_runner(tok, script)
    runner.run(make_tasks(1), build_workflow("debate", {"debaters": ["debater"] * 2, "rounds": 2}))
    # round 2, debater 1 sees its own answer (1) and the other's (2), and vice versa
    assert "Your previous answer:\n\\boxed{1}" in seen[2] and "Agent 2:\n\\boxed{2}" in seen[2]
    assert "Your previous answer:\n\\boxed{2}" in seen[3] and "Agent 1:\n\\boxed{1}" in seen[3]


def test_planner_gives_each_worker_its_subtask_and_falls_back(tok):
    prompts = []

    def script(req):
        if req.agent == "planner":
            return "1. add\n2. check" if "0 + 4" in req.messages[-1]["content"] else "no plan"
        prompts.append(req.messages[-1]["content"])
        return "\\boxed{4}"

    runner, _ = scripted_runner(tok, script)
    eps = runner.run(make_tasks(2), build_workflow("planner")).episodes
    assert "Your subtask: add" in prompts[0] and "Your subtask: check" in prompts[1]
    assert "Your subtask: solve the whole problem" in prompts[2]
    assert [e.metadata["plan_fallback"] for e in eps] == [0, 1]
    assert eps[0].metadata["answer_agent"] == "worker+worker (merged)"
    assert parse_plan("Plan:\n1) a\nStep 2: b\n3. c\nfoo") == ["a", "b", "c"]


def test_routed_set_sizes_follow_the_router(tok):
    # the router picks 1, 2 or 3 experts depending on the task
    choice = {"0": "checker", "1": "algebra_expert, checker",
              "2": "arithmetic_expert, algebra_expert, checker"}

    def script(req):
        if req.agent == "router":
            return choice[req.messages[-1]["content"].split("What is ")[1][0]]
        return "\\boxed{4}"

    runner, _ = scripted_runner(tok, script)
    eps = runner.run(make_tasks(3), build_workflow("routed"), group_size=2).episodes
    sizes = [e.transitions[1].size for e in eps]
    assert sizes == [1, 1, 2, 2, 3, 3]
    assert [e.metadata["route"] for e in eps[::2]] == [
        ["checker"], ["algebra_expert", "checker"], ["arithmetic_expert", "algebra_expert", "checker"]
    ]
    assert all(e.metadata["route_invalid"] == 0 for e in eps)
    # the share routed to each expert: checker acts in all 6 episodes, algebra in 4, arithmetic in 2
    m = rollout_metrics(eps)
    assert (m["episode/routed_to/checker"], m["episode/routed_to/algebra_expert"],
            m["episode/routed_to/arithmetic_expert"]) == pytest.approx((1.0, 4 / 6, 2 / 6))
    batch = build_flat_batch(eps, pad_token_id=tok.pad_token_id)
    assert sorted(set(batch.set_sizes.tolist())) == [1, 2, 3]


def test_mixed_draws_per_task_and_mixes_set_sizes(tok):
    wf = build_workflow("mixed", {"workflows": [
        {"name": "single", "weight": 1.0},
        {"name": "parallel", "weight": 2.0, "params": {"k": 4}},
        {"name": "debate", "weight": 1.0, "params": {"debaters": ["debater"] * 2}},
    ]})
    runner, _ = scripted_runner(tok)
    eps = runner.run(make_tasks(24), wf, group_size=2).episodes
    by_task: dict[str, set[str]] = {}
    for e in eps:
        by_task.setdefault(e.task.task_id, set()).add(e.workflow)
        assert e.metadata["mixed_from"] == "mixed"
    assert all(len(v) == 1 for v in by_task.values())  # G rollouts of a task: one workflow
    counts = Counter(next(iter(v)) for v in by_task.values())
    assert set(counts) == {"single", "parallel", "debate"}
    sizes = Counter(s.size for e in eps for s in e.transitions)
    assert set(sizes) == {1, 2, 4}
    # the draw depends only on (seed, task): the same run again gives the same workflows
    again = scripted_runner(tok)[0].run(make_tasks(24), wf, group_size=2).episodes
    assert [e.workflow for e in again] == [e.workflow for e in eps]
    other_seed = scripted_runner(tok, seed=1)[0].run(make_tasks(24), wf, group_size=2).episodes
    assert [e.workflow for e in other_seed] != [e.workflow for e in eps]


def test_mixed_labels_let_one_workflow_appear_at_several_set_sizes(tok):
    """Debates of 2, 3 and 4 in one mix (each its own label): every episode records its label,
    and its vote's set has that label's size."""
    wf = build_workflow("mixed", {"workflows": [
        {"name": "single"},
        *({"name": "debate", "label": f"debate-{n}", "params": {"debaters": ["debater"] * n, "rounds": 1}}
          for n in (2, 3, 4)),
    ]})
    runner, _ = scripted_runner(tok)
    eps = runner.run(make_tasks(32), wf, group_size=2).episodes
    size_of = {"single": 1, "debate-2": 2, "debate-3": 3, "debate-4": 4}
    assert {e.workflow for e in eps} == set(size_of)
    for e in eps:
        assert [s.size for s in e.transitions] == [size_of[e.workflow]]
    # the labels do not change the draw: four unlabelled components with the same weights pick
    # the same positions
    plain = build_workflow("mixed", {"workflows": [
        {"name": "single"}, {"name": "parallel"}, {"name": "debate"}, {"name": "pipeline"}]})
    position = {"single": 0, "debate-2": 1, "debate-3": 2, "debate-4": 3,
                "parallel": 1, "debate": 2, "pipeline": 3}
    by_task = {e.task.task_id: position[e.workflow] for e in eps}
    plain_eps = scripted_runner(tok)[0].run(make_tasks(32), plain, group_size=2).episodes
    assert {e.task.task_id: position[e.workflow] for e in plain_eps} == by_task


def test_mixed_refuses_a_repeated_or_empty_label():
    with pytest.raises(ValueError, match="distinct names.*label"):
        build_workflow("mixed", {"workflows": [{"name": "debate"}, {"name": "debate"}]})
    with pytest.raises(ValueError, match=r"workflows\[1\]\.label must be a non-empty string"):
        build_workflow("mixed", {"workflows": [{"name": "single"}, {"name": "debate", "label": ""}]})
    with pytest.raises(ValueError, match="unknown key.*use name/weight/params/label"):
        build_workflow("mixed", {"workflows": [{"name": "single", "lable": "x"}]})


def test_episodes_feed_the_objective_unchanged(tok):
    """Mixed set sizes -> FlatBatch -> SRPO's per-set advantages grouped by task (and event)."""
    calls = Counter()

    def script(req):  # alternate right and wrong aggregators, so groups are not degenerate
        calls[req.agent] += 1
        if req.agent == "aggregator":
            return "\\boxed{4}" if calls[req.agent] % 2 else "\\boxed{5}"
        return default_script(req)

    runner, _ = scripted_runner(tok, script, logprob=-0.5)
    eps = runner.run(make_tasks(2), build_workflow("parallel", {"k": 3}), group_size=4).episodes
    batch = build_flat_batch(eps, pad_token_id=tok.pad_token_id)
    assert batch.num_sets == 2 * 4 * 2
    assert batch.set_sizes.tolist() == [3, 1] * 8
    assert batch.set_event[:2] == ("solve", "aggregate")
    assert batch.sampling_logprobs is not None
    assert torch.all(batch.sampling_logprobs[batch.response_mask] == -0.5)
    spec = get_method("srpo", group_keys=("task", "event"))
    prepared, metrics = prepare_step(spec, batch, old_logprobs=batch.sampling_logprobs)
    # rewards alternate 1.1 / 0.1 inside every group of 4 -> advantages +-0.866 (std-scaled)
    adv = prepared.set_advantages  # [S]: SRPO's advantages stay per set
    assert adv is not None and adv.shape == (batch.num_sets,) and torch.all(adv.abs() > 0.5)


@pytest.mark.parametrize("name, params", [("parallel", {"k": 3}), ("debate", {"rounds": 2}),
                                          ("planner", {}), ("routed", {})])
def test_an_episode_driven_request_by_request_equals_the_batched_run(tok, name, params):
    """RolloutRunner.start_episode: the caller generates (e.g. an async server); same records."""
    runner, backend = scripted_runner(tok, seed=3)
    wf = build_workflow(name, params)
    (task,) = make_tasks(1)
    batched = runner.run([task], wf, group_size=1).episodes[0]
    driver = runner.start_episode(task, wf)
    rounds = 0
    while not driver.done:
        rounds += 1
        reqs = driver.requests
        driver.submit(backend.generate(reqs[0].policy, reqs))
    driven = driver.finish()
    assert rounds >= 2
    assert [(s.event, s.agents) for s in driven.transitions] == [(s.event, s.agents) for s in batched.transitions]
    assert [m.response_ids for s in driven.transitions for m in s.members] == \
        [m.response_ids for s in batched.transitions for m in s.members]
    assert driven.reward_components == batched.reward_components
    with pytest.raises(ValueError, match="finished"):
        driver.submit([])
    unfinished = runner.start_episode(task, wf)
    with pytest.raises(ValueError, match="still running"):
        unfinished.finish()
    with pytest.raises(ValueError, match="generations for"):
        unfinished.submit([])


def test_debate_credit_debaters_gives_each_round_its_members_mean_reward(tok):
    # round 1: 9, 9, 4 (one right: credit (0.1 + 0.1 + 1.1) / 3); round 2: 7, 4, 4 (two right:
    # (0.1 + 1.1 + 1.1) / 3). The episode's reward stays the vote of round 2 (4: right, 1.1).
    def script(req):
        content = req.messages[-1]["content"]
        checker = req.messages[0]["content"] == "You are the checker."
        if "previous answer" not in content:
            return "\\boxed{4}" if checker else "\\boxed{9}"
        return "\\boxed{7}" if checker else "\\boxed{4}"

    runner, _ = scripted_runner(tok, script)
    params = {"debaters": ["debater", "debater", "checker"], "rounds": 2, "credit": "debaters"}
    (ep,) = runner.run(make_tasks(1), build_workflow("debate", params)).episodes
    assert ep.reward == pytest.approx(1.1)
    assert [s.reward for s in ep.transitions] == pytest.approx([1.3 / 3, 2.3 / 3])
    assert ep.set_returns() == pytest.approx([1.3 / 3, 2.3 / 3])
    assert ep.metadata["debaters_credit_r1"] == pytest.approx(1.3 / 3)
    assert ep.metadata["extracted_answer"] == "4" and ep.metadata["votes"] == 2
    # the default credits every round with the vote
    (ep,) = runner.run(make_tasks(1), build_workflow("debate", dict(params, credit="episode"))).episodes
    assert [s.reward for s in ep.transitions] == [None, None] and ep.set_returns() == [1.1, 1.1]


def test_debate_credit_must_be_known():
    with pytest.raises(ValueError, match="debate.credit must be one of"):
        build_workflow("debate", {"credit": "vote"})
