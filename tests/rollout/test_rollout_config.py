"""Typed config: YAML + key=value overrides, clear errors naming the key; building from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from srpo.build import build_agents, build_policies, build_rollout, load_tasks
from srpo.config import (
    Config,
    ConfigError,
    apply_overrides,
    from_dict,
    load_config,
    parse_override,
    to_dict,
)

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "srpo" / "presets" / "smoke.yaml"
FIXTURES = ROOT / "tests" / "fixtures" / "math"


def test_smoke_preset_loads():
    cfg = load_config(SMOKE)
    assert cfg.model.name == "tiny" and cfg.model.tokenizer == "bytes"
    assert cfg.workflow.name == "parallel" and cfg.workflow.params == {"k": 3}
    assert cfg.sampling.max_new_tokens == 12 and cfg.group_size == 2
    # every agent a built-in workflow uses by default has a default (workflow or task pack)
    from srpo.workflows import build_workflow, list_workflows

    for name, _ in list_workflows():
        wf = build_workflow(name)
        assert set(wf.agents) <= set(build_agents(cfg, wf)), name


def test_overrides_are_typed_and_reach_nested_mappings():
    cfg = load_config(SMOKE, [
        "sampling.temperature=0.7",
        "group_size=3",
        "agents.solver.template=Q: {input} A:",  # string fields take the text verbatim
        "agents.solver.sampling.max_new_tokens=5",
        "agents.critic.system_prompt=You critique.",  # a new role
        "workflow.params={k: 4, aggregator: critic}",
        "rollout.max_batch_size=8",
        "task.path=null",
    ])
    assert cfg.sampling.temperature == 0.7 and cfg.group_size == 3
    assert cfg.agents["solver"].template == "Q: {input} A:"
    assert cfg.agents["critic"].system_prompt == "You critique." and cfg.agents["critic"].policy is None
    assert cfg.workflow.params == {"k": 4, "aggregator": "critic"}
    assert cfg.rollout.max_batch_size == 8
    agents = build_agents(cfg)
    assert agents["critic"].policy == "shared"  # unset: the only policy
    assert agents["solver"].sampling.max_new_tokens == 5 and agents["solver"].sampling.temperature == 0.7
    assert agents["critic"].sampling.max_new_tokens == 12


def test_int_is_accepted_for_float_and_round_trip():
    cfg = load_config(None, ["sampling.temperature=1"])
    assert cfg.sampling.temperature == 1.0 and isinstance(cfg.sampling.temperature, float)
    assert from_dict(Config, to_dict(cfg)) == cfg


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["sampling.tempreature=0.5"], r"unknown key\(s\) \['sampling.tempreature'\]; known keys of sampling"),
        (["modle.name=tiny"], r"unknown key\(s\) \['modle'\]"),
        (["group_size=two"], r"group_size must be an integer, got str 'two'"),
        (["group_size=0"], r"group_size must be > 0"),
        (["sampling.top_k=1.5"], r"sampling.top_k must be an integer"),
        (["rollout.record_logprobs=yes please"], r"rollout.record_logprobs must be true or false"),
        (["agents.solver.policy=ghost"], r"agents.solver.policy: unknown policy 'ghost'"),
        (["agents.solver.sampling.temp=1"], r"agents.solver.sampling: unknown key\(s\) \['temp'\]"),
        (["agents.solver.template={question}"],
         r"agents.solver.template: bad template '\{question\}'.*it may use \['input'\]"),
        (["policies.kind=mixture"], r"policies.kind must be one of"),
        (["policies.names=[a, b]"], r"'shared' takes exactly one policy name"),
        (["task.source=gsm8k"], r"task.source 'gsm8k' needs task.path"),
        (["model.dtype=float64"], r"model.dtype must be one of"),
        (["sampling=3"], r"sampling must be a mapping"),
        (["sampling.temperature.x=1"], r"sampling.temperature is a value, not a section"),
        (["temperature"], r"must look like key=value"),
    ],
)
def test_bad_config_names_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(SMOKE, overrides)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping at top level"):
        load_config(bad)
    bad.write_text("task:\n  reward:\n    strictt: true\n")
    with pytest.raises(ConfigError, match=r"\['task.reward.strictt'\]; known keys of task.reward"):
        load_config(bad)


def test_parse_override_values():
    assert parse_override("a.b=[1, 2]") == (["a", "b"], [1, 2])
    assert parse_override("x=null") == (["x"], None)
    assert parse_override("agents.solver.system_prompt=a: b", Config) == (
        ["agents", "solver", "system_prompt"], "a: b")
    assert apply_overrides({}, ["a.b.c=1"]) == {"a": {"b": {"c": 1}}}


def test_task_loading_from_config():
    cfg = load_config(SMOKE)
    tasks = load_tasks(cfg.task, split="train", limit=3)
    assert len(tasks) == 3 and all(t.source == "reasoning_gym/basic_arithmetic" for t in tasks)
    held = load_tasks(cfg.task, split="heldout", limit=2)
    assert {t.task_id for t in held}.isdisjoint({t.task_id for t in tasks})
    with pytest.raises(ValueError, match=r"asked for 40 train tasks but task.train_size is 32"):
        load_tasks(cfg.task, limit=40)
    gsm = load_config(None, ["task.source=gsm8k", f"task.path={FIXTURES / 'gsm8k.jsonl'}",
                             "task.heldout_size=1"])
    tasks = load_tasks(gsm.task, split="train", limit=2)
    assert [t.answer for t in tasks] == ["6000", "-5"]


def test_policies_from_config():
    pytest.importorskip("peft")
    cfg = load_config(SMOKE, ["policies.kind=lora", "policies.names=[solver_p, agg_p]",
                              "policies.lora.rank=2", "agents.solver.policy=solver_p",
                              "agents.aggregator.policy=agg_p"] +
                      [f"agents.{a}.policy=solver_p" for a in (
                          "verifier", "reviser", "debater", "planner", "worker", "router",
                          "arithmetic_expert", "algebra_expert", "checker", "searcher",
                          "query_writer", "answerer", "player")])
    ps = build_policies(cfg.model, cfg.policies)
    assert ps.kind == "lora" and ps.names == ("solver_p", "agg_p") and len(ps.models()) == 1
    cfg = load_config(SMOKE, ["policies.kind=separate", "policies.names=[a, b]",
                              "policies.models={b: {init_seed: 3}}"] +
                      [f"agents.{a}.policy=a" for a in cfg.agents])
    ps = build_policies(cfg.model, cfg.policies)
    assert len(ps.models()) == 2


def test_build_rollout_checks_workflow_agents():
    cfg = load_config(SMOKE, ["workflow.params={aggregator: judge}"])
    with pytest.raises(ValueError, match=r"workflow 'parallel' needs agent\(s\) \['judge'\]"):
        build_rollout(cfg)
    with pytest.raises(ValueError, match=r"unknown workflow 'nope'"):
        build_rollout(load_config(SMOKE), workflow="nope")
