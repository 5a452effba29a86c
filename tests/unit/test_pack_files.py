"""A task pack or workflow given by file imports the modules beside it (`import helper`), from a
config in another folder loaded from a third working directory, and leaves sys.path as it was."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from srpo.build import load_tasks
from srpo.config import ConfigError, load_config
from srpo.workflows import build_workflow

PACK = textwrap.dedent('''
    from srpo.packs import TaskPack
    from srpo.types import Task

    import {helper}


    def load_tasks(cfg, split, size):
        return [Task(task_id=f"words/{{split}}/{{i}}", prompt=w, answer=w)
                for i, w in enumerate({helper}.WORDS[:size])]


    PACK = TaskPack(name="words", description="repeat a word", load_tasks=load_tasks,
                    make_reward=lambda cfg: {helper}.reward)
''')
HELPER = textwrap.dedent('''
    WORDS = ["apple", "river", "stone", "cloud"]


    def reward(task, text):
        return float(text.strip() == task.answer)
''')
WORKFLOW = textwrap.dedent('''
    from srpo.workflows.base import Request

    from {helper} import ROLE


    class Echo:
        name, description, agents = "echo", "one agent, named by the helper", (ROLE,)

        def run(self, task, ctx):
            out = yield Request(ROLE, task.prompt)
            return ctx.score(task, out.text)
''')


@pytest.fixture
def layout(tmp_path, monkeypatch, request):
    """tmp/code/ (the pack or workflow and its helper), tmp/configs/ (the config naming them by a
    path relative to itself), tmp/elsewhere/ (the working directory). The helper's module name
    is unique to the test, and forgotten after it (sys.modules keeps what a file imported)."""
    helper = f"srpo_test_helper_{request.node.name.replace('[', '_').replace(']', '')}"
    for folder in ("code", "configs", "elsewhere"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    yield tmp_path, helper
    sys.modules.pop(helper, None)


def test_a_pack_file_imports_a_module_beside_it(layout):
    root, helper = layout
    (root / "code" / "words_pack.py").write_text(PACK.format(helper=helper))
    (root / "code" / f"{helper}.py").write_text(HELPER)
    (root / "configs" / "words.yaml").write_text(
        "task: {name: ../code/words_pack.py:PACK, train_size: 2, heldout_size: 2}\n"
        "train: {tasks_per_step: 1}\nworkflow: {name: single}\n")
    path_before = list(sys.path)
    cfg = load_config(str(root / "configs" / "words.yaml"))
    assert sys.path == path_before  # the pack's folder was on it only while the file ran
    assert cfg.task.name == f"{root / 'code' / 'words_pack.py'}:PACK"
    assert [t.answer for t in load_tasks(cfg.task, split="train")] == ["apple", "river"]
    assert Path(sys.modules[helper].__file__) == root / "code" / f"{helper}.py"


def test_a_workflow_file_imports_a_module_beside_it(layout):
    root, helper = layout
    (root / "code" / "echo_flow.py").write_text(WORKFLOW.format(helper=helper))
    (root / "code" / f"{helper}.py").write_text('ROLE = "echoer"\n')
    (root / "configs" / "echo.yaml").write_text("workflow: {name: ../code/echo_flow.py:Echo}\n")
    path_before = list(sys.path)
    cfg = load_config(str(root / "configs" / "echo.yaml"), check_machine=False)
    workflow = build_workflow(cfg.workflow.name, cfg.workflow.params)
    assert sys.path == path_before
    assert workflow.name == "echo" and tuple(workflow.agents) == ("echoer",)


def test_a_pack_file_that_fails_to_import_leaves_sys_path_as_it_was(layout):
    root, helper = layout
    (root / "code" / "broken_pack.py").write_text(PACK.format(helper=helper))  # no helper beside it
    (root / "configs" / "broken.yaml").write_text("task: {name: ../code/broken_pack.py:PACK}\n")
    path_before = list(sys.path)
    with pytest.raises(ConfigError, match=rf"broken_pack\.py.*No module named '{helper}'"):
        load_config(str(root / "configs" / "broken.yaml"))
    assert sys.path == path_before
