"""How far does the set log-ratio Lambda_S move after one optimizer step, per event reduction?

The clip range of each reduction should match the typical size of its own Lambda_S once the
policy has moved by one minibatch step (before that, on-policy, Lambda_S = 0 and no clip binds).
This script measures it on the default job's setting (SmolLM2 + LoRA, debate: sets of 3):

    for each of --steps rollout batches:
        split the batch's sets into two halves; take one optimizer step on half A (SRPO, `mean`);
        compute delta = log pi_new - log pi_old on half B's members (sets it did not train on);
        Lambda_S of half B's sets under every reduction, from the same delta.

It prints quantiles of |Lambda_S| per reduction and the clip fraction each candidate eps would
give. Used for the clip defaults in docs/algorithms.md.

    python benchmarks/measure_set_ratio_scale.py [--steps 4] [overrides ...]
"""

from __future__ import annotations

import argparse
import tempfile

import torch

from srpo.batch import build_flat_batch
from srpo.cli.train import DEFAULT_CONFIG
from srpo.config import load_config
from srpo.objective.methods import prepare_step
from srpo.objective.reductions import REDUCTIONS, set_log_ratio
from srpo.train.trainer import Trainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="srpo-measure-")  # the trainer's run directory is not kept
    cfg = load_config(DEFAULT_CONFIG, [f"output_dir={scratch}/run", "eval.size=0", *args.overrides])
    trainer = Trainer(cfg)
    lambdas: dict[str, list[torch.Tensor]] = {r: [] for r in REDUCTIONS}
    sizes: list[torch.Tensor] = []
    for step in range(args.steps):
        batch = build_flat_batch(trainer.sampler.rollout(step), trainer.pad_id)
        with torch.no_grad():
            old = trainer.updater.logprobs(trainer.policies, batch).logprobs.cpu()
        filled, _ = prepare_step(trainer.spec, batch, old)
        order = torch.randperm(batch.num_sets).tolist()
        half_a, half_b = order[: len(order) // 2], order[len(order) // 2 :]
        a = filled.select_sets(half_a)
        trainer.update(a)  # one optimizer step on half A (it computes the step's weights itself)
        b = filled.select_sets(half_b)
        with torch.no_grad():
            new = trainer.updater.logprobs(trainer.policies, b).logprobs.cpu()
        delta = new - b.old_logprobs
        for r in REDUCTIONS:
            lambdas[r].append(set_log_ratio(delta, b.response_mask, b.set_index, b.num_sets, r))
        sizes.append(b.set_sizes)
        print(f"step {step + 1}: {b.num_sets} held-aside sets measured", flush=True)
    size_all = torch.cat(sizes)
    print(f"\n|Lambda_S| after one optimizer step (lr {cfg.train.lr}), {int(size_all.numel())} sets "
          f"of sizes {sorted(set(size_all.tolist()))}")
    print(f"{'reduction':<11} {'median':>9} {'p80':>9} {'p95':>9} {'max':>9}")
    for r in REDUCTIONS:
        x = torch.cat(lambdas[r]).abs().double()
        q = torch.quantile(x, torch.tensor([0.5, 0.8, 0.95], dtype=torch.float64)).tolist()
        print(f"{r:<11} {q[0]:>9.2e} {q[1]:>9.2e} {q[2]:>9.2e} {float(x.max()):>9.2e}")
    print("\nshare of sets outside [1 - eps, 1 + eps] for candidate eps:")
    eps_grid = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.2)
    print(f"{'reduction':<11}" + "".join(f"{e:>9.0e}" for e in eps_grid))
    for r in REDUCTIONS:
        ratio = torch.cat(lambdas[r]).double().exp()
        row = [float(((ratio > 1 + e) | (ratio < 1 - e)).double().mean()) for e in eps_grid]
        print(f"{r:<11}" + "".join(f"{v:>9.2f}" for v in row))


if __name__ == "__main__":
    main()
