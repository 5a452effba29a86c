"""Before any routed training: does the router's reply parse, and is each expert better on a kind?

Reads a routed config (default: the `math/routed` preset, a mix of problem kinds) and runs
`srpo rollout` on held-out problems at the config's sampling settings:

  router:   the routed workflow as configured: the share of router replies that parse to a route
            (`route_invalid` 0), and the experts chosen per problem kind (a table kind x expert);
  experts:  each expert alone (workflow `single` with that agent): its sampled success per kind
            (`correct` of each answer), so the routed job's premise, "each expert is better on
            one kind", is measured before a router is trained to use it.

    .venv/bin/python benchmarks/routed_experts.py --n 128 --out results/bench/routed_experts_2026-12-06
    .venv/bin/python benchmarks/routed_experts.py --set agents.router.sampling.temperature=1.0

A screen, not a speed benchmark: `train.threads=1` (runs beside other jobs). Writes
OUT/summary.json (with the commit and dirty flag of the code) and OUT/<part>.jsonl episodes
(gzip them before committing).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import yaml
from provenance import ROOT, provenance


def rollout(config: str, out: Path, n: int, group_size: int, overrides: list[str]) -> list[dict]:
    cmd = [sys.executable, "-m", "srpo.cli", "rollout", config, "--split", "heldout", "--n", str(n),
           "--out", str(out), f"group_size={group_size}", "train.threads=1", *overrides]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def route_table(episodes: list[dict]) -> dict:
    """Valid share, and per kind the count of each chosen route ("invalid" for a fallback)."""
    table: dict[str, Counter] = defaultdict(Counter)
    for ep in episodes:
        route = "invalid" if ep["metadata"]["route_invalid"] else ",".join(ep["metadata"]["route"])
        table[ep.get("task_kind", "-")][route] += 1
    valid = sum(1 - ep["metadata"]["route_invalid"] for ep in episodes)
    return {"episodes": len(episodes), "valid_share": valid / len(episodes),
            "routes_by_kind": {k: dict(v) for k, v in sorted(table.items())},
            "invalid_replies": Counter(ep["transitions"][0]["members"][0]["text"] for ep in episodes
                                       if ep["metadata"]["route_invalid"]).most_common(10)}


def success_by_kind(episodes: list[dict]) -> dict:
    by: dict[str, list[float]] = defaultdict(list)
    for ep in episodes:
        by[ep.get("task_kind", "-")].append(ep["reward_components"]["correct"])
    return {k: {"answers": len(v), "success": sum(v) / len(v)} for k, v in sorted(by.items())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="math/routed")
    p.add_argument("--n", type=int, default=128, help="held-out problems")
    p.add_argument("--group-size", type=int, default=2, help="rollouts per problem")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from srpo.config import load_config, to_dict

    cfg = load_config(args.config, args.set)
    experts = cfg.workflow.params["experts"]
    summary = {"written_by": provenance(ROOT), "config": args.config, "overrides": args.set,
               "n": args.n, "group_size": args.group_size}
    summary["router"] = route_table(rollout(args.config, out / "router.jsonl", args.n, args.group_size, args.set))
    print(json.dumps(summary["router"], indent=1), flush=True)
    summary["experts"] = {}
    for expert in experts:
        # the same config with one agent, the expert, answering alone (a config may not
        # configure agents its workflow does not have)
        alone = to_dict(cfg)
        alone["agents"] = {expert: alone["agents"][expert]}
        alone["workflow"] = {"name": "single", "params": {"agent": expert}}
        path = out / f"{expert}.yaml"
        path.write_text(yaml.safe_dump(alone, sort_keys=False))
        eps = rollout(str(path), out / f"{expert}.jsonl", args.n, args.group_size, [])
        summary["experts"][expert] = success_by_kind(eps)
        print(expert, json.dumps(summary["experts"][expert]), flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
