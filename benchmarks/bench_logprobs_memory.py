"""Peak CPU memory and time of chunked response log-probs vs. alternatives (forward + backward).

    .venv/bin/python benchmarks/bench_logprobs_memory.py                  # --mode head (default)
    .venv/bin/python benchmarks/bench_logprobs_memory.py --mode model     # whole random Llama
    .venv/bin/python benchmarks/bench_logprobs_memory.py --mode model --vocab 151936  # Qwen vocab

--mode head (the lm_head kernel alone; the decision benchmark for srpo/objective/logprobs.py):
a plain nn.Linear(hidden, vocab, bias=False) head with random weights, hidden states [N, hidden]
that require grad, random targets, loss = sum(logp * g) (+ sum(entropy * k)) with fixed random
g, k; the backward reaches hidden and the head weight. Three variants:

    custom      (a) token_logprobs_from_hidden: custom autograd.Function, hand-derived backward
    checkpoint  (b) per-chunk torch.utils.checkpoint(use_reentrant=False) around
                    head -> (softcap) -> /temperature -> log_softmax -> gather (+ entropy)
    full        (c) full logits [N, V] through plain autograd (the naive reference)

Defaults are SmolLM2-135M shapes: V = 49,152, hidden = 576, N in {1024, 4096} response rows,
chunk_size 1024, with and without entropy. Memory: each (variant, N, entropy) runs ONE
forward+backward in its own fresh subprocess, after a tiny warm-up of the same code path (so
lazy library buffers are already there); reported is peak RSS (getrusage ru_maxrss, the kernel's
high-water mark) minus the RSS right before the measured pass. tracemalloc does not see torch's
allocations, hence RSS. The increment includes the gradients the pass produces (head weight
[V, hidden] and hidden [N, hidden]), the same for every variant. Time: one more subprocess per
(N, entropy) runs the three variants interleaved (the order rotates every round) for --repeats
rounds and reports the median; the per-round ratio b/a and c/a is paired, so its spread shows the
noise. The first round's outputs are kept to check that (a) and (b) (and (c)) agree: max abs
difference of logprobs, entropy, d hidden and d W. --parts memory / --parts time runs one half.
Timings taken while another job uses the CPUs are worthless (RSS is not affected). On the
2-core CPU the default run took about 6 minutes, --parts time about 3.5.

--mode model: a randomly initialised Llama with a small hidden size (256) and 2 layers, so that,
as in real models at RL batch sizes, the [batch, response, vocab] logits dominate activation
memory. Every response is full length (no padding), so the chunked path gets no advantage from
skipping padded rows. Variants: response_logprobs_reference (full), response_logprobs (chunked),
and the backbone without lm_head (the floor). Each runs in its own subprocess; memory as above
but measured over --repeats passes; time is the fastest pass.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
HEAD_VARIANTS = ("custom", "checkpoint", "full")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("head", "model"), default="head")
    parser.add_argument("--vocab", type=int, default=49_152, help="vocabulary size V")
    parser.add_argument(
        "--hidden", type=int, default=None, help="hidden size (head: 576, model: 256)"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--repeats", type=int, default=None, help="passes (head: 5, model: 2)")
    # head mode
    parser.add_argument("--rows", type=int, nargs="+", default=[1024, 4096], help="N (head mode)")
    parser.add_argument("--temperature", type=float, default=1.0, help="head mode")
    parser.add_argument("--softcap", type=float, default=None, help="head mode")
    parser.add_argument(
        "--parts", nargs="+", choices=("memory", "time"), default=["memory", "time"],
        help="head mode: which measurements to run",
    )  # fmt: skip
    # model mode
    parser.add_argument("--batch", type=int, default=8, help="members M (model mode)")
    parser.add_argument("--response-len", type=int, default=512, help="T (model mode)")
    parser.add_argument("--prompt-len", type=int, default=64, help="P (model mode)")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers (model mode)")
    parser.add_argument(
        "--chunk-size", type=int, nargs="+", default=[1024],
        help="chunk size (head mode: the first value; model mode: one chunked run per value)",
    )  # fmt: skip
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hidden is None:
        args.hidden = 576 if args.mode == "head" else 256
    if args.repeats is None:
        args.repeats = 5 if args.mode == "head" else 2
    return args


def current_rss_bytes() -> int:
    """Resident set size right now (Linux /proc)."""
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def spawn_worker(worker: str, argv: list[str]) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--worker", worker]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {worker} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------
# Head mode
# ------------------------------------------------------------------------------------------------


def checkpoint_logprobs(hidden, targets, head, *, chunk_size, temperature, softcap, with_entropy):
    """(b): the plain alternative, per-chunk torch.utils.checkpoint around autograd ops."""
    import torch
    from torch.utils.checkpoint import checkpoint

    def chunk(h, y):  # [n, H], [n] -> ([n], [n] or None)
        z = head(h).float()  # [n, V]
        if softcap is not None:
            z = softcap * torch.tanh(z / softcap)
        if temperature != 1.0:
            z = z / temperature
        logp_all = torch.log_softmax(z, dim=-1)  # [n, V]
        logp = logp_all.gather(1, y[:, None]).squeeze(1)  # [n]
        if not with_entropy:
            return logp, None
        return logp, -(logp_all.exp() * logp_all).sum(-1)

    outs = [
        checkpoint(
            chunk, hidden[i : i + chunk_size], targets[i : i + chunk_size], use_reentrant=False
        )
        for i in range(0, hidden.shape[0], chunk_size)
    ]
    logp = torch.cat([o[0] for o in outs])
    return logp, torch.cat([o[1] for o in outs]) if with_entropy else None


def full_logprobs(hidden, targets, head, *, chunk_size, temperature, softcap, with_entropy):
    """(c): full [N, V] logits through plain autograd."""
    import torch

    del chunk_size
    z = head(hidden).float()  # [N, V]
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    if temperature != 1.0:
        z = z / temperature
    logp_all = torch.log_softmax(z, dim=-1)
    logp = logp_all.gather(1, targets[:, None]).squeeze(1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, entropy


def custom_logprobs(hidden, targets, head, *, chunk_size, temperature, softcap, with_entropy):
    """(a): the library's custom autograd.Function."""
    from srpo.objective.logprobs import token_logprobs_from_hidden

    out = token_logprobs_from_hidden(
        hidden, targets, head, chunk_size=chunk_size, temperature=temperature, softcap=softcap,
        with_entropy=with_entropy,
    )  # fmt: skip
    return out.logprobs, out.entropy


