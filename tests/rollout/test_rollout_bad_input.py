"""Bad input gets a clear, tested outcome: unknown names, unparsable router output, a raising
reward, empty generations, broken workflows."""

from __future__ import annotations

import pytest
from rollout_helpers import make_agents, make_tasks, scripted_runner, tok  # noqa: F401 (fixtures)

from srpo.batch import build_flat_batch
from srpo.rollout import (
    AgentSpec,
    Generation,
    PolicySet,
    RolloutRunner,
    SamplingParams,
    ScriptedBackend,
    rollout_metrics,
)
from srpo.tasks.math import MathReward
from srpo.types import Task
from srpo.workflows import (
    Request,
    RewardFailure,
    RouteError,
    build_workflow,
    parse_route,
)

# ----------------------------------------------------------------- unknown names


def test_unknown_workflow_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown workflow 'paralel'; did you mean 'parallel'\? "
                                         r"known workflows: \[.*'parallel'"):
        build_workflow("paralel")


def test_unknown_workflow_param_is_named():
    with pytest.raises(ValueError, match=r"workflow 'parallel' has no parameter\(s\) \['kk'\]"):
        build_workflow("parallel", {"kk": 3})


def test_unknown_agent_of_a_workflow_fails_before_generating(tok):
    runner, backend = scripted_runner(tok)
    wf = build_workflow("parallel", {"aggregator": "judge"})
    with pytest.raises(ValueError, match=r"workflow 'parallel': unknown agent\(s\) \['judge'\]; known agents: \["):
        runner.run(make_tasks(1), wf)
    assert backend.calls == []


def test_unknown_agent_requested_at_run_time(tok):
    class Sneaky:
        name, description, agents = "sneaky", "asks an agent it did not declare", ("solver",)

        def run(self, task, ctx):
            out = yield Request("ghost", "hi")
            ctx.transition("x", [out])
            return ctx.score(out)

    runner, _ = scripted_runner(tok)
    with pytest.raises(ValueError, match=r"workflow 'sneaky', task 't0'.*unknown agent\(s\) \['ghost'\]"):
        runner.run(make_tasks(1), Sneaky())


def test_a_configured_agent_the_workflow_does_not_declare_is_refused(tok):
    """docs/workflows.md: a workflow's `agents` are the roles it may ask (checked against the
    config before it runs); asking another configured role is an error, not a silent run."""
    class Undeclared:
        name, description, agents = "undeclared", "asks a configured role it did not declare", ("solver",)

        def run(self, task, ctx):
            out = yield Request("verifier", "hi")
            ctx.transition("x", [out])
            return ctx.score(out)

    runner, _ = scripted_runner(tok)
    with pytest.raises(ValueError, match=r"workflow 'undeclared', task 't0'.*agent 'verifier'.*does not "
                                         r"declare in its `agents` \['solver'\]"):
        runner.run(make_tasks(1), Undeclared())
    with pytest.raises(ValueError, match=r"agent 'verifier'.*does not declare"):
        runner.start_episode(make_tasks(1)[0], Undeclared())  # the first round is asked at once


def test_unknown_policy_names_agent_and_known_policies(tok):
    backend = ScriptedBackend(PolicySet.scripted(tok, ["shared"]), {})
    agents = [AgentSpec("solver", policy="lora_solver")]
    with pytest.raises(ValueError, match=r"'solver' -> 'lora_solver'; known policies: \['shared'\]"):
        RolloutRunner(agents, backend, MathReward())


def test_policy_set_lookup_names_known_policies(tok):
    with pytest.raises(ValueError, match=r"unknown policy 'b'; known policies: \['a'\]"):
        PolicySet.scripted(tok, ["a"])["b"]


def test_bad_sampling_and_template():
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0)
    with pytest.raises(ValueError, match=r"unknown sampling setting\(s\) \['temp'\]"):
        SamplingParams().replace(temp=1.0)
    with pytest.raises(ValueError, match=r"agent 'a': bad template .*it may use \['input'\]"):
        AgentSpec("a", template="{question}")


# ----------------------------------------------------------------- router


@pytest.mark.parametrize(
    "reply,why",
    [
        ("", "empty reply"),
        ("   ", "empty reply"),
        ("Algebra_expert", "unknown expert"),
        ("algebra_expert checker", "unknown expert"),
        ("algebra_expert,", "unknown expert"),
        ("I pick algebra_expert", "unknown expert"),
        ("checker, checker", "named twice"),
        ("checker, algebra_expert, arithmetic_expert", "3 experts chosen, allowed 1..2"),
    ],
)
def test_parse_route_is_strict(reply, why):
    experts = ["arithmetic_expert", "algebra_expert", "checker"]
    with pytest.raises(RouteError, match=why):
        parse_route(reply, experts, 1, 2)


def test_parse_route_accepts_exact_lists():
    experts = ["arithmetic_expert", "algebra_expert", "checker"]
    assert parse_route(" checker ,algebra_expert\n", experts, 1, 3) == ["checker", "algebra_expert"]


