"""Set size on the LLM: the preregistered study of docs/results.md, "Set size in one batch, on
the LLM" (issue 51, section 2).

Each run is `srpo train math/mixed` (sets of 1, 2, 3 and 4 members in every step) under batch
reuse (2 epochs x 2 minibatches: ratios leave 1 and the clip acts) with each set size's part of
the gradient logged, one event REDUCTION of the set ratio (its default clip range), one seed, in
a fresh process at `train.threads=1`, JOBS side by side (no wall times: two runs on 2 cores slow
each other). No held-out evaluation: the study is about the update's diagnostics.

    .venv/bin/python benchmarks/set_size_stability.py run --reductions mean sum \\
        --seeds 0 1 2 3 4 --runs-dir /tmp/sizes
    .venv/bin/python benchmarks/set_size_stability.py analyze --runs-dir /tmp/sizes \\
        --out results/bench/set_size_stability_2026-12-06

A record already in RUNS_DIR/<reduction>-seed<S>.json is reused, so a killed queue resumes.
`analyze` writes rows.json (per run and set size: each diagnostic's mean over the steps that
computed a set of that size), tests.json (S1 and S2 with their verdicts), table.md and
by_set_size.png (each diagnostic against set size, one line per reduction, the seeds' range).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_before_after import ROOT, metric_rows, run_cells, run_side

from srpo_lab.stats import slope, t_interval

SIZES = (1, 2, 3, 4)
# the preregistered bands (docs/results.md): S1 on the slope of log(own-unit ratio spread) on
# log(set size), S2 on the clip fraction at size 4 minus at size 1
MEAN_SLOPE_BAND = (-0.6, 0.25)
SUM_SLOPE_FLOOR = 0.25
MEAN_CLIP_BAND = (-0.10, 0.10)
SUM_CLIP_FLOOR = 0.0
# diagnostic -> its key template per set size (docs/metrics.md)
DIAGNOSTICS = {
    "ratio_spread": "ratio/k{k}/log_std",  # the method's own set log-ratio (S1)
    "clip_frac": "clip/k{k}/frac",  # (S2)
    "grad_norm": "grad/k{k}/norm",  # the size's part of the gradient (exploratory)
    "adv_abs": "adv/k{k}/abs_mean",  # (exploratory)
    "mean_unit_spread": "set_ratio/k{k}/log_std",  # Lambda_S under `mean` for every run (exploratory)
    "sets": "sets/k{k}/count",  # sets of that size a step (exploratory)
}


def run_name(reduction: str, seed: int) -> str:
    return f"{reduction}-seed{seed}"


def overrides(reduction: str, seed: int) -> list[str]:
    return [f"seed={seed}", "train.threads=1", "train.epochs=2", "train.minibatches=2",
            "train.grad_norm_by_set_size=true", f"train.method_settings={{reduction: {reduction}}}",
            "eval.before=false", "eval.after=false"]


def one(reduction: str, seed: int, runs_dir: Path) -> dict:
    """Run one cell (or reuse its record) and return its row."""
    name = run_name(reduction, seed)
    rec = run_side(name, ROOT, "math/mixed", overrides(reduction, seed), runs_dir)
    return row(reduction, seed, runs_dir / name, rec)


def row(reduction: str, seed: int, run_dir: Path, rec: dict) -> dict:
    """Each diagnostic per set size: its mean over the training steps that logged it (a step
    logs a size only when it computed a set of that size)."""
    steps = [r for r in metric_rows(run_dir) if "loss" in r]
    per_size: dict[str, dict[str, float | None]] = {}
    for name, template in DIAGNOSTICS.items():
        per_size[name] = {}
        for k in SIZES:
            values = [r[template.format(k=k)] for r in steps if template.format(k=k) in r]
            per_size[name][str(k)] = sum(values) / len(values) if values else None
    return {"reduction": reduction, "seed": seed, "overrides": rec.get("overrides"), "commit": rec.get("commit"),
            "dirty": rec.get("dirty"), "steps": len(steps), "per_size": per_size,
            "approx_kl": _mean([r.get("approx_kl") for r in steps]),
            "reward": _mean([r.get("reward/mean") for r in steps]),
            "nonfinite": any(not math.isfinite(v) for r in steps for v in r.values() if isinstance(v, float)),
            "clamped": sum(r.get("ratio/clamp_count", 0.0) for r in steps)}


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def spread_slope(r: dict) -> float | None:
    """Least-squares slope of log(own-unit ratio spread) on log(set size) over sizes 1-4; None
    when a size has no value or a zero spread."""
    spreads = [r["per_size"]["ratio_spread"][str(k)] for k in SIZES]
    if any(v is None or v <= 0 for v in spreads):
        return None
    return slope([math.log(k) for k in SIZES], [math.log(v) for v in spreads])


def clip_difference(r: dict) -> float | None:
    """Clip fraction at set size 4 minus at set size 1."""
    c = r["per_size"]["clip_frac"]
    return None if c["4"] is None or c["1"] is None else c["4"] - c["1"]


def _interval(values: list[float | None]) -> dict | None:
    values = [v for v in values if v is not None]
    if len(values) < 2:
        return None
    i = t_interval(values)
    return {"n": len(values), "mean": i.estimate, "low": i.low, "high": i.high, "values": values}


def verdict(mean_ci: dict | None, sum_ci: dict | None, band: tuple[float, float], floor: float) -> str:
    """supported: mean's CI inside BAND and sum's CI above FLOOR; refuted: mean's CI entirely
    outside BAND, or sum's CI entirely below FLOOR; else undecided (docs/results.md)."""
    if mean_ci is None or sum_ci is None:
        return "undecided (runs missing)"
    inside = band[0] <= mean_ci["low"] and mean_ci["high"] <= band[1]
    outside = mean_ci["high"] < band[0] or mean_ci["low"] > band[1]
    if inside and sum_ci["low"] > floor:
        return "supported"
    if outside or sum_ci["high"] < floor:
        return "refuted"
    return "undecided"


