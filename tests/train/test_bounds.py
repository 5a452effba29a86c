"""Nothing unbounded, nothing silently accepted (issue 55, part 4): what the config fuzz test
cannot see from a config alone, each answered in one line before any work or at the bound.

  * a split larger than its question space stops drawing early (not after hours);
  * rollouts a step that cannot fit this machine's memory are refused before any model;
  * a workflow whose stop condition never holds ends at its round limit, naming it;
  * an export manifest that leaves out a file, or lists no weights, is refused naming it;
  * resume=true with train.steps fewer than the steps done is refused;
  * a workflow file calling sys.exit() at import is an error naming the file (exit 2);
  * a question longer than the model's context is refused before training, naming the task.

`srpo` runs in-process (srpo.cli.main) on the smoke preset.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from srpo.cli import main
from srpo.config import load_config
from srpo.record.checkpoint import CorruptCheckpointError, verify_export
from srpo.rollout import AgentSpec, PolicySet, RolloutRunner, SamplingParams, ScriptedBackend
from srpo.rollout import runner as runner_module
from srpo.tasks.math import MathReward
from srpo.types import Task

# the module (srpo.tasks.math's attribute of that name is its function)
rg_tasks = sys.modules["srpo.tasks.math.reasoning_gym_tasks"]

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "srpo" / "presets" / "smoke.yaml"
GSM8K = ROOT / "tests" / "fixtures" / "math" / "gsm8k.jsonl"
QUIET = ["eval.before=false", "eval.after=false", "checkpoint.plots=false",
         "checkpoint.report=false"]

LOOPING_WORKFLOW = '''
from srpo.workflows.base import Request


class Forever:
    """Asks its solver again and again: its stop condition never holds."""

    name = "forever"
    description = "never returns"
    agents = ("solver",)
    max_rounds = 3

    def run(self, task, ctx):
        while True:
            out = yield Request("solver", task.prompt)
            ctx.transition("solve", [out])
'''


def one_line(capsys, command: str = "srpo train", *, out: list[str] | None = None) -> str:
    """The one line of srpo's answer on stderr (stdout appended to `out`, if given)."""
    captured = capsys.readouterr()
    if out is not None:
        out.append(captured.out)
    lines = [line for line in captured.err.splitlines() if line.startswith("srpo ")]
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith(f"{command}: "), lines[0]
    return lines[0]


# --------------------------------------------------------------------------- task splits


def test_a_split_larger_than_its_question_space_stops_drawing_early(monkeypatch):
    # chain_sum with two 1-digit terms has 200 questions; 100,000 asked would draw 2,000,000
    # items before the rate check, which stops after two windows of draws
    monkeypatch.setattr(rg_tasks, "RATE_WINDOW", 1000)
    config = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    with pytest.raises(ValueError, match=r"only 200 of the 100000 requested questions are usable "
                                         r"after drawing 2000 items.*too small"):
        rg_tasks.reasoning_gym_tasks("chain_sum", size=100_000, seed=0, config=config)
    # a size the space holds is drawn as before
    assert len(rg_tasks.reasoning_gym_tasks("chain_sum", size=150, seed=0, config=config)) == 150


# --------------------------------------------------------------------------- memory


def test_rollouts_that_cannot_fit_in_memory_are_refused_before_any_model(tmp_path, capsys, monkeypatch):
    from srpo.config import loading

    monkeypatch.setattr(loading, "_available_memory", lambda: 100 * 2**20)  # 100 MiB
    # 4 tasks x 100,000 rollouts x 12 tokens x 64 bytes = 0.3 GiB: under the cap, over memory
    code = main(["train", str(SMOKE), f"output_dir={tmp_path / 'run'}", "group_size=100000"])
    assert code == 2
    line = one_line(capsys)
    assert re.search(r"group_size \(100000\) x train\.tasks_per_step \(4\) rollouts of up to 12 "
                     r"tokens .* need at least 0\.3 GiB .* more than the 0\.1 GiB of memory "
                     r"available on this machine", line), line
    assert not (tmp_path / "run").exists()
    monkeypatch.setattr(loading, "_available_memory", lambda: None)  # unknown: not refused
    load_config(SMOKE, [f"output_dir={tmp_path / 'run'}", "group_size=100000"])


# --------------------------------------------------------------------------- round limit


def test_a_workflow_that_never_stops_ends_at_its_round_limit_in_one_line(tmp_path, capsys):
    path = tmp_path / "looping.py"
    path.write_text(LOOPING_WORKFLOW)
    code = main(["train", str(SMOKE), f"output_dir={tmp_path / 'run'}", "train.steps=1",
                 "eval.size=1", f"workflow.name={path}:Forever", "workflow.params={}"])
    assert code == 1  # a workflow's error, as any other one it raises
    line = one_line(capsys)
    assert re.search(r"workflow 'forever' did not finish within 3 generation rounds \(task "
                     r"'rg/.*', rollout 0\): its stop condition never held", line), line


def test_the_default_round_limit_holds_for_a_workflow_without_its_own(tok):
    class Forever:
        name, description, agents = "forever", "never returns", ("solver",)

        def run(self, task, ctx):
            while True:
                ctx.transition("solve", [(yield ("solver", task.prompt))])

    backend = ScriptedBackend(PolicySet.scripted(tok), lambda r: "4")
    agents = [AgentSpec("solver", policy="shared", sampling=SamplingParams(max_new_tokens=4))]
    runner = RolloutRunner(agents, backend, MathReward())
    task = Task(task_id="t0", prompt="What is 2 + 2?", answer="4")
    with pytest.raises(ValueError, match=rf"workflow 'forever' did not finish within "
                                         rf"{runner_module.MAX_ROUNDS} generation rounds"):
        runner.run([task], Forever())
    assert backend.stats.calls == runner_module.MAX_ROUNDS
    driver = runner.start_episode(task, Forever())  # the same limit, one episode at a time
    with pytest.raises(ValueError, match="did not finish within"):
        while True:
            driver.submit(backend.generate("shared", driver.requests))
    Forever.max_rounds = 0
    with pytest.raises(ValueError, match=r"workflow 'forever': max_rounds must be an int >= 1, got 0"):
        runner.run([task], Forever())


