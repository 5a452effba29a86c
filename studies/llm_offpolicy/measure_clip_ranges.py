"""Fair clip ranges: each method's clip range set by one rule, from its own ratio unit.

Methods clip different units: SRPO a set's log-ratio Lambda_S (mean reduction), GSPO a member's
sequence log-ratio, GRPO / MAGRPO / DAPO / AT-GRPO / Dr. MAS each token's log-ratio. Their default
ranges differ by design (1e-2 on a set mean, 3e-4 on a sequence mean, 0.2 on a token), so a
comparison at the defaults compares objectives and clip widths at once. The rule (the same as the
testbed study's H6, docs/results.md): eps_u = the 75th percentile of |log r_u| of the method's
own units one optimizer step after the data were sampled, so a quarter of its units lie outside
[exp(-eps), exp(eps)] ~ [1 - eps, 1 + eps]; symmetric (low = high = eps_u).

Protocol, per method and per rollout batch (the study's setting, lr and minibatch shape):

    roll out a batch with the method's trainer; split its sets into two halves at random;
    one optimizer step of the method on half A (one minibatch of the reuse schedule);
    on half B (sets it did not train on): delta = log pi_new - log pi_old per token;
    the method's units of half B from delta: tokens, members' sequence means, or Lambda_S.

    python studies/llm_offpolicy/measure_clip_ranges.py CONFIG --methods srpo,grpo,gspo,magrpo \
        --steps 2 --out results/llm-offpolicy/clip_ranges.json [overrides ...]

Prints the quantiles of |log r_u| per method and the eps of the rule; writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from srpo.batch import FlatBatch, build_flat_batch
from srpo.config import load_config
from srpo.objective.methods import get_method, prepare_step
from srpo.objective.reductions import set_log_ratio
from srpo.train.trainer import Trainer

OUTSIDE_SHARE = 0.25  # the rule: a quarter of a method's units outside its range


def unit_log_ratios(unit: str, delta: torch.Tensor, batch: FlatBatch) -> torch.Tensor:
    """The method's ratio units of `batch` from per-token log-ratios delta [M, T]."""
    mask = batch.response_mask.bool()  # [M, T] trained tokens
    if unit == "token":
        return delta[mask]
    if unit == "sequence":  # a member's mean token log-ratio (GSPO)
        d = torch.where(mask, delta, torch.zeros_like(delta))
        return d.sum(1) / mask.sum(1).clamp_min(1)
    return set_log_ratio(delta, batch.response_mask, batch.set_index, batch.num_sets, "mean")


def measure(config: str, method: str, steps: int, overrides: list[str], seed: int) -> dict:
    spec = get_method(method)
    scratch = tempfile.mkdtemp(prefix="srpo-clip-")  # the trainer's run directory is not kept
    cfg = load_config(config, [f"train.method={method}", f"output_dir={scratch}/run", "eval.size=0",
                               f"seed={seed}", "checkpoint.report=false", *overrides])
    trainer = Trainer(cfg)
    values: list[torch.Tensor] = []
    for step in range(steps):
        batch = build_flat_batch(trainer.sampler.rollout(step), trainer.pad_id)
        with torch.no_grad():
            old = trainer.updater.logprobs(trainer.policies, batch).logprobs.cpu()
        filled, _ = prepare_step(trainer.spec, batch, old)
        order = torch.randperm(filled.num_sets).tolist()
        half_a, half_b = order[: len(order) // 2], order[len(order) // 2 :]
        trainer.update(filled.select_sets(half_a))  # one optimizer step on half A
        b = filled.select_sets(half_b)
        with torch.no_grad():
            new = trainer.updater.logprobs(trainer.policies, b).logprobs.cpu()
        values.append(unit_log_ratios(spec.ratio_unit, new - b.old_logprobs, b).detach().abs().double())
    x = torch.cat(values)
    q = torch.quantile(x, torch.tensor([0.5, 1 - OUTSIDE_SHARE, 0.95], dtype=torch.float64)).tolist()
    return {"method": method, "ratio_unit": spec.ratio_unit, "units": int(x.numel()),
            "default_clip": [spec.clip_low, spec.clip_high], "median": q[0], "p75": q[1],
            "p95": q[2], "eps": q[1],
            "outside_default": float(((x.exp() > 1 + spec.clip_high) |
                                      ((-x).exp() < 1 - spec.clip_low)).double().mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--methods", default="srpo,grpo,gspo,magrpo")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the table as JSON here")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_intermixed_args()
    rows = []
    for method in args.methods.split(","):
        start = time.perf_counter()
        rows.append(measure(args.config, method, args.steps, args.overrides, args.seed))
        print(f"{method}: {rows[-1]['units']} units in {time.perf_counter() - start:.0f} s", flush=True)
    print(f"\n|log r_u| one optimizer step after sampling ({args.steps} batches, seed {args.seed})")
    print(f"{'method':<8} {'unit':<9} {'units':>6} {'median':>9} {'p75=eps':>9} {'p95':>9} "
          f"{'default':>13} {'outside default':>16}")
    for r in rows:
        lo, hi = r["default_clip"]
        print(f"{r['method']:<8} {r['ratio_unit']:<9} {r['units']:>6} {r['median']:>9.2e} "
              f"{r['eps']:>9.2e} {r['p95']:>9.2e} {f'{lo:g}/{hi:g}':>13} {r['outside_default']:>16.2f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"config": args.config, "overrides": args.overrides,
                                              "steps": args.steps, "seed": args.seed,
                                              "rule": f"eps = quantile {1 - OUTSIDE_SHARE} of |log r_u|",
                                              "methods": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