HEAD_FUNCTIONS = {
    "custom": custom_logprobs,
    "checkpoint": checkpoint_logprobs,
    "full": full_logprobs,
}


def head_problem(args: argparse.Namespace, n_rows: int):
    """Random head, hidden [N, H] (requires grad), targets [N], loss weights g, k [N]."""
    import torch

    gen = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(args.hidden, args.vocab, bias=False)
    with torch.no_grad():  # std 1/sqrt(H) weights and unit hidden: logits of O(1), not uniform
        head.weight.copy_(torch.randn(args.vocab, args.hidden, generator=gen) / args.hidden**0.5)
    hidden = (2 * torch.randn(n_rows, args.hidden, generator=gen)).requires_grad_(True)
    targets = torch.randint(0, args.vocab, (n_rows,), generator=gen)
    g = torch.randn(n_rows, generator=gen) / n_rows
    k = torch.randn(n_rows, generator=gen) / n_rows
    return head, hidden, targets, g, k


def head_pass(args, variant, problem, with_entropy):
    """One forward+backward; returns (logp, entropy, d hidden, d W) and clears the grads."""
    head, hidden, targets, g, k = problem
    logp, entropy = HEAD_FUNCTIONS[variant](
        hidden, targets, head, chunk_size=args.chunk_size[0], temperature=args.temperature,
        softcap=args.softcap, with_entropy=with_entropy,
    )  # fmt: skip
    loss = (logp * g).sum()
    if with_entropy:
        loss = loss + (entropy * k).sum()
    loss.backward()
    result = (
        logp.detach(),
        None if entropy is None else entropy.detach(),
        hidden.grad,
        head.weight.grad,
    )
    hidden.grad, head.weight.grad = None, None
    return result


