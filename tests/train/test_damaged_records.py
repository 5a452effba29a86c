"""Damaged or foreign records, and destinations that cannot be written, are answered in one line
(issue 55, section 3): every case below makes a command print exactly one line on stderr,
`srpo <command>: ...`, naming the file, key, variable or workflow, with exit status 2 for bad
input (refused before any work, nothing written) and 1 for a failure during the work; never a
traceback. Most cases run `srpo.cli.main` in-process (the same code as the command, without the
interpreter's start-up); the table in docs/training.md ("What survives what") lists them."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from srpo.cli import main

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "srpo" / "presets" / "smoke.yaml")
QUIET = ["checkpoint.plots=false", "checkpoint.tensorboard=false", "train.threads=1"]


def _one_line(stderr: str, prefix: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def _refused(capsys, argv: list[str], code: int = 2) -> str:
    """Run `srpo argv` in-process: its exit status and its one line on stderr."""
    capsys.readouterr()
    assert main(argv) == code
    return _one_line(capsys.readouterr().err, f"srpo {argv[0]}: ")


# ---------------------------------------------------------------- a trained run, copied per test


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A 1-step smoke run with a checkpoint, evaluations before / after (and their episodes),
    no export (so `srpo eval RUN` loads the checkpoint)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    assert main(["train", SMOKE, f"output_dir={run}", *QUIET, "train.steps=1", "eval.size=2",
                 "checkpoint.export=false", "checkpoint.report=false"]) == 0
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def _resume(run: Path) -> list[str]:
    return ["train", SMOKE, f"output_dir={run}", *QUIET, "train.steps=2", "eval.size=2",
            "checkpoint.export=false", "checkpoint.report=false", "resume=true"]


# ---------------------------------------------------------------- trainer_state.json of the wrong shape


def _edit_marker(run: Path, how: str) -> Path:
    marker = run / "checkpoints" / "step-1" / "trainer_state.json"
    meta = json.loads(marker.read_text())
    if how == "list":
        meta = [1, 2, 3]
    elif how == "no step":
        del meta["step"]
    elif how == "no policies":
        del meta["policies"]
    elif how == "empty data_state":
        meta["data_state"] = {}
    elif how == "step two":
        meta["step"] = "two"
    marker.write_text(json.dumps(meta))
    return marker


@pytest.mark.parametrize("how, problem", [
    ("list", "holds a JSON list, not the object srpo writes"),
    ("no step", "is not a marker srpo wrote ('step' is not a step number)"),
    ("no policies", "is not a marker srpo wrote ('policies' is not a mapping)"),
    ("empty data_state", "is not a marker srpo wrote (its 'data_state' has no 'next_step' step number)"),
    ("step two", "is not a marker srpo wrote ('step' is not a step number)"),
])
def test_a_marker_of_the_wrong_shape_is_one_line_on_resume_and_on_eval(run, capsys, how, problem):
    marker = _edit_marker(run, how)
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    line = _refused(capsys, _resume(run))
    assert line == (f"srpo train: checkpoint {marker.parent} is unusable: {marker} {problem}: it was "
                    f"altered or written by something else. no older intact checkpoint is left: "
                    f"start the run again")
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # nothing written
    if how == "empty data_state":  # the trainer's own field: evaluation does not read it
        return
    line = _refused(capsys, ["eval", str(run), "--n", "1"])
    assert line == f"srpo eval: {marker} {problem}: it was altered or written by something else"


# ---------------------------------------------------------------- metrics.jsonl


@pytest.mark.parametrize("bad, problem", [
    (b"not json\n", "is not valid JSON"),
    (b'{"step": 1, "x": "\xff"}\n', "is not UTF-8 text (byte 0xff at offset"),
])
def test_a_damaged_metrics_line_is_refused_on_resume_naming_the_file_and_line(run, capsys, bad, problem):
    log = run / "metrics.jsonl"
    lines = log.read_bytes().count(b"\n")
    with open(log, "ab") as f:
        f.write(bad)
    old = log.read_bytes()
    line = _refused(capsys, _resume(run))
    assert line.startswith(f"srpo train: {log}: line {lines + 1} {problem}")
    assert line.endswith("delete or mend that line to resume")
    assert log.read_bytes() == old
    for command in ("report", "plot"):  # the readers of the log name it too
        assert _refused(capsys, [command, str(run)]).startswith(f"srpo {command}: {log}: line {lines + 1} {problem}")


def test_a_cut_last_line_ending_inside_a_character_is_still_only_a_cut_line(run, capsys):
    """A kill mid-write can cut a multi-byte character: that is a cut line (dropped on resume
    with a warning), not a damaged file."""
    from srpo.record.metrics_log import MetricsLogger, read_metrics

    log = run / "metrics.jsonl"
    rows = len(read_metrics(run))
    with open(log, "ab") as f:
        f.write('{"step": 1, "note": "é'.encode()[:-1])
    with pytest.warns(RuntimeWarning, match="truncated last line"):
        assert len(read_metrics(run)) == rows
    with pytest.warns(RuntimeWarning, match="truncated last line"):
        MetricsLogger(run, tensorboard=False).close()
    assert log.read_bytes().endswith(b"\n") and len(read_metrics(run)) == rows


# ---------------------------------------------------------------- srpo report


def test_report_names_an_evaluation_file_without_correct(run, capsys):
    path = run / "eval" / "before.json"
    data = json.loads(path.read_text())
    del data["correct"]
    path.write_text(json.dumps(data))
    assert _refused(capsys, ["report", str(run)]) == (
        f"srpo report: {path} is not an evaluation file srpo wrote (no 'correct' list of true / false)")
    assert not (run / "report.html").exists()


def test_report_names_an_eval_episode_without_task_id(run, capsys):
    path = run / "eval" / "before.episodes.jsonl.gz"
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f]
    del rows[0]["task_id"]
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    assert _refused(capsys, ["report", str(run)]) == (
        f"srpo report: {path}: line 1 is not an episode record (no 'task_id')")


def test_report_out_an_existing_directory_is_refused_before_any_work(run, tmp_path, capsys):
    out = tmp_path / "a-folder"
    out.mkdir()
    assert _refused(capsys, ["report", str(run), "--out", str(out)]) == (
        f"srpo report: --out {out} is a directory; give the path of a file to write")
    assert list(out.iterdir()) == [] and list(tmp_path.glob(".a-folder*")) == []


# ---------------------------------------------------------------- outputs checked before the work


@pytest.fixture
def read_only(tmp_path):
    """A directory nothing can be written in: chmod for a user; as root (whom chmod does not
    stop) a read-only tmpfs, or a skip where mounting is not allowed."""
    where = tmp_path / "ro"
    where.mkdir()
    (where / "present").write_text("x")
    if os.geteuid() != 0:
        where.chmod(0o555)
        yield where
        where.chmod(0o755)
        return
    if shutil.which("mount") is None:
        pytest.skip("running as root (chmod does not stop writes) and no mount command")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"running as root (chmod does not stop writes) and cannot mount a read-only "
                    f"tmpfs: {done.stderr.strip() or done.returncode}")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_rollout_and_eval_check_their_destination_first(tmp_path, read_only, capsys, monkeypatch):
    import srpo.build

    def no_work(*args, **kwargs):
        raise AssertionError("the destination must be checked before any work")

    monkeypatch.setattr(srpo.build, "build_rollout", no_work)
    folder = tmp_path / "folder"
    folder.mkdir()
    assert _refused(capsys, ["rollout", SMOKE, "--n", "2", "--out", str(folder)]) == (
        f"srpo rollout: --out {folder} is a directory; give the path of a file to write")
    assert _refused(capsys, ["eval", SMOKE, "--n", "2", "--out", str(folder)]) == (
        f"srpo eval: --out {folder} is a directory; give the path of a file to write")
    for argv in (["rollout", SMOKE, "--n", "2", "--out", str(read_only / "x.jsonl")],
                 ["eval", SMOKE, "--n", "2", "--out", str(read_only / "sub" / "e.json")]):
        line = _refused(capsys, argv)
        assert f"--out {argv[-1]} cannot be written: {read_only} is not writable (" in line, line
        assert line.endswith("nothing was done")


def test_report_and_plot_of_a_run_on_a_read_only_filesystem(trained, tmp_path, capsys):
    """The run copied into a tmpfs, which is then remounted read-only (as root); as a user the
    run's folder is made read-only with chmod."""
    if os.geteuid() == 0:
        if shutil.which("mount") is None:
            pytest.skip("running as root (chmod does not stop writes) and no mount command")
        disk = tmp_path / "disk"
        disk.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"running as root and cannot mount a tmpfs: {done.stderr.strip()}")
        try:
            run = disk / "run"
            shutil.copytree(trained, run, ignore=shutil.ignore_patterns("checkpoints"))
            subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
            _report_and_plot_refused(run, capsys)
        finally:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)
    else:
        run = tmp_path / "run"
        shutil.copytree(trained, run, ignore=shutil.ignore_patterns("checkpoints"))
        run.chmod(0o555)
        try:
            _report_and_plot_refused(run, capsys)
        finally:
            run.chmod(0o755)


