"""Peak memory and time of one update against train.micro_batch_tokens (the default job's model).

Each size runs in a fresh process (peak RSS is per process): build the default job's trainer
(SmolLM2-135M, LoRA r16), roll out step 0 once (same seed: the same batch for every size), then
time one update with every set computed (zero-advantage skipping off) while a thread samples the
process's resident memory every 5 ms. Prints a table: peak RSS during the update, its growth
over the memory held before it, update seconds, micro-batches and the largest one's shape.

    .venv/bin/python benchmarks/bench_update_memory.py                 # sizes 512 1024 2048 4096
    .venv/bin/python benchmarks/bench_update_memory.py --sizes 1024 2048 --threads 2
    .venv/bin/python benchmarks/bench_update_memory.py --checkpointing   # activation checkpointing on
    .venv/bin/python benchmarks/bench_update_memory.py --config studies/configs/search_world_2hop_candidate.yaml \
        --sizes 1024 4096 16384                                           # another job's step-0 batch

Run it alone: another job on the machine changes both memory and time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class PeakRSS:
    """Samples the resident set size in a thread; `peak` is the largest value seen."""

    def __init__(self, interval: float = 0.005):
        self.interval, self.peak, self._stop = interval, _rss_bytes(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_bytes())
            time.sleep(self.interval)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())


def child(size: int, threads: int, checkpointing: bool, config: str) -> dict:
    import torch

    from srpo.batch import build_flat_batch, pack_sets
    from srpo.config import load_config
    from srpo.objective import prepare_step
    from srpo.train.trainer import Trainer

    scratch = tempfile.mkdtemp(prefix="srpo-bench-mem-")
    cfg = load_config(config, [
        f"output_dir={scratch}/run", "eval.size=0", f"train.micro_batch_tokens={size}",
        "train.skip_zero_advantage=false", f"train.threads={threads}",
        f"train.activation_checkpointing={str(checkpointing).lower()}",
    ])
    trainer = Trainer(cfg)
    batch = build_flat_batch(trainer.sampler.rollout(0), trainer.pad_id)
    batch, _ = prepare_step(trainer.spec, batch, None)
    micro = [batch.select_sets(ids) for ids in pack_sets(batch, size)]
    shapes, prompts = [], 0
    for m in micro:  # rows x (trimmed) width of each micro-batch's forward
        used = m.attention_mask.any(dim=0).nonzero().flatten()
        shapes.append((m.num_members, int(used[-1] - used[0] + 1)))
        # distinct prompts: what the update runs through the decoder with train.share_prompt_forward
        prompts += len({tuple(row.tolist()) for row in m.input_ids[:, : m.prompt_length]})
    before = _rss_bytes()
    start = time.perf_counter()
    with PeakRSS() as sampler:
        trainer.update(batch)
    seconds = time.perf_counter() - start
    return {
        "size": size, "rss_before": before, "rss_peak": sampler.peak, "update_s": seconds,
        "micro_batches": len(micro), "prompt_forwards": prompts, "largest": max(shapes, key=lambda s: s[0] * s[1]),
        "members": batch.num_members, "attn": trainer.policies.models()[0].config._attn_implementation,
        "torch": torch.__version__,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--checkpointing", action="store_true", help="train.activation_checkpointing=true")
    ap.add_argument("--config", default=str(REPO / "srpo" / "presets" / "default.yaml"),
                    help="the job whose step-0 batch is updated (default: the default job)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.threads, args.checkpointing, args.config)))
        return
    rows = []
    for size in args.sizes:
        flag = ["--checkpointing"] if args.checkpointing else []
        out = subprocess.run([sys.executable, __file__, "--child", str(size), "--threads", str(args.threads), *flag,
                              "--config", args.config],
                             check=True, capture_output=True, text=True, cwd=REPO)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"done {size}", file=sys.stderr, flush=True)
    gb = 1 << 30
    print(f"one update of {Path(args.config).name}'s step-0 batch ({rows[0]['members']} members), "
          f"{args.threads} threads, attention {rows[0]['attn']}, torch {rows[0]['torch']}, "
          f"activation checkpointing {'on' if args.checkpointing else 'off'}")
    print(f"{'micro_batch_tokens':>18} {'peak RSS GB':>12} {'growth GB':>10} {'update s':>9} "
          f"{'micro-batches':>13} {'prompt forwards':>15} {'largest rows x width':>21}")
    for r in rows:
        rows_, width = r["largest"]
        print(f"{r['size']:>18} {r['rss_peak'] / gb:>12.2f} {(r['rss_peak'] - r['rss_before']) / gb:>10.2f} "
              f"{r['update_s']:>9.1f} {r['micro_batches']:>13} {r['prompt_forwards']:>15} {f'{rows_} x {width}':>21}")


if __name__ == "__main__":
    main()
