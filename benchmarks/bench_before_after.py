"""A job before and after a code change, alone, one after the other: wall time, each phase,
peak memory and the held-out result.

"before" is a commit (checked out in a temporary git worktree and run with this checkout's
.venv, PYTHONPATH pointing at it); "after" is this checkout. Each side runs `srpo train` on
its own default job (or on --config, which must load under both), with the same overrides, in
a fresh process under /usr/bin/time. Reported: wall time, peak RSS, the sum over steps of each
logged phase (time/rollout, time/update, ...), steps, held-out accuracy before and after
training with the paired test of each run, and the ratios after / before.

    .venv/bin/python benchmarks/bench_before_after.py                      # default job, vs BEFORE
    .venv/bin/python benchmarks/bench_before_after.py --before HEAD~3 --config srpo/presets/math/parallel.yaml
    # one cell of the CPU study (math-parallel, srpo, seed 0, its `common` budget), shared prefill after
    .venv/bin/python benchmarks/bench_before_after.py --config studies/configs/math_parallel.yaml \
        --out results/bench/before_after_cell.json --after rollout.hf.share_prefill=true \
        train.threads=1 train.steps=5 train.lr=8.0e-4 train.tasks_per_step=4 eval.size=64 checkpoint.every=1 seed=0

Run it with nothing else on the machine (two CPU-bound jobs side by side slow each other 3-7x).
BEFORE is the commit before this project's learning-per-CPU-second work (zero-advantage sets
skipped, own sampler, 40-step default job, shared prefill), right after the training-core fix.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from srpo.record.accuracy import paired_comparison

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "cae2695"


def run_side(name: str, code: Path, config: str | None, overrides: list[str], out_dir: Path) -> dict:
    """One `srpo train` in a fresh process under /usr/bin/time; its record is also written to
    OUT_DIR/<name>.json, and a record already there is reused (a queue of runs survives a kill).
    The record names the code it ran (`commit`, `dirty` of CODE, taken when the run starts)."""
    run_dir = out_dir / name
    done = out_dir / f"{name}.json"
    if done.is_file():
        print(f"[{name}] reusing {done}", flush=True)
        return json.loads(done.read_text())
    cmd = ["/usr/bin/time", "-f", "%e %M", sys.executable, "-m", "srpo.cli", "train",
           *([config] if config else []), f"output_dir={run_dir}", *overrides]
    env = {**os.environ, "PYTHONPATH": str(code)}
    print(f"[{name}] {' '.join(cmd[3:])}  (code: {code.name})", flush=True)
    code_state = provenance(code)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"[{name}] failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    elapsed, max_kb = proc.stderr.strip().splitlines()[-1].split()
    out = run_record(run_dir, wall, float(elapsed), int(max_kb)) | {"overrides": overrides, **code_state}
    done.write_text(json.dumps(out, indent=1))
    print(f"[{name}] {wall / 60:.1f} min, {out['peak_rss_gb']:.1f} GB, {out['steps']} steps", flush=True)
    return out


def run_cells(cells: list[tuple], run_one, jobs: int) -> list:
    """run_one(*cell) for every cell, JOBS at a time (threads, each waiting on its own `srpo
    train` process), started in the given order; their results in that order."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda cell: run_one(*cell), cells))