def _report_and_plot_refused(run: Path, capsys) -> None:
    line = _refused(capsys, ["report", str(run)])
    assert line.startswith(f"srpo report: the report {run / 'report.html'} cannot be written: {run} "
                           f"is not writable"), line
    line = _refused(capsys, ["plot", str(run)])
    assert line.startswith(f"srpo plot: the plot {run / 'plots' / 'reward.png'} cannot be written"), line


# ---------------------------------------------------------------- run and config directories


def test_output_dir_a_dangling_link_a_too_long_name_or_a_lock_that_is_a_directory(tmp_path, capsys):
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere")
    line = _refused(capsys, ["train", SMOKE, f"output_dir={link}", "train.steps=1"])
    assert line.startswith(f"srpo train: output_dir {link} is a symbolic link") and "does not exist" in line
    assert not (tmp_path / "nowhere").exists()
    long = tmp_path / ("a" * 300)
    line = _refused(capsys, ["train", SMOKE, f"output_dir={long}", "train.steps=1"])
    assert line.startswith("srpo train: output_dir '") and line.endswith(
        "cannot be a directory: File name too long (a name of 300 bytes; file systems allow at most 255)")
    run = tmp_path / "run"
    (run / ".srpo.lock").mkdir(parents=True)
    assert _refused(capsys, ["train", SMOKE, f"output_dir={run}", "train.steps=1"]) == (
        f"srpo train: {run / '.srpo.lock'} is a directory, where a run keeps its lock file: srpo did "
        f"not make it; remove it (rmdir) or choose another output_dir")
    assert [p.name for p in run.iterdir()] == [".srpo.lock"]


