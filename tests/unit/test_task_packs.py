"""Task packs: the three built-in ones are found without the core importing them, and a
user's pack in one file (docs/task-packs.md, taken verbatim) loads, runs and trains."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from srpo.build import build_agents, build_rollout, load_tasks
from srpo.config import ConfigError, load_config
from srpo.packs import get_pack, known_pack_names

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def echo_files(tmp_path, monkeypatch):
    text = (ROOT / "docs" / "task-packs.md").read_text()
    section = text.split("## A pack in one file", 1)[1]
    (tmp_path / "echo_pack.py").write_text(re.search(r"```python\n(.*?)```", section, re.S).group(1))
    (tmp_path / "echo.yaml").write_text(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    monkeypatch.chdir(tmp_path)  # the config names the pack file relative to here
    return tmp_path


def test_the_built_in_packs_are_installed():
    assert {"math", "search", "testbed"} <= set(known_pack_names())
    assert get_pack("math").success_component == "correct"
    assert get_pack("search").make_environment is not None
    assert [w.name for w in get_pack("testbed").workflows] == ["cover"]


def test_a_pack_from_a_file_configures_runs_and_scores(echo_files):
    cfg = load_config("echo.yaml")
    assert cfg.task.words == ["apple", "river"]  # the pack's own setting, validated
    assert cfg.task.name == f"{echo_files / 'echo_pack.py'}:ECHO"  # stored resolved
    tasks = load_tasks(cfg.task, split="heldout")
    assert [t.answer for t in tasks] == ["river", "apple", "river", "apple"]
    assert build_agents(cfg)["solver"].system_prompt == "Repeat the word you are given."
    runner, workflow = build_rollout(cfg)
    episodes = runner.run(tasks[:2], workflow, group_size=2).episodes
    assert len(episodes) == 4
    assert all(set(e.reward_components) == {"said"} for e in episodes)


def test_a_pack_from_a_file_trains_and_evaluates_with_its_success_component(echo_files):
    from srpo.train.trainer import Trainer

    cfg = load_config("echo.yaml", ["checkpoint.report=false", "checkpoint.plots=false",
                                    "checkpoint.tensorboard=false", "checkpoint.export=false"])
    result = Trainer(cfg).train()
    assert len(result.history) == 1
    before = json.loads((Path(cfg.output_dir) / "eval" / "before.json").read_text())
    assert len(before["correct"]) == 4  # scored by "said", the pack's success component
    saved = (Path(cfg.output_dir) / "config.yaml").read_text()
    assert "words:" in saved and "echo_pack.py:ECHO" in saved


def test_bad_pack_settings_and_names_are_refused(echo_files):
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['task.colour'\]; known keys of task "
                                          r"\(task pack .*echo_pack.py:ECHO'\): .*'words'"):
        load_config("echo.yaml", ["task.colour=red"])
    with pytest.raises(ConfigError, match=r"task.words\[1\] must be a string"):
        load_config("echo.yaml", ["task.words=[apple, 3]"])
    with pytest.raises(ConfigError, match="echo_pack.py' has no attribute 'NOPE'"):
        load_config("echo.yaml", ["task.name=echo_pack.py:NOPE"])
    with pytest.raises(ConfigError, match="is the class EchoSettings, not a srpo.packs.TaskPack value"):
        load_config("echo.yaml", ["task.name=echo_pack.py:EchoSettings"])
    with pytest.raises(ConfigError, match=r"unknown task pack 'chess'.*known packs: \[.*'math'"):
        load_config("echo.yaml", ["task.name=chess"])


def test_switching_the_pack_on_the_command_line_drops_the_files_settings(echo_files):
    cfg = load_config("echo.yaml", ["task.name=math"])  # `words` belonged to the echo pack
    assert cfg.task.source == "reasoning_gym" and not hasattr(cfg.task, "words")
    cfg = load_config(None, ["task.name=testbed", "task.testbed.set_sizes=[2]"])
    assert cfg.task.testbed.set_sizes == [2]


def test_srpo_packs_lists_the_installed_packs(capsys):
    from srpo.cli import main

    assert main(["packs"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert {"math", "search", "testbed"} <= set(names)
