"""Shared prompt prefill (rollout.hf.share_prefill) on and off, side by side in one process.

Rolls out the same step of a config twice per repetition, alternating (off, on, off, on, ...),
with the torch seed reset before each, so both generate from the same random stream; reports
the median rollout seconds of each, their ratio, and how many episodes came out token-identical
(float rounding of the smaller prefill matmul may move a sampled token now and then).

    .venv/bin/python benchmarks/bench_prefill_sharing.py                       # the default job's step
    .venv/bin/python benchmarks/bench_prefill_sharing.py --config benchmarks/comlrl/srpo_magrpo.yaml
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from srpo.build import build_rollout, load_tasks
from srpo.config import load_config


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=None, help="a config (default: the default job's preset)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    from srpo.cli.train import DEFAULT_CONFIG

    # the hf engine (the default job's is ctranslate2, which has no shared prefill)
    cfg = load_config(args.config or DEFAULT_CONFIG, ["rollout.backend=hf", "rollout.hf.share_prefill=false",
                                                      *args.overrides])
    torch.set_num_threads(args.threads)
    runner, workflow = build_rollout(cfg)
    tasks = load_tasks(cfg.task, split="train", limit=cfg.train.tasks_per_step)
    for model in runner.backend.policies.models():
        model.eval()
    seconds: dict[bool, list[float]] = {False: [], True: []}
    outputs: dict[bool, list] = {}
    for rep in range(args.reps + 1):  # the first repetition warms up
        for share in (False, True):
            runner.backend.share_prefill = share
            runner.seed = 0
            torch.manual_seed(0)
            t0 = time.perf_counter()
            with torch.no_grad():
                result = runner.run(tasks, workflow, group_size=cfg.group_size)
            if rep:
                seconds[share].append(time.perf_counter() - t0)
            outputs[share] = [[m.response_ids for t in e.transitions for m in t.members] for e in result.episodes]
    same = sum(a == b for a, b in zip(outputs[False], outputs[True]))
    off, on = statistics.median(seconds[False]), statistics.median(seconds[True])
    rows = len(tasks) * cfg.group_size
    print(f"{args.config or 'default job'}: {len(tasks)} tasks x {cfg.group_size} rollouts, workflow {workflow.name}, "
          f"{args.threads} threads, median of {args.reps}")
    print(f"  rollout seconds: off {off:.2f}  on {on:.2f}  ratio on/off {on / off:.2f}x")
    print(f"  prefill rows shared per rollout: {runner.backend.stats.prefill_rows_shared // (args.reps + 1)}")
    print(f"  token-identical episodes: {same}/{rows}")


if __name__ == "__main__":
    main()