def test_a_directory_without_config_yaml_and_a_missing_run(tmp_path, capsys):
    folder = tmp_path / "folder"
    folder.mkdir()
    for command in ("eval", "train"):
        assert _refused(capsys, [command, str(folder)]) == (
            f"srpo {command}: {folder} is a directory without config.yaml (not a run directory)")
    assert _refused(capsys, ["plot", str(tmp_path / "nosuch")]) == (
        f"srpo plot: no run directory at {tmp_path / 'nosuch'}")
    assert _refused(capsys, ["plot", str(folder)]) == (
        f"srpo plot: no metrics log at {folder / 'metrics.jsonl'}")


# ---------------------------------------------------------------- task files, workflows, rewards


def _rollout(tmp_path: Path, *extra: str) -> list[str]:
    return ["rollout", SMOKE, "--n", "1", "--out", str(tmp_path / "out.jsonl"), *extra]


def _task_file(tmp_path: Path, name: str, content: bytes) -> list[str]:
    path = tmp_path / name
    path.write_bytes(content)
    return ["task.source=gsm8k", f"task.path={path}", "task.heldout_size=1", "task.train_size=1",
            "train.tasks_per_step=1", "eval.size=1"]


def test_task_files_that_are_not_utf8_too_deep_or_hold_a_lone_surrogate_name_the_file(tmp_path, capsys):
    good = json.dumps({"question": "q2", "answer": "#### 2"}) + "\n"
    args = _task_file(tmp_path, "latin1.jsonl", b'{"question": "caf\xe9", "answer": "#### 1"}\n' + good.encode())
    assert _refused(capsys, _rollout(tmp_path, *args)) == (
        f"srpo rollout: {tmp_path / 'latin1.jsonl'}:line 1: not UTF-8 text (byte 0xe9); save the file as UTF-8")
    deep = ("[" * 100_000 + "]" * 100_000 + "\n").encode()
    for name in ("deep.jsonl", "deep.json"):
        line = _refused(capsys, _rollout(tmp_path, *_task_file(tmp_path, name, deep)))
        assert line.startswith(f"srpo rollout: {tmp_path / name}") and "JSON nested too deeply to read" in line
    lone = json.dumps({"question": "1 + \ud800?", "answer": "#### 2"}) + "\n" + good
    assert _refused(capsys, _rollout(tmp_path, *_task_file(tmp_path, "lone.jsonl", lone.encode()))) == (
        f"srpo rollout: {tmp_path / 'lone.jsonl'}:line 1: field 'question' holds a lone surrogate "
        f"(U+D800) at character 4, which is not text a tokenizer can encode")


