"""TRL's GRPOTrainer side of benchmarks/time_to_accuracy.py: one seed, one training-time budget.

Runs in TRL's own environment (../trl-venv, built by scripts/peer_envs.sh); imports nothing of
srpo but its reward (peer_common.py). Trains SmolLM2-135M + LoRA (the same r / alpha / dropout
/ target modules as srpo's policies.lora) with TRL's own loading, generation (transformers
`generate` inside GRPOTrainer; vLLM is GPU only) and loss, on the driver's tasks file, and
saves the adapter (peft layout: adapter_config.json, adapter_model.safetensors) under
OUT/ckpt/<tag>/<policy>/ at every ~`every` seconds of training time (clock.py: the clock is
paused while saving; the budget stops training). Writes OUT/peer.json: start-up, training
seconds, steps, marks, settings, versions.

Settings: TRL's own defaults for everything the task does not fix (loss_type "dapo",
scale_rewards "group", beta 0, epsilon 0.2, num_iterations 1, top_k 0, top_p 1, AdamW, grad
norm 1.0, bf16 on where the CPU computes it, which is GRPOConfig's default), except:
  learning_rate 4e-4   GRPOConfig's 1e-6 is a full fine-tuning rate; 4e-4 is the LoRA rate
                       measured best on this task (srpo's presets, docs/benchmarks.md)
  lr constant          a run stopped by a time budget has no step count to decay over
  activation checkpointing off   GRPOConfig's gradient_checkpointing defaults on to save
                       memory; a 135M model needs no saving, and recomputing only costs time
                       (srpo's default is off too)
  mask_truncated_completions on   DAPO's practice, which TRL documents for stability; the
                       analogue of srpo's `train.cut_answers: none`
and the task-level shapes every trainer shares: num_generations 4, 6 prompts a step (batch 24),
max_completion_length 24, temperature 1.0.

    ../trl-venv/bin/python benchmarks/tta/trl_peer.py --model DIR --tasks T.json --out OUT \\
        --seed 0 --budget 600 --every 60
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # start-up is measured from here (imports included)

import argparse  # noqa: E402 (after the start-up clock)
import os  # noqa: E402
from pathlib import Path  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from clock import PhaseTimer, TrainingClock  # noqa: E402 (benchmarks/tta/, this script's folder)
from peer_common import (  # noqa: E402
    bf16_supported,
    checkpoint_discarder,
    math_reward,
    peer_arguments,
    read_tasks,
    versions,
    write_record,
)


def parse_args() -> argparse.Namespace:
    p = peer_arguments(__doc__.splitlines()[0],
                       bf16_help="auto: on where the CPU computes bfloat16 (GRPOConfig's default is on)")
    p.add_argument("--policy", default="solver", help="the srpo policy name the evaluation loads it as")
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--prompts-per-step", type=int, default=6)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--mask-truncated", choices=("on", "off"), default="on")
    return p.parse_args()


def reward_function(tasks: list[dict]):
    """TRL's reward signature: one float per completion, srpo's MathReward on its text."""
    answers = {t["task_id"]: t["answer"] for t in tasks}
    score = math_reward()

    def correct(prompts, completions, task_id, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [score(tid, answers[tid], text) for tid, text in zip(task_id, texts)]

    return correct


def grpo_config(args: argparse.Namespace, out: Path, bf16: bool):
    """GRPOConfig: TRL's defaults but for the settings the module doc names."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out / "trl_output"), use_cpu=True, bf16=bf16, fp16=False,
        seed=args.seed, data_seed=args.seed, max_steps=10**6,  # the time budget stops it
        per_device_train_batch_size=args.prompts_per_step * args.num_generations,
        gradient_accumulation_steps=1, num_generations=args.num_generations,
        max_completion_length=args.max_new_tokens, temperature=args.temperature,
        learning_rate=args.lr, lr_scheduler_type="constant", activation_checkpointing=False,
        mask_truncated_completions=args.mask_truncated == "on",
        logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none",
        disable_tqdm=True, dataloader_num_workers=0,
    )


def clock_callback(clock: TrainingClock):
    """Starts the training clock at train begin; after each optimizer step, saves at marks and
    stops at the budget (TRL's own stop: control.should_training_stop)."""
    from transformers import TrainerCallback

    class ClockCallback(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            clock.start()

        def on_step_end(self, args, state, control, **kw):
            if clock.after_step(state.global_step):
                control.should_training_stop = True

    return ClockCallback()


def phase_timer(trainer) -> PhaseTimer:
    """Where GRPOTrainer's training seconds go (clock.PhaseTimer, exclusive): generation
    (`_generate`: tokenizing prompts and transformers' generate), scoring (`_calculate_rewards`),
    rollout_rest (the rest of `_generate_and_score_completions`: log-probs it needs, advantages),
    forward (`compute_loss`: the training forward and loss) and backward (the rest of
    `training_step`: backward, batching); the optimizer step is in Trainer's loop (`other`)."""
    phases = PhaseTimer()
    for method, phase in (("_generate", "generation"), ("_calculate_rewards", "scoring"),
                          ("_generate_and_score_completions", "rollout_rest"), ("compute_loss", "forward"),
                          ("training_step", "backward")):
        phases.wrap(trainer, method, phase)
    return phases


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import PrinterCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOTrainer

    hf_logging.set_verbosity_error()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = read_tasks(args.tasks)
    dataset = Dataset.from_list([{"prompt": t["messages"], "task_id": t["task_id"]} for t in tasks])
    bf16 = args.bf16 == "on" or (args.bf16 == "auto" and bf16_supported())
    lora = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.0,
                      target_modules="all-linear", task_type="CAUSAL_LM")
    holder: dict = {}  # the trainer takes the clock's callback, and the clock's save needs the trainer

    def save(tag: str) -> None:
        holder["trainer"].model.save_pretrained(str(out / "ckpt" / tag / args.policy))

    clock = TrainingClock(args.every, args.budget, save, started=STARTED, marks=args.marks,
                          discard=checkpoint_discarder(out))
    trainer = GRPOTrainer(model=args.model, reward_funcs=reward_function(tasks), args=grpo_config(args, out, bf16),
                          train_dataset=dataset, peft_config=lora, callbacks=[clock_callback(clock)])
    trainer.remove_callback(PrinterCallback)
    holder["trainer"] = trainer
    phases = phase_timer(trainer)
    trainer.train()
    clock.finish()  # the epochs ran out before the budget: the last state is a checkpoint too
    record = {"side": "trl", **clock.record(), **phases.record(clock.seconds()),
              "settings": {**{k: v for k, v in vars(args).items() if k not in ("tasks", "out", "model")},
                           "bf16": bf16, "loss_type": trainer.args.loss_type,
                           "scale_rewards": trainer.args.scale_rewards, "beta": trainer.args.beta,
                           "epsilon": trainer.args.epsilon,
                           "activation_checkpointing": trainer.args.activation_checkpointing,
                           "trainable_params": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)},
              "versions": versions("trl", "transformers", "peft", "accelerate", "torch", "datasets", "math-verify")}
    write_record(out, record)


if __name__ == "__main__":
    main()
