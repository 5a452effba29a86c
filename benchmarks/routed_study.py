"""The routed job against the same experts on a fixed route (issue 51, section 1; preregistered
in docs/results.md, "Routing: a router over fixed experts"; the first study, "Routing: a router
that routes", ran this script as of 47b2fea, where both arms trained their experts).

Arms, on the same stage-1 expert adapters (`scripts/train_routed_experts.sh`, named by
`--experts`, a folder holding number_sequence/ and aiw/):

  routed:  `srpo train math/routed` as it ships, in a fresh process with only `seed` (and
           `train.threads`) set: the router learns which expert answers each problem; the
           experts are frozen (`train.frozen_policies`), so they stay the stage-1 adapters;
  fixed:   `srpo eval math/routed workflow.params.fixed_route=[word_problem_expert]`: every
           problem goes to that expert (the better single expert on the mix), unchanged. A greedy
           evaluation of frozen experts does not depend on the seed: it runs once, and every
           seed's routed run is compared with it.

    .venv/bin/python benchmarks/routed_study.py run --experts runs/experts \\
        --runs-dir /tmp/routed --seeds 0 1 2 --jobs 2 --threads 1
    .venv/bin/python benchmarks/routed_study.py analyze --runs-dir /tmp/routed \\
        --out results/bench/routed_study_<date>

`analyze` writes rows.json, tests.json and table.md: per seed, the routed arm's held-out
accuracy after training against the fixed route's on the same 256 problems (McNemar, exact,
two-sided: R1), the routes of the greedy held-out evaluation before and after training by problem
kind (R2), and the routed arm's own before -> after change.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_before_after import ROOT, run_cells, run_side

from srpo.record.accuracy import paired_comparison

PRESET = "math/routed"
FIXED_EXPERT = "word_problem_expert"
FIXED_ROUTE = f"workflow.params.fixed_route=[{FIXED_EXPERT}]"
ARMS = ("routed", "fixed")
# which expert is right for which kind: the table's "to its expert" share
OWN_EXPERT = {"number_sequence": "sequence_expert", "aiw": "word_problem_expert"}
ALPHA = 0.01  # R1: each seed's McNemar p below this
R2_SHARE = 0.9  # R2: after training, each kind's share of held-out problems sent to its own expert


def experts_override(experts: Path) -> str:
    folder = experts.resolve()
    return (f"policies.lora.init={{sequence: {folder / 'number_sequence/export/debater/lora'}, "
            f"aiw: {folder / 'aiw/export/debater/lora'}}}")


def one(seed: int, experts: Path, runs_dir: Path, threads: int) -> dict:
    """The routed arm of one seed: a training run."""
    overrides = [f"seed={seed}", f"train.threads={threads}", experts_override(experts)]
    return run_side(f"routed-seed{seed}", ROOT, PRESET, overrides, runs_dir)


def fixed(experts: Path, runs_dir: Path, threads: int) -> None:
    """The fixed arm: one greedy held-out evaluation, written as runs_dir/fixed/eval/after.json
    (+ .episodes.jsonl.gz), the layout of a run's evaluation."""
    out = runs_dir / "fixed" / "eval" / "after.json"
    if out.is_file():
        print(f"[fixed] reusing {out}", flush=True)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "srpo.cli", "eval", PRESET, "--out", str(out), "seed=0",
           f"train.threads={threads}", experts_override(experts), FIXED_ROUTE,
           f"output_dir={runs_dir / 'fixed'}"]
    print(f"[fixed] {' '.join(cmd[3:])}", flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


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
    fixed_after = evaluation(runs_dir / "fixed", "after")
    rows = [{"arm": "fixed", "seed": None, "accuracy": sum(fixed_after.values()) / len(fixed_after),
             "by_kind": {"after": accuracy_by_kind(runs_dir / "fixed", "after")},
             "routes": {"after": routes(runs_dir / "fixed", "after")}}]
    tests = []
    for seed in seeds:
        d = runs_dir / f"routed-seed{seed}"
        rec = json.loads((runs_dir / f"routed-seed{seed}.json").read_text())
        row = {"arm": "routed", "seed": seed, "commit": rec.get("commit"), "dirty": rec.get("dirty"),
               "wall_seconds": rec["wall_seconds"], "peak_rss_gb": rec["peak_rss_gb"],
               "change": compare(evaluation(d, "before"), evaluation(d, "after")),
               "by_kind": {w: accuracy_by_kind(d, w) for w in ("before", "after")},
               "routes": {w: routes(d, w) for w in ("before", "after")},
               "training_own_expert_share": training_routes(d)}
        row["own_expert_share"] = {w: own_expert_share(row["routes"][w]) for w in ("before", "after")}
        rows.append(row)
        r1 = compare(fixed_after, evaluation(d, "after"))
        tests.append({"seed": seed, "test": "R1", **r1,
                      "met": r1["diff"] > 0 and r1["p"] < ALPHA,
                      "fixed_significantly_better": r1["diff"] < 0 and r1["p"] < ALPHA,
                      "R2_met": all(v >= R2_SHARE for v in row["own_expert_share"]["after"].values())})
    return {"rows": rows, "tests": tests, "R1": verdict([t["met"] for t in tests], tests),
            "R2": verdict([t["R2_met"] for t in tests], None)}


def verdict(met: list[bool], tests: list[dict] | None) -> str:
    """supported: met on all 3 seeds; refuted: the fixed route significantly ahead on a seed, or
    not ahead on 2 or more (R1) / not met on 2 or more (R2); else undecided."""
    if len(met) == 3 and all(met):
        return "supported"
    if tests is not None:
        if any(t["fixed_significantly_better"] for t in tests) or sum(t["diff"] <= 0 for t in tests) >= 2:
            return "refuted"
    elif sum(not m for m in met) >= 2:
        return "refuted"
    return "undecided"


def markdown(result: dict) -> str:
    out = ["| seed | routed after | fixed route | routed - fixed, points [95% CI] | McNemar p "
           "| p < 0.01, routed ahead | each kind >= 90% to its expert |", "|---|---|---|---|---|---|---|"]
    for t in result["tests"]:
        out.append(f"| {t['seed']} | {t['b']:.1%} | {t['a']:.1%} | {100 * t['diff']:+.1f} "
                   f"[{100 * t['ci'][0]:+.1f}, {100 * t['ci'][1]:+.1f}] | {t['p']:.2g} "
                   f"| {'yes' if t['met'] else 'no'} | {'yes' if t['R2_met'] else 'no'} |")
    out += ["", f"R1: {result['R1']}; R2: {result['R2']}", "",
            "| arm | seed | before -> after | change (p) | by kind after | wall | peak |",
            "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        kinds = ", ".join(f"{k} {v:.1%}" for k, v in r["by_kind"]["after"].items())
        if r["arm"] == "fixed":
            out.append(f"| fixed (evaluation, frozen experts) | - | {r['accuracy']:.1%} | - | {kinds} | - | - |")
            continue
        c = r["change"]
        out.append(f"| {r['arm']} | {r['seed']} | {c['a']:.1%} -> {c['b']:.1%} | {100 * c['diff']:+.1f} ({c['p']:.2g}) "
                   f"| {kinds} | {r['wall_seconds'] / 60:.1f} min | {r['peak_rss_gb']:.1f} GB |")
    out += ["", "Routes of the greedy held-out evaluations, problems per kind and expert:", "",
            "| arm | seed | when | kind | routes |", "|---|---|---|---|---|"]
    for r in result["rows"]:
        for when in r.get("routes", {}):
            for kind, c in r["routes"][when].items():
                seed = "-" if r["seed"] is None else r["seed"]
                out.append(f"| {r['arm']} | {seed} | {when} | {kind} | {', '.join(f'{k} {n}' for k, n in c.items())} |")
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
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--threads", type=int, default=1)
    a = sub.add_parser("analyze")
    a.add_argument("--runs-dir", required=True, type=Path)
    a.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    a.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    if args.cmd == "run":
        args.runs_dir.mkdir(parents=True, exist_ok=True)
        fixed(args.experts, args.runs_dir, args.threads)
        run_cells([(s,) for s in args.seeds], lambda seed: one(seed, args.experts, args.runs_dir, args.threads),
                  args.jobs)
        return
    result = analyze(args.runs_dir, args.seeds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rows.json").write_text(json.dumps({"rows": result["rows"]}, indent=1))
    (args.out / "tests.json").write_text(json.dumps({"tests": result["tests"], "R1": result["R1"]}, indent=1))
    (args.out / "table.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
