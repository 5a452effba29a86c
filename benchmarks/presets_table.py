"""Every math preset as it ships, measured the same way (issue 51, section 3): wall time, peak
memory, the held-out change per seed with its McNemar p, and each transition's sets by size.

Each run is `srpo train <preset>` with only `seed` (and `train.threads`) set, in a fresh
process. Wall times mean something only for runs made alone (`--jobs 1` on an otherwise idle
machine, the preset's own threads: `--threads 0` keeps them), given to `analyze` as
`--alone-dir`; for held-out changes, runs may go side by side at one thread each (`--jobs 2
--threads 1`); each record says how it was made (`jobs`, `threads`).

    .venv/bin/python benchmarks/presets_table.py run --presets math/single math/debate \\
        --seeds 0 1 2 --runs-dir /tmp/presets --jobs 2 --threads 1
    .venv/bin/python benchmarks/presets_table.py run --presets math/single --seeds 0 \\
        --runs-dir /tmp/presets_alone --jobs 1 --threads 0          # wall time, alone
    .venv/bin/python benchmarks/presets_table.py analyze --runs-dir /tmp/presets \\
        [--alone-dir /tmp/presets_alone] --out results/bench/presets_<date>

A record already in RUNS_DIR/<preset>-seed<S>.json is reused (a killed queue resumes). The sets
by size come from the held-out evaluation before training (every problem's episode, greedy):
per transition event, the share of its sets of each size.
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

MATH_PRESETS = ("math/single", "math/parallel", "math/pipeline", "math/debate", "math/planner",
                "math/mixed", "math/routed")


def run_name(preset: str, seed: int) -> str:
    return f"{preset.replace('/', '_')}-seed{seed}"


def one(preset: str, seed: int, runs_dir: Path, threads: int, jobs: int) -> dict:
    extra = [f"train.threads={threads}"] if threads > 0 else []
    rec = run_side(run_name(preset, seed), ROOT, preset, [f"seed={seed}", *extra], runs_dir)
    path = runs_dir / f"{run_name(preset, seed)}.json"
    if "jobs" not in rec:  # how the run was made, for the table's wall-time rule
        rec |= {"preset": preset, "seed": seed, "jobs": jobs, "threads": threads}
        path.write_text(json.dumps(rec, indent=1))
    return rec


def sets_by_size(run_dir: Path) -> dict[str, dict[str, float]]:
    """Per transition event of the evaluation before training: the share of its sets by size."""
    path = run_dir / "eval" / "before.episodes.jsonl.gz"
    counts: dict[str, Counter] = defaultdict(Counter)
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                for t in json.loads(line)["transitions"]:
                    counts[t["event"]][len(t["members"])] += 1
    return {event: {str(k): n / sum(c.values()) for k, n in sorted(c.items())} for event, c in sorted(counts.items())}


def row(rec: dict, run_dir: Path) -> dict:
    h = rec.get("heldout")
    return {"preset": rec["preset"], "seed": rec["seed"], "jobs": rec["jobs"], "threads": rec["threads"],
            "commit": rec.get("commit"), "dirty": rec.get("dirty"), "wall_seconds": rec["wall_seconds"],
            "peak_rss_gb": rec["peak_rss_gb"], "steps": rec["steps"], "heldout": h,
            "sets_by_size": sets_by_size(run_dir)}


def _fmt_sizes(sizes: dict[str, dict[str, float]]) -> str:
    return "; ".join(f"{event}: " + ", ".join(f"{k}: {100 * s:.0f}%" for k, s in by.items())
                     for event, by in sizes.items())


def markdown(rows: list[dict], alone: list[dict]) -> str:
    lines = ["| preset | wall alone | peak memory | held-out change per seed, points (McNemar p) | "
             "learns on every seed (p < 0.05) | sets by size (eval before) |", "|---|---|---|---|---|---|"]
    for preset in dict.fromkeys(r["preset"] for r in rows):
        mine = sorted((r for r in rows if r["preset"] == preset), key=lambda r: r["seed"])
        walls = [r for r in alone if r["preset"] == preset and r["jobs"] == 1]
        wall = "-" if not walls else ", ".join(f"{r['wall_seconds'] / 60:.1f} min (seed {r['seed']}, "
                                                 f"{r['threads'] or 'preset'} threads)" for r in walls)
        changes = ", ".join(f"{100 * r['heldout']['diff']:+.1f} ({r['heldout']['p']:.2g})"
                            for r in mine if r["heldout"])
        learns = all(r["heldout"] and r["heldout"]["diff"] > 0 and r["heldout"]["p"] < 0.05 for r in mine)
        peak = max(r["peak_rss_gb"] for r in mine + walls)
        lines.append(f"| {preset} | {wall} | {peak:.1f} GB | {changes} | {'yes' if learns else 'no'} | "
                     f"{_fmt_sizes(mine[0]['sets_by_size'])} |")
    return "\n".join(lines) + "\n"


def _rows(runs_dir: Path | None) -> list[dict]:
    if runs_dir is None:
        return []
    out = []
    for path in sorted(runs_dir.glob("*-seed*.json")):
        rec = json.loads(path.read_text())
        if "preset" in rec:
            out.append(row(rec, runs_dir / path.stem))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--presets", nargs="+", default=list(MATH_PRESETS))
    r.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    r.add_argument("--runs-dir", required=True, type=Path)
    r.add_argument("--jobs", type=int, default=1)
    r.add_argument("--threads", type=int, default=0, help="train.threads (0: the preset's own)")
    a = sub.add_parser("analyze")
    a.add_argument("--runs-dir", required=True, type=Path)
    a.add_argument("--alone-dir", type=Path, help="runs made alone (--jobs 1), for wall times")
    a.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    if args.cmd == "run":
        args.runs_dir.mkdir(parents=True, exist_ok=True)
        cells = [(preset, s) for s in args.seeds for preset in args.presets]  # seed-major
        run_cells(cells, lambda preset, seed: one(preset, seed, args.runs_dir, args.threads, args.jobs), args.jobs)
        return
    # wall times only from --alone-dir: a run made with --jobs 1 may still have had other
    # processes beside it; the person who made the runs says which were alone
    rows, alone = _rows(args.runs_dir), _rows(args.alone_dir)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rows.json").write_text(json.dumps({"rows": rows, "alone": alone}, indent=1))
    (args.out / "table.md").write_text(markdown(rows, alone))
    print(markdown(rows, alone))


if __name__ == "__main__":
    main()
