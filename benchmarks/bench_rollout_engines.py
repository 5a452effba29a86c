"""Rollout engines and precisions side by side: HF generate (float32, bfloat16, bfloat16 with
LoRA merged) vs CTranslate2 (float32, int8) on the default job.

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
     token for token;
  6. with --parts update: the update's forward + backward (the trainer's batch_logprobs and a
     loss on every token) over one rollout batch of the default job, per precision (float32,
     bfloat16), median seconds of --repeats, and the LoRA gradients' relative L2 distance.

Each precision has its own PolicySet (a bf16 run stores the LoRA base in bf16), with the same
LoRA noise (seeded), so the modes sample from the same policy up to rounding.

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
MODES = {"hf": {"rollout.backend": "hf", "model.dtype": "float32"},
         "hf-bf16": {"rollout.backend": "hf", "model.dtype": "bfloat16"},
         "hf-bf16-merged": {"rollout.backend": "hf", "model.dtype": "bfloat16", "rollout.hf.merge_lora": "true"},
         "hf-merged": {"rollout.backend": "hf", "model.dtype": "float32", "rollout.hf.merge_lora": "true"},
         "ct2-float32": {"rollout.backend": "ctranslate2", "model.dtype": "float32"},
         "ct2-int8": {"rollout.backend": "ctranslate2", "rollout.ctranslate2.compute_type": "int8",
                      "model.dtype": "float32"}}


def policies_of(dtype: str, threads: int, noise: float, cache: dict):
    """One PolicySet per precision, each with the same LoRA weights (seeded init and noise)."""
    if dtype not in cache:
        cfg = load_config(PRESET, overrides("hf", threads) + [f"model.dtype={dtype}"])
        torch.manual_seed(1234)  # LoRA's A is drawn when the adapters are made
        policies = build_policies(cfg.model, cfg.policies, cfg.device)
        lora_step(policies, noise)
        cache[dtype] = policies
    return cache[dtype]


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
    cache: dict = {}
    runners, workflow, of_mode = {}, None, {}
    for mode in args.modes:
        of_mode[mode] = policies_of(MODES[mode]["model.dtype"], args.threads, args.lora_noise, cache)
        mcfg = load_config(PRESET, overrides(mode, args.threads))
        runner, workflow = build_rollout(mcfg, policies=of_mode[mode])
        runners[mode] = runner
    policies = of_mode[args.modes[0]]
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
        if not hasattr(backend, "sync") and getattr(backend, "merged", None) is None:
            continue
        times = []
        for _ in range(args.sync_repeats):
            lora_step(of_mode[mode], 1e-4)
            if hasattr(backend, "sync"):
                assert backend.is_stale(of_mode[mode].names[0])
                times.append(backend.sync())
            else:  # hf with merge_lora: the merged copy is rebuilt on the next generate
                start = time.perf_counter()
                backend.merged.model_for(of_mode[mode][of_mode[mode].names[0]])
                times.append(time.perf_counter() - start)
        sync = statistics.median(times)
        line = f"  {mode:12s} sync {sync:.2f} s   runs: " + ", ".join(f"{x:.2f}" for x in times)
        if "hf" in rollout_s:
            saved = rollout_s["hf"] - rollout_s[mode]
            line += (f"   rollout {rollout_s[mode]:.2f} s vs hf {rollout_s['hf']:.2f} s: saves "
                     f"{saved:.2f} s, net of the sync {saved - sync:+.2f} s a step")
        print(line)

    print("\n3. mismatch/kl of each backend's rollout against the trained (torch) policy, whose "
          "forward runs in the mode's precision")
    for mode in args.modes:
        episodes, _, _ = run(mode, 100)
        kl, diff = mismatch_kl(of_mode[mode], episodes, tok.pad_token_id)
        print(f"  {mode:12s} mismatch/kl {kl:.3e}   mean |log-prob diff| {diff:.3e}")


def bench_eval(args) -> None:
    """Greedy held-out evaluation of the same weights through each backend: accuracy, seconds,
    and agreement with HF (per problem, and every generated token)."""
    from srpo.record.evaluate import evaluate

    cfg = load_config(PRESET, overrides("hf", args.threads))
    cache: dict = {}
    tasks = load_tasks(cfg.task, split="heldout", limit=args.eval_size)
    print(f"\n5. greedy evaluation of the same weights on {len(tasks)} held-out problems")
    ref = None
    for mode in args.modes:
        policies = policies_of(MODES[mode]["model.dtype"], args.threads, args.lora_noise, cache)
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


def bench_update(args) -> None:
    """The update's forward + backward over one default-job rollout batch, per precision, with
    each distinct prompt run once (train.share_prompt_forward, the default) and every row whole,
    in the trainer's micro-batches (pack_sets at the preset's micro_batch_tokens); the modes
    alternate repeat by repeat after one warm-up each."""
    from srpo.batch import build_flat_batch, pack_sets

    cfg = load_config(PRESET, overrides("hf", args.threads))
    cache: dict = {}
    p32 = policies_of("float32", args.threads, args.lora_noise, cache)
    runner, workflow = build_rollout(load_config(PRESET, overrides("hf", args.threads)), policies=p32)
    tasks = load_tasks(cfg.task, split="train", limit=cfg.train.tasks_per_step)
    torch.manual_seed(7)
    episodes = runner.run(tasks, workflow, group_size=cfg.group_size).episodes
    tok = p32[p32.names[0]].tokenizer
    batch = build_flat_batch(episodes, tok.pad_token_id)
    packs = pack_sets(batch, cfg.train.micro_batch_tokens)
    prompt_tokens = int(batch.attention_mask[:, :batch.prompt_length].sum())
    print(f"\n6. update forward + backward over one rollout batch ({batch.num_members} members, "
          f"{prompt_tokens} prompt and {int(batch.response_mask.sum())} response tokens, "
          f"{len(packs)} micro-batches of <= {cfg.train.micro_batch_tokens} tokens), median of {args.repeats}")
    modes = [(dtype, share) for dtype in ("float32", "bfloat16") for share in (False, True)]
    policies = {dtype: policies_of(dtype, args.threads, args.lora_noise, cache) for dtype in ("float32", "bfloat16")}
    grads, times = {}, {m: [] for m in modes}

    def run(dtype: str, share: bool) -> float:
        model = policies[dtype].models()[0]
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        for ids in packs:
            micro = batch.select_sets(ids)
            out = batch_logprobs(policies[dtype], micro, chunk_size=cfg.train.logprob_chunk_size,
                                 share_prompts=share)
            torch.where(micro.response_mask, out.logprobs, 0).sum().backward()
        seconds = time.perf_counter() - start
        grads[(dtype, share)] = {n: q.grad.double() for n, q in model.named_parameters() if q.grad is not None}
        return seconds

    for mode in modes:  # warm-up
        run(*mode)
    for _ in range(args.repeats):
        for mode in modes:
            times[mode].append(run(*mode))

    def distance(a, b) -> float:
        num = sum(((grads[a][n] - grads[b][n]) ** 2).sum() for n in grads[b]) ** 0.5
        return float(num / sum((grads[b][n] ** 2).sum() for n in grads[b]) ** 0.5)

    base = statistics.median(times[("float32", False)])
    for dtype, share in modes:
        sec = statistics.median(times[(dtype, share)])
        label = f"{dtype}, {'prompts shared' if share else 'rows whole'}"
        print(f"  {label:28s} {sec:6.2f} s  {sec / base:.2f}x   runs: "
              + ", ".join(f"{x:.2f}" for x in times[(dtype, share)]))
    for dtype in ("float32", "bfloat16"):
        print(f"  {dtype}: shared / whole time "
              f"{statistics.median(times[(dtype, True)]) / statistics.median(times[(dtype, False)]):.2f}x; "
              f"LoRA gradients {distance((dtype, True), (dtype, False)):.2e} apart (relative L2)")
    print(f"  bf16 / float32 (rows whole): LoRA gradients "
          f"{distance(('bfloat16', False), ('float32', False)):.2%} apart")


def bench_training(args) -> None:
    from srpo.train.trainer import Trainer

    print(f"\n4. the default job through Trainer: {args.train_steps} steps, eval on {args.eval_size}")
    modes = [m for m in args.modes if m != "ct2-int8"]  # int8 needs train.tis_cap to train
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
                   help="comma-separated, of: rollout (1-3), train (4, minutes), eval (5), update (6)")
    p.add_argument("--train-steps", type=int, default=40)
    p.add_argument("--eval-size", type=int, default=256)
    args = p.parse_args()
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        raise SystemExit(f"unknown mode(s) {unknown}; known: {list(MODES)}")
    torch.set_num_threads(args.threads)
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    known = {"rollout", "train", "eval", "update"}
    if parts - known:
        raise SystemExit(f"unknown part(s) {sorted(parts - known)}")
    if "rollout" in parts:
        bench_rollouts(args)
    if "train" in parts:
        bench_training(args)
    if "eval" in parts:
        bench_eval(args)
    if "update" in parts:
        bench_update(args)


if __name__ == "__main__":
    main()
