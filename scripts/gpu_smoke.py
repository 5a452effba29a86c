#!/usr/bin/env python3
"""GPU smoke run: srpo's GPU code paths on one CUDA GPU, offline, in about 10 minutes, with no
model weights (nothing over 64 MiB travels to the GPU machine): random models of real shapes
are built there from their config.

    python scripts/gpu_smoke.py                      # on a CUDA machine (SMOKE_DEVICE=cuda)
    SMOKE_DEVICE=cpu python scripts/gpu_smoke.py     # the same checks at small sizes, on a CPU

Checks, each printing one line `smoke: <check> ok|FAIL <numbers>` (a failed check does not stop
the others, except those that need its output):
  env          torch / CUDA / GPU, srpo and how its task packs were found
  tiny         the tiny random model (built in code) through srpo/presets/gpu/math_gsm8k.yaml's
               workflow: 3 parallel solvers + an aggregator, LoRA per role, bf16, 2 steps
  init-0.5b    a randomly initialised Qwen2.5-0.5B (its real config; SMOKE_DEVICE=cpu: the same
               vocabulary with tiny layers) written as a model folder, weights made on the device
  math-0.5b    that model through the same workflow: 2 steps with a checkpoint, held-out eval
               before; resumed to 3 steps, eval after, both adapters exported merged
  search-0.5b  srpo/presets/gpu/search_nq.yaml's workflow (3 parallel query writers + an answerer,
               BM25 over the generated world), 2 steps
  eval         `srpo eval` of the math run's exported policies
  report       `srpo report` of the math run (one HTML file)
  math-1.5b    a random Qwen2.5-1.5B, 2 steps, when the time spent so far leaves room
               (SMOKE_BIG=auto|1|0; auto: if under 45% of SMOKE_BUDGET_S, default 540 s)
The math data is a generated GSM8K-format file (the preset's own `task.source: gsm8k` loader;
arithmetic questions, held-out ones first). Numbers per training check: wall time, steps,
seconds per step, rollout (generated) tokens/s, reward, mismatch/kl, peak GPU memory (torch's
allocator; on a CPU: the process's peak RSS).

Results: $OUT/smoke.json (OUT is set by the GPU machine's runner; else SMOKE_OUT, else a new
temporary directory), with the run directories under it ($OUT/runs) and each failed check's
traceback in $OUT/smoke.log. Exit status 0 only when every check passed.
"""

from __future__ import annotations

import gc
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _configs_dir() -> Path:
    """srpo/presets/gpu of a checkout (scripts/..), or the bundle's copy beside this script."""
    for base in (HERE.parent / "srpo" / "presets" / "gpu", HERE / "configs" / "gpu"):
        if (base / "math_gsm8k.yaml").is_file():
            return base
    sys.exit(f"gpu_smoke: no srpo/presets/gpu/math_gsm8k.yaml under {HERE.parent} or {HERE}")


DEVICE = os.environ.get("SMOKE_DEVICE", "cuda")
CUDA = DEVICE.startswith("cuda")
BUDGET_S = float(os.environ.get("SMOKE_BUDGET_S", "540"))
BIG = os.environ.get("SMOKE_BIG", "auto")
OUT = Path(os.environ.get("OUT") or os.environ.get("SMOKE_OUT") or "")  # set in main()
START = time.perf_counter()
RESULTS: list[dict] = []
LOG = OUT / "smoke.log"


def line(name: str, ok: bool, numbers: dict) -> None:
    shown = "  ".join(f"{k}={v}" for k, v in numbers.items())
    print(f"smoke: {name:<12} {'ok' if ok else 'FAIL'}  {shown}", flush=True)


def check(name: str, fn, *args, **kwargs):
    """Run one check; record and print its line; return its value (None when it failed)."""
    start = time.perf_counter()
    import torch

    if CUDA:
        torch.cuda.reset_peak_memory_stats()
    try:
        value, numbers = fn(*args, **kwargs)
        ok, error = True, None
    except Exception as e:  # noqa: BLE001 (one failed check must not hide the others' results)
        value, numbers, ok = None, {}, False
        error = f"{type(e).__name__}: {e}"
        with LOG.open("a", encoding="utf-8") as f:
            f.write(f"==== {name}\n{traceback.format_exc()}\n")
    numbers = {"s": round(time.perf_counter() - start, 1), **numbers, **_memory()}
    if error:
        numbers["error"] = error.splitlines()[0][:300]
    RESULTS.append({"check": name, "ok": ok, **numbers})
    line(name, ok, numbers)
    _write_results(final=False)
    gc.collect()
    if CUDA:
        torch.cuda.empty_cache()
    return value


