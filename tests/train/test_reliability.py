"""Reliability and security of runs: no code from checkpoints or configs, run directories that
can always be resumed or refused clearly, each step and evaluation logged once, and a crash test
that kills a real training process at random moments."""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from srpo.cli import main
from srpo.config import load_config
from srpo.record.checkpoint import (
    STATE_FILE,
    CorruptCheckpointError,
    list_checkpoints,
    load_checkpoint,
    verify_checkpoint,
)
from srpo.train.metrics import run_dependent
from srpo.train.trainer import Trainer
from srpo.workflows import build_workflow

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "srpo" / "presets" / "smoke.yaml")
QUIET = ["checkpoint.plots=false", "checkpoint.tensorboard=false", "train.threads=1"]


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def _stable(rows: list[dict]) -> list[dict]:
    return [run_dependent(r) for r in rows]


def _train(run: Path, *overrides: str) -> None:
    Trainer(load_config(SMOKE, [f"output_dir={run}", *QUIET, *overrides])).train()


# ---------------------------------------------------------------- security


class _RunsCode:
    """Unpickling this object runs a shell command (what a crafted checkpoint file would do)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _rehash(ckpt: Path) -> None:
    """Recompute the stored sha256 of every file, as whoever crafted a file can."""
    from srpo.record.checkpoint import _sha256

    meta = json.loads((ckpt / STATE_FILE).read_text())
    meta["files"] = {name: _sha256(ckpt / name) for name in meta["files"]}
    (ckpt / STATE_FILE).write_text(json.dumps(meta))


def test_a_crafted_checkpoint_file_is_refused_and_runs_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    _train(run, "train.steps=1", "eval.size=0", "checkpoint.export=false")
    (ckpt,) = list_checkpoints(run)
    marker = tmp_path / "pwned"
    optim = ckpt / "optim-shared.pt"
    with open(optim, "wb") as f:
        pickle.dump({"optimizer": _RunsCode(marker), "scheduler": None}, f)
    _rehash(ckpt)
    verify_checkpoint(ckpt)  # the checksums match: they prove nothing about who wrote the file
    trainer = Trainer(load_config(SMOKE, [f"output_dir={run}", *QUIET, "train.steps=2", "eval.size=0",
                                          "checkpoint.export=false", "resume=true"]))
    with pytest.raises(CorruptCheckpointError) as err:
        load_checkpoint(ckpt, trainer.checkpoint_state())
    assert not marker.exists()
    # what it is (not a file srpo wrote), and never torch's advice to load it with weights_only=False
    assert (f"{optim} is not a checkpoint file srpo wrote: it holds more than tensors and plain containers "
            f"(such as pickled objects that need code to load), and srpo never runs code from a "
            f"checkpoint") in str(err.value)
    assert "weights_only" not in str(err.value)
    assert "no older intact checkpoint is left: start the run again" in str(err.value)
    # the CLI says it in one line and writes nothing
    trainer.release_run_dir()  # the run directory's lock, or the CLI is refused for that instead
    capsys.readouterr()
    code = main(["train", SMOKE, f"output_dir={run}", *QUIET, "train.steps=2", "eval.size=0",
                 "checkpoint.export=false", "resume=true"])
    assert code == 2 and not marker.exists()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"checkpoint {ckpt} is unusable: {optim} is not a checkpoint" in err


def test_a_config_naming_a_function_or_os_system_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.py"
    evil.write_text(f"def evil(**kw):\n    open({str(marker)!r}, 'w').close()\n\n"
                    f"class NotAWorkflow:\n    name = 'x'\n    description = 'y'\n")
    with pytest.raises(ValueError, match=r"'system' is a builtin_function_or_method, not a class"):
        build_workflow("os:system", {"command": f"touch {marker}"})
    with pytest.raises(ValueError, match=r"'evil' is a function, not a class"):
        build_workflow(f"{evil}:evil")
    with pytest.raises(ValueError, match=r"'NotAWorkflow' has no 'agents' attribute or property"):
        build_workflow(f"{evil}:NotAWorkflow")
    assert not marker.exists()
    code = main(["train", SMOKE, f"output_dir={tmp_path / 'r'}", "workflow.name=os:system",
                 f"workflow.params={{command: 'touch {marker}'}}"])
    assert code == 2 and not marker.exists()


# ---------------------------------------------------------------- run directories


def test_a_run_killed_before_its_first_checkpoint_is_refused_fresh_and_restarts_on_resume(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    # what a run killed at step 3, before its only (final) checkpoint, leaves behind
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 0.0}) + "\n" for s in range(4)))
    common = [f"output_dir={run}", *QUIET, "train.steps=2", "eval.size=4", "checkpoint.export=false"]
    assert main(["train", SMOKE, *common]) == 2
    assert "already holds a run (metrics.jsonl); pass resume=true" in capsys.readouterr().err
    assert main(["train", SMOKE, *common, "resume=true"]) == 0
    assert "has no complete checkpoint; starting from step 0" in capsys.readouterr().out
    fresh = tmp_path / "fresh"
    assert main(["train", SMOKE, *common[1:], f"output_dir={fresh}"]) == 0
    assert _stable(_rows(run)) == _stable(_rows(fresh))  # the stale lines are gone


def test_resuming_a_finished_run_logs_its_final_evaluation_once(tmp_path):
    """A kill during plots or export leaves a run whose final evaluation was logged after its last
    checkpoint; resuming redoes the evaluation and must not log it twice."""
    run = tmp_path / "run"
    common = [f"output_dir={run}", *QUIET, "train.steps=2", "eval.size=4", "checkpoint.export=false"]
    Trainer(load_config(SMOKE, common)).train()
    once = _rows(run)
    for _ in range(3):  # as after repeated kills during export
        Trainer(load_config(SMOKE, [*common, "resume=true"])).train()
    again = _rows(run)
    assert [r["step"] for r in again] == [0, 1, 2, 2]  # before, step 1, step 2, after
    assert sum("eval/accuracy" in r and "loss" not in r for r in again) == 2  # before + after
    assert _stable(again) == _stable(once)


def test_a_corrupt_latest_checkpoint_is_one_line_naming_it_and_the_intact_one(tmp_path, capsys):
    run = tmp_path / "run"
    common = [f"output_dir={run}", *QUIET, "eval.size=0", "checkpoint.export=false", "checkpoint.every=1",
              "checkpoint.keep_last=3"]
    assert main(["train", SMOKE, *common, "train.steps=2"]) == 0
    config_before = (run / "config.yaml").read_text()
    optim = run / "checkpoints" / "step-2" / "optim-shared.pt"
    optim.write_bytes(optim.read_bytes()[:-10])  # truncated
    capsys.readouterr()
    assert main(["train", SMOKE, *common, "train.steps=3", "resume=true"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "step-2 is unusable: checksum mismatch for" in err and "optim-shared.pt" in err
    assert f"the newest intact checkpoint is {run / 'checkpoints' / 'step-1'}" in err
    assert (run / "config.yaml").read_text() == config_before  # nothing was rewritten
    # a garbage marker names its file too
    (run / "checkpoints" / "step-2" / STATE_FILE).write_text("{not json")
    assert main(["train", SMOKE, *common, "train.steps=3", "resume=true"]) == 2
    err = capsys.readouterr().err
    assert f"{run / 'checkpoints' / 'step-2' / STATE_FILE} cannot be read" in err


def test_eval_of_a_run_directory_says_what_it_evaluates_and_checks_the_export(tmp_path, capsys):
    run = tmp_path / "run"
    common = [f"output_dir={run}", *QUIET, "eval.size=4", "train.steps=1"]
    assert main(["train", SMOKE, *common]) == 0
    capsys.readouterr()
    assert main(["eval", str(run), "--n", "2"]) == 0
    out = capsys.readouterr().out
    assert f"evaluating the trained policies exported in {run / 'export'} (checksums verified)" in out
    # a damaged export is an error naming the file
    weights = next((run / "export" / "shared").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-4])
    assert main(["eval", str(run), "--n", "2"]) == 2
    assert f"checksum mismatch for {weights}" in capsys.readouterr().err
    # no export: the newest checkpoint is evaluated, and said so
    import shutil

    shutil.rmtree(run / "export")
    assert main(["eval", str(run), "--n", "2"]) == 0
    assert f"evaluating the policies of checkpoint {run / 'checkpoints' / 'step-1'}" in capsys.readouterr().out
    # neither: the untrained policies, said so
    shutil.rmtree(run / "checkpoints")
    assert main(["eval", str(run), "--n", "2"]) == 0
    assert "evaluating the UNTRAINED initial policies" in capsys.readouterr().out


# ---------------------------------------------------------------- crash test


def _logged_lines(run: Path) -> int:
    try:
        return (run / "metrics.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


# slow (about 30 s of real training processes killed and resumed):
# CI runs it in its slow pass, so the README's fast command stays under ~10 minutes
@pytest.mark.slow
def test_random_kills_of_a_real_training_process_lose_nothing(tmp_path):
    """SIGKILL a real `srpo train` process at random moments (seeded) until it finishes, resuming
    each time; after every kill each complete checkpoint verifies, and at the end every step and
    evaluation is logged once and the metrics equal an uninterrupted run's.

    A moment is drawn as a point of the run's progress, not as seconds (a fast machine finished
    the run before seconds-drawn kills came): a number of logged lines to wait for (0: during
    start-up and the first evaluation; all train lines: during the final evaluation, plots and
    export), then a random delay. A run that ends before its kill is resumed again (resuming a
    finished run redoes its final evaluation and export), until KILLS kills have landed.
    """
    KILLS = 5
    rng = random.Random(7)
    common = [*QUIET, "train.steps=5", "eval.size=4", "checkpoint.every=1", "checkpoint.keep_last=2"]
    cmd = [sys.executable, "-m", "srpo.cli", "train", SMOKE]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    reference = tmp_path / "reference"
    subprocess.run([*cmd, f"output_dir={reference}", *common], check=True, env=env, capture_output=True,
                   timeout=120)
    lines = len(_rows(reference))  # before-eval, 5 steps, after-eval
    run = tmp_path / "run"
    kills, attempts = 0, 0
    resume: list[str] = []
    while True:
        attempts += 1
        assert attempts < 4 * KILLS, "the runs kept ending before their kills"
        proc = subprocess.Popen([*cmd, f"output_dir={run}", *common, *resume], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        resume = ["resume=true"]
        if kills >= KILLS:  # the last attempt runs to its end
            proc.wait(timeout=120)
            assert proc.returncode == 0, proc.stderr.read().decode()[-2000:]
            break
        target, delay = rng.randint(0, lines - 1), rng.uniform(0.0, 2.5)
        deadline = time.monotonic() + 120
        while proc.poll() is None and _logged_lines(run) < target and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            proc.wait(timeout=delay)
            assert proc.returncode == 0, proc.stderr.read().decode()[-2000:]  # ended first: resume again
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
        for ckpt in list_checkpoints(run):
            verify_checkpoint(ckpt)  # a kill never leaves a complete checkpoint with bad files
    rows = _rows(run)
    train_steps = [r["step"] for r in rows if "loss" in r]
    assert train_steps == [1, 2, 3, 4, 5]
    assert sum("eval/accuracy" in r and "loss" not in r for r in rows) == 2  # before, after: once each
    assert _stable(rows) == _stable(_rows(reference))
    assert (run / "export" / "shared" / "srpo_export.json").is_file()