def metric_rows(run_dir: Path) -> list[dict]:
    """The run's metrics.jsonl, one dict a line (training steps and evaluations)."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def run_record(run_dir: Path, wall: float, elapsed: float, max_kb: int) -> dict:
    """What one finished run measured: wall, peak RSS, each phase summed over steps, held-out."""
    rows = metric_rows(run_dir)
    steps = [r for r in rows if "loss" in r]
    phases: dict[str, float] = {}
    for r in steps:
        for k, v in r.items():
            if k.startswith("time/"):
                phases[k[5:]] = phases.get(k[5:], 0.0) + v
    evals = {}
    for when in ("before", "after"):
        path = run_dir / "eval" / f"{when}.json"
        if path.exists():
            evals[when] = json.loads(path.read_text())
    # the evaluation before training is logged at step 0, the one after at the last step
    eval_seconds = {("before" if r["step"] == 0 else "after"): r["eval/seconds"] for r in rows if "eval/seconds" in r}
    out = {"wall_seconds": wall, "time_elapsed": elapsed, "peak_rss_gb": max_kb / 1024**2,
           "steps": len(steps), "phase_seconds": phases, "eval_seconds": eval_seconds,
           # each step's phases, to tell a slow step from a slow job
           "per_step": [{"step": r["step"], **{k[5:]: round(v, 3) for k, v in r.items() if k.startswith("time/")},
                         **({"peak_rss_gb": r["memory/peak_rss_gb"]} if "memory/peak_rss_gb" in r else {})}
                        for r in steps]}
    if "before" in evals and "after" in evals:
        c = paired_comparison(evals["before"]["correct"], evals["after"]["correct"])
        out["heldout"] = {"n": c.n, "before": sum(evals["before"]["correct"]) / c.n,
                          "after": sum(evals["after"]["correct"]) / c.n, "diff": c.diff.estimate,
                          "low": c.diff.low, "high": c.diff.high, "gained": c.gained, "lost": c.lost, "p": c.p_value}
        # kept in the JSON so that a later --skip-before run can still pair the two trained policies
        out["heldout_after_correct"] = [int(c) for c in evals["after"]["correct"]]
        # how often the trained policy gave its most common answer (a constant answer is a
        # gain the reward paid for without the skill; None from code before the field existed)
        out["heldout_after_top_answer"] = {k: evals["after"].get(k) for k in ("top_answer", "top_answer_share")}
    return out


def summarize(sides: dict[str, list[dict]]) -> dict:
    """Each side's spread over seeds: wall, peak RSS and the held-out paired change (mean, min,
    max), and whether every seed's change is positive with p < 0.05."""
    out = {}
    for name, runs in sides.items():
        walls = [r["wall_seconds"] for r in runs]
        rss = [r["peak_rss_gb"] for r in runs]
        diffs = [r["heldout"]["diff"] for r in runs if "heldout" in r]
        ps = [r["heldout"]["p"] for r in runs if "heldout" in r]
        out[name] = {"seeds": len(runs), "wall_mean": sum(walls) / len(walls), "wall_min": min(walls),
                     "wall_max": max(walls), "peak_rss_gb_max": max(rss),
                     **({"heldout_diff_mean": sum(diffs) / len(diffs), "heldout_diff_min": min(diffs),
                         "heldout_diff_max": max(diffs),
                         "every_seed_positive_p05": all(d > 0 and p < 0.05 for d, p in zip(diffs, ps))}
                        if diffs else {})}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default=BEFORE, help=f"the commit to compare against (default {BEFORE})")
    p.add_argument("--config", default=None, help="a config both sides load (default: each side's default job)")
    p.add_argument("--out", default="results/bench/before_after.json")
    p.add_argument("--skip-before", help="a JSON written earlier by this script: reuse its 'before' side")
    p.add_argument("--only", choices=("before", "after"),
                   help="run one side only (the other from --skip-before, or none)")
    p.add_argument("--seeds", type=int, nargs="+", help="run each side once per seed (override seed=S); "
                   "the report gives each seed and the spread")
    p.add_argument("--after", action="append", default=[], metavar="KEY=VALUE",
                   help="an override for the after side only (a setting the before code does not know, "
                        "e.g. rollout.hf.share_prefill=true); repeatable")
    p.add_argument("--runs-dir", help="keep each run's directory and record here (default: a temporary "
                   "folder); a record already there is reused, so a killed queue resumes")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    seeds = args.seeds or [None]
    seeded = lambda s: [] if s is None else [f"seed={s}"]
    with tempfile.TemporaryDirectory(prefix="bench-before-after-") as scratch:
        tmp = Path(args.runs_dir) if args.runs_dir else Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        before_runs: list[dict] = []
        if args.skip_before:
            earlier = json.loads(Path(args.skip_before).read_text())
            before_runs = earlier.get("before_seeds") or [earlier["before"]]
        elif args.only != "after":
            tree = Path(scratch) / "before-code"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.before],
                           check=True, capture_output=True)
            try:
                for s in seeds:
                    before_runs.append(run_side(f"before-seed{s}", tree, args.config,
                                                [*args.overrides, *seeded(s)], tmp) | {"seed": s})
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        after_runs = [] if args.only == "before" else [
            run_side(f"after-seed{s}", ROOT, args.config, [*args.overrides, *seeded(s), *args.after], tmp)
            | {"seed": s} for s in seeds]
    # each run's record names its own code (commit, dirty); this is the checkout that wrote the file
    report = {"before_commit": args.before, "written_by": provenance(ROOT), "config": args.config or "default job",
              "overrides": args.overrides,
              "after_only_overrides": args.after, "seeds": seeds,
              "before": before_runs[0] if before_runs else None, "after": after_runs[0] if after_runs else None,
              "before_seeds": before_runs, "after_seeds": after_runs,
              "spread": summarize({k: v for k, v in (("before", before_runs), ("after", after_runs)) if v})}
    if before_runs and after_runs:
        before, after = before_runs[0], after_runs[0]
        report["ratio_after_over_before"] = {
            "wall": report["spread"]["after"]["wall_mean"] / report["spread"]["before"]["wall_mean"],
            "peak_rss": report["spread"]["after"]["peak_rss_gb_max"] / report["spread"]["before"]["peak_rss_gb_max"],
            **{f"phase/{k}": after["phase_seconds"][k] / v for k, v in before["phase_seconds"].items()
               if v > 0 and k in after["phase_seconds"]},
        }
        b_correct, a_correct = before.get("heldout_after_correct"), after.get("heldout_after_correct")
        if b_correct is not None and a_correct is not None and len(b_correct) == len(a_correct):
            c = paired_comparison(b_correct, a_correct)
            report["after_vs_before_heldout"] = {"diff": c.diff.estimate, "low": c.diff.low, "high": c.diff.high,
                                                 "p": c.p_value, "gained": c.gained, "lost": c.lost}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k not in ("before", "after", "before_seeds", "after_seeds")},
                     indent=1))
    for name, runs in (("before", before_runs), ("after", after_runs)):
        for side in runs:
            h = side.get("heldout")
            if h:
                print(f"{name} seed {side['seed']}: {side['wall_seconds'] / 60:.2f} min, {side['steps']} steps, "
                      f"{side['peak_rss_gb']:.1f} GB; held-out {100 * h['before']:.1f}% -> "
                      f"{100 * h['after']:.1f}% ({100 * h['diff']:+.1f} "
                      f"[{100 * h['low']:+.1f}, {100 * h['high']:+.1f}], "
                      f"{h['gained']} gained / {h['lost']} lost, p = {h['p']:.2g})")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
