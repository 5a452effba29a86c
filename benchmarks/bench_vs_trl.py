"""One GRPO training step: srpo's Trainer vs TRL's GRPOTrainer, like for like, in one process.

Single agent (the `single` workflow: every active set has one member), so both sides do the
same work per step: generate `prompts x group_size` completions of at most `max_new_tokens`
tokens (sampling at the same temperature, no top-k/top-p), score them with the same
`MathReward`, compute group-normalized advantages, and take ONE optimizer step (1 epoch, 1
minibatch, no gradient accumulation, on-policy, no reference model / beta = 0, AdamW, same lr,
constant schedule, grad clip) on the same model (loaded fresh from the same source for each side)
with the same LoRA adapters (or full fine-tuning with --full). The prompts of step k are the
same on both sides (srpo's `Trainer.tasks_for_step(k)`, fed to TRL in that order without
shuffling), with identical chat-templated prompt ids (checked).

srpo: `Trainer` built from a config; each step calls its phases the way `Trainer.train` does
(rollout -> sets -> old_logprobs -> advantages -> update), timed as one wall-clock block.
TRL: `GRPOTrainer.train()` with max_steps = warm-up + N; a callback times each optimizer step
(on_step_begin -> on_step_end: generation, scoring, advantages, forward/backward, optimizer).
Set-up (model loading, trainer construction) is excluded on both sides. Reported: the median
seconds per step over the N timed steps after the warm-up, its split into "rollout" (generation
+ scoring + advantages) and "update", generated tokens per step, and the ratio srpo / TRL
(target <= 1.0x).

    .venv/bin/python benchmarks/bench_vs_trl.py                            # SmolLM2, LoRA r16
    .venv/bin/python benchmarks/bench_vs_trl.py --model tiny --prompts 2 --group-size 2 \\
        --max-new-tokens 8 --steps 1                                       # seconds-long check

Needs `trl` (pip install -e '.[bench]'). Everything is offline (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import dataclasses
import gc
import shutil
import statistics
import tempfile
import time
import types
import warnings

import torch
from provenance import provenance

from srpo.batch import build_flat_batch
from srpo.build import build_agents, build_reward, build_workflow_from, load_tasks
from srpo.config import Config, load_config
from srpo.objective.methods import prepare_step
from srpo.rollout.runner import rollout_metrics
from srpo.train.trainer import Trainer
from srpo.types import Task


@dataclasses.dataclass
class StepRecord:
    seconds: float  # the whole optimizer step
    rollout_s: float  # generation + scoring + advantages
    completions: int
    tokens: int  # generated tokens (eos included)
    eos: int  # completions that stopped with eos (the rest hit max_new_tokens)


@dataclasses.dataclass
class SideResult:
    name: str
    steps: list[StepRecord]  # timed steps only (after the warm-up)
    warmup: list[StepRecord]

    def median(self, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in self.steps)


# --------------------------------------------------------------------------- settings


def build_config(args: argparse.Namespace, output_dir: str) -> Config:
    total_steps = args.warmup + args.steps
    if args.model == "tiny":
        model = ["model.name=tiny", "model.arch=llama", "model.tokenizer=smollm2",
                 f"model.hidden_size={args.tiny_hidden}", f"model.num_layers={args.tiny_layers}",
                 "model.init_seed=0"]
    else:
        model = ["model.name=smollm2"]
    if args.full:
        policies = ["policies.kind=shared"]
    else:
        policies = ["policies.kind=lora", f"policies.lora.rank={args.lora_rank}",
                    f"policies.lora.alpha={2.0 * args.lora_rank}", "policies.lora.dropout=0.0",
                    "policies.lora.target_modules=all-linear"]
    overrides = [
        *model, "model.dtype=float32", *policies,
        "workflow.name=single",
        "task.source=reasoning_gym", "task.dataset=basic_arithmetic",
        "task.difficulty={min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}",
        f"task.train_size={max(64, args.prompts * total_steps)}", "task.heldout_size=16",
        "task.seed=0",
        f"sampling.temperature={args.temperature:.6e}", "sampling.top_k=0", "sampling.top_p=1.0",
        f"sampling.max_new_tokens={args.max_new_tokens}",
        f"group_size={args.group_size}", "seed=0", "device=cpu",
        f"train.method={args.method}", f"train.steps={total_steps}",
        f"train.tasks_per_step={args.prompts}", "train.epochs=1", "train.minibatches=1",
        f"train.lr={args.lr:.6e}", "train.weight_decay=0.0", "train.adam_betas=[0.9, 0.999]",
        "train.warmup_steps=0", f"train.grad_clip={args.grad_clip:.6e}", "train.kl_beta=0.0",
        "train.entropy_alpha=0.0", f"train.threads={args.threads}",
        "eval.before=false", "eval.after=false", "eval.every=0", "eval.size=0",
        "checkpoint.export=false", "checkpoint.plots=false", "checkpoint.tensorboard=false",
        f"output_dir={output_dir}",
    ]
    return load_config(None, overrides)


def tasks_of_step(cfg: Config, pool: list[Task], step: int) -> list[Task]:
    """srpo's task choice of a step, without building a Trainer (it only reads cfg and tasks)."""
    return Trainer.tasks_for_step(types.SimpleNamespace(cfg=cfg, train_tasks=pool), step)


