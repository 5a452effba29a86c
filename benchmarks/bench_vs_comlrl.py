"""srpo's MAGRPO training step vs CoMLRL 1.4.3's MAGRPOTrainer on the same shapes, alone.

Shapes (issue: "rollouts at least as fast as a peer's"): SmolLM2-135M-Instruct, 2 agents with a
separate full model each, one prompt a step, K = 4 samples per agent of at most 32 new tokens at
temperature 1 (no top-k / top-p), one AdamW step per agent per step, 2 threads. srpo runs
benchmarks/comlrl/srpo_magrpo.yaml (debate with two debaters, one round, `method: magrpo`);
CoMLRL runs benchmarks/comlrl/comlrl_peer.py in its own environment on the very prompt tokens
srpo sampled from at each step (checked token for token).

Phases compared per step: srpo's `time/rollout` (chat templating, batched generation with
sampling-time log-prob recording, decoding, math-verify scoring, episode records) against
CoMLRL's generation (its `_generate_completions` for both agents: tokenizing, generate,
decoding); srpo's `time/update` against CoMLRL's `_update_from_samples` for both agents; and the
whole step. Tokens differ between the sides (both sample), so seconds per generated token are
reported too. The two sides run one after the other in fresh processes, alternating
(srpo, CoMLRL, srpo, CoMLRL, ...); the first step of each run is a warm-up and is left out;
medians over the remaining steps of all rounds.

Set up the peer's environment once (it pins its own dependencies; keep it out of .venv):

    python3.11 -m venv ../comlrl-venv
    ../comlrl-venv/bin/pip install torch==2.13.0 comlrl==1.4.3

Then, with nothing else running on the machine:

    .venv/bin/python benchmarks/bench_vs_comlrl.py --peer-python ../comlrl-venv/bin/python
    .venv/bin/python benchmarks/bench_vs_comlrl.py --peer-python ... --steps 4 --rounds 1   # quick

A run of the default (8 steps, 2 rounds) takes about 10 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from provenance import provenance  # noqa: E402 (after the path it lives on)

CONFIG = HERE / "comlrl" / "srpo_magrpo.yaml"
PEER = HERE / "comlrl" / "comlrl_peer.py"


# --------------------------------------------------------------------------- srpo side (in .venv)


def run_srpo(steps: int, threads: int, out: Path, prompts_out: Path | None, overrides: list[str]) -> None:
    """One srpo training run of `steps` steps; writes per-step phase times (and the prompts)."""
    from srpo.config import load_config
    from srpo.train.trainer import Trainer

    code = provenance()  # the code this run ran, taken when it starts
    with tempfile.TemporaryDirectory(prefix="bench-comlrl-") as run_dir:
        cfg = load_config(CONFIG, [f"train.steps={steps}", f"train.threads={threads}",
                                   f"output_dir={run_dir}", *overrides])
        trainer = Trainer(cfg)
        backend = trainer.runner.backend
        prompts: list[dict] = []
        generate = backend.generate

        def recording_generate(policy, requests):  # the first prompt of each step, for the peer
            if len(prompts) < trainer.step + 1:
                task = trainer.sampler.tasks_for_step(trainer.step)[0]
                tok = backend.policies[policy].tokenizer
                ids = list(requests[0].prompt_ids)
                prompts.append({"prompt": tok.decode(ids), "prompt_ids": ids, "answer": str(task.answer)})
            return generate(policy, requests)

        backend.generate = recording_generate
        result = trainer.train()
    rows = [{
        "step": i + 1,
        "rollout": m["time/rollout"],
        "update": m["time/update"],
        "step_seconds": sum(v for k, v in m.items() if k.startswith("time/")),
        "generated_tokens": m["rollout/tokens/generated"],
    } for i, m in enumerate(result.history)]
    out.write_text(json.dumps({"side": "srpo", "threads": threads, **code, "steps": rows}, indent=1))
    if prompts_out is not None:
        prompts_out.write_text(json.dumps(prompts, indent=1))


# --------------------------------------------------------------------------- driver


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def summarize(srpo_runs: list[list[dict]], peer_runs: list[list[dict]]) -> dict:
    """Medians per step over every timed step (warm-up step 1 of each run left out)."""
    s = [r for run in srpo_runs for r in run if r["step"] > 1]
    c = [r for run in peer_runs for r in run if r["step"] > 1]
    out = {"steps_timed": {"srpo": len(s), "comlrl": len(c)}}
    for name, s_key, c_key in (("rollout", "rollout", "generation"), ("update", "update", "update"),
                               ("step", "step_seconds", "step_seconds"),
                               ("tokens", "generated_tokens", "generated_tokens")):
        out[name] = {"srpo": _median(s, s_key), "comlrl": _median(c, c_key)}
        out[name]["ratio"] = out[name]["srpo"] / out[name]["comlrl"]
    s_tok = sum(r["rollout"] for r in s) / sum(r["generated_tokens"] for r in s)
    c_tok = sum(r["generation"] for r in c) / sum(r["generated_tokens"] for r in c)
    out["rollout_s_per_token"] = {"srpo": s_tok, "comlrl": c_tok, "ratio": s_tok / c_tok}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer-python", help="python of CoMLRL's own environment (see the module docstring)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2, help="srpo / CoMLRL runs, alternating")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="results/bench/vs_comlrl.json")
    p.add_argument("--side", choices=["srpo"], help=argparse.SUPPRESS)  # a child process
    p.add_argument("--side-out", help=argparse.SUPPRESS)
    p.add_argument("--prompts-out", help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*", help="srpo config overrides (key=value), e.g. rollout.backend=ctranslate2")
    args = p.parse_args()
    if args.side == "srpo":
        run_srpo(args.steps, args.threads, Path(args.side_out),
                 Path(args.prompts_out) if args.prompts_out else None, args.overrides)
        return
    if not args.peer_python:
        p.error("--peer-python is required (CoMLRL's environment; see the module docstring)")
    from srpo.models import smollm2_path

    model_dir = smollm2_path()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    srpo_runs, peer_runs = [], []
    with tempfile.TemporaryDirectory(prefix="bench-comlrl-") as tmp:
        prompts = Path(tmp) / "prompts.json"
        for r in range(args.rounds):
            side_out = Path(tmp) / f"srpo{r}.json"
            t0 = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--side", "srpo", "--steps", str(args.steps),
                            "--threads", str(args.threads), "--side-out", str(side_out),
                            *(["--prompts-out", str(prompts)] if r == 0 else []), *args.overrides],
                           check=True, env=env)
            srpo_runs.append({"round": r + 1, **json.loads(side_out.read_text())})
            print(f"[round {r + 1}] srpo: {time.perf_counter() - t0:.0f} s", flush=True)
            peer_out = Path(tmp) / f"comlrl{r}.json"
            peer_code = provenance()  # the checkout that drove the peer (its script: benchmarks/comlrl/)
            t0 = time.perf_counter()
            subprocess.run([args.peer_python, str(PEER), "--model", str(model_dir), "--prompts", str(prompts),
                            "--out", str(peer_out), "--threads", str(args.threads)], check=True, env=env)
            peer_runs.append({"round": r + 1, "side": "comlrl", **peer_code,
                              "steps": json.loads(peer_out.read_text())["steps"]})
            print(f"[round {r + 1}] comlrl: {time.perf_counter() - t0:.0f} s", flush=True)
    summary = summarize([run["steps"] for run in srpo_runs], [run["steps"] for run in peer_runs])
    report = {"shapes": {"agents": 2, "K": 4, "max_new_tokens": 32, "prompts_per_step": 1,
                         "threads": args.threads, "steps": args.steps, "rounds": args.rounds},
              "overrides": args.overrides, "written_by": provenance(), "summary": summary,
              "runs": {"srpo": srpo_runs, "comlrl": peer_runs}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"\nmedians per step over {summary['steps_timed']} timed steps (srpo / CoMLRL):")
    for name in ("rollout", "update", "step", "tokens"):
        m = summary[name]
        print(f"  {name:8s} {m['srpo']:8.2f} {m['comlrl']:8.2f}   {m['ratio']:.2f}x")
    m = summary["rollout_s_per_token"]
    print(f"  rollout seconds per generated token: {m['srpo']:.4f} / {m['comlrl']:.4f} = {m['ratio']:.2f}x")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
