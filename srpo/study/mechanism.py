"""The testbed mechanism study: many short training runs of the cover testbed, resumable.

A spec (benchmarks/studies/testbed_mechanism.yaml) lists blocks; a block crosses presets (set-size
regimes, srpo/presets/testbed/*.yaml), stress levels (reuse x learning rate: any dotted overrides),
methods and seeds. Every run is the real trainer on the real workflow, in-process:

    python -m srpo.study.mechanism run benchmarks/studies/testbed_mechanism.yaml --jobs 2
    python -m srpo.study.mechanism report benchmarks/studies/testbed_mechanism.yaml

Layout: <output>/cells/<block>/<preset>/<level>/<method>/seed<k>.json, one compact record per
run (per-step series of the metrics the analysis reads, and the run's collapse verdict), written
atomically when the run ends; a run with a record is done. `run` starts `jobs` worker processes
(each one torch thread) that split the pending runs, in priority order: blocks as listed, then
seed-major, so a partial study is balanced over its cells. The run directories themselves are
temporary (deleted once the record is written).

Collapse (fixed before the study, docs/results.md): a run collapsed if
  * nonfinite: a logged loss, reward or gradient norm is not finite, or the run raised; or
  * degraded: its final reward (mean of the last 10 steps) is below its initial reward (mean of
    the first 3 steps) minus 0.05; or
  * stuck: its final reward is below 0.9 while, over the last 10 steps, at least 90% of advantage
    groups were degenerate (every rollout of the task got the same reward: the policy has
    become deterministic on a suboptimal joint action and no gradient is left to leave it).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from srpo.study.mechanism_plan import Run, load_spec, plan_runs

# what the analysis reads from each step's metrics (None where a step did not log it)
SERIES = ("reward/mean", "entropy", "adv/degenerate_share", "clip/all/frac", "loss",
          "update/skipped_set_share", "approx_kl")
SIZED_SERIES = ("ratio/k{k}/log_std", "set_ratio/k{k}/log_std", "clip/k{k}/frac")
FINAL_STEPS, INITIAL_STEPS = 10, 3
STUCK_REWARD, STUCK_DEGENERATE, DEGRADED_MARGIN = 0.9, 0.9, 0.05


def run_overrides(spec: dict[str, Any], run: Run, run_dir: Path) -> tuple[str, list[str]]:
    """(config file, dotted overrides) of one run: common, then the block's, the level's, the
    method's, then seed and output_dir."""
    block = spec["blocks"][run.block]
    values: dict[str, Any] = {}
    for part in (spec.get("common", {}), block.get("common", {}), block["levels"][run.level],
                 spec["methods"][run.method]):
        values.update(part)
    values["seed"] = run.seed
    values["output_dir"] = str(run_dir)
    overrides = [f"{k}={_yaml_value(v)}" for k, v in values.items()]
    return spec["presets"][run.preset], overrides


def _yaml_value(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return yaml.safe_dump(value, default_flow_style=True).strip()
    return str(value)


def _finite(x: Any) -> bool:
    return x is None or (isinstance(x, (int, float)) and math.isfinite(x))


def _series(history: list[dict[str, float]], key: str) -> list[float | None]:
    return [h.get(key) for h in history]


def collapse_verdict(reward: list[float], degenerate: list[float | None], nonfinite: bool) -> dict[str, Any]:
    """The preregistered collapse rule (module doc) applied to one run's series."""
    if nonfinite or not reward:
        return {"collapsed": True, "reason": "nonfinite", "initial": None, "final": None}
    initial = sum(reward[:INITIAL_STEPS]) / len(reward[:INITIAL_STEPS])
    final = sum(reward[-FINAL_STEPS:]) / len(reward[-FINAL_STEPS:])
    degen = [d if d is not None else 1.0 for d in degenerate[-FINAL_STEPS:]]
    degen_share = sum(degen) / len(degen)
    reason = None
    if final < initial - DEGRADED_MARGIN:
        reason = "degraded"
    elif final < STUCK_REWARD and degen_share >= STUCK_DEGENERATE:
        reason = "stuck"
    return {"collapsed": reason is not None, "reason": reason, "initial": initial, "final": final,
            "final_degenerate_share": degen_share}


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.5g}")


