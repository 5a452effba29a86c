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
from pathlib import Path

from srpo.train.stats import paired_comparison

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "cae2695"


def run_side(name: str, code: Path, config: str | None, overrides: list[str], out_dir: Path) -> dict:
    run_dir = out_dir / name
    cmd = ["/usr/bin/time", "-f", "%e %M", sys.executable, "-m", "srpo.cli", "train",
           *([config] if config else []), f"output_dir={run_dir}", *overrides]
    env = {**os.environ, "PYTHONPATH": str(code)}
    print(f"[{name}] {' '.join(cmd[3:])}  (code: {code.name})", flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"[{name}] failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    elapsed, max_kb = proc.stderr.strip().splitlines()[-1].split()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
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
    out = {"wall_seconds": wall, "time_elapsed": float(elapsed), "peak_rss_gb": int(max_kb) / 1024**2,
           "steps": len(steps), "phase_seconds": phases, "eval_seconds": eval_seconds,
           # each step's phases, to tell a slow step from a slow job
           "per_step": [{"step": r["step"], **{k[5:]: round(v, 3) for k, v in r.items() if k.startswith("time/")}}
                        for r in steps]}
    if "before" in evals and "after" in evals:
        c = paired_comparison(evals["before"]["correct"], evals["after"]["correct"])
        out["heldout"] = {"n": c.n, "before": sum(evals["before"]["correct"]) / c.n,
                          "after": sum(evals["after"]["correct"]) / c.n, "diff": c.diff.estimate,
                          "low": c.diff.low, "high": c.diff.high, "gained": c.gained, "lost": c.lost, "p": c.p_value}
        # kept in the JSON so that a later --skip-before run can still pair the two trained policies
        out["heldout_after_correct"] = [int(c) for c in evals["after"]["correct"]]
    print(f"[{name}] {wall / 60:.1f} min, {out['peak_rss_gb']:.1f} GB, {len(steps)} steps", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default=BEFORE, help=f"the commit to compare against (default {BEFORE})")
    p.add_argument("--config", default=None, help="a config both sides load (default: each side's default job)")
    p.add_argument("--out", default="results/bench/before_after.json")
    p.add_argument("--skip-before", help="a JSON written earlier by this script: reuse its 'before' side")
    p.add_argument("--after", action="append", default=[], metavar="KEY=VALUE",
                   help="an override for the after side only (a setting the before code does not know, "
                        "e.g. rollout.hf.share_prefill=true); repeatable")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-before-after-") as tmp:
        tmp = Path(tmp)
        if args.skip_before:
            before = json.loads(Path(args.skip_before).read_text())["before"]
        else:
            tree = tmp / "before-code"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.before],
                           check=True, capture_output=True)
            try:
                before = run_side("before", tree, args.config, args.overrides, tmp)
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        after = run_side("after", ROOT, args.config, [*args.overrides, *args.after], tmp)
    report = {"before_commit": args.before, "config": args.config or "default job", "overrides": args.overrides,
              "after_only_overrides": args.after, "before": before, "after": after,
              "ratio_after_over_before": {
                  "wall": after["wall_seconds"] / before["wall_seconds"],
                  "peak_rss": after["peak_rss_gb"] / before["peak_rss_gb"],
                  **{f"phase/{k}": after["phase_seconds"][k] / v for k, v in before["phase_seconds"].items()
                     if v > 0 and k in after["phase_seconds"]},
              }}
    b_correct, a_correct = before.get("heldout_after_correct"), after.get("heldout_after_correct")
    if b_correct is not None and a_correct is not None and len(b_correct) == len(a_correct):
        c = paired_comparison(b_correct, a_correct)
        report["after_vs_before_heldout"] = {"diff": c.diff.estimate, "low": c.diff.low, "high": c.diff.high,
                                             "p": c.p_value, "gained": c.gained, "lost": c.lost}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k not in ("before", "after")}, indent=1))
    for name, side in (("before", before), ("after", after)):
        h = side.get("heldout")
        if h:
            print(f"{name}: {side['wall_seconds'] / 60:.2f} min, {side['steps']} steps; held-out {100 * h['before']:.1f}% -> "
                  f"{100 * h['after']:.1f}% ({100 * h['diff']:+.1f} [{100 * h['low']:+.1f}, {100 * h['high']:+.1f}], "
                  f"{h['gained']} gained / {h['lost']} lost, p = {h['p']:.2g})")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