def test_invalid_router_choice_falls_back_with_a_penalty(tok):
    # t0: a valid choice; t1: garbage -> fallback "first" = [arithmetic_expert], penalty 0.5
    def script(req):
        if req.agent == "router":
            return "checker" if "0 + 4" in req.messages[-1]["content"] else "ask the checker!"
        return "\\boxed{4}"

    runner, _ = scripted_runner(tok, script)
    eps = runner.run(make_tasks(2), build_workflow("routed", {"penalty": 0.5}), group_size=2).episodes
    ok, bad = eps[0], eps[2]
    assert ok.metadata["route_invalid"] == 0 and ok.reward_components["route_penalty"] == 0.0
    assert bad.metadata["route_invalid"] == 1
    assert "unknown expert" in bad.metadata["route_error"]
    assert bad.metadata["route"] == ["arithmetic_expert"]
    assert bad.transitions[1].agents == ("arithmetic_expert",)
    # correct (1.0) + format (0.1) - penalty (0.5) = 0.6
    assert bad.reward_components == pytest.approx({"correct": 1.0, "format": 0.1, "route_penalty": -0.5})
    assert bad.reward == pytest.approx(0.6)
    m = rollout_metrics(eps)
    assert m["episode/route_invalid"] == 0.5  # 2 invalid of 4 routed episodes


def test_router_fallback_all_and_list(tok):
    runner, _ = scripted_runner(tok, lambda r: "???" if r.agent == "router" else "\\boxed{4}")
    (ep,) = runner.run(make_tasks(1), build_workflow("routed", {"fallback": "all"})).episodes
    assert ep.transitions[1].size == 3
    (ep,) = runner.run(make_tasks(1), build_workflow("routed", {"fallback": ["checker"]})).episodes
    assert ep.transitions[1].agents == ("checker",)
    with pytest.raises(ValueError, match="fallback"):
        build_workflow("routed", {"fallback": ["nobody"]})
    with pytest.raises(ValueError, match="min_experts"):
        build_workflow("routed", {"min_experts": 3, "max_experts": 2})


def test_a_fixed_route_asks_no_router(tok):
    asked = []

    def script(req):
        asked.append(req.agent)
        return "\\boxed{4}"

    runner, _ = scripted_runner(tok, script)
    (ep,) = runner.run(make_tasks(1), build_workflow("routed", {"fixed_route": ["checker", "algebra_expert"]})).episodes
    assert "router" not in asked and [t.event for t in ep.transitions] == ["experts"]
    assert ep.transitions[0].agents == ("checker", "algebra_expert")
    assert ep.metadata["route"] == ["checker", "algebra_expert"] and ep.metadata["route_invalid"] == 0
    assert ep.reward_components["route_penalty"] == 0.0
    # by kind: the task's kind picks the route; a kind with no route is an error naming both
    by_kind = build_workflow("routed", {"fixed_route": {"a": ["checker"], "b": ["arithmetic_expert"]}})
    tasks = [Task(task_id=f"k{k}", prompt="What is 2 + 2?", answer="4", metadata={"kind": k}) for k in "ab"]
    eps = runner.run(tasks, by_kind).episodes
    assert [e.transitions[0].agents for e in eps] == [("checker",), ("arithmetic_expert",)]
    with pytest.raises(ValueError, match=r"no route for task 'kc' of kind 'c'; it routes the kinds \['a', 'b'\]"):
        runner.run([Task(task_id="kc", prompt="x", answer="4", metadata={"kind": "c"})], by_kind)
    for bad in (["nobody"], [], "checker", ["checker", "checker"], {"a": ["nobody"]}):
        with pytest.raises(ValueError, match="routed.fixed_route"):
            build_workflow("routed", {"fixed_route": bad})


# ----------------------------------------------------------------- rewards


def test_raising_reward_names_task_and_agent(tok):
    def reward(task, text):
        raise ZeroDivisionError("boom")

    runner, _ = scripted_runner(tok, reward=reward)
    with pytest.raises(RewardFailure, match=r"task 't0' \(answer of agent 'aggregator', workflow 'parallel'\): "
                                            r"ZeroDivisionError: boom"):
        runner.run(make_tasks(1), build_workflow("parallel"))


def test_math_reward_error_is_not_a_silent_zero(tok):
    runner, _ = scripted_runner(tok)
    task = Task("no-gold", "What is 1+1?", answer=None)
    with pytest.raises(RewardFailure, match=r"task 'no-gold' \(answer of agent 'solver'.*no gold answer"):
        runner.run([task], build_workflow("single"))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "1.0", None])
def test_non_finite_or_non_numeric_reward_is_an_error(tok, value):
    runner, _ = scripted_runner(tok, reward=lambda task, text: value)
    with pytest.raises(RewardFailure, match="task 't0'"):
        runner.run(make_tasks(1), build_workflow("single"))