def execute(spec: dict[str, Any], run: Run, scratch: Path) -> dict[str, Any]:
    """Trains one run in this process and returns its record."""
    from srpo.config import load_config
    from srpo.train.trainer import Trainer

    run_dir = scratch / run.label.replace("/", "_")
    shutil.rmtree(run_dir, ignore_errors=True)
    config, overrides = run_overrides(spec, run, run_dir)
    cfg = load_config(config, overrides)
    start = time.perf_counter()
    error = None
    try:
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # a line per step
            history = Trainer(cfg).train().history
    except (ValueError, RuntimeError, FloatingPointError) as e:  # a diverged run is a result
        history, error = [], f"{type(e).__name__}: {e}"
    wall = time.perf_counter() - start
    shutil.rmtree(run_dir, ignore_errors=True)
    sizes = sorted(set(cfg.task.testbed.set_sizes))
    series = {key: [_round(v) for v in _series(history, key)] for key in SERIES}
    for template in SIZED_SERIES:
        for k in sizes:
            key = template.format(k=k)
            series[key] = [_round(v) for v in _series(history, key)]
    grad = [[h[k] for k in h if k.startswith("grad_norm/")] for h in history]
    series["grad_norm/mean"] = [_round(sum(g) / len(g)) if g else None for g in grad]
    nonfinite = error is not None or not all(_finite(v) for key in ("reward/mean", "loss", "grad_norm/mean")
                                             for v in series[key])
    verdict = collapse_verdict([v for v in series["reward/mean"] if v is not None],
                               series["adv/degenerate_share"], nonfinite)
    from srpo.study.runner import code_version

    return {"run": run.__dict__, "config": config, "overrides": overrides[:-1], "code": code_version(),
            "steps": len(history),
            "wall_seconds": round(wall, 2), "error": error, **verdict, "series": series}


def _write_record(path: Path, data: dict[str, Any]) -> None:
    from srpo.study.runner import _write_json

    path.parent.mkdir(parents=True, exist_ok=True)
    _write_json(path, data, compact=True)


def pending_runs(spec: dict[str, Any], blocks: set[str] | None = None) -> list[Run]:
    output = Path(spec["output"])
    return [r for r in plan_runs(spec)
            if (blocks is None or r.block in blocks) and not r.record_path(output).exists()]


def work(spec_path: str, worker: int, jobs: int, deadline: float | None, blocks: set[str] | None) -> int:
    """One worker: runs pending[worker::jobs] until done or past the deadline (epoch seconds)."""
    import torch

    torch.set_num_threads(1)
    spec = load_spec(spec_path)
    output = Path(spec["output"])
    scratch = Path(tempfile.mkdtemp(prefix=f"srpo-mechanism-{worker}-"))
    mine = pending_runs(spec, blocks)[worker::jobs]
    durations: list[float] = []
    try:
        for i, run in enumerate(mine):
            expected = max(durations[-20:]) if durations else 0.0
            if deadline is not None and time.time() + expected > deadline:
                print(f"[worker {worker}] time is up; {len(mine) - i} runs left", flush=True)
                return 0
            t0 = time.perf_counter()
            record = execute(spec, run, scratch)
            _write_record(run.record_path(output), record)
            durations.append(time.perf_counter() - t0)
            print(f"[worker {worker}] {i + 1}/{len(mine)} {run.label}: final {record['final']} "
                  f"collapsed={record['collapsed']} ({durations[-1]:.1f} s)", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m srpo.study.mechanism", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the pending runs (resumable)")
    r.add_argument("spec")
    r.add_argument("--jobs", type=int, default=1, help="worker processes (one torch thread each)")
    r.add_argument("--max-minutes", type=float, default=None, help="stop starting runs after this")
    r.add_argument("--blocks", default=None, help="comma-separated blocks to run (default: all)")
    r.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    s = sub.add_parser("status", help="runs done / planned per block")
    s.add_argument("spec")
    rep = sub.add_parser("report", help="tables, tests and plots of the finished runs")
    rep.add_argument("spec")
    args = p.parse_args(argv)
    spec = load_spec(args.spec)
    if args.command == "status":
        output = Path(spec["output"])
        for name in spec["blocks"]:
            planned = [r for r in plan_runs(spec) if r.block == name]
            done = sum(r.record_path(output).exists() for r in planned)
            print(f"{name}: {done}/{len(planned)} runs done")
        return 0
    if args.command == "report":
        from srpo.study.mechanism_report import write_report

        print(write_report(spec))
        return 0
    blocks = set(args.blocks.split(",")) if args.blocks else None
    deadline = None if args.max_minutes is None else time.time() + 60 * args.max_minutes
    if args.worker is not None:
        return work(args.spec, args.worker, args.jobs, deadline, blocks)
    procs = []
    for w in range(args.jobs):
        cmd = [sys.executable, "-m", "srpo.study.mechanism", "run", args.spec, "--jobs", str(args.jobs),
               "--worker", str(w)]
        if args.max_minutes is not None:
            cmd += ["--max-minutes", str(args.max_minutes)]
        if args.blocks:
            cmd += ["--blocks", args.blocks]
        procs.append(subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}))
    return max(proc.wait() for proc in procs)


if __name__ == "__main__":
    sys.exit(main())
