"""One writer per run directory, and a run that never destroys a config a person wrote.

Real `srpo train` processes: two started together on one output_dir (one runs, the other is
refused in one line naming the directory and the holder's pid, and the log has every step once);
a late `resume=true` while the run goes on; a SIGKILLed holder, whose lock the kernel frees.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from srpo.config import load_config
from srpo.record.run_dir import LOCK_FILE, RunDirectoryBusy, RunLock, check_config_file, write_config
from srpo.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "srpo" / "presets" / "smoke.yaml")
QUIET = ["checkpoint.plots=false", "checkpoint.tensorboard=false", "train.threads=1",
         "checkpoint.report=false"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
CMD = [sys.executable, "-m", "srpo.cli", "train", SMOKE]


def _steps(run: Path) -> list[int]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().split("\n") if x]
    return [r["step"] for r in rows if "loss" in r]


def _start(run: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen([*CMD, f"output_dir={run}", *QUIET, *overrides], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _refusal(proc: subprocess.Popen, run: Path, holder: int) -> None:
    """proc was refused: exit 2, one line naming the directory and the holder's pid."""
    err = proc.stderr.read()
    assert proc.returncode == 2, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(run) in lines[0] and f"pid {holder}" in lines[0] and "in use" in lines[0], lines[0]


def test_two_runs_started_together_on_one_directory_one_runs_the_other_is_refused(tmp_path):
    run = tmp_path / "dup"
    common = ["train.steps=6", "eval.size=4", "checkpoint.every=2"]
    a, b = _start(run, *common), _start(run, *common, "seed=1")
    for p in (a, b):
        p.wait(timeout=180)
    (winner,) = [p for p in (a, b) if p.returncode == 0]
    (loser,) = [p for p in (a, b) if p is not winner]
    _refusal(loser, run, winner.pid)
    assert _steps(run) == [1, 2, 3, 4, 5, 6]  # every step once, from one run
    assert yaml.safe_load((run / "config.yaml").read_text())["seed"] == (0 if winner is a else 1)


# slow (about 16 s of a real run and a resume beside it):
# CI runs it in its slow pass, so the README's fast command stays under ~10 minutes
@pytest.mark.slow
def test_a_late_resume_while_the_run_goes_on_is_refused_and_changes_nothing(tmp_path):
    run = tmp_path / "run"
    first = _start(run, "train.steps=40", "eval.size=4", "checkpoint.every=1")
    deadline = time.monotonic() + 120
    while not (run / "checkpoints").is_dir() and time.monotonic() < deadline:
        time.sleep(0.2)  # resume=true needs something to resume: wait for a checkpoint
    assert first.poll() is None, "the first run ended before the test could overlap it"
    late = _start(run, "train.steps=40", "eval.size=4", "checkpoint.every=1", "resume=true")
    late.wait(timeout=120)
    still_running = first.poll() is None
    first.wait(timeout=300)
    assert still_running, "the first run ended before the late resume was refused"
    _refusal(late, run, first.pid)
    assert first.returncode == 0, first.stderr.read()[-2000:]
    assert _steps(run) == list(range(1, 41))


# slow (about 20 s of real processes killed while holding the lock):
# CI runs it in its slow pass, so the README's fast command stays under ~10 minutes
@pytest.mark.slow
def test_a_killed_holder_never_leaves_the_directory_locked(tmp_path):
    run = tmp_path / "run"
    proc = _start(run, "train.steps=40", "eval.size=4", "checkpoint.every=1")
    deadline = time.monotonic() + 120
    while not (run / "checkpoints").is_dir() and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (run / LOCK_FILE).read_text().strip() == str(proc.pid)  # the file stays, the lock does not
    again = _start(run, "train.steps=40", "eval.size=4", "checkpoint.every=1", "resume=true")
    again.wait(timeout=300)
    assert again.returncode == 0, again.stderr.read()[-2000:]
    assert _steps(run) == list(range(1, 41))


# ---------------------------------------------------------------- in one process


def test_the_lock_is_exclusive_until_released(tmp_path):
    lock = RunLock.acquire(tmp_path / "r")
    with pytest.raises(RunDirectoryBusy, match=rf"in use by another srpo process \(pid {os.getpid()}\)"):
        RunLock.acquire(tmp_path / "r")
    lock.release()
    lock.release()  # idempotent
    RunLock.acquire(tmp_path / "r").release()


def test_a_trainer_that_refuses_its_directory_releases_it(tmp_path):
    run = tmp_path / "run"
    Trainer(load_config(SMOKE, [f"output_dir={run}", *QUIET, "train.steps=1", "eval.size=0",
                                "checkpoint.export=false"])).train()
    with pytest.raises(ValueError, match="already holds a run"):
        Trainer(load_config(SMOKE, [f"output_dir={run}", *QUIET, "train.steps=1"]))
    RunLock.acquire(run).release()  # not left held by the refused trainer