def test_a_lone_surrogate_in_a_prompt_names_its_key(tmp_path, capsys):
    assert _refused(capsys, _rollout(tmp_path, "agents.solver.system_prompt=a\ud800b")) == (
        "srpo rollout: agents.solver.system_prompt: holds a lone surrogate (U+D800) at character 1, "
        "which is not text a tokenizer can encode")


WORKFLOW = '''
from dataclasses import dataclass
from srpo.workflows.base import GenericRoles, Request

@dataclass
class W(GenericRoles):
    agent: str = "solver"
    name = "w"
    description = "a test workflow"

    @property
    def agents(self):
        return (self.agent,)

    def run(self, task, ctx):
        out = yield Request(self.agent, task.prompt)
        ctx.transition("answer", [out])
        BODY
'''


def _workflow(tmp_path: Path, run_ends: str | None, name: str, *, file: str | None = None) -> str:
    """A workflow file whose run() ends with `run_ends`, or a file of the given text."""
    path = tmp_path / name
    path.write_text(file if file is not None else WORKFLOW.replace("BODY", run_ends))
    return f"{path}:W"


def test_a_workflow_file_that_cannot_be_imported_is_named(tmp_path, capsys):
    ref = _workflow(tmp_path, None, "syntax.py", file="def (:\n")
    for command in (_rollout(tmp_path, "--workflow", ref),
                    ["train", SMOKE, f"output_dir={tmp_path / 'run'}", "--workflow", ref]):
        assert _refused(capsys, command).endswith(
            f"{tmp_path / 'syntax.py'} cannot be imported: SyntaxError at line 1: invalid syntax")
    ref = _workflow(tmp_path, None, "raises.py", file="raise RuntimeError('boom at import')\n")
    assert _refused(capsys, _rollout(tmp_path, "--workflow", ref)) == (
        f"srpo rollout: {tmp_path / 'raises.py'} raised RuntimeError while it was imported: boom at import")
    assert not (tmp_path / "run").exists()


