"""The trainer end to end on the smoke preset (tiny random model): runs, resumes exactly,
survives a kill during a checkpoint write, and rejects bad input before doing any work."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from safetensors.torch import load_file

from srpo.cli import main
from srpo.config import ConfigError, load_config
from srpo.models import build_tiny_model
from srpo.train.metrics import run_dependent
from srpo.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "srpo" / "presets" / "smoke.yaml")
QUIET = ["checkpoint.plots=false", "checkpoint.export=false", "checkpoint.tensorboard=false"]


def _train_lines(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r]


def test_smoke_run_trains_and_writes_its_outputs(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", SMOKE, f"output_dir={run}"]) == 0
    out = capsys.readouterr().out
    assert "held-out accuracy" in out and "McNemar" in out
    lines = _train_lines(run)
    assert [r["step"] for r in lines] == [1, 2]
    for r in lines:
        assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm/shared"])
        assert r["sets/k3/count"] > 0 and r["sets/k1/count"] > 0  # parallel k=3 + aggregator
    assert (run / "config.yaml").is_file()
    ckpt = run / "checkpoints" / "step-2"
    assert (ckpt / "trainer_state.json").is_file()
    # parameters changed: the checkpoint's weights differ from the seeded initial model
    initial, _ = build_tiny_model(seed=0)
    trained = load_file(str(ckpt / "policy-model.safetensors"))
    moved = sum(float((trained[k] - v).abs().sum()) for k, v in initial.state_dict().items() if k in trained)
    assert moved > 0
    assert any((run / "plots").glob("*.png"))
    assert (run / "export" / "shared" / "config.json").is_file()


@pytest.mark.parametrize("overrides", [["train.method=grpo"], ["train.method=magrpo", "train.minibatches=2"],
                                       ["train.method=srpo", "train.epochs=2", "train.minibatches=2",
                                        "train.method_settings={reduction: pooled}"]])
def test_other_methods_and_multi_epoch_updates_run(tmp_path, overrides):
    cfg = load_config(SMOKE, [f"output_dir={tmp_path}", "eval.size=0", "train.steps=1", *QUIET, *overrides])
    result = Trainer(cfg).train()
    assert result.steps_done == 1
    assert math.isfinite(result.history[0]["loss"])


def _comparable(row: dict) -> dict:
    return run_dependent(row)


def test_resume_equals_uninterrupted_run(tmp_path):
    common = [*QUIET, "eval.size=0", "checkpoint.every=2"]
    full = tmp_path / "full"
    Trainer(load_config(SMOKE, [f"output_dir={full}", "train.steps=4", *common])).train()
    part = tmp_path / "part"
    Trainer(load_config(SMOKE, [f"output_dir={part}", "train.steps=2", *common])).train()
    Trainer(load_config(SMOKE, [f"output_dir={part}", "train.steps=4", "resume=true", *common])).train()
    a, b = _train_lines(full), _train_lines(part)
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b):
        ca, cb = _comparable(ra), _comparable(rb)
        assert ca.keys() == cb.keys()
        for k in ca:
            assert ca[k] == pytest.approx(cb[k], abs=1e-6), k


KILL_SCRIPT = textwrap.dedent("""
    import sys, time
    import srpo.record.checkpoint as ck
    from srpo.config import load_config
    from srpo.train.trainer import Trainer

    calls = {"n": 0}
    original = ck._publish
    def stall(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # the second checkpoint (step 2): stop mid-write
            print("STALLED", flush=True)
            time.sleep(120)
        return original(*args, **kwargs)
    ck._publish = stall
    cfg = load_config(sys.argv[1], sys.argv[2:])
    Trainer(cfg).train()
""")


def test_sigkill_during_checkpoint_write_resumes_from_previous(tmp_path):
    run = tmp_path / "run"
    args = [f"output_dir={run}", "train.steps=3", "checkpoint.every=1", "eval.size=0", *QUIET]
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, SMOKE, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        for line in proc.stdout:
            if line.strip() == "STALLED":
                break
        else:
            pytest.fail(f"the run never reached the stalled write: {proc.stderr.read()}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    trainer = Trainer(load_config(SMOKE, [*args, "resume=true"]))
    assert trainer._resume_from.name == "step-1"
    result = trainer.train()
    assert result.steps_done == 3
    assert [r["step"] for r in _train_lines(run)] == [1, 2, 3]


def test_bad_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['train.stepz'\]"):
        load_config(SMOKE, ["train.stepz=3"])
    with pytest.raises(ConfigError, match="train.steps must be an integer"):
        load_config(SMOKE, ["train.steps=three"])
    with pytest.raises(ConfigError, match="unknown method 'ppo'"):
        load_config(SMOKE, ["train.method=ppo"])
    with pytest.raises(ConfigError, match="exceeds task.train_size"):
        load_config(SMOKE, ["train.tasks_per_step=999"])


def test_missing_model_path_fails_before_work(tmp_path, capsys):
    code = main(["train", SMOKE, f"output_dir={tmp_path / 'r'}", "model.name=/no/such/model"])
    assert code == 2
    assert "/no/such/model" in capsys.readouterr().err
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_checkpoint_from_another_config_is_refused_before_work(tmp_path):
    run = tmp_path / "run"
    Trainer(load_config(SMOKE, [f"output_dir={run}", "train.steps=1", "eval.size=0", *QUIET])).train()
    with pytest.raises(ValueError, match="written by another config") as refused:
        Trainer(load_config(SMOKE, [f"output_dir={run}", "train.steps=2", "eval.size=0", "resume=true",
                                    "train.lr=0.5", *QUIET]))
    # the refusal names what differs from the run's config.yaml, and only that (train.steps may change)
    lr = load_config(SMOKE, []).train.lr
    assert f"differing from config.yaml in: train.lr: {lr!r} -> 0.5; only" in str(refused.value)
    with pytest.raises(ValueError, match=r"already holds a run \(metrics.jsonl, checkpoints"):
        Trainer(load_config(SMOKE, [f"output_dir={run}", "train.steps=2", "eval.size=0", *QUIET]))


def test_lora_adapter_per_role_trains_both_and_eval_reads_the_export(tmp_path, capsys):
    run = tmp_path / "lora"
    overrides = [f"output_dir={run}", "train.steps=1", "eval.size=4", "checkpoint.plots=false",
                 "checkpoint.tensorboard=false", "policies.kind=lora", "policies.names=[shared, aggregator]",
                 "agents.aggregator.policy=aggregator", "policies.lora.rank=4"]
    result = Trainer(load_config(SMOKE, overrides)).train()
    row = result.history[0]
    assert row["grad_norm/shared"] > 0 and row["grad_norm/aggregator"] > 0
    assert sorted(p.name for p in (run / "export").iterdir()) == ["aggregator", "shared"]
    capsys.readouterr()
    assert main(["eval", str(run), "--n", "4"]) == 0
    out = capsys.readouterr().out
    assert "evaluating the trained policies" in out and "parallel:" in out and "agent aggregator" in out


def test_eval_out_writes_the_episodes_beside_the_result(tmp_path, capsys):
    from srpo.cli.train import eval_episodes_path
    from srpo.record.episodes_log import read_records

    out = tmp_path / "eval" / "base.json"
    assert eval_episodes_path(out) == tmp_path / "eval" / "base.episodes.jsonl.gz"
    assert eval_episodes_path("x.out") == Path("x.out.episodes.jsonl.gz")
    assert main(["eval", SMOKE, "--n", "3", "--out", str(out), f"output_dir={tmp_path / 'run'}"]) == 0
    result = json.loads(out.read_text())
    records = read_records(eval_episodes_path(out))
    # one greedy episode per held-out task, in the result's order, scored as the result says
    assert [r["task_id"] for r in records] == result["task_ids"]
    assert len(records) == result["n"] == 3
    assert all(r["transitions"] and r["transitions"][0]["members"][0]["prompt"] for r in records)
    assert all(r["step"] == 0 for r in records)


def test_wandb_requested_without_the_package_is_a_clear_error(tmp_path):
    import importlib.util

    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    trainer = Trainer(load_config(SMOKE, [f"output_dir={tmp_path}", "eval.size=0", "checkpoint.wandb=true", *QUIET]))
    with pytest.raises(ModuleNotFoundError, match="wandb"):
        trainer.train()
