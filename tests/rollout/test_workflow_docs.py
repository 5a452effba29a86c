"""The one-file workflow of docs/workflows.md, taken verbatim from the docs: it runs by import
path (no registration), from Python and from the command line."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
from rollout_helpers import make_tasks, scripted_runner, tok  # noqa: F401 (fixtures)

from srpo.cli.rollout import add_rollout_commands
from srpo.workflows import build_workflow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def critic_loop_file(tmp_path) -> str:
    text = (ROOT / "docs" / "workflows.md").read_text()
    section = text.split("## Writing a workflow in one file", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    path = tmp_path / "critic_loop.py"
    path.write_text(code)
    return f"{path}:CriticLoop"


def test_docs_workflow_records_its_sets(tok, critic_loop_file):
    # t0: approved at once; t1: never approved (2 reviews, then the final revision)
    def script(req):
        if req.agent == "verifier":
            return "APPROVED" if "0 + 4" in req.messages[-1]["content"] else "wrong, redo"
        return "\\boxed{4}"

    runner, _ = scripted_runner(tok, script)
    wf = build_workflow(critic_loop_file, {"max_turns": 2})
    eps = runner.run(make_tasks(2), wf, group_size=2).episodes
    assert [s.event for s in eps[0].transitions] == ["solve-0", "review-0"]
    assert [s.event for s in eps[2].transitions] == [
        "solve-0", "review-0", "solve-1", "review-1", "final"]
    assert [s.agents for s in eps[2].transitions] == [
        ("solver",), ("verifier",), ("solver",), ("verifier",), ("solver",)]
    assert all(e.reward == pytest.approx(1.1) for e in eps)


def test_docs_workflow_from_the_command_line(tmp_path, critic_loop_file, capsys):
    parser = argparse.ArgumentParser(prog="srpo")
    add_rollout_commands(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "eps.jsonl"
    smoke = str(ROOT / "srpo" / "presets" / "smoke.yaml")
    args = parser.parse_args(["rollout", smoke, "sampling.max_new_tokens=3", "group_size=1",
                              "--workflow", critic_loop_file, "--n", "1", "--out", str(out)])
    assert args.handler(args) == 0
    (ep,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert ep["workflow"] == "critic_loop"
    assert [t["event"] for t in ep["transitions"]][:2] == ["solve-0", "review-0"]


def test_bad_import_paths():
    with pytest.raises(ValueError, match="cannot import 'no/such/file.py'"):
        build_workflow("no/such/file.py:X")
    with pytest.raises(ValueError, match="cannot import 'no_such_module_xyz'"):
        build_workflow("no_such_module_xyz:X")
    with pytest.raises(ValueError, match="'srpo.workflows' has no attribute 'Nope'"):
        build_workflow("srpo.workflows:Nope")
    wf = build_workflow("srpo.workflows:ParallelAggregate", {"k": 2})
    assert wf.k == 2


def _doc_blocks(lang: str) -> list[str]:
    text = (ROOT / "docs" / "workflows.md").read_text()
    section = text.split("### Declaring a new agent (role) in a config", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


def test_the_docs_agent_config_and_its_scripted_test_run(tmp_path, critic_loop_file, monkeypatch):
    """The docs' config (a new role, `critic`) and the test they tell users to copy, verbatim."""
    (config,) = _doc_blocks("yaml")
    # the test to copy is the section's Python block that defines tests (others are snippets)
    (user_test,) = [b for b in _doc_blocks("python") if "\ndef test_" in "\n" + b]
    monkeypatch.chdir(tmp_path)  # the config names critic_loop.py relative to here
    (tmp_path / "critic_loop.yaml").write_text(config)
    namespace: dict = {}
    exec(compile(user_test, "test_critic_loop.py", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert tests
    for test in tests:
        test()


def test_a_role_added_on_the_command_line_and_an_undeclared_one(tmp_path, critic_loop_file):
    from srpo.build import build_agents, build_workflow_from
    from srpo.config import load_config

    smoke = ROOT / "srpo" / "presets" / "smoke.yaml"
    cfg = load_config(smoke, [f"workflow.name={critic_loop_file}", "workflow.params={reviewer: critic}",
                              "agents.critic.system_prompt=You review answers."])
    agents = build_agents(cfg)
    assert agents["critic"].system_prompt == "You review answers." and "solver" in agents  # built-ins kept
    assert build_workflow_from(cfg).agents == ("solver", "critic")
    from srpo.build import build_rollout

    bad = load_config(smoke, [f"workflow.name={critic_loop_file}", "workflow.params={reviewer: nobody}"])
    with pytest.raises(ValueError, match=r"needs agent\(s\) \['nobody'\]"):
        build_rollout(bad)