def test_plain_number_and_mapping_rewards(tok):
    runner, _ = scripted_runner(tok, reward=lambda task, text: 0.25)
    (ep,) = runner.run(make_tasks(1), build_workflow("single")).episodes
    assert ep.reward == 0.25 and ep.reward_components == {"reward": 0.25}
    runner, _ = scripted_runner(tok, reward=lambda task, text: {"a": 1, "b": -0.5})
    (ep,) = runner.run(make_tasks(1), build_workflow("single")).episodes
    assert ep.reward == 0.5 and ep.reward_components == {"a": 1.0, "b": -0.5}


# ----------------------------------------------------------------- empty generations


def test_empty_generation_is_one_eos_token_and_the_reward_decides(tok):
    runner, _ = scripted_runner(tok, lambda r: "")
    (ep,) = runner.run(make_tasks(1), build_workflow("single")).episodes
    (m,) = ep.transitions[0].members
    assert m.response_ids == [tok.eos_token_id] and m.loss_mask == [1]
    assert m.text == "" and m.stop_reason == "eos"
    assert ep.reward == 0.0 and ep.metadata["extracted_answer"] is None
    assert rollout_metrics([ep])["members/empty"] == 1
    batch = build_flat_batch([ep], pad_token_id=tok.pad_token_id)  # trainable: 1 token
    assert batch.response_mask.sum() == 1


def test_backend_returning_zero_tokens_names_the_agent(tok):
    runner, _ = scripted_runner(tok, lambda r: [] if r.agent == "aggregator" else "\\boxed{4}")
    with pytest.raises(ValueError, match=r"agent 'aggregator' \(policy 'shared'\): the backend returned zero tokens"):
        runner.run(make_tasks(1), build_workflow("parallel"))


def test_length_stop_has_no_eos(tok):
    runner, _ = scripted_runner(tok, lambda r: "x" * 50, max_new_tokens=8)
    (ep,) = runner.run(make_tasks(1), build_workflow("single")).episodes
    (m,) = ep.transitions[0].members
    assert len(m.response_ids) == 8 and tok.eos_token_id not in m.response_ids
    assert m.stop_reason == "length"


def test_malformed_backend_generation(tok):
    class Bad(ScriptedBackend):
        def generate(self, policy, requests):
            return [Generation([5, 6], [0.0], "eos") for _ in requests]

    backend = Bad(PolicySet.scripted(tok), {})
    runner = RolloutRunner(make_agents(), backend, MathReward())
    with pytest.raises(ValueError, match="stop_reason 'eos' but the last token is not eos"):
        runner.run(make_tasks(1), build_workflow("single"))


# ----------------------------------------------------------------- broken workflows


class _Custom:
    name, description, agents = "custom", "test workflow", ("solver",)

    def __init__(self, body):
        self.body = body

    def run(self, task, ctx):
        return (yield from self.body(task, ctx))


def test_unconsumed_output_is_an_error_naming_the_agent(tok):
    def body(task, ctx):
        a, b = yield [Request("solver", "q"), Request("solver", "q")]
        ctx.transition("solve", [a])
        return ctx.score(a)

    runner, _ = scripted_runner(tok)
    with pytest.raises(ValueError, match=r"workflow 'custom'.*output #1 of agent 'solver' was never consumed"):
        runner.run(make_tasks(1), _Custom(body))


def test_output_consumed_twice_is_an_error(tok):
    def body(task, ctx):
        a = yield Request("solver", "q")
        ctx.transition("solve", [a])
        ctx.transition("again", [a])
        return ctx.score(a)

    runner, _ = scripted_runner(tok)
    with pytest.raises(ValueError, match=r"output of agent 'solver' was already consumed by event 'solve'") as info:
        runner.run(make_tasks(1), _Custom(body))
    assert any("workflow 'custom', task 't0'" in n for n in getattr(info.value, "__notes__", []))


def _yields_empty_list(task, ctx):
    yield []


def _yields_a_string(task, ctx):
    yield "solver"


def _returns_nothing(task, ctx):
    out = yield ("solver", "q")
    ctx.transition("answer", [out])


@pytest.mark.parametrize(
    "body,match",
    [
        (_yields_empty_list, "yielded an empty list"),
        (_yields_a_string, "yielded str; yield a Request"),
        (_returns_nothing, "returned no reward"),
    ],
)
def test_malformed_workflows(tok, body, match):
    runner, _ = scripted_runner(tok)
    with pytest.raises((ValueError, TypeError), match=match):
        runner.run(make_tasks(1), _Custom(body))


def test_empty_transition_and_duplicate_tasks(tok):
    def body(task, ctx):
        a = yield Request("solver", "q")
        ctx.transition("solve", [])
        return ctx.score(a)

    runner, _ = scripted_runner(tok)
    with pytest.raises(ValueError, match="must consume at least one output"):
        runner.run(make_tasks(1), _Custom(body))
    with pytest.raises(ValueError, match="duplicate task ids"):
        runner.run(make_tasks(1) * 2, build_workflow("single"))
    with pytest.raises(ValueError, match="group_size"):
        runner.run(make_tasks(1), build_workflow("single"), group_size=0)
