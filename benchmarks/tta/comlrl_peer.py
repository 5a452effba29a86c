"""CoMLRL's MAGRPO side of benchmarks/time_to_accuracy.py: one seed, one training-time budget.

Runs in CoMLRL's own environment (../comlrl-venv, built by scripts/peer_envs.sh); imports
nothing of srpo but its reward (peer_common.py). CoMLRL's setting closest to an srpo workflow:
MAGRPO with 3 agents answering the same prompt in one turn and one joint reward, which is the
default job's debate (one round, 3 debaters, a majority vote; benchmarks/tta/srpo_trio.yaml,
where each debater is its own adapter). Each agent is its own copy of the model with its own
LoRA adapter (the same r / alpha / dropout / target modules as srpo's policies.lora); the joint
reward of a sample is srpo's MathReward of srpo's majority vote over the 3 answers (ties: the
first agent's), the debate's episode reward. Every ~`every` seconds of training time
(clock.py) the adapters are saved (peft layout) under OUT/ckpt/<tag>/<policy>/; the budget
stops training. Writes OUT/peer.json.

Settings: MAGRPOConfig's defaults for everything the task does not fix (num_generations 4,
temperature 0.6, top_p 0.6, top_k 50, rollout_buffer_size 2 = an update every 2 prompts,
advantages: mean baseline, normalized; joint_mode aligned; no reference KL), except:
  agent_learning_rate 4e-4   its 5e-6 is a full fine-tuning rate; 4e-4 is the LoRA rate
                             measured best on this task (srpo's presets, docs/benchmarks.md)
  num_turns 1                one answer each (a second turn needs an external transition)
  max_new_tokens 24          the task's answer budget, as every side
  eval_interval 0            its own evaluation off: the benchmark's evaluator scores checkpoints
  num_train_epochs 100       the time budget ends training, not the data
  base weights in bfloat16   where the CPU computes it (CoMLRL's model_config torch_dtype; the
                             adapters stay float32, peft's default), as srpo's model.dtype auto
The pad token is <|endoftext|>: CoMLRL finds a prompt's end at its first pad token, and
SmolLM2's default pad <|im_end|> ends every chat turn inside the prompt. CoMLRL does not shuffle
its data; the tasks are shuffled here with the seed. Unlike srpo's `train.cut_answers: none`, an
answer cut by the token budget still votes (CoMLRL's reward sees texts only).

    ../comlrl-venv/bin/python benchmarks/tta/comlrl_peer.py --model DIR --tasks T.json --out OUT \\
        --seed 0 --budget 600 --every 60
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # start-up is measured from here (imports included)

import argparse  # noqa: E402 (after the start-up clock)
import os  # noqa: E402
import random  # noqa: E402
from pathlib import Path  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from clock import BudgetReached, PhaseTimer, TrainingClock  # noqa: E402 (benchmarks/tta/, this script's folder)
from peer_common import (  # noqa: E402
    bf16_supported,
    checkpoint_discarder,
    math_reward,
    peer_arguments,
    read_tasks,
    versions,
    vote_winner,
    write_record,
)

POLICIES = ("agent_a", "agent_b", "agent_c")  # srpo_trio.yaml's policy names, in debater order


def parse_args() -> argparse.Namespace:
    return peer_arguments(__doc__.splitlines()[0],
                          bf16_help="base weights in bfloat16; auto: where the CPU computes it").parse_args()


def joint_reward(score):
    """MAGRPO's reward function: one joint reward for one completion of each agent,
    R(vote(answer_1, ..., answer_n)), R srpo's MathReward and vote srpo's majority vote."""

    def reward(*completions, batch_items=None):
        item = batch_items[0]
        return [score(item["task_id"], item["answer"], vote_winner([c[0] for c in completions]))]

    return reward


def build_agents(model_dir: str, dtype: torch.dtype, rank: int, alpha: float) -> list:
    """One model per agent, each with its own LoRA adapter ("default")."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules="all-linear",
                        task_type="CAUSAL_LM")
    return [get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype), config)
            for _ in POLICIES]


def phase_timer(trainer) -> PhaseTimer:
    """Where MAGRPO's training seconds go (clock.PhaseTimer, exclusive): generation (each agent's
    completions of a prompt), scoring (the joint rewards), forward (a sample's forward and loss)
    and backward_optimizer (the rest of an update: backward, optimizer step)."""
    phases = PhaseTimer()
    for method, phase in (("_generate_completions_with_external_prompts", "generation"),
                          ("_compute_rewards", "scoring"), ("_compute_loss_with_gradients", "forward"),
                          ("_update_from_samples", "backward_optimizer")):
        phases.wrap(trainer, method, phase)
    return phases


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)  # CoMLRL shuffles each update's samples with `random`
    from comlrl.trainers.reinforce.magrpo import MAGRPOConfig, MAGRPOTrainer
    from datasets import Dataset
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = read_tasks(args.tasks)
    random.Random(args.seed).shuffle(tasks)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.pad_token = "<|endoftext|>"  # module doc: not <|im_end|>
    bf16 = args.bf16 == "on" or (args.bf16 == "auto" and bf16_supported())
    agents = build_agents(args.model, torch.bfloat16 if bf16 else torch.float32, args.lora_rank, args.lora_alpha)
    # epochs enough that the budget, not the data, ends training (each epoch: the pool in order)
    config = MAGRPOConfig(num_train_epochs=100, agent_learning_rate=args.lr, num_agents=len(POLICIES),
                          max_new_tokens=args.max_new_tokens, num_turns=1, eval_interval=0,
                          logging_steps=10**9)
    trainer = MAGRPOTrainer(
        agents=agents, num_agents=len(POLICIES), tokenizer=tokenizer,
        train_dataset=Dataset.from_list([{"prompt": t["text"], "answer": t["answer"], "task_id": t["task_id"]}
                                         for t in tasks]),
        formatters=[lambda item: item["prompt"]] * len(POLICIES),
        reward_func=joint_reward(math_reward()), args=config,
    )
    trainer.verbose = False

    def save(tag: str) -> None:
        for name, agent in zip(POLICIES, trainer.agents):
            agent.save_pretrained(str(out / "ckpt" / tag / name))

    clock = TrainingClock(args.every, args.budget, save, started=STARTED, marks=args.marks,
                          discard=checkpoint_discarder(out))
    step_fn = trainer._train_step_returns

    def step(*a, **kw):  # one prompt: every agent's generation, the rewards, an update when due
        result = step_fn(*a, **kw)
        if clock.after_step(clock.steps + 1):
            raise BudgetReached
        return result

    trainer._train_step_returns = step
    phases = phase_timer(trainer)
    clock.start()
    try:
        trainer.train()
    except BudgetReached:
        pass
    else:  # the epochs ran out before the budget: the last state is still a checkpoint
        clock.finish()
    record = {"side": "comlrl", **clock.record(), **phases.record(clock.seconds()),
              "step_unit": "prompt (an update every rollout_buffer_size prompts)",
              "settings": {**{k: v for k, v in vars(args).items() if k not in ("tasks", "out", "model")},
                           "bf16": bf16, "policies": list(POLICIES),
                           **{k: getattr(config, k) for k in ("num_generations", "temperature", "top_p", "top_k",
                                                              "rollout_buffer_size", "train_batch_size",
                                                              "advantage_mode", "advantage_normalization",
                                                              "joint_mode")}},
              "versions": versions("comlrl", "transformers", "peft", "torch", "datasets", "math-verify")}
    write_record(out, record)


if __name__ == "__main__":
    main()
