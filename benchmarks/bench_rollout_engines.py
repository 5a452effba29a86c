"""Rollout engines side by side: HF generate vs CTranslate2 (float32, int8) on the default job.

The default job's rollout (srpo/presets/default.yaml: SmolLM2-135M-Instruct + LoRA r16, debate
of 3 debaters, group 4, 6 tasks, 24 new tokens, temperature 1) through each backend, in one
process, over the same PolicySet, alternating backends run by run after a warm-up each:

  1. tokens/s of each backend (the whole RolloutRunner.run: templating, batching, generation,
     log-prob recording, records, rewards; weight sync excluded, measured in 2), ratio to HF;
  2. the weight sync of a CTranslate2 backend after an update: the LoRA weights are changed in
     place (like an optimizer step), then `backend.sync()` converts the policy again (merge,
     spec, save to /dev/shm, load); median seconds, and what a rollout saves against it;
  3. mismatch/kl per backend: the trainer's metric, token mean of k3 KL(sampler || trainer
     forward) on the backend's own rollout, the trainer's log-probs at temperature 1 from the
     torch policy (the one trained);
  4. with --parts train: the default job (shortened by --train-steps / --eval-size) through Trainer
     with each backend, one after the other: mean seconds per phase (metrics.jsonl's time/*),
     eval seconds, held-out accuracy before / after (greedy, so "before" must agree);
  5. with --parts eval: the greedy held-out evaluation (--eval-size problems) of the same weights
     through each backend: accuracy, seconds, agreement with the first mode per problem and
     token for token.

Before parts 1-3 and 5, every LoRA weight gets small random noise (std --lora-noise), so the
merged weights differ from the base weights as they do after some training.

    .venv/bin/python benchmarks/bench_rollout_engines.py                  # 1-3, 1.5 min alone
    .venv/bin/python benchmarks/bench_rollout_engines.py --parts train --modes hf,ct2-float32 \\
        --train-steps 10 --eval-size 64                                   # ~3 min alone
    .venv/bin/python benchmarks/bench_rollout_engines.py --parts eval      # ~1.5 min alone

Threads: torch.set_num_threads(--threads) and CTranslate2 intra_threads = --threads. Numbers
from a machine that runs something else at the same time are not worth reporting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from srpo.batch import build_flat_batch
from srpo.build import build_policies, build_rollout, load_tasks
from srpo.config import load_config
from srpo.objective.diagnostics import kl_k3, masked_token_mean
from srpo.train.forward import batch_logprobs

PRESET = Path(__file__).resolve().parents[1] / "srpo" / "presets" / "default.yaml"
# the preset's engine is ctranslate2 since the default job moved to it: each mode names its own
MODES = {"hf": {"rollout.backend": "hf"}, "ct2-float32": {"rollout.backend": "ctranslate2"},
         "ct2-int8": {"rollout.backend": "ctranslate2", "rollout.ctranslate2.compute_type": "int8"}}


def overrides(mode: str, threads: int) -> list[str]:
    own = [f"rollout.ctranslate2.threads={threads}"] if MODES[mode]["rollout.backend"] == "ctranslate2" else []
    return [f"{k}={v}" for k, v in MODES[mode].items()] + own


def lora_step(policies, scale: float) -> None:
    """Change every LoRA weight in place (what an optimizer step does to the trained weights)."""
    with torch.no_grad():
        for model in policies.models():
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.add_(torch.randn_like(p) * scale)


def mismatch_kl(policies, episodes, pad_id: int) -> tuple[float, float]:
    """(token mean of k3 KL(sampler || trainer), mean |log-prob difference|), as the trainer logs."""
    batch = build_flat_batch(episodes, pad_id)
    with torch.no_grad():
        trained = batch_logprobs(policies, batch).logprobs.double()
    sampled = batch.sampling_logprobs.double()
    mask = batch.response_mask
    return (masked_token_mean(kl_k3(sampled, trained), mask),
            masked_token_mean((sampled - trained).abs(), mask))


def bench_rollouts(args) -> None:
    cfg = load_config(PRESET, overrides("hf", args.threads))
    policies = build_policies(cfg.model, cfg.policies, cfg.device)
    lora_step(policies, args.lora_noise)
    runners, workflow = {}, None
    for mode in args.modes:
        mcfg = load_config(PRESET, overrides(mode, args.threads))
        runner, workflow = build_rollout(mcfg, policies=policies)
        runners[mode] = runner
    tasks = load_tasks(cfg.task, split="train", limit=cfg.train.tasks_per_step)
    tok = policies[policies.names[0]].tokenizer
    print(f"default job rollout: {len(tasks)} tasks x group {cfg.group_size} x debate of 3, "
          f"{cfg.sampling.max_new_tokens} new tokens, temperature {cfg.sampling.temperature}; "
          f"{torch.get_num_threads()} torch threads, CTranslate2 intra_threads {args.threads}")

    def run(mode: str, seed: int):
        runner = runners[mode]
        if hasattr(runner.backend, "sync"):
            runner.backend.sync()  # not timed here: part 2
        torch.manual_seed(seed)
        start = time.perf_counter()
        episodes = runner.run(tasks, workflow, group_size=cfg.group_size).episodes
        seconds = time.perf_counter() - start
        tokens = sum(len(m.response_ids) for e in episodes for s in e.transitions for m in s.members)
        return episodes, tokens, seconds

    tps: dict[str, list[float]] = {m: [] for m in args.modes}
    last = {}
    for mode in args.modes:  # warm-up (and the first conversion)
        run(mode, 0)
    for r in range(args.repeats):
        for mode in args.modes:
            episodes, tokens, seconds = run(mode, 1 + r)
            tps[mode].append(tokens / seconds)
            last[mode] = (episodes, tokens, seconds)
    print("\n1. rollout tokens/s (median of runs), ratio to hf")
    base = statistics.median(tps["hf"]) if "hf" in tps else None
    for mode in args.modes:
        m = statistics.median(tps[mode])
        ratio = f"{m / base:.2f}x" if base else "-"
        _, tokens, seconds = last[mode]
        print(f"  {mode:12s} {m:8.1f} tok/s  {ratio:>6s}   runs: "
              + ", ".join(f"{x:.0f}" for x in tps[mode])
              + f"   (last run {tokens} tokens in {seconds:.2f} s)")

    print(f"\n2. weight sync after an in-place LoRA update (median of {args.sync_repeats})")
    rollout_s = {m: last[m][2] for m in args.modes}
    for mode in args.modes:
        backend = runners[mode].backend
        if not hasattr(backend, "sync"):
            continue
        times = []
        for _ in range(args.sync_repeats):
            lora_step(policies, 1e-4)
            assert backend.is_stale(policies.names[0])
            times.append(backend.sync())
        sync = statistics.median(times)
        line = f"  {mode:12s} sync {sync:.2f} s   runs: " + ", ".join(f"{x:.2f}" for x in times)
        if "hf" in rollout_s:
            saved = rollout_s["hf"] - rollout_s[mode]
            line += (f"   rollout {rollout_s[mode]:.2f} s vs hf {rollout_s['hf']:.2f} s: saves "
                     f"{saved:.2f} s, net of the sync {saved - sync:+.2f} s a step")
        print(line)

    print("\n3. mismatch/kl of each backend's rollout against the trained (torch) policy")
    for mode in args.modes:
        episodes, _, _ = run(mode, 100)
        kl, diff = mismatch_kl(policies, episodes, tok.pad_token_id)
        print(f"  {mode:12s} mismatch/kl {kl:.3e}   mean |log-prob diff| {diff:.3e}")


def bench_eval(args) -> None:
    """Greedy held-out evaluation of the same weights through each backend: accuracy, seconds,
    and agreement with HF (per problem, and every generated token)."""
    from srpo.train.evaluate import evaluate

    cfg = load_config(PRESET, overrides("hf", args.threads))
    policies = build_policies(cfg.model, cfg.policies, cfg.device)
    lora_step(policies, args.lora_noise)
    tasks = load_tasks(cfg.task, split="heldout", limit=args.eval_size)
    print(f"\n5. greedy evaluation of the same weights on {len(tasks)} held-out problems")
    ref = None
    for mode in args.modes:
        runner, workflow = build_rollout(load_config(PRESET, overrides(mode, args.threads)),
                                         policies=policies)
        if hasattr(runner.backend, "sync"):
            runner.backend.sync()
        result, episodes = evaluate(runner, workflow, tasks, seed=cfg.seed, batch_tasks=cfg.eval.batch_tasks)
        ids = [[m.response_ids for s in e.transitions for m in s.members] for e in episodes]
        line = f"  {mode:12s} accuracy {result.summary()}  {result.seconds:.1f} s"
        if ref is None:
            ref = (result, ids)
        else:
            same_correct = sum(a == b for a, b in zip(ref[0].correct, result.correct))
            same_tokens = sum(a == b for a, b in zip(ref[1], ids))
            line += (f"; vs {args.modes[0]}: same verdict on {same_correct}/{len(tasks)}, "
                     f"token-identical episodes {same_tokens}/{len(tasks)}")
        print(line)


def bench_training(args) -> None:
    from srpo.train.trainer import Trainer

    print(f"\n4. the default job through Trainer: {args.train_steps} steps, eval on {args.eval_size}")
    modes = [m for m in args.modes if m != "ct2-int8"]  # int8 is refused for training
    for mode in modes:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = load_config(PRESET, overrides(mode, args.threads) + [
                f"train.steps={args.train_steps}", f"eval.size={args.eval_size}",
                f"output_dir={tmp}/run", "checkpoint.plots=false", "checkpoint.export=false",
                "checkpoint.tensorboard=false", "checkpoint.report=false"])
            start = time.perf_counter()
            trainer = Trainer(cfg)
            result = trainer.train()
            wall = time.perf_counter() - start
            rows = [json.loads(x) for x in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in rows if "loss" in r]
        phases = sorted({k for r in steps for k in r if k.startswith("time/")})
        mean = {k: statistics.mean(r[k] for r in steps if k in r) for k in phases}
        evals = [r["eval/seconds"] for r in rows if "eval/seconds" in r]
        kl = [r["mismatch/kl"] for r in steps if "mismatch/kl" in r]
        computed = sum(r["sets/all/count"] * (1 - r["update/skipped_set_share"]) for r in steps)
        update = sum(r["time/update"] for r in steps)
        stats = trainer.runner.backend.stats
        sync = (f", {stats.syncs} syncs, {stats.sync_seconds:.1f} s in all"
                if hasattr(stats, "syncs") else "")
        print(f"  {mode:12s} wall {wall:.0f} s; per step: "
              + ", ".join(f"{k[5:]} {v:.2f} s" for k, v in mean.items())
              + f"; eval {', '.join(f'{e:.1f}' for e in evals)} s{sync}")
        print(f"  {'':12s} update: {computed:.0f} sets computed (zero-advantage sets skipped), "
              f"{update / max(computed, 1):.3f} s a computed set (the samples differ by backend)")
        if kl:
            print(f"  {'':12s} mismatch/kl mean {statistics.mean(kl):.3e} (max {max(kl):.3e})")
        if result.before and result.after:
            print(f"  {'':12s} held-out before {result.before.summary()}")
            print(f"  {'':12s} held-out after  {result.after.summary()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--modes", default="hf,ct2-float32,ct2-int8",
                   help="comma-separated, of: " + ", ".join(MODES))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sync-repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lora-noise", type=float, default=4e-3)
    p.add_argument("--parts", default="rollout",
                   help="comma-separated, of: rollout (1-3), train (4, minutes), eval (5)")
    p.add_argument("--train-steps", type=int, default=40)
    p.add_argument("--eval-size", type=int, default=256)
    args = p.parse_args()
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        raise SystemExit(f"unknown mode(s) {unknown}; known: {list(MODES)}")
    torch.set_num_threads(args.threads)
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    if parts - {"rollout", "train", "eval"}:
        raise SystemExit(f"unknown part(s) {sorted(parts - {'rollout', 'train', 'eval'})}")
    if "rollout" in parts:
        bench_rollouts(args)
    if "train" in parts:
        bench_training(args)
    if "eval" in parts:
        bench_eval(args)

if __name__ == "__main__":
    main()