def test_a_nan_component_or_a_multi_line_error_of_a_workflow_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SRPO_DEBUG", raising=False)
    ref = _workflow(tmp_path, "return {'correct': float('nan')}", "nan.py")
    line = _refused(capsys, _rollout(tmp_path, "--workflow", ref), code=1)
    assert line.startswith("srpo rollout: ValueError: workflow 'w', task ") and line.endswith(
        "the return value of run(): component 'correct' is not finite (nan) (SRPO_DEBUG=1 shows the traceback)")
    ref = _workflow(tmp_path, "raise RuntimeError('first\\nsecond\\n\\nthird')", "lines.py")
    line = _refused(capsys, _rollout(tmp_path, "--workflow", ref), code=1)
    assert line.startswith("srpo rollout: RuntimeError: first second third (raised while running workflow 'w'")


def test_reward_weights_whose_sum_overflows_name_the_task_and_the_reward_functions():
    from srpo.rollout.runner import _finite_sum
    from srpo.tasks.math.rewards import MathReward, RewardError
    from srpo.types import Task

    # weights whose largest reward is not a number are refused when the reward is built (and as
    # config: tests/train/test_config_fuzz.py); one that still overflows names the task
    with pytest.raises(ValueError, match=r"correct_weight \+ format_weight must be finite"):
        MathReward(1e308, 1e308, format_rule="any")
    reward = MathReward(1.0, 1.0, format_rule="any")
    reward.correct_weight = reward.format_weight = 1e308  # past the constructor's check
    with pytest.raises(RewardError, match=r"task 't1' failed: ValueError: the weighted components "
                                          r"\{'correct': 1e\+308, 'format': 1e\+308\} sum to inf"):
        reward(Task("t1", "1 + 1?", "2"), "\\boxed{2}")
    where = "workflow 'single', task 't1', rollout 0"
    with pytest.raises(ValueError, match=r"workflow 'single', task 't1', rollout 0: the reward components "
                                         r"\{'f': 1e\+308, 'g': 1e\+308\} sum past the largest float"):
        _finite_sum({"f": 1e308, "g": 1e308}, where)  # math.fsum's OverflowError, named
    assert _finite_sum({"f": 1.0, "g": 2.0}, where) == 3.0


def test_api_reward_function_times_a_huge_weight_names_the_function():
    from srpo.api.rewards import RewardFunction, RewardFunctionError
    from srpo.types import Task

    def my_reward(completion, row):
        return 10.0

    fn = RewardFunction(my_reward, "my_reward", 1e308, "reward function my_reward ('my_reward')")
    with pytest.raises(RewardFunctionError, match=r"my_reward.*times its weight 1e\+308 is not a finite number"):
        fn("text", Task("t1", "q", "a"), {})


# ---------------------------------------------------------------- the environment, evaluation sizes


def test_world_size_that_is_not_a_number_names_the_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "two")
    assert _refused(capsys, ["train", SMOKE, f"output_dir={tmp_path / 'run'}", "train.steps=1"]) == (
        "srpo train: the environment variable WORLD_SIZE must be a whole number >= 0 (set by a launcher "
        "such as torchrun or accelerate), got 'two'")
    assert not (tmp_path / "run").exists()


def test_eval_with_no_held_out_task_is_refused(capsys):
    assert _refused(capsys, ["eval", SMOKE, "task.heldout_size=0", "eval.size=0"]) == (
        "srpo eval: no held-out task to evaluate: task.heldout_size is 0; set task.heldout_size (and "
        "eval.size or --n) to 1 or more")


def test_a_task_made_in_code_with_a_lone_surrogate_names_the_task_and_field():
    """The config and task-file routes name the key or file; a Task built in Python (the API's
    train_dataset rows become Tasks) is refused when made, before any tokenizer sees it."""
    from srpo.types import Task

    with pytest.raises(ValueError, match=r"task 't1': its prompt holds a character that is not text "
                                         r"\(a lone surrogate at position 8\)"):
        Task("t1", "what is \udc80 2+2?", "4")
    with pytest.raises(ValueError, match=r"task 't2': its answer holds"):
        Task("t2", "2+2?", "\ud800")
    assert Task("t3", "2+2? ✓ 😀", "4").prompt.endswith("😀")  # real non-ASCII text is fine