def load_model(args: argparse.Namespace):
    """A fresh (model, tokenizer) from the same source the srpo config names."""
    if args.model == "tiny":
        from srpo.models import build_tiny_model

        return build_tiny_model("llama", tokenizer="smollm2", hidden_size=args.tiny_hidden,
                                num_layers=args.tiny_layers, seed=0)
    from srpo.models import load_smollm2

    return load_smollm2()


# --------------------------------------------------------------------------- srpo


def run_srpo(cfg: Config, warmup: int) -> tuple[SideResult, dict]:
    """Warm-up + timed steps of srpo's Trainer; also the prompt ids of step 0 (one per task)
    and the number of trained parameters."""
    trainer = Trainer(cfg)
    trainable = sum(p.numel() for ps in trainer.params.values() for p in ps if p.requires_grad)
    t = cfg.train
    records: list[StepRecord] = []
    step0_prompts: list[list[int]] = []
    for step in range(t.steps):
        start = time.perf_counter()
        # the body of Trainer.train's loop, minus logging / eval / checkpointing
        episodes = trainer.sampler.rollout(trainer.step)
        batch = build_flat_batch(episodes, trainer.pad_id)
        old, ref, _ = trainer.updater.old_and_ref_logprobs(batch)
        batch, _ = prepare_step(trainer.spec, batch, old)
        batch = dataclasses.replace(batch, ref_logprobs=ref)
        mid = time.perf_counter()
        trainer.update(batch)
        trainer.step += 1
        end = time.perf_counter()
        members = [m for e in episodes for s in e.transitions for m in s.members]
        eos_id = trainer.policies[trainer.policies.names[0]].tokenizer.eos_token_id
        tokens = int(rollout_metrics(episodes)["tokens/generated"])
        assert tokens == sum(len(m.response_ids) for m in members)
        records.append(StepRecord(
            seconds=end - start, rollout_s=mid - start, completions=len(members), tokens=tokens,
            eos=sum(1 for m in members if m.response_ids and m.response_ids[-1] == eos_id),
        ))
        if step == 0:
            seen: dict[str, list[int]] = {}  # task id -> its prompt ids, in task order
            for e in episodes:
                for s in e.transitions:
                    for m in s.members:
                        seen.setdefault(e.task.task_id, list(m.prompt_ids))
            step0_prompts = list(seen.values())
    del trainer, episodes, batch
    gc.collect()
    info = {"prompt_ids_step0": step0_prompts, "trainable_params": trainable}
    return SideResult("srpo", records[warmup:], records[:warmup]), info


# --------------------------------------------------------------------------- TRL