def head_memory_worker(args: argparse.Namespace, variant: str, n_rows: int, with_entropy: bool):
    import torch

    torch.set_num_threads(args.threads)
    # Warm-up on 8 rows: lazy allocations of the same code path happen before the measurement.
    head_pass(args, variant, head_problem(args, 8), with_entropy)
    problem = head_problem(args, n_rows)
    gc.collect()
    before = current_rss_bytes()
    start = time.perf_counter()
    head_pass(args, variant, problem, with_entropy)  # its grads are dropped after the peak
    seconds = time.perf_counter() - start
    peak = peak_rss_bytes()
    return {"before": before, "peak": peak, "increment": peak - before, "time": seconds}


def head_time_worker(args: argparse.Namespace, n_rows: int, with_entropy: bool) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    warmup = head_problem(args, 8)
    for variant in HEAD_VARIANTS:  # first-call costs (lazy imports, e.g. checkpoint's dynamo)
        head_pass(args, variant, warmup, with_entropy)
    problem = head_problem(args, n_rows)
    times = {v: [] for v in HEAD_VARIANTS}
    outputs = {}
    for r in range(args.repeats):
        order = HEAD_VARIANTS[r % 3 :] + HEAD_VARIANTS[: r % 3]
        for variant in order:
            start = time.perf_counter()
            out = head_pass(args, variant, problem, with_entropy)
            times[variant].append(time.perf_counter() - start)
            if r == 0:
                outputs[variant] = out
            del out

    def max_diff(x, y):
        names = ("logp", "entropy", "d_hidden", "d_W")
        return {n: float((a - b).abs().max()) for n, a, b in zip(names, x, y) if a is not None}

    return {
        "times": times,
        "b_vs_a": max_diff(outputs["checkpoint"], outputs["custom"]),
        "c_vs_a": max_diff(outputs["full"], outputs["custom"]),
        "grad_W_max": float(outputs["custom"][3].abs().max()),
        "grad_hidden_max": float(outputs["custom"][2].abs().max()),
    }


def head_main(args: argparse.Namespace, argv: list[str]) -> None:
    import platform

    configs = [(n, e) for n in args.rows for e in (False, True)]
    print(
        f"head mode: V={args.vocab} hidden={args.hidden} chunk_size={args.chunk_size[0]} "
        f"temperature={args.temperature} softcap={args.softcap} threads={args.threads} "
        f"repeats={args.repeats}; {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}"
    )
    print(f"one float32 [chunk, V] buffer = {args.chunk_size[0] * args.vocab * 4 / MIB:,.0f} MiB")
    memory, timing = {}, {}
    for n_rows, ent in configs:
        if "memory" in args.parts:
            for variant in HEAD_VARIANTS:
                worker = f"mem:{variant}:{n_rows}:{int(ent)}"
                memory[n_rows, ent, variant] = spawn_worker(worker, argv)
        if "time" in args.parts:
            timing[n_rows, ent] = spawn_worker(f"time:{n_rows}:{int(ent)}", argv)
    if memory:
        print_head_memory(configs, memory)
    if timing:
        print_head_timing(args, configs, timing)


