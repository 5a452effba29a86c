"""The routed job against the same experts on a fixed route (issue 51, section 1; preregistered
in docs/results.md, "Routing: a router that routes").

Arms, each `srpo train math/routed` in a fresh process with only `seed` (and `train.threads`)
set, plus the arm's overrides:

  routed:  the preset as it ships: the router picks one expert per problem, and the router and
           both experts train;
  fixed:   `workflow.params.fixed_route=[word_problem_expert]`: every problem goes to that
           expert (the better single expert on the mix), which trains; no router.

Both start from the same expert adapters (stage 1, `scripts/train_routed_experts.sh`), named by
`--experts` (a folder holding number_sequence/ and aiw/).

    .venv/bin/python benchmarks/routed_study.py run --experts runs/experts \\
        --runs-dir /tmp/routed --seeds 0 1 2 --jobs 2 --threads 1
    .venv/bin/python benchmarks/routed_study.py analyze --runs-dir /tmp/routed \\
        --out results/bench/routed_study_<date>

`analyze` writes rows.json, tests.json and table.md: per seed, the routed arm's held-out
accuracy against the fixed arm's on the same 256 problems (McNemar, exact, two-sided: R1), the
routes of the greedy held-out evaluation before and after training by problem kind (R2), and each
arm's own before -> after change.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_before_after import ROOT, run_cells, run_side

from srpo.record.accuracy import paired_comparison

PRESET = "math/routed"
FIXED_EXPERT = "word_problem_expert"
ARMS = {"routed": [], "fixed": [f"workflow.params.fixed_route=[{FIXED_EXPERT}]"]}
# which expert is right for which kind: the table's "to its expert" share
OWN_EXPERT = {"number_sequence": "sequence_expert", "aiw": "word_problem_expert"}
ALPHA = 0.01  # R1: each seed's McNemar p below this


def experts_override(experts: Path) -> str:
    folder = experts.resolve()
    return (f"policies.lora.init={{sequence: {folder / 'number_sequence/export/debater/lora'}, "
            f"aiw: {folder / 'aiw/export/debater/lora'}}}")


def one(arm: str, seed: int, experts: Path, runs_dir: Path, threads: int) -> dict:
    overrides = [f"seed={seed}", f"train.threads={threads}", experts_override(experts), *ARMS[arm]]
    return run_side(f"{arm}-seed{seed}", ROOT, PRESET, overrides, runs_dir)


def evaluation(run_dir: Path, when: str) -> dict[str, bool]:
    """task_id -> correct, of the run's greedy held-out evaluation `when` (before/after)."""
    ev = json.loads((run_dir / "eval" / f"{when}.json").read_text())
    return dict(zip(ev["task_ids"], ev["correct"], strict=True))