def run_trl(args: argparse.Namespace, cfg: Config, pool: list[Task]) -> tuple[SideResult, dict]:
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    total_steps = cfg.train.steps
    agent = build_agents(cfg)[build_workflow_from(cfg).agent]
    workflow = build_workflow_from(cfg)
    rows, by_id = [], {}
    for step in range(total_steps):
        for task in tasks_of_step(cfg, pool, step):
            by_id[task.task_id] = task
            rows.append({"prompt": agent.messages(workflow.prompt.format(question=task.prompt)),
                         "task_id": task.task_id})
    dataset = Dataset.from_list(rows)
    reward = build_reward(cfg.task)
    pending: list[dict] = []  # one entry per generation batch (= per optimizer step here)

    def math_reward(prompts, completions, completion_ids, task_id, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        pending.append({"completions": len(completion_ids),
                        "tokens": sum(len(ids) for ids in completion_ids),
                        "eos": sum(1 for ids in completion_ids if ids and ids[-1] in eos_ids),
                        "task_ids": list(task_id)})
        return [reward(by_id[tid], text).total for tid, text in zip(task_id, texts)]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.begin = 0.0
            self.seconds: list[float] = []

        def on_step_begin(self, a, state, control, **kw):
            self.begin = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            self.seconds.append(time.perf_counter() - self.begin)

    model, tok = load_model(args)
    peft_config = None
    if not args.full:
        from peft import LoraConfig

        lora = cfg.policies.lora
        peft_config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                 target_modules=lora.target_modules, task_type="CAUSAL_LM")
    n_completions = cfg.train.tasks_per_step * cfg.group_size
    out_dir = tempfile.mkdtemp(prefix="bench_vs_trl_")
    grpo_args = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        seed=cfg.seed, data_seed=cfg.seed,
        max_steps=total_steps,
        per_device_train_batch_size=n_completions, gradient_accumulation_steps=1,
        num_generations=cfg.group_size, num_iterations=1, shuffle_dataset=False,
        max_completion_length=cfg.sampling.max_new_tokens,
        temperature=cfg.sampling.temperature, top_p=1.0, top_k=0, repetition_penalty=1.0,
        beta=0.0, epsilon=0.2, loss_type="grpo", scale_rewards="group",
        learning_rate=cfg.train.lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=cfg.train.weight_decay, adam_beta1=cfg.train.adam_betas[0],
        adam_beta2=cfg.train.adam_betas[1], max_grad_norm=cfg.train.grad_clip,
        optim="adamw_torch",
        logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none",
        disable_tqdm=True, log_completions=False, dataloader_num_workers=0,
        remove_unused_columns=False,
    )
    timer = StepTimer()
    trainer = GRPOTrainer(model=model, reward_funcs=math_reward, args=grpo_args,
                          train_dataset=dataset, processing_class=tok, peft_config=peft_config,
                          callbacks=[timer])
    trainer.remove_callback(PrinterCallback)  # the end-of-training metrics dict
    eos_ids = set(trainer.eos_token_ids)
    gen_seconds: list[float] = []
    inner = trainer._generate_and_score_completions

    def timed_generate_and_score(inputs):
        start = time.perf_counter()
        try:
            return inner(inputs)
        finally:
            gen_seconds.append(time.perf_counter() - start)

    trainer._generate_and_score_completions = timed_generate_and_score
    info = {
        "eos_token_ids": sorted(eos_ids),
        "trainable_params": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
        "prompt_ids_step0": tok.apply_chat_template(
            [r["prompt"] for r in rows[: cfg.train.tasks_per_step]], add_generation_prompt=True,
            tokenize=True, return_dict=True)["input_ids"],
        "expected_task_ids": [r["task_id"] for r in rows],
    }
    trainer.train()
    info["task_ids"] = [p["task_ids"] for p in pending]
    if not (len(timer.seconds) == len(gen_seconds) == len(pending) == total_steps):
        raise SystemExit(f"TRL ran {len(timer.seconds)} steps / {len(gen_seconds)} generations / "
                         f"{len(pending)} scorings, expected {total_steps} of each")
    records = [StepRecord(seconds=s, rollout_s=g, completions=p["completions"], tokens=p["tokens"],
                          eos=p["eos"]) for s, g, p in zip(timer.seconds, gen_seconds, pending)]
    del trainer, model
    gc.collect()
    shutil.rmtree(out_dir, ignore_errors=True)
    w = args.warmup
    return SideResult("TRL", records[w:], records[:w]), info


# --------------------------------------------------------------------------- report