def print_head_memory(configs: list, memory: dict) -> None:
    print("\nPeak RSS increment of one forward+backward (fresh subprocess per cell), MiB")
    header = f"{'N':>6} {'entropy':>8}" + "".join(f"{v:>12}" for v in HEAD_VARIANTS)
    header += f"{'b/a':>8}{'c/a':>8}"
    print(header)
    print("-" * len(header))
    for n_rows, ent in configs:
        inc = {v: memory[n_rows, ent, v]["increment"] for v in HEAD_VARIANTS}
        print(
            f"{n_rows:>6} {ent!s:>8}"
            + "".join(f"{inc[v] / MIB:>12,.0f}" for v in HEAD_VARIANTS)
            + f"{inc['checkpoint'] / inc['custom']:>8.2f}{inc['full'] / inc['custom']:>8.2f}"
        )


def print_head_timing(args: argparse.Namespace, configs: list, timing: dict) -> None:
    print(
        f"\nWall time of forward+backward, median of {args.repeats} interleaved rounds (s); "
        "paired per-round ratios: median [min, max]"
    )
    header = f"{'N':>6} {'entropy':>8}" + "".join(f"{v:>12}" for v in HEAD_VARIANTS)
    header += f"{'b/a':>24}{'c/a':>24}"
    print(header)
    print("-" * len(header))
    for n_rows, ent in configs:
        t = timing[n_rows, ent]["times"]
        med = {v: statistics.median(t[v]) for v in HEAD_VARIANTS}

        def ratios(v, t=t):
            rs = [x / y for x, y in zip(t[v], t["custom"])]
            return f"{statistics.median(rs):.3f} [{min(rs):.3f}, {max(rs):.3f}]"

        print(
            f"{n_rows:>6} {ent!s:>8}"
            + "".join(f"{med[v]:>12.2f}" for v in HEAD_VARIANTS)
            + f"{ratios('checkpoint'):>24}{ratios('full'):>24}"
        )

    print(
        "\nTimes per round (s), rounds in order; round r starts with variant r mod 3 of (a, b, c):"
    )
    for n_rows, ent in configs:
        t = timing[n_rows, ent]["times"]
        cols = "  ".join(f"{v}=" + ",".join(f"{x:.2f}" for x in t[v]) for v in HEAD_VARIANTS)
        print(f"N={n_rows:>5} entropy={ent!s:<5} {cols}")

    print("\nAgreement (first round): max |x - x_custom| (scale: max |dW|, max |d hidden| of (a))")
    for n_rows, ent in configs:
        r = timing[n_rows, ent]
        for label, key in (("b", "b_vs_a"), ("c", "c_vs_a")):
            diffs = "  ".join(f"{k}={v:.2e}" for k, v in r[key].items())
            print(f"N={n_rows:>5} entropy={ent!s:<5} {label} vs a: {diffs}")
        print(
            f"N={n_rows:>5} entropy={ent!s:<5} scale: max|dW|={r['grad_W_max']:.2e} "
            f"max|d hidden|={r['grad_hidden_max']:.2e}"
        )


# ------------------------------------------------------------------------------------------------
# Model mode
# ------------------------------------------------------------------------------------------------


def model_worker(args: argparse.Namespace) -> dict:
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


def print_model_table(args: argparse.Namespace, results: list[dict]) -> None:
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


# ------------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------------


def main() -> None:
    argv = sys.argv[1:]
    args = parse_args(argv)
    if args.worker is None:
        if args.mode == "head":
            head_main(args, argv)
        else:
            variants = ["full"] + [f"chunked:{c}" for c in args.chunk_size] + ["backbone"]
            print_model_table(args, [spawn_worker(v, argv) for v in variants])
        return
    sys.path.insert(0, str(REPO_ROOT))
    if args.mode == "model":
        result = model_worker(args)
    elif args.worker.startswith("mem:"):
        _, variant, n_rows, ent = args.worker.split(":")
        result = head_memory_worker(args, variant, int(n_rows), bool(int(ent)))
    else:
        _, n_rows, ent = args.worker.split(":")
        result = head_time_worker(args, int(n_rows), bool(int(ent)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