def study_tests(rows: list[dict]) -> dict:
    by = {red: [r for r in rows if r["reduction"] == red] for red in ("mean", "sum")}
    slopes = {red: _interval([spread_slope(r) for r in rs]) for red, rs in by.items()}
    clips = {red: _interval([clip_difference(r) for r in rs]) for red, rs in by.items()}
    return {
        "S1": {"statistic": "slope of log ratio/k{k}/log_std on log k, k = 1-4, per seed; 95% t-interval",
               "mean": slopes["mean"], "sum": slopes["sum"], "mean_band": MEAN_SLOPE_BAND,
               "sum_floor": SUM_SLOPE_FLOOR,
               "verdict": verdict(slopes["mean"], slopes["sum"], MEAN_SLOPE_BAND, SUM_SLOPE_FLOOR)},
        "S2": {"statistic": "clip/k4/frac - clip/k1/frac, per seed; 95% t-interval",
               "mean": clips["mean"], "sum": clips["sum"], "mean_band": MEAN_CLIP_BAND,
               "sum_floor": SUM_CLIP_FLOOR,
               "verdict": verdict(clips["mean"], clips["sum"], MEAN_CLIP_BAND, SUM_CLIP_FLOOR)},
    }


def _fmt(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}g}"


def markdown(rows: list[dict], tests: dict) -> str:
    reductions = sorted({r["reduction"] for r in rows})
    lines = []
    for name in DIAGNOSTICS:
        lines += [f"**{name}** (`{DIAGNOSTICS[name]}`, mean over seeds of each run's step mean; "
                  "min-max over seeds)", "",
                  "| reduction | " + " | ".join(f"k={k}" for k in SIZES) + " |",
                  "|---" * (len(SIZES) + 1) + "|"]
        for red in reductions:
            cells = []
            for k in SIZES:
                vals = [r["per_size"][name][str(k)] for r in rows if r["reduction"] == red]
                vals = [v for v in vals if v is not None]
                cells.append("-" if not vals else f"{sum(vals) / len(vals):.4g} ({min(vals):.3g}-{max(vals):.3g})")
            lines.append(f"| {red} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["| test | reduction | n | mean | 95% CI | predicted | verdict |", "|---|---|---|---|---|---|---|"]
    for label, t in tests.items():
        for red, want in (("mean", f"inside [{t['mean_band'][0]}, {t['mean_band'][1]}]"),
                          ("sum", f"above {t['sum_floor']}")):
            ci = t[red]
            lines.append(f"| {label} | {red} | {ci['n'] if ci else 0} | {_fmt(ci and ci['mean'])} | "
                         f"[{_fmt(ci and ci['low'])}, {_fmt(ci and ci['high'])}] | {want} | {t['verdict']} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ("ratio_spread", "clip_frac", "grad_norm", "adv_abs")
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.4))
    for ax, name in zip(axes, names):
        for red in sorted({r["reduction"] for r in rows}):
            per_k = {k: [r["per_size"][name][str(k)] for r in rows if r["reduction"] == red
                         and r["per_size"][name][str(k)] is not None] for k in SIZES}
            ks = [k for k in SIZES if per_k[k]]
            means = [sum(per_k[k]) / len(per_k[k]) for k in ks]
            line = ax.plot(ks, means, marker="o", label=red)[0]
            ax.fill_between(ks, [min(per_k[k]) for k in ks], [max(per_k[k]) for k in ks],
                            color=line.get_color(), alpha=0.2)
        ax.set_xlabel("set size")
        ax.set_title(DIAGNOSTICS[name].replace("{k}", "K"), fontsize=9)
        ax.set_xticks(SIZES)
        if name in ("ratio_spread", "grad_norm"):
            ax.set_yscale("log")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--reductions", nargs="+", default=["mean", "sum"])
    r.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    r.add_argument("--runs-dir", required=True, type=Path)
    r.add_argument("--jobs", type=int, default=2)
    a = sub.add_parser("analyze")
    a.add_argument("--runs-dir", required=True, type=Path)
    a.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    if args.cmd == "run":
        args.runs_dir.mkdir(parents=True, exist_ok=True)
        cells = [(red, s) for s in args.seeds for red in args.reductions]  # seed-major
        run_cells(cells, lambda red, seed: one(red, seed, args.runs_dir), args.jobs)
        return
    rows = []
    for rec_path in sorted(args.runs_dir.glob("*-seed*.json")):
        red, seed = rec_path.stem.rsplit("-seed", 1)
        rows.append(row(red, int(seed), args.runs_dir / rec_path.stem, json.loads(rec_path.read_text())))
    tests = study_tests(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rows.json").write_text(json.dumps({"rows": rows}, indent=1))
    (args.out / "tests.json").write_text(json.dumps(tests, indent=1))
    (args.out / "table.md").write_text(markdown(rows, tests))
    plot(rows, args.out / "by_set_size.png")
    print(markdown(rows, tests))


if __name__ == "__main__":
    main()
