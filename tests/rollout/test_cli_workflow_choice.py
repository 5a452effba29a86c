"""Choosing and running a workflow from the command line: another workflow starts from its own
params, `srpo train --workflow`, a workflow file stored resolved, a workflow's error as one line,
and the step line's gradient norm beside the (on-policy ~0) loss."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from srpo.cli import main
from srpo.config import load_config

SMOKE = str(Path(__file__).resolve().parents[2] / "srpo" / "presets" / "smoke.yaml")  # parallel, params {k: 3}
QUIET = ["eval.size=0", "checkpoint.export=false", "checkpoint.plots=false", "checkpoint.report=false",
         "checkpoint.episodes_per_step=0", "train.steps=1"]

FAILING_WORKFLOW = '''
from srpo.workflows.base import Request


class Broken:
    name, description, agents = "broken", "raises on its first answer", ("solver",)

    def run(self, task, ctx):
        out = yield Request("solver", task.prompt)
        return {"score": {"nested": 1}}[out.text]  # a KeyError of the workflow's own
'''


def test_naming_another_workflow_drops_the_files_params_unless_given():
    assert load_config(SMOKE, check_machine=False).workflow.params == {"k": 3}
    cfg = load_config(SMOKE, ["workflow.name=debate"], check_machine=False)
    assert (cfg.workflow.name, cfg.workflow.params) == ("debate", {})
    cfg = load_config(SMOKE, ["workflow.name=debate", "workflow.params.rounds=2"], check_machine=False)
    assert cfg.workflow.params == {"rounds": 2}
    cfg = load_config(SMOKE, ["workflow.name=parallel", "group_size=3"], check_machine=False)
    assert cfg.workflow.params == {"k": 3}  # the same workflow keeps them


def test_train_takes_a_workflow_option(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", SMOKE, "--workflow", "single", f"output_dir={run}", *QUIET]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["workflow"] == {"name": "single", "params": {}}
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("step 1/1")][0]
    assert " loss " in line and " grad " in line and "grad -" not in line


def test_a_workflow_file_is_stored_resolved(tmp_path, monkeypatch):
    (tmp_path / "flows.py").write_text(FAILING_WORKFLOW)
    monkeypatch.chdir(tmp_path)
    cfg = load_config(SMOKE, ["workflow.name=flows.py:Broken"], check_machine=False)
    assert cfg.workflow.name == f"{(tmp_path / 'flows.py').resolve()}:Broken"
    assert cfg.workflow.params == {}


def test_a_workflows_error_is_one_line_and_the_traceback_needs_srpo_debug(tmp_path, monkeypatch, capsys):
    (tmp_path / "flows.py").write_text(FAILING_WORKFLOW)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SRPO_DEBUG", raising=False)
    argv = ["rollout", SMOKE, "--n", "1", "--out", str(tmp_path / "x.jsonl"), "workflow.name=flows.py:Broken"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "KeyError" in err and "workflow 'broken', task" in err and "SRPO_DEBUG=1" in err
    assert main(["train", SMOKE, "workflow.name=flows.py:Broken", f"output_dir={tmp_path / 'run'}", *QUIET]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("srpo train: KeyError") and len(err.splitlines()) == 1
    monkeypatch.setenv("SRPO_DEBUG", "1")
    with pytest.raises(KeyError):
        main(argv)


def test_an_error_of_srpo_itself_keeps_its_traceback():
    from srpo.rollout.runner import workflow_error_line

    assert workflow_error_line(KeyError("internal")) is None
    assert workflow_error_line(ValueError("some other failure")) is None
    err = ValueError("workflow 'x', task 't', rollout 0: yielded an empty list of requests")
    assert workflow_error_line(err) == f"ValueError: {err}"