def test_a_trainer_holds_its_directory_until_train_ends(tmp_path):
    run = tmp_path / "run"
    trainer = Trainer(load_config(SMOKE, [f"output_dir={run}", *QUIET, "train.steps=1", "eval.size=0",
                                          "checkpoint.export=false"]))
    with pytest.raises(RunDirectoryBusy):
        RunLock.acquire(run)
    trainer.train()
    RunLock.acquire(run).release()


def test_a_hand_written_config_in_the_output_dir_is_never_overwritten(tmp_path, capsys):
    from srpo.cli import main

    run = tmp_path / "exp"
    run.mkdir()
    text = f"# my experiment: keep this comment\noutput_dir: {run}\ntrain:\n  steps: 1\n"
    (run / "config.yaml").write_text(text)
    assert main(["train", str(run), *QUIET, "eval.size=0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "config.yaml was not written by srpo" in err, err
    assert (run / "config.yaml").read_text() == text


def test_a_config_srpo_wrote_is_rewritten_on_resume(tmp_path):
    cfg = {"output_dir": "x", "train": {"steps": 2}, "note": "é\u2028"}
    write_config(tmp_path, cfg)
    check_config_file(tmp_path)  # srpo's own: no refusal
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == cfg
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]  # no temporary file left


def test_a_report_that_cannot_be_made_does_not_fail_a_finished_run(tmp_path, monkeypatch, capsys):
    import srpo.record.report as report
    from srpo.record.report import ReportError

    def damaged(run_dir):
        raise ReportError(f"{run_dir}/episodes/step-000001.jsonl.gz is not a readable gzip JSONL file")

    monkeypatch.setattr(report, "collect_run", damaged)
    run = tmp_path / "run"
    result = Trainer(load_config(SMOKE, [f"output_dir={run}", *QUIET[:-1], "train.steps=1", "eval.size=0",
                                         "checkpoint.export=false"])).train()
    assert result.steps_done == 1
    err = capsys.readouterr().err
    assert "report: not written (" in err and f"srpo report {run}" in err, err
    assert not (run / "report.html").exists()


def test_a_run_refused_before_any_work_leaves_no_directory(tmp_path):
    run = tmp_path / "new"
    lock = RunLock.acquire(run)
    lock.release(discard=True)
    assert not run.exists()
    run.mkdir()  # a directory the user made stays, with only the lock file in it
    lock = RunLock.acquire(run)
    lock.release(discard=True)
    assert run.is_dir()


def test_a_lock_file_removed_between_open_and_lock_is_retried(tmp_path, monkeypatch):
    """The flock-then-unlink race: a refused run removes its lock file (still locked) just after
    this process opened it; the lock taken on that unlinked file would exclude nobody, so acquire
    takes the file now at the path instead, and a third process is refused."""
    import fcntl

    import srpo.record.run_dir as run_dir_module

    run = tmp_path / "r"
    run.mkdir()
    calls = []
    real_flock = fcntl.flock

    def flock_after_a_discard(fd, op):
        if not calls:  # the first open's file disappears before it is locked
            (run / LOCK_FILE).unlink()
        calls.append(op)
        return real_flock(fd, op)

    monkeypatch.setattr(run_dir_module.fcntl, "flock", flock_after_a_discard)
    lock = RunLock.acquire(run)
    monkeypatch.undo()
    assert len(calls) == 2  # retried once
    assert os.fstat(lock._fd).st_ino == os.stat(run / LOCK_FILE).st_ino
    with pytest.raises(RunDirectoryBusy):
        RunLock.acquire(run)
    lock.release()


def test_config_differences_names_changed_added_and_removed_fields_but_not_resumable_ones():
    from srpo.record.run_identity import config_differences

    before = {"train": {"lr": 1e-3, "steps": 4, "epochs": 1}, "output_dir": "a", "eval": {"size": 8},
              "workflow": {"params": {"k": 2}}}
    after = {"train": {"lr": 0.5, "steps": 9, "share_prompt_forward": True}, "output_dir": "b",
             "eval": {"size": 0}, "workflow": {"params": {"k": 2}}}
    assert config_differences(before, after) == [
        "train.lr: 0.001 -> 0.5", "train.epochs: 1 -> <absent>", "train.share_prompt_forward: <absent> -> True"]
    assert config_differences(before, before) == []


def test_a_refusal_waits_for_the_holder_to_write_its_pid(tmp_path):
    """The holder writes its pid just after locking: a run refused in that gap reads it once
    written (CI once saw 'pid unknown' there), and says unknown only if it never comes."""
    import threading

    from srpo.record.run_dir import _holder

    lock = tmp_path / LOCK_FILE
    lock.write_text("")
    threading.Timer(0.1, lambda: lock.write_text("4242\n")).start()
    assert _holder(lock) == "pid 4242"
    lock.write_text("")
    assert _holder(lock, wait_s=0.05) == "pid unknown"
