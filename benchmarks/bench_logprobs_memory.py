"""Peak CPU memory and time of chunked response log-probs vs. full logits (forward + backward).

    .venv/bin/python benchmarks/bench_logprobs_memory.py                  # SmolLM2 vocab, 49,152
    .venv/bin/python benchmarks/bench_logprobs_memory.py --vocab 151936   # Qwen vocab

Set-up: a randomly initialised Llama with a small hidden size (256) and 2 layers, so that, as in
real models at RL batch sizes, the [batch, response, vocab] logits dominate activation memory.
Every response is full length (no padding), so the chunked path gets no advantage from skipping
padded rows: the comparison isolates chunking + recomputation.

Each variant runs in its own fresh subprocess. Memory is the process's peak RSS
(getrusage(RUSAGE_SELF).ru_maxrss) and its increment over the RSS measured right after the model
and inputs were created; the increment is what the log-prob computation itself costs.
The loss is sum(logprobs * w) with fixed random w, and the printed loss / lm_head grad norm
check that both variants compute the same thing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=49_152, help="vocabulary size V")
    parser.add_argument("--batch", type=int, default=8, help="members M")
    parser.add_argument("--response-len", type=int, default=512, help="response tokens T")
    parser.add_argument("--prompt-len", type=int, default=64, help="prompt tokens P")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers")
    parser.add_argument(
        "--chunk-size", type=int, nargs="+", default=[1024], help="one chunked run per value"
    )
    parser.add_argument("--repeats", type=int, default=2, help="forward+backward passes per run")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # "full" | "chunked:N"
    return parser.parse_args(argv)


def current_rss_bytes() -> int:
    """Resident set size right now (Linux /proc)."""
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


# ------------------------------------------------------------------------------------------------
# Worker: one variant, in its own process
# ------------------------------------------------------------------------------------------------


def run_worker(args: argparse.Namespace) -> dict:
    sys.path.insert(0, str(REPO_ROOT))
    import torch
    import transformers

    from srpo.objective.logprobs import response_logprobs, response_logprobs_reference

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=args.prompt_len + args.response_len,
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(config).float().eval()  # eval: no dropout anywhere
    M, P, T = args.batch, args.prompt_len, args.response_len
    input_ids = torch.randint(0, args.vocab, (M, P + T))  # [M, P+T]
    attention_mask = torch.ones_like(input_ids)  # [M, P+T] full-length members
    weights = torch.randn(M, T) / (M * T)  # [M, T] a token-mean style loss

    if args.worker == "full":
        def logprobs():
            return response_logprobs_reference(model, input_ids, attention_mask, P).logprobs
    elif args.worker == "backbone":
        # Floor: the same decoder forward/backward with no lm_head at all (no logits).
        def logprobs():
            hidden = model.model(input_ids=input_ids, attention_mask=attention_mask)[0]
            return hidden[:, P - 1 : -1].sum(-1)  # [M, T]
    else:
        chunk_size = int(args.worker.split(":")[1])

        def logprobs():
            return response_logprobs(
                model, input_ids, attention_mask, P, chunk_size=chunk_size
            ).logprobs

    gc.collect()
    setup_rss, setup_peak = current_rss_bytes(), peak_rss_bytes()
    times, loss = [], None
    for _ in range(args.repeats):
        start = time.perf_counter()
        loss = (logprobs() * weights).sum()
        loss.backward()
        times.append(time.perf_counter() - start)
        head_grad = model.lm_head.weight.grad
        grad_norm = head_grad.norm().item() if head_grad is not None else float("nan")
        model.zero_grad(set_to_none=True)
    peak = peak_rss_bytes()
    return {
        "variant": args.worker,
        "setup_rss": setup_rss,
        "setup_peak": setup_peak,
        "peak": peak,
        "increment": peak - setup_rss,
        "time": min(times),
        "loss": loss.item(),
        "grad_norm": grad_norm,
    }


# ------------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------------


def run_variant(variant: str, argv: list[str]) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--worker", variant]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {variant} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_table(args: argparse.Namespace, results: list[dict]) -> None:
    M, T, V = args.batch, args.response_len, args.vocab
    logits_mib = M * T * V * 4 / MIB
    print(
        f"M={M} T={T} P={args.prompt_len} V={V} hidden={args.hidden} layers={args.layers} "
        f"threads={args.threads} repeats={args.repeats}; one float32 [M, T, V] = "
        f"{logits_mib:,.0f} MiB"
    )
    header = (
        f"{'variant':<14}{'setup RSS':>11}{'peak RSS':>11}{'increment':>11}"
        f"{'time/iter':>11}{'loss':>16}{'|grad lm_head|':>16}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['variant']:<14}{r['setup_rss'] / MIB:>8,.0f}MiB{r['peak'] / MIB:>8,.0f}MiB"
            f"{r['increment'] / MIB:>8,.0f}MiB{r['time']:>10.2f}s"
            f"{r['loss']:>16.8f}{r['grad_norm']:>16.8f}"
        )
    full, floor = results[0], results[-1]
    print(
        "backbone = decoder forward+backward without lm_head: the floor no log-prob method can "
        "go below"
    )
    for r in results[1:-1]:
        mem = r["increment"] / full["increment"]
        verdict = "OK" if mem < 0.25 else "ABOVE TARGET"
        above = (r["increment"] - floor["increment"]) / (full["increment"] - floor["increment"])
        print(
            f"{r['variant']} / full: peak increment {mem:.1%} (target < 25%: {verdict}), "
            f"increment above backbone floor {above:.1%}, peak RSS {r['peak'] / full['peak']:.1%}, "
            f"time {r['time'] / full['time']:.2f}x"
        )


def main() -> None:
    argv = sys.argv[1:]
    args = parse_args(argv)
    if args.worker is not None:
        print(json.dumps(run_worker(args)))
        return
    variants = ["full"] + [f"chunked:{c}" for c in args.chunk_size] + ["backbone"]
    results = [run_variant(v, argv) for v in variants]
    print_table(args, results)


if __name__ == "__main__":
    main()