def _memory() -> dict:
    import torch

    if CUDA:
        return {"peak_alloc_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)}
    return {"peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}


def _write_results(*, final: bool) -> None:
    import torch

    summary = {"device": DEVICE, "torch": torch.__version__, "cuda": torch.version.cuda,
               "wall_s": round(time.perf_counter() - START, 1), "finished": final,
               "passed": all(r["ok"] for r in RESULTS), "checks": RESULTS}
    (OUT / "smoke.json").write_text(json.dumps(summary, indent=2) + "\n")


# --------------------------------------------------------------------------- the checks


def env_check():
    import torch

    from srpo.packs import _entry_points, known_pack_names

    numbers = {"torch": torch.__version__, "python": sys.version.split()[0]}
    if CUDA:
        if not torch.cuda.is_available():
            raise RuntimeError(f"SMOKE_DEVICE={DEVICE} but torch {torch.__version__} sees no CUDA GPU")
        props = torch.cuda.get_device_properties(torch.device(DEVICE))
        numbers.update(gpu=props.name.replace(" ", "_"), gib=round(props.total_memory / 2**30),
                       cuda=torch.version.cuda, bf16=torch.cuda.is_bf16_supported())
    import srpo

    packs = known_pack_names()
    numbers["srpo_at"] = str(Path(srpo.__file__).parent.parent)
    numbers.update(packs=",".join(packs), entry_points=",".join(sorted(_entry_points())) or "none")
    if not {"math", "search"} <= set(packs):
        raise RuntimeError(f"srpo's task packs are not found: {packs}")
    return None, numbers


def write_math_data(path: Path, heldout: int, train: int, seed: int = 0) -> Path:
    """GSM8K-format records {"question", "answer": "... #### n"}: `heldout` first, then `train`,
    all questions distinct (the loader refuses held-out questions that recur in training)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    with path.open("w", encoding="utf-8") as f:
        while len(seen) < heldout + train:
            a, b, op = rng.randint(2, 99), rng.randint(2, 99), rng.choice("+-*")
            question = f"Tom has {a} apples. He {'gets' if op == '+' else 'gives away' if op == '-' else 'multiplies them by'} {b}. How many apples does he have now?"
            if question in seen:
                continue
            seen.add(question)
            value = a + b if op == "+" else a - b if op == "-" else a * b
            f.write(json.dumps({"question": question,
                                "answer": f"{a} {op} {b} = {value}\n#### {value}"}) + "\n")
    return path


def _small(cpu_value, cuda_value):
    return cuda_value if CUDA else cpu_value


def train_check(preset: str, overrides: list[str], *, expect_steps: int, before: bool = True,
                after: bool = True, moves: bool = True, exports: tuple[str, ...] = ()):
    """A Trainer run; moves: some step's gradient must be non-zero (the update really ran)."""
    import torch  # noqa: F401  (loaded before srpo, as srpo does)

    from srpo.config import load_config
    from srpo.train.trainer import Trainer

    trainer = Trainer(load_config(preset, overrides))
    result = trainer.train()
    if result.steps_done != expect_steps or not result.history:
        raise AssertionError(f"{result.steps_done} steps done, {len(result.history)} in this run; "
                             f"expected {expect_steps}")
    for i, m in enumerate(result.history):
        bad = {k: v for k, v in m.items()
               if (k == "loss" or k.startswith("grad_norm/")) and not math.isfinite(v)}
        if bad:
            raise AssertionError(f"non-finite values at step {i + 1}: {bad}")
    if (after and result.after is None) or (before and result.before is None):
        raise AssertionError("no held-out evaluation before/after training")
    hist = result.history
    mean = lambda key: sum(m.get(key, float("nan")) for m in hist) / len(hist)
    grad = max(v for m in hist for k, v in m.items() if k.startswith("grad_norm/"))
    if moves and not grad > 0:
        raise AssertionError(f"every step's gradient was zero (rewards: "
                             f"{[m.get('reward/std') for m in hist]} std): no update ran")
    step_s = sum(v for m in hist for k, v in m.items() if k.startswith("time/")) / len(hist)
    numbers = {"steps": f"{len(hist)}/{result.steps_done}", "s_per_step": round(step_s, 2),
               "gen_tok_s": round(mean("throughput/gen_tokens_per_s")),
               "reward": round(hist[-1].get("reward/mean", float("nan")), 3),
               "mismatch_kl": f"{hist[-1].get('mismatch/kl', float('nan')):.1e}",
               "loss": f"{hist[-1].get('loss', float('nan')):.2e}", "grad_max": f"{grad:.2e}"}
    run_dir = result.run_dir
    for policy in exports:
        if not (run_dir / "export" / policy / "config.json").is_file():
            raise AssertionError(f"no export of policy {policy!r} in {run_dir / 'export'}")
    if exports:
        numbers["exported"] = ",".join(exports)
    del trainer, result
    return run_dir, numbers


def init_check(shape: str, folder: Path):
    from srpo.models.random_init import SHAPES, write_random_model

    write_random_model(folder, shape, seed=0, dtype="bfloat16", device=DEVICE)
    size = sum(p.stat().st_size for p in folder.iterdir())
    cfg = SHAPES[shape]
    return folder, {"shape": shape, "layers": cfg["num_hidden_layers"], "hidden": cfg["hidden_size"],
                    "vocab": cfg["vocab_size"], "folder_mib": round(size / 2**20)}


def cli_check(args: list[str], expect: Path | None = None):
    proc = subprocess.run([sys.executable, "-m", "srpo.cli", *args], capture_output=True, text=True,
                          check=False)
    with LOG.open("a", encoding="utf-8") as f:
        f.write(f"==== srpo {' '.join(args)} (exit {proc.returncode})\n{proc.stdout[-4000:]}\n"
                f"{proc.stderr[-4000:]}\n")
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or [""]
        raise RuntimeError(f"srpo {args[0]} exited {proc.returncode}: {tail[0][:200]}")
    numbers = {}
    if expect is not None:
        if not expect.is_file():
            raise AssertionError(f"{expect} was not written")
        numbers["kib"] = round(expect.stat().st_size / 1024)
    return None, numbers


def plan(device: str, runs: Path, data: Path, models: dict[str, Path]) -> dict[str, list[str]]:
    """The config overrides of each training check (on srpo/presets/gpu/math_gsm8k.yaml, or
    search_nq.yaml for search-*): sizes for a GPU, or small ones on a CPU. data: the GSM8K-format
    file; models: the random model folders by size ("0.5b", "1.5b")."""
    gpu = device.startswith("cuda")

    def small(cpu_value, gpu_value):
        return gpu_value if gpu else cpu_value

    heldout, train = small(4, 32), small(16, 200)
    common = [f"device={device}", "model.dtype=bfloat16", "seed=0", "checkpoint.tensorboard=false",
              "checkpoint.plots=false", "train.warmup_steps=0", "eval.every=0", "group_size=4",
              f"train.tasks_per_step={small(2, 8)}", f"rollout.max_batch_size={small(16, 256)}"]
    math_common = [*common, "task.source=gsm8k", f"task.path={data}",
                   f"task.heldout_size={heldout}", f"task.train_size={train}",
                   f"eval.size={heldout}", f"sampling.max_new_tokens={small(8, 96)}",
                   # a format component (any number in the answer) gives a random model's
                   # rollouts varied rewards, so the updates are not all zero
                   "task.reward={correct_weight: 1.0, format_weight: 0.5, format_rule: any}"]
    big = [*math_common, f"model.name={models['0.5b']}", "checkpoint.every=2",
           "train.micro_batch_tokens=16384", "train.lr=5.0e-5", f"output_dir={runs / 'math-0.5b'}"]
    return {
        "tiny": [*math_common, "model.name=tiny", "train.steps=2", "checkpoint.export=false",
                 f"output_dir={runs / 'tiny'}"],
        # 2 steps with a checkpoint, then resumed to 3, evaluated and both adapters exported
        "math-0.5b": [*big, "train.steps=2", "checkpoint.export=false", "eval.after=false"],
        "resume-0.5b": [*big, "train.steps=3", "resume=true", "eval.before=false"],
        "search-0.5b": [*common, f"model.name={models['0.5b']}", "task.search.corpus=world",
                        "task.search.index_dir=null", "task.search.plain_text_fallback=true",
                        f"task.train_size={small(16, 64)}", f"task.heldout_size={small(4, 8)}",
                        f"eval.size={small(4, 8)}", f"sampling.max_new_tokens={small(8, 64)}",
                        "train.steps=2", "checkpoint.export=false",
                        f"output_dir={runs / 'search-0.5b'}"],
        "math-1.5b": [*math_common, f"model.name={models['1.5b']}", "train.steps=2",
                      "checkpoint.export=false", "train.micro_batch_tokens=8192", "train.lr=3.0e-5",
                      "eval.before=false", f"output_dir={runs / 'math-1.5b'}"],
    }


def main() -> int:
    global OUT, LOG
    if str(OUT) in ("", "."):
        OUT = Path(tempfile.mkdtemp(prefix="srpo-gpu-smoke."))
    LOG = OUT / "smoke.log"
    OUT.mkdir(parents=True, exist_ok=True)
    LOG.write_text("")
    runs = OUT / "runs"
    runs.mkdir(exist_ok=True)
    configs = _configs_dir()
    math_preset, search_preset = configs / "math_gsm8k.yaml", configs / "search_nq.yaml"
    print(f"gpu_smoke: device {DEVICE}, budget {BUDGET_S:.0f} s, results in {OUT}", flush=True)
    check("env", env_check)

    heldout, train = _small(4, 32), _small(16, 200)
    data = write_math_data(OUT / "arithmetic_gsm8k.jsonl", heldout, train)
    shape = "qwen2.5-0.5b" if CUDA else "qwen2.5-cpu-small"
    models = {"0.5b": OUT / "models" / shape, "1.5b": OUT / "models" / "qwen2.5-1.5b"}
    runs_of = plan(DEVICE, runs, data, models)
    check("tiny", train_check, math_preset, runs_of["tiny"], expect_steps=2)

    folder = check("init-0.5b", init_check, shape, models["0.5b"])
    math_run = None
    if folder is not None:
        first = check("math-0.5b", train_check, math_preset, runs_of["math-0.5b"],
                      expect_steps=2, after=False)
        if first is not None:
            math_run = check("resume-0.5b", train_check, math_preset, runs_of["resume-0.5b"],
                             expect_steps=3, before=False, moves=False,  # 1 step: may be 0
                             exports=("solver", "aggregator"))
        # a random model's search rewards are all 0 (no tags, no overlap): its gradient may be 0
        check("search-0.5b", train_check, search_preset, runs_of["search-0.5b"], expect_steps=2,
              moves=False)
    if math_run is not None:
        check("eval", cli_check, ["eval", str(math_run), "--n", str(_small(2, 8))])
        check("report", cli_check, ["report", str(math_run), "--out", str(OUT / "report.html")],
              OUT / "report.html")

    elapsed = time.perf_counter() - START
    run_big = BIG == "1" or (BIG == "auto" and CUDA and elapsed < 0.45 * BUDGET_S)
    if run_big:
        if check("init-1.5b", init_check, "qwen2.5-1.5b", models["1.5b"]) is not None:
            check("math-1.5b", train_check, math_preset, runs_of["math-1.5b"], expect_steps=2,
                  before=False)
    else:
        print(f"gpu_smoke: math-1.5b skipped (SMOKE_BIG={BIG}, {elapsed:.0f} s spent of {BUDGET_S:.0f})",
              flush=True)
    # the random model folders are not results: delete them (GBs), keep the runs' small files
    for name in ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-cpu-small"):
        _rmtree(OUT / "models" / name)
    for run in runs.iterdir():
        for heavy in ("export", "checkpoints"):
            _rmtree(run / heavy)
    _write_results(final=True)
    passed = sum(r["ok"] for r in RESULTS)
    total = time.perf_counter() - START
    verdict = "PASSED" if passed == len(RESULTS) else "FAILED"
    print(f"smoke: {verdict} {passed}/{len(RESULTS)} checks in {total:.0f} s; {OUT / 'smoke.json'}",
          flush=True)
    return 0 if verdict == "PASSED" else 1


def _rmtree(path: Path) -> None:
    import shutil

    if path.exists():
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
