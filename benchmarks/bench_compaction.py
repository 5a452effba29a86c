"""Dropping finished rows from the batch (`rollout.hf.compact_finished`) against transformers
`generate`, on the default job's rollout and evaluation shapes.

One process, one model: the default job's rollout is built twice (compact_finished off / on; the
same merged bf16 copy and settings otherwise), then alternated: R rounds of the step's shape
(18 tasks x 4 rollouts x 3 debaters = 216 rows, 24 new tokens, temperature 1) on fresh training
tasks each round (the same tasks and seed for both sides of a round), and the greedy evaluation of
256 held-out problems. Reported: seconds and generated tokens of each, and the ratios on / off.
The sampled rounds draw other tokens once a row has left the batch (the random stream differs),
so their token counts differ a little; the evaluation is greedy and should generate the same.

    .venv/bin/python benchmarks/bench_compaction.py              # 4 rounds, 2 threads
    .venv/bin/python benchmarks/bench_compaction.py --rounds 6 --threads 1

Run it alone: another job on the machine skews both sides.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from srpo.build import build_rollout, load_tasks
from srpo.config import load_config
from srpo.config.presets import PRESETS_DIR
from srpo.record.evaluate import evaluate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tasks", type=int, default=18, help="tasks a round (x group_size x 3 debaters rows)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    sides = {}
    for name, flag in (("off", "false"), ("on", "true")):
        cfg = load_config(PRESETS_DIR / "default.yaml", [f"rollout.hf.compact_finished={flag}"])
        sides[name] = build_rollout(cfg)
    train = load_tasks(cfg.task, split="train", limit=a.tasks * (a.rounds + 1))
    held = load_tasks(cfg.task, split="heldout", limit=256)
    results = {name: {"round_s": [], "round_tokens": [], "eval_s": [], "eval_acc": []} for name in sides}

    def round_(name: str, tasks, seed: int) -> None:
        runner, workflow = sides[name]
        runner.seed = seed
        stats = runner.backend.stats
        before = stats.generated_tokens
        start = time.perf_counter()
        with torch.no_grad():
            runner.run(tasks, workflow, group_size=cfg.group_size)
        results[name]["round_s"].append(time.perf_counter() - start)
        results[name]["round_tokens"].append(stats.generated_tokens - before)

    for name in sides:  # warm-up: merged copies built, first-call costs paid
        round_(name, train[: a.tasks], 0)
        results[name] = {k: [] for k in results[name]}
    for r in range(a.rounds):
        tasks = train[a.tasks * (r + 1): a.tasks * (r + 2)]
        for name in ("off", "on") if r % 2 == 0 else ("on", "off"):
            round_(name, tasks, 100 + r)
    for r in range(2):
        for name in ("off", "on") if r % 2 == 0 else ("on", "off"):
            runner, workflow = sides[name]
            start = time.perf_counter()
            result, _ = evaluate(runner, workflow, held, seed=0, batch_tasks=cfg.eval.batch_tasks)
            results[name]["eval_s"].append(time.perf_counter() - start)
            results[name]["eval_acc"].append(result.accuracy.estimate)
    print(
        f"default job shapes, {a.threads} threads, torch {torch.__version__}: {a.rounds} sampled rounds of "
        f"{a.tasks * cfg.group_size * 3} rows x {cfg.sampling.max_new_tokens} new tokens, 2 greedy evaluations of 256"
    )
    for name, r in results.items():
        print(
            f"  compact_finished {name:3s}: round {statistics.median(r['round_s']):.2f} s median "
            f"({', '.join(f'{s:.2f}' for s in r['round_s'])}), "
            f"{sum(r['round_tokens']) / sum(r['round_s']):.0f} tokens/s; "
            f"evaluation {', '.join(f'{s:.1f}' for s in r['eval_s'])} s, accuracy {r['eval_acc'][0]:.4f}"
        )
    on, off = results["on"], results["off"]
    print(
        f"  on / off: round {statistics.median(on['round_s']) / statistics.median(off['round_s']):.2f}x, "
        f"evaluation {statistics.median(on['eval_s']) / statistics.median(off['eval_s']):.2f}x"
    )


if __name__ == "__main__":
    main()