@pytest.fixture(scope="module")
def tok():
    from srpo.models import build_byte_tokenizer

    return build_byte_tokenizer()


# --------------------------------------------------------------------------- a finished run


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A 2-step smoke run with its checkpoint and export (built once for this module)."""
    run = tmp_path_factory.mktemp("bounds") / "run"
    assert main(["train", str(SMOKE), f"output_dir={run}", "train.steps=2", *QUIET]) == 0
    return run


def test_resume_with_fewer_steps_than_done_is_refused(finished_run, capsys):
    capsys.readouterr()
    before = (finished_run / "metrics.jsonl").read_bytes()
    code = main(["train", str(SMOKE), f"output_dir={finished_run}", "train.steps=1",
                 "resume=true", *QUIET])
    assert code == 2
    line = one_line(capsys)
    assert re.search(r"train\.steps \(1\) is fewer than the 2 steps the run in .* has done "
                     r"\(checkpoint step-2\): resume with train\.steps >= 2", line), line
    assert (finished_run / "metrics.jsonl").read_bytes() == before  # nothing of it touched
    assert (finished_run / "checkpoints" / "step-2").is_dir()


def _export_copy(finished_run: Path, tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    return run, run / "export" / "shared"


def test_a_manifest_that_lists_no_files_is_refused_by_eval(finished_run, tmp_path, capsys):
    run, folder = _export_copy(finished_run, tmp_path)
    (folder / "srpo_export.json").write_text(json.dumps({"files": {}}))
    weights = folder / "model.safetensors"
    from safetensors.torch import load_file, save_file

    save_file({k: v.zero_() for k, v in load_file(weights).items()}, weights, metadata={"format": "pt"})
    capsys.readouterr()
    assert main(["eval", str(run), "--n", "1"]) == 2
    out: list[str] = []
    line = one_line(capsys, "srpo eval", out=out)
    assert re.search(r"export/shared/\S+ is not listed in .*srpo_export\.json: it was added or "
                     r"renamed after the export", line), line
    assert "checksums verified" not in out[0]


def test_a_manifest_must_list_every_file_and_a_weights_file(finished_run, tmp_path):
    _, folder = _export_copy(finished_run, tmp_path)
    verify_export(folder)  # as exported
    manifest = folder / "srpo_export.json"
    files = json.loads(manifest.read_text())["files"]
    assert "model.safetensors" in files
    without = {k: v for k, v in files.items() if k != "model.safetensors"}
    manifest.write_text(json.dumps({"files": without}))
    with pytest.raises(CorruptCheckpointError, match=r"model\.safetensors is not listed in"):
        verify_export(folder)
    (folder / "model.safetensors").unlink()  # no weights at all, and none listed
    with pytest.raises(CorruptCheckpointError, match=r"srpo_export\.json lists no weights file"):
        verify_export(folder)


# --------------------------------------------------------------------------- user files and data


def test_a_workflow_file_that_exits_at_import_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "exits.py"
    path.write_text("import sys\nsys.exit(0)\n")
    code = main(["train", str(SMOKE), f"output_dir={tmp_path / 'run'}", "train.steps=1",
                 f"workflow.name={path}:Flow"])
    assert code == 2
    line = one_line(capsys)
    assert re.search(rf"workflow '{re.escape(str(path))}:Flow': '{re.escape(str(path))}' called "
                     r"sys\.exit\(0\) while it was imported", line), line
    assert not (tmp_path / "run").exists()


def _long_question_file(tmp_path: Path, index: int) -> Path:
    records = [json.loads(line) for line in GSM8K.read_text().splitlines()]
    records[index]["question"] = "What is " + "1 + " * 1100 + "1?"  # 4,410 byte tokens > 4,096
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_question_longer_than_the_context_is_refused_before_training(tmp_path, capsys):
    path = _long_question_file(tmp_path, 2)
    code = main(["train", str(SMOKE), f"output_dir={tmp_path / 'run'}", "task.source=gsm8k",
                 f"task.path={path}", "task.train_size=2", "task.heldout_size=1",
                 "train.tasks_per_step=1", "eval.size=1"])
    assert code == 2
    line = one_line(capsys)
    assert re.search(r"task 'gsm8k/\S+' \(train split\): its question alone is 4410 tokens "
                     r"\(policy 'shared'\); with sampling\.max_new_tokens 12 that exceeds the "
                     r"model's context of 4096 tokens", line), line
    assert not (tmp_path / "run").exists()


def test_a_question_longer_than_the_context_is_refused_by_eval(tmp_path, capsys):
    path = _long_question_file(tmp_path, 0)  # the held-out one
    code = main(["eval", str(SMOKE), "task.source=gsm8k", f"task.path={path}",
                 "task.train_size=2", "task.heldout_size=1", "train.tasks_per_step=1", "eval.size=1"])
    assert code == 2
    line = one_line(capsys, "srpo eval")
    assert re.search(r"task 'gsm8k/\S+' \(heldout split\): its question alone is 4410 tokens", line), line