def describe(r: SideResult, group: int, max_new: int) -> list[str]:
    med, roll = r.median("seconds"), r.median("rollout_s")
    comps = {s.completions for s in r.steps + r.warmup}
    toks = [s.tokens for s in r.steps]
    n = r.steps[0].completions
    mean_len = statistics.mean(s.tokens / s.completions for s in r.steps)
    eos_share = statistics.mean(s.eos / s.completions for s in r.steps)
    return [
        f"{r.name:5s} {med:8.3f} s/step   (rollout {roll:.3f} s + update {med - roll:.3f} s; "
        f"timed steps: {', '.join(f'{s.seconds:.3f}' for s in r.steps)}; warm-up: "
        f"{', '.join(f'{s.seconds:.3f}' for s in r.warmup)})",
        f"      completions/step {sorted(comps)} ({n // group} prompts x {group}), generated "
        f"tokens/step {toks} (mean completion length {mean_len:.2f} / max {max_new}, stopped at "
        f"eos {100 * eos_share:.0f}%), {statistics.median(toks) / med:.1f} gen tok/s of step",
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2")
    p.add_argument("--prompts", type=int, default=4, help="distinct prompts per step")
    p.add_argument("--group-size", type=int, default=4, help="completions per prompt")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=3, help="timed steps (after the warm-up)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--method", default="grpo", choices=("grpo", "srpo"),
                   help="srpo method (TRL always runs its loss_type='grpo')")
    p.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--lr", type=float, default=None, help="default 2e-4 (LoRA) / 1e-5 (full)")
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--order", choices=("srpo-first", "trl-first"), default="srpo-first")
    p.add_argument("--tiny-hidden", type=int, default=64)
    p.add_argument("--tiny-layers", type=int, default=2)
    args = p.parse_args()
    if args.lr is None:
        args.lr = 1e-5 if args.full else 2e-4
    if args.steps < 1 or args.warmup < 0 or args.group_size < 2:
        p.error("--steps >= 1, --warmup >= 0 and --group-size >= 2 (TRL needs 2) are required")
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    import transformers
    import trl

    out_dir = tempfile.mkdtemp(prefix="bench_vs_trl_srpo_")
    cfg = build_config(args, out_dir)
    pool = load_tasks(cfg.task, split="train")
    n = args.prompts * args.group_size
    print("srpo vs TRL: one GRPO optimizer step, single agent, same model / prompts / sizes")
    print(f"  model {args.model}"
          + (f" (random llama, hidden {args.tiny_hidden}, {args.tiny_layers} layers, SmolLM2 "
             f"tokenizer)" if args.model == "tiny" else " (SmolLM2-135M-Instruct, float32)")
          + ", " + ("full fine-tuning" if args.full
                    else f"LoRA r={args.lora_rank} alpha={2 * args.lora_rank} dropout 0 all-linear"))
    print(f"  per step: {args.prompts} prompts x {args.group_size} completions = {n} completions, "
          f"max_new_tokens {args.max_new_tokens}, temperature {args.temperature} (no top-k/top-p), "
          f"reward MathReward (correct 1.0), task reasoning_gym basic_arithmetic")
    print(f"  optimizer: AdamW lr {args.lr:g} betas (0.9, 0.999) wd 0, constant lr, grad clip "
          f"{args.grad_clip}; 1 epoch, 1 minibatch, no grad accumulation, beta 0 (no reference "
          f"model), clip eps 0.2, group-std-normalized advantages")
    print(f"  srpo: method {args.method}, workflow single (solver), micro_batch_tokens "
          f"{cfg.train.micro_batch_tokens}, record_logprobs {cfg.rollout.record_logprobs}")
    print(f"  TRL {trl.__version__}: GRPOTrainer loss_type grpo, per_device_train_batch_size {n}, "
          f"num_generations {args.group_size}, gradient_checkpointing off, bf16 off, use_cpu")
    print(f"  steps: {args.warmup} warm-up + {args.steps} timed; torch {torch.__version__}, "
          f"transformers {transformers.__version__}, {torch.get_num_threads()} threads; order "
          f"{args.order}", flush=True)
    print(f"  code: {provenance()}  (commit, and whether the tree held uncommitted changes)", flush=True)

    results: dict[str, SideResult] = {}
    srpo_info: dict = {}
    trl_info: dict = {}
    for side in (("srpo", "trl") if args.order == "srpo-first" else ("trl", "srpo")):
        start = time.perf_counter()
        if side == "srpo":
            results["srpo"], srpo_info = run_srpo(cfg, args.warmup)
        else:
            torch.manual_seed(cfg.seed)
            results["trl"], trl_info = run_trl(args, cfg, pool)
        print(f"  ({side}: {time.perf_counter() - start:.1f} s in all, set-up included)",
              flush=True)

    # like-for-like checks
    same_prompts = [list(x) for x in trl_info["prompt_ids_step0"]] == srpo_info["prompt_ids_step0"]
    trl_order_ok = [t for ids in trl_info["task_ids"] for t in ids[:: args.group_size]] == \
        trl_info["expected_task_ids"]
    print(f"checks: step-0 prompt ids identical on both sides: {same_prompts}; TRL saw srpo's "
          f"prompts in srpo's step order: {trl_order_ok}; TRL eos ids {trl_info['eos_token_ids']}; "
          f"trainable params srpo {srpo_info['trainable_params']:,} / TRL "
          f"{trl_info['trainable_params']:,}")
    shutil.rmtree(out_dir, ignore_errors=True)
    for side in ("srpo", "trl"):
        for line in describe(results[side], args.group_size, args.max_new_tokens):
            print(line)
    s, t = results["srpo"], results["trl"]
    ratio = s.median("seconds") / t.median("seconds")
    print(f"ratio srpo / TRL (median s/step): {ratio:.3f}x   (target <= 1.0x)   "
          f"[rollout {s.median('rollout_s') / t.median('rollout_s'):.3f}x, update "
          f"{(s.median('seconds') - s.median('rollout_s')) / (t.median('seconds') - t.median('rollout_s')):.3f}x]")
    tok_s = statistics.mean(x.tokens for x in s.steps)
    tok_t = statistics.mean(x.tokens for x in t.steps)
    if abs(tok_s - tok_t) > 0.02 * max(tok_s, tok_t):
        print(f"note: generated tokens per step differ (srpo {tok_s:.1f}, TRL {tok_t:.1f}): "
              f"sampling differs between the sides, so eos stops differ; per generated token, "
              f"srpo/TRL = {(s.median('seconds') / tok_s) / (t.median('seconds') / tok_t):.3f}x")


if __name__ == "__main__":
    main()
