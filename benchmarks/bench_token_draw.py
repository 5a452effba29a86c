"""The hf engine's per-step work on the vocabulary: drawing a token and recording its log-prob.

Side by side in one process, alternated, on the same [rows, vocab] float32 scores (the shape of
one decode step of the default job's rollout: 216 rows = 18 tasks x 4 rollouts x 3 debaters,
SmolLM2's 49,152-token vocabulary):
  before   the processors of commit --before (default 5fa41b2, read with `git show`): the
           recorder `SampledLogprobRecorder` (its own log-sum-exp) and then `InverseCdfSampler`
           (a softmax pass, and a fresh [B, V] tensor of -inf with one 0 a row)
  after    this checkout's `InverseCdfSampler(record=True)`: one exp pass, the log-prob from
           the CDF's total mass, the token marked +inf in place
Each timing includes the float32 copy generate makes of the step's logits (the same both sides).

    .venv/bin/python benchmarks/bench_token_draw.py                 # 216 x 49152, 2 threads
    .venv/bin/python benchmarks/bench_token_draw.py --rows 72 --threads 1

Run it alone: another job on the machine skews both sides.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from srpo.rollout.backends.hf.processors import InverseCdfSampler

ROOT = Path(__file__).resolve().parents[1]
PROCESSORS = "srpo/rollout/backends/hf/processors.py"


def processors_at(commit: str):
    """The processors module as it was at `commit`."""
    source = subprocess.run(["git", "show", f"{commit}:{PROCESSORS}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "processors_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("processors_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", default="5fa41b2")
    p.add_argument("--rows", type=int, default=216)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=30)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    old = processors_at(a.before)
    logits = torch.randn(a.rows, a.vocab, dtype=torch.bfloat16) * 4  # what the lm_head gives under autocast
    ids = torch.zeros(a.rows, 1, dtype=torch.long)
    recorder, old_sampler = old.SampledLogprobRecorder(), old.InverseCdfSampler()
    fused = InverseCdfSampler(record=True)
    times: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(a.repeats + 3):
        for name in ("before", "after") if i % 2 == 0 else ("after", "before"):
            start = time.perf_counter()
            scores = logits.float()  # generate's float32 copy of the step's logits
            if name == "before":
                old_sampler(ids, recorder(ids, scores)).argmax(dim=-1)
            else:
                fused(ids, scores).argmax(dim=-1)
            if i >= 3:
                times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"[{a.rows}, {a.vocab}] float32 scores, {a.threads} threads, {a.repeats} alternated repeats, "
          f"torch {torch.__version__}; each step: logits to float32, record + draw, greedy argmax")
    for name, t in med.items():
        print(f"  {name:6s} median {t * 1e3:6.1f} ms a step (min {min(times[name]) * 1e3:.1f})")
    print(f"  after / before: {med['after'] / med['before']:.2f}x")


if __name__ == "__main__":
    main()