def routes(run_dir: Path, when: str) -> dict[str, dict[str, int]]:
    """Per problem kind, how many held-out problems went to each route ("invalid": the router's
    reply did not parse and the fallback answered)."""
    table: dict[str, Counter] = defaultdict(Counter)
    with gzip.open(run_dir / "eval" / f"{when}.episodes.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            ep = json.loads(line)
            meta = ep["metadata"]
            route = "invalid" if meta.get("route_invalid") else ",".join(meta["route"])
            table[ep.get("task_kind", "-")][route] += 1
    return {kind: dict(sorted(c.items())) for kind, c in sorted(table.items())}


def own_expert_share(table: dict[str, dict[str, int]]) -> dict[str, float]:
    """Per kind, the share of its problems routed to the expert trained on it."""
    return {kind: c.get(OWN_EXPERT.get(kind, ""), 0) / sum(c.values()) for kind, c in table.items()}


def training_routes(run_dir: Path) -> list[dict[str, float | None]]:
    """Per training step, per kind: the share of the step's trained episodes (the run's
    episodes/step-*.jsonl.gz) routed to the kind's own expert (None: no episode of that kind)."""
    out = []
    for path in sorted((run_dir / "episodes").glob("step-*.jsonl.gz")):
        own: dict[str, list[bool]] = defaultdict(list)
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                ep = json.loads(line)
                kind = ep.get("task_kind", "-")
                own[kind].append(ep["metadata"]["route"] == [OWN_EXPERT.get(kind)])
        out.append({kind: (sum(own[kind]) / len(own[kind]) if own[kind] else None) for kind in OWN_EXPERT})
    return out


def accuracy_by_kind(run_dir: Path, when: str) -> dict[str, float]:
    right: dict[str, list[bool]] = defaultdict(list)
    with gzip.open(run_dir / "eval" / f"{when}.episodes.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            ep = json.loads(line)
            right[ep.get("task_kind", "-")].append(ep["reward_components"]["correct"] > 0)
    return {kind: sum(v) / len(v) for kind, v in sorted(right.items())}


def compare(a: dict[str, bool], b: dict[str, bool]) -> dict:
    """b against a on the same problems (b - a)."""
    if set(a) != set(b):
        raise SystemExit("the two evaluations hold different held-out problems")
    ids = sorted(a)
    c = paired_comparison([a[i] for i in ids], [b[i] for i in ids])
    return {"n": c.n, "a": c.before, "b": c.after, "diff": c.diff.estimate, "ci": [c.diff.low, c.diff.high],
            "gained": c.gained, "lost": c.lost, "p": c.p_value}


def analyze(runs_dir: Path, seeds: list[int]) -> dict:
    rows, tests = [], []
    for seed in seeds:
        dirs = {arm: runs_dir / f"{arm}-seed{seed}" for arm in ARMS}
        recs = {arm: json.loads((runs_dir / f"{arm}-seed{seed}.json").read_text()) for arm in ARMS}
        for arm, d in dirs.items():
            row = {"arm": arm, "seed": seed, "commit": recs[arm].get("commit"), "dirty": recs[arm].get("dirty"),
                   "wall_seconds": recs[arm]["wall_seconds"], "peak_rss_gb": recs[arm]["peak_rss_gb"],
                   "change": compare(evaluation(d, "before"), evaluation(d, "after")),
                   "by_kind": {w: accuracy_by_kind(d, w) for w in ("before", "after")}}
            if arm == "routed":
                row["routes"] = {w: routes(d, w) for w in ("before", "after")}
                row["own_expert_share"] = {w: own_expert_share(row["routes"][w]) for w in ("before", "after")}
                row["training_own_expert_share"] = training_routes(d)
            rows.append(row)
        r1 = compare(evaluation(dirs["fixed"], "after"), evaluation(dirs["routed"], "after"))
        tests.append({"seed": seed, "test": "R1", **r1,
                      "met": r1["diff"] > 0 and r1["p"] < ALPHA,
                      "fixed_significantly_better": r1["diff"] < 0 and r1["p"] < ALPHA})
    met = [t["met"] for t in tests]
    verdict = ("supported" if all(met) and len(met) == 3 else
               "refuted" if any(t["fixed_significantly_better"] for t in tests)
               or sum(t["diff"] <= 0 for t in tests) >= 2 else "undecided")
    return {"rows": rows, "tests": tests, "R1": verdict}


def markdown(result: dict) -> str:
    out = ["| seed | routed after | fixed after | routed - fixed, points [95% CI] | McNemar p "
           "| p < 0.01, routed ahead |", "|---|---|---|---|---|---|"]
    for t in result["tests"]:
        out.append(f"| {t['seed']} | {t['b']:.1%} | {t['a']:.1%} | {100 * t['diff']:+.1f} "
                   f"[{100 * t['ci'][0]:+.1f}, {100 * t['ci'][1]:+.1f}] | {t['p']:.2g} "
                   f"| {'yes' if t['met'] else 'no'} |")
    out += ["", f"R1: {result['R1']}", "",
            "| arm | seed | before -> after | change (p) | by kind after | wall | peak |",
            "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        c = r["change"]
        kinds = ", ".join(f"{k} {v:.1%}" for k, v in r["by_kind"]["after"].items())
        out.append(f"| {r['arm']} | {r['seed']} | {c['a']:.1%} -> {c['b']:.1%} | {100 * c['diff']:+.1f} ({c['p']:.2g}) "
                   f"| {kinds} | {r['wall_seconds'] / 60:.1f} min | {r['peak_rss_gb']:.1f} GB |")
    out += ["", "Routes of the greedy held-out evaluation (routed arm), problems per kind and expert:", "",
            "| seed | when | kind | routes |", "|---|---|---|---|"]
    for r in result["rows"]:
        for when in r.get("routes", {}):
            for kind, c in r["routes"][when].items():
                out.append(f"| {r['seed']} | {when} | {kind} | {', '.join(f'{k} {n}' for k, n in c.items())} |")
    out += ["", "Training (exploratory): per step, the share of the trained episodes of each kind routed to "
            f"its own expert ({' / '.join(OWN_EXPERT)}; - where the step trained no episode of that kind):", ""]
    for r in result["rows"]:
        if "training_own_expert_share" in r:
            steps = " ".join("/".join("-" if v is None else f"{v:.2f}" for v in step.values())
                             for step in r["training_own_expert_share"])
            out.append(f"- seed {r['seed']}: {steps}")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--experts", required=True, type=Path, help="stage 1's folder (number_sequence/, aiw/)")
    r.add_argument("--runs-dir", required=True, type=Path)
    r.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    r.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--threads", type=int, default=1)
    a = sub.add_parser("analyze")
    a.add_argument("--runs-dir", required=True, type=Path)
    a.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    a.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    if args.cmd == "run":
        args.runs_dir.mkdir(parents=True, exist_ok=True)
        cells = [(arm, s) for s in args.seeds for arm in args.arms]  # seed-major: both arms of a seed together
        run_cells(cells, lambda arm, seed: one(arm, seed, args.experts, args.runs_dir, args.threads), args.jobs)
        return
    result = analyze(args.runs_dir, args.seeds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rows.json").write_text(json.dumps({"rows": result["rows"]}, indent=1))
    (args.out / "tests.json").write_text(json.dumps({"tests": result["tests"], "R1": result["R1"]}, indent=1))
    (args.out / "table.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
