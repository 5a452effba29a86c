"""The default job on reasoning-gym tasks it was not tuned on: only `task.dataset`,
`task.difficulty` and `task.train_size` change, as a new user would change them.

Each (task, seed) is one `srpo train` in a fresh process with `train.threads=1`, JOBS of them
side by side (so no wall time is reported: two runs on 2 cores slow each other). Reported per
run: held-out accuracy before and after with the paired test, the most common held-out answer
before and after (a gain that is one constant answer is not a skill), informative tasks per
step and the share of sampled answers cut by the token budget per step.

    .venv/bin/python benchmarks/untuned_tasks.py --tasks chain_sum number_format --seeds 0 \\
        --out results/bench/untuned.json --runs-dir /tmp/untuned

A record already in RUNS_DIR/<task>-seed<S>.json is reused, so a killed queue resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_before_after import ROOT, metric_rows, run_cells, run_side
from provenance import provenance

# tasks no preset uses, at a difficulty where the base model is right 10-25% of the time
# (greedy, 256 held-out problems; docs/benchmarks.md)
TASKS: dict[str, str] = {
    "chain_sum": "{min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 2}",
    "number_format": "{min_num_candidates: 2, max_num_candidates: 2, min_n: 1, max_n: 100}",
    "products": "{min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 2}",
}
TRAIN_SIZE = 1000  # these spaces are smaller than the default's 2000 distinct problems


def overrides(task: str, seed: int, extra: list[str]) -> list[str]:
    return [f"task.dataset={task}", f"task.difficulty={TASKS[task]}", f"task.train_size={TRAIN_SIZE}",
            f"seed={seed}", "train.threads=1", *extra]


def per_step(run_dir: Path) -> dict:
    steps = [r for r in metric_rows(run_dir) if "loss" in r]
    return {"informative_tasks_per_step": [r.get("rollout/dynamic/informative_tasks") for r in steps],
            "stop_length_share_per_step": [round(r["rollout/stop/length"], 3) for r in steps
                                           if "rollout/stop/length" in r]}


def top_answer(run_dir: Path, when: str) -> list:
    ev = json.loads((run_dir / "eval" / f"{when}.json").read_text())
    return [ev.get("top_answer"), ev.get("top_answer_share")]


def one(task: str, seed: int, extra: list[str], runs_dir: Path) -> dict:
    name = f"{task}-seed{seed}"
    rec = run_side(name, ROOT, None, overrides(task, seed, extra), runs_dir)
    h = rec["heldout"]
    return {"task.dataset": task, "task.difficulty": TASKS[task], "task.train_size": TRAIN_SIZE,
            "seed": seed, "overrides": extra, "heldout": h,
            # the code this run ran (taken when it started; None in a record from before the field)
            "commit": rec.get("commit"), "dirty": rec.get("dirty"),
            "top_answer_before": top_answer(runs_dir / name, "before"),
            "top_answer_after": top_answer(runs_dir / name, "after"),
            **per_step(runs_dir / name)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--jobs", type=int, default=2, help="runs side by side (each train.threads=1)")
    p.add_argument("--out", required=True)
    p.add_argument("--runs-dir", required=True)
    p.add_argument("overrides", nargs="*", help="more key=value overrides for every run")
    args = p.parse_args()
    runs_dir = Path(args.runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(t, s) for s in args.seeds for t in args.tasks]
    runs = run_cells(jobs, lambda task, seed: one(task, seed, args.overrides, runs_dir), args.jobs)
    out = {"what": "the default job with only task.dataset, task.difficulty and task.train_size "
                   f"changed (train.threads=1, {args.jobs} runs side by side: no wall time)",
           "written_by": provenance(ROOT), "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    for r in runs:
        h = r["heldout"]
        print(f"{r['task.dataset']} seed {r['seed']}: {100 * h['before']:.1f}% -> {100 * h['after']:.1f}% "
              f"({100 * h['diff']:+.1f} [{100 * h['low']:+.1f}, {100 * h['high']:+.1f}], {h['gained']} / "
              f"{h['lost']}, p = {h['p']:.2g}); top answer {r['top_answer_before']} -> {r['top_answer_after']}")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
