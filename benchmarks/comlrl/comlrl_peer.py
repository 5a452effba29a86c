"""The peer side of benchmarks/bench_vs_comlrl.py: CoMLRL's MAGRPO trainer, timed per step.

Runs in CoMLRL's own environment (it imports nothing from srpo; see bench_vs_comlrl.py for how
to make that environment). Two agents, each its own full copy of the model folder given, one
prompt a step (the prompt texts srpo renders for the same steps, given as JSON), K samples per
agent, sampling at temperature 1 with no top-k / top-p (what srpo trains with), one AdamW step
per agent per prompt. Timing wraps CoMLRL's own methods without changing them:

    step        MAGRPOTrainer._train_step_returns (generation, rewards, returns, both updates)
    generation  MAGRPOTrainer._generate_completions (per agent: tokenize, generate, decode)
    update      MAGRPOTrainer._update_from_samples (per agent: forward, backward, AdamW)

Writes one JSON object: per step {step, generation, update, step_seconds, generated_tokens}.

    <comlrl-env>/bin/python benchmarks/comlrl/comlrl_peer.py --model DIR --prompts P.json --out O.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from comlrl.trainers.reinforce.magrpo import MAGRPOConfig, MAGRPOTrainer
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer


def integer_reward(gold: str):
    """1.0 when the last integer of an agent's text is the gold answer, for each agent, averaged."""

    def last_int(text: str) -> str | None:
        found = re.findall(r"-?\d+", text)
        return found[-1] if found else None

    def reward(*completions, batch_items=None):
        answers = [c[0] for c in completions]
        gold_now = batch_items[0]["answer"] if batch_items else gold
        return [sum(last_int(a) == gold_now for a in answers) / len(answers)]

    return reward


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a Hugging Face model folder (srpo's converted SmolLM2)")
    p.add_argument("--prompts", required=True, help="JSON: [{prompt, prompt_ids, answer}, ...], one per step")
    p.add_argument("--out", required=True)
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-6)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    items = json.loads(Path(args.prompts).read_text())
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    # pad must not be <|im_end|>: CoMLRL finds a prompt's end at its first pad token, and
    # <|im_end|> ends every chat turn inside the prompt (its completions then decode empty)
    tokenizer.pad_token = "<|endoftext|>"
    for item in items:  # the very prompt tokens srpo conditions on
        ids = tokenizer(item["prompt"])["input_ids"]
        if ids != item["prompt_ids"]:
            raise SystemExit(f"prompt tokens differ from srpo's: {ids[:12]}... vs {item['prompt_ids'][:12]}...")
    agents = [AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32) for _ in range(2)]
    config = MAGRPOConfig(
        num_train_epochs=1, agent_learning_rate=args.lr, num_agents=2,
        num_generations=args.num_generations, max_new_tokens=args.max_new_tokens,
        temperature=1.0, top_p=1.0, top_k=0, num_turns=1, eval_interval=0,
        rollout_buffer_size=1, train_batch_size=1, logging_steps=1,
    )
    trainer = MAGRPOTrainer(
        agents=agents, num_agents=2, tokenizer=tokenizer,
        train_dataset=Dataset.from_list([{"prompt": it["prompt"], "answer": it["answer"]} for it in items]),
        formatters=[lambda item: item["prompt"]] * 2,
        reward_func=integer_reward(items[0]["answer"]), args=config,
    )
    trainer.verbose = False

    def generated(out: dict) -> int:
        """Tokens generated (up to and including eos), counted here: CoMLRL's response_lens
        stop at the first pad token, and rows that ended early are padded with the model's
        generation-config pad id, which need not be the tokenizer's."""
        total = 0
        for row in out["completion_input_ids"][0]:
            row = row.tolist()
            n = len(row)
            for i, t in enumerate(row):
                if t == tokenizer.eos_token_id:
                    n = i + 1
                    break
                if t == tokenizer.pad_token_id:
                    n = i
                    break
            total += n
        return total

    steps: list[dict] = []
    current: dict = {}

    def timed(name: str, fn):
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            current[name] = current.get(name, 0.0) + time.perf_counter() - t0
            if name == "generation":
                current["generated_tokens"] = current.get("generated_tokens", 0) + generated(out)
            return out
        return wrapper

    trainer._generate_completions = timed("generation", trainer._generate_completions)
    trainer._update_from_samples = timed("update", trainer._update_from_samples)
    step_fn = trainer._train_step_returns

    def step(*a, **kw):
        current.clear()
        t0 = time.perf_counter()
        out = step_fn(*a, **kw)
        steps.append({"step": len(steps) + 1, **current, "step_seconds": time.perf_counter() - t0})
        print(f"comlrl step {len(steps)}: {steps[-1]}", flush=True)
        return out

    trainer._train_step_returns = step
    trainer.train()
    with open(args.out, "w") as f:
        json.dump({"side": "comlrl", "threads": args.threads, "steps": steps}, f, indent=1)


if __name__ == "__main__":
    main()
