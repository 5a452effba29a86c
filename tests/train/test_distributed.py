"""Data-parallel training is exact: ranks that own whole tasks, weights over the step's totals and
summed gradients give the single-process gradient; and a real 2-process run (torchrun, gloo on
CPU) trains, logs and checkpoints once."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import make_episodes, prepare_full_step

from srpo.batch import build_flat_batch
from srpo.objective import METHODS, get_method, method_policy_loss
from srpo.objective.methods import step_counts
from srpo.train.distributed import check_data_parallel

REPO = Path(__file__).resolve().parents[2]


def _summed(counts: list[dict]) -> dict:
    """What srpo.train.distributed.sum_counts computes, without a process group."""
    agents: dict[str, int] = {}
    for c in counts:
        for a, n in c["agents"].items():
            agents[a] = agents.get(a, 0) + n
    return {"sets": sum(c["sets"] for c in counts), "members": sum(c["members"] for c in counts),
            "tokens": sum(c["tokens"] for c in counts), "agents": agents,
            "response_width": max(c["response_width"] for c in counts)}


def _loss_and_grad(spec, episodes, theta, totals=None):
    """Loss of a batch and its gradient w.r.t. a parameter shared by all rows ([T_max] offsets)."""
    batch = build_flat_batch(episodes, 0)
    m, t = batch.response_mask.shape
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(m, t, generator=g, dtype=torch.float64)
    filled, _ = prepare_full_step(spec, batch, old, totals=totals)
    # the log-ratio depends on the member's own tokens and on the shared parameter
    logprobs = old + 0.05 * torch.sin(batch.input_ids[:, batch.prompt_length:].double()) + theta[:t]
    loss, _ = method_policy_loss(spec, filled, logprobs)
    (grad,) = torch.autograd.grad(loss, theta)
    return loss.detach(), grad


DATA_PARALLEL = sorted(n for n in METHODS if n != "dr_mas")


def test_methods_pooling_across_tasks_are_refused_for_data_parallel_runs():
    for name in DATA_PARALLEL:
        check_data_parallel(get_method(name))
    with pytest.raises(ValueError, match=r"'dr_mas': its scale_keys \('agent',\) pool rewards across tasks"):
        check_data_parallel(get_method("dr_mas"))


@pytest.mark.parametrize("name", DATA_PARALLEL)
def test_two_ranks_owning_whole_tasks_sum_to_the_single_process_step(name):
    spec = get_method(name)
    episodes = make_episodes(num_tasks=4, group_size=3, set_sizes=(3, 1), seed=2)
    width = max(len(m.response_ids) for e in episodes for s in e.transitions for m in s.members)
    theta = torch.full((width,), 0.01, dtype=torch.float64, requires_grad=True)
    full_loss, full_grad = _loss_and_grad(spec, episodes, theta)
    # rank r owns tasks r, r + 2 (all G rollouts of a task stay on one rank)
    tasks = sorted({e.task.task_id for e in episodes})
    shards = [[e for e in episodes if tasks.index(e.task.task_id) % 2 == r] for r in (0, 1)]
    totals = _summed([step_counts(build_flat_batch(s, 0)) for s in shards])
    parts = [_loss_and_grad(spec, s, theta, totals) for s in shards]
    torch.testing.assert_close(sum(p[0] for p in parts), full_loss, rtol=0, atol=1e-10)
    torch.testing.assert_close(sum(p[1] for p in parts), full_grad, rtol=0, atol=1e-10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torchrun_two_processes_train_and_write_one_run_directory(tmp_path, dtype):
    """bfloat16: the model.dtype the GPU presets use, through the same gloo all-reduce. A full
    fine-tune computes in bf16 but keeps float32 weights (srpo.models.precision), so the export
    is float32 either way."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
           "-m", "srpo.cli", "train", str(REPO / "srpo" / "presets" / "smoke.yaml"), f"output_dir={run}",
           "train.steps=2", "eval.size=4", "checkpoint.every=1", "checkpoint.plots=false",
           "checkpoint.tensorboard=false", "train.threads=1", f"model.dtype={dtype}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if "loss" in r] == [1, 2]  # rank 0 logs, once per step
    assert proc.stdout.count("[eval before]") == 1 and proc.stdout.count("step 2/2") == 1
    assert (run / "checkpoints" / "step-2" / "trainer_state.json").is_file()
    assert json.loads((run / "export" / "shared" / "config.json").read_text())["dtype"] == "float32"
    # each rank rolled out half of the step's tasks: 4 tasks x G 2 -> 4 episodes on rank 0
    assert lines[1]["rollout/episodes"] == 4.0


_CLOSE_SCRIPT = """
import os, torch.distributed as dist
from srpo.train.distributed import DistContext, close_distributed, init_distributed
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"], RANK="0", WORLD_SIZE="1")
dist.init_process_group("gloo")               # made by the caller (as accelerate does)
os.environ["WORLD_SIZE"] = "2"                # what a launcher would set
ctx = init_distributed("cpu")
assert not ctx.owns_group, ctx
close_distributed(ctx)
assert dist.is_initialized(), "a group the caller made was destroyed"
close_distributed(DistContext(0, 2, 0, owns_group=True))
assert not dist.is_initialized(), "the group init_distributed made outlived close_distributed"
close_distributed(DistContext(0, 2, 0, owns_group=True))  # again: the constructor's error path, then train()
print("ok")
"""


def test_close_distributed_destroys_only_the_group_init_distributed_made():
    """A rank that exits with its gloo group alive can abort at interpreter exit (SIGABRT after all
    of its work; see srpo.train.distributed.close_distributed), so train() destroys the group it
    made, and never one the caller made."""
    proc = subprocess.run([sys.executable, "-c", _CLOSE_SCRIPT], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**__import__("os").environ, "PORT": str(_free_port())})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
