"""Forward+backward time of the SRPO set loss against the token-level GRPO loss, same tensors.

Both losses see the same [M, T] log-probs, mask, members and advantages (sets of 1-8 members);
runs alternate in one process and the median of each is compared. Target: SRPO <= 1.2x GRPO.

    python benchmarks/bench_objective.py [--members 512] [--tokens 1024] [--reps 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import srpo
from srpo.objective.aggregation import member_token_weights, set_weights
from srpo.objective.losses import UnitLossInputs, UnitLossSettings, unit_policy_loss


def make_inputs(members: int, tokens: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    sizes: list[int] = []
    while sum(sizes) < members:
        sizes.append(int(torch.randint(1, 9, (1,), generator=g)))
    sizes[-1] -= sum(sizes) - members
    if sizes[-1] == 0:
        sizes.pop()
    set_index = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))  # [M]
    lengths = torch.randint(tokens // 8, tokens + 1, (members,), generator=g)
    mask = torch.arange(tokens).unsqueeze(0) < lengths.unsqueeze(1)  # [M, T]
    old = -3 * torch.rand(members, tokens, generator=g)
    new = old + 0.05 * torch.randn(members, tokens, generator=g)
    set_adv = torch.randn(len(sizes), generator=g)
    return new, old, mask, set_index, set_adv


def time_once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    new, old, mask, set_index, set_adv = make_inputs(args.members, args.tokens)
    num_sets = int(set_index.max()) + 1
    member_adv = set_adv[set_index]
    lengths = mask.sum(-1)  # [M]
    grpo_w = member_token_weights("seq_mean_token_mean", lengths, set_index, num_sets)  # [M]
    srpo_w = set_weights(member_token_weights("set_mean", lengths, set_index, num_sets),
                         lengths, set_index, num_sets)  # [S]

    def srpo_public():
        lp = new.clone().requires_grad_(True)
        loss, _ = srpo.setwise_policy_loss(lp, old, mask, set_index, set_adv, clip_low=3e-4, clip_high=4e-4)
        loss.backward()

    def srpo_engine():
        lp = new.clone().requires_grad_(True)
        x = UnitLossInputs(lp, old, mask, set_index, num_sets, set_adv, srpo_w)
        loss = unit_policy_loss("set", x, UnitLossSettings(3e-4, 4e-4)).loss
        loss.backward()

    def grpo_engine():
        lp = new.clone().requires_grad_(True)
        x = UnitLossInputs(lp, old, mask, set_index, num_sets, member_adv, grpo_w)
        loss = unit_policy_loss("token", x, UnitLossSettings(0.2, 0.2)).loss
        loss.backward()

    variants = {"grpo (token)": grpo_engine, "srpo (engine)": srpo_engine, "srpo (public fn)": srpo_public}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():  # warm-up
        fn()
    for _ in range(args.reps):
        for name, fn in variants.items():  # alternate so drift hits all variants alike
            times[name].append(time_once(fn))

    base = statistics.median(times["grpo (token)"])
    print(f"M={args.members} members x T={args.tokens} tokens, {num_sets} sets of 1-8, "
          f"{args.reps} reps, {args.threads} threads; forward+backward incl. input checks and metrics")
    print(f"{'variant':<18} {'median ms':>10} {'min ms':>8} {'ratio vs grpo':>14}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<18} {1000 * med:>10.1f} {1000 * min(ts):>8.1f} {med / base:>14.2f}")


if __name__ == "__main__":
    main()
