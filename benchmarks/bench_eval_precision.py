"""A trained run's policy evaluated again in another precision / engine setting, paired with the
run's own evaluation after training, problem by problem.

Why: a bf16 run evaluates through a merged bf16 copy of each LoRA policy (`rollout.hf.merge_lora`),
and bf16 weights round small LoRA deltas; this says whether the accuracy that evaluation reports
is that of the policy the trainer trained (the checkpoint's float32 adapters on the run's base,
computed in float32, unmerged).

    .venv/bin/python benchmarks/bench_eval_precision.py RUN_DIR model.dtype=float32 rollout.hf.merge_lora=false

Prints both accuracies, the problems on which they agree and the paired test.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from srpo.build import build_policies, build_rollout, load_tasks
from srpo.config import load_config
from srpo.record.accuracy import paired_comparison
from srpo.record.checkpoint import load_checkpoint_policies
from srpo.record.evaluate import evaluate
from srpo.record.policies import checkpointed_models

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("overrides", nargs="*", help="key=value over the run's config (e.g. model.dtype=float32)")
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    args = p.parse_args()
    code = provenance()  # the code of this evaluation, taken when it starts (the run's own: its config)
    cfg = load_config(args.run_dir / "config.yaml", [f"output_dir={args.run_dir}", *args.overrides])
    policies = build_policies(cfg.model, cfg.policies, cfg.device)
    ckpt = load_checkpoint_policies(args.run_dir, checkpointed_models(policies))
    runner, workflow = build_rollout(cfg, policies=policies)
    size = cfg.eval.size if cfg.eval.size is not None else cfg.task.heldout_size
    tasks = load_tasks(cfg.task, split="heldout", limit=size)
    result, _ = evaluate(runner, workflow, tasks, seed=cfg.seed, batch_tasks=cfg.eval.batch_tasks)
    run_after = json.loads((args.run_dir / "eval" / "after.json").read_text())["correct"]
    c = paired_comparison(run_after, result.correct)
    agree = sum(int(a) == int(b) for a, b in zip(run_after, result.correct))
    out = {"run_dir": args.run_dir.name, "checkpoint": ckpt.name, "overrides": args.overrides, **code,
           "compute_dtype": policies.compute_dtype, "n": c.n,
           "run_after_accuracy": sum(run_after) / c.n, "this_accuracy": sum(result.correct) / c.n,
           "same_verdict": agree, "diff": c.diff.estimate, "low": c.diff.low, "high": c.diff.high,
           "p": c.p_value, "seconds": result.seconds}
    print(json.dumps(out, indent=1))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
