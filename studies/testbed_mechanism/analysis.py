"""The testbed mechanism study's analysis: the collapse rule, the preregistered tests (H1, H2, H3,
H6), a table per block and the plots, from the runs' records.

    python -m studies.testbed_mechanism.analysis [--spec studies/testbed_mechanism/spec.yaml]

writes <output>/analysis.md, analysis.json and plots/*.png (output: the spec's, results/
testbed-mechanism). The records are the harness's (srpo_lab.study.series): the study's archive
<output>/runs.jsonl.gz and any per-run file beside it. A cell whose runs are not all done is
reported with the runs it has and marked incomplete, and a hypothesis whose cells are incomplete
is reported as "not run yet", never tested on part of its seeds.

Collapse (fixed before the study, docs/results.md): a run collapsed if
  * nonfinite: a logged loss, reward or gradient norm is not finite, or the run raised; or
  * degraded: its final reward (mean of the last 10 steps) is below its initial reward (mean of
    the first 3 steps) minus 0.05; or
  * stuck: its final reward is below 0.9 while, over the last 10 steps, at least 90% of advantage
    groups were degenerate (every rollout of the task got the same reward: the policy has
    become deterministic on a suboptimal joint action and no gradient is left to leave it).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from srpo_lab.stats import (
    bootstrap_ci,
    fisher_one_sided,
    holm,
    log_log_slope_ci,
    mann_whitney_p,
    mean,
    wilson_interval,
)
from srpo_lab.study.runner import iter_results
from srpo_lab.study.spec import StudySpec, load_spec

SPEC = "studies/testbed_mechanism/spec.yaml"
TARGET_REWARD, TARGET_WINDOW = 0.9, 5
STRESS_LEVELS = ("r4", "r16", "r4_lr3", "r4_lr10")  # H1: reuse >= 4
FINAL_STEPS, INITIAL_STEPS = 10, 3
STUCK_REWARD, STUCK_DEGENERATE, DEGRADED_MARGIN = 0.9, 0.9, 0.05


# ----------------------------------------------------------------- the collapse rule


def collapse_verdict(reward: list[float], degenerate: list[float | None], nonfinite: bool) -> dict[str, Any]:
    """The preregistered collapse rule (module doc) applied to one run's series."""
    if nonfinite or not reward:
        return {"collapsed": True, "reason": "nonfinite", "initial": None, "final": None}
    initial = sum(reward[:INITIAL_STEPS]) / len(reward[:INITIAL_STEPS])
    final = sum(reward[-FINAL_STEPS:]) / len(reward[-FINAL_STEPS:])
    degen = [d if d is not None else 1.0 for d in degenerate[-FINAL_STEPS:]]
    degen_share = sum(degen) / len(degen)
    reason = None
    if final < initial - DEGRADED_MARGIN:
        reason = "degraded"
    elif final < STUCK_REWARD and degen_share >= STUCK_DEGENERATE:
        reason = "stuck"
    return {"collapsed": reason is not None, "reason": reason, "initial": initial, "final": final,
            "final_degenerate_share": degen_share}


def _finite(x: Any) -> bool:
    return x is None or (isinstance(x, (int, float)) and math.isfinite(x))


def run_verdict(record: dict[str, Any]) -> dict[str, Any]:
    """The collapse verdict of one record, from its series and whether it raised."""
    series = record["series"]
    nonfinite = record.get("error") is not None or not all(
        _finite(v) for key in ("reward/mean", "loss", "grad_norm/mean") for v in series.get(key, []))
    # a step that logged no degenerate share counts as degenerate (collapse_verdict), so does
    # every step of a series without one
    degenerate = series.get("adv/degenerate_share", [None] * len(series["reward/mean"]))
    return collapse_verdict([v for v in series["reward/mean"] if v is not None], degenerate, nonfinite)


# ----------------------------------------------------------------- loading


def load_records(spec: StudySpec) -> tuple[dict[tuple, list[dict]], dict[tuple, int]]:
    """({(block, setting, level, method): [record + its collapse verdict, ...]}, planned run count
    per cell); the verdict is computed here, from the series (run_verdict)."""
    records: dict[tuple, list[dict]] = defaultdict(list)
    planned: dict[tuple, int] = defaultdict(int)
    for cell, record in iter_results(spec):
        key = (cell.block, cell.setting, cell.level, cell.method)
        planned[key] += 1
        if record is not None:
            records[key].append({**record, **run_verdict(record)})
    return records, planned


# ----------------------------------------------------------------- per run


def steps_to_target(reward: Sequence[float | None]) -> int | None:
    """First update (1-based) whose TARGET_WINDOW-update mean reward is >= TARGET_REWARD."""
    r = [x if x is not None else 0.0 for x in reward]
    for i in range(len(r) - TARGET_WINDOW + 1):
        if mean(r[i : i + TARGET_WINDOW]) >= TARGET_REWARD:
            return i + TARGET_WINDOW
    return None


# ----------------------------------------------------------------- per cell


def cell_summary(records: list[dict], planned: int) -> dict[str, Any]:
    finals = [r["final"] for r in records if r["final"] is not None]
    collapsed = sum(r["collapsed"] for r in records)
    reasons: dict[str, int] = defaultdict(int)
    for r in records:
        if r["collapsed"]:
            reasons[r["reason"]] += 1
    _, lo, hi = wilson_interval(collapsed, len(records)) if records else (0.0, float("nan"), float("nan"))
    reached = [steps_to_target(r["series"]["reward/mean"]) for r in records]
    clip = [mean([c for c in r["series"]["clip/all/frac"] if c is not None] or [0.0]) for r in records]
    return {
        "runs": len(records), "planned": planned, "complete": len(records) == planned,
        "collapsed": collapsed, "collapse_rate": collapsed / len(records) if records else float("nan"),
        "collapse_ci": [lo, hi], "reasons": dict(reasons),
        "final_mean": mean(finals), "final_ci": list(bootstrap_ci(finals)),
        "reached_target": sum(s is not None for s in reached),
        "steps_to_target_median": _median([s for s in reached if s is not None]),
        "clip_frac_mean": mean(clip),
    }


def _median(xs: list[int]) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    mid = len(xs) // 2
    return float(xs[mid]) if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


# ----------------------------------------------------------------- hypotheses


def _complete(records: dict[tuple, list[dict]], planned: dict[tuple, int], key: tuple) -> bool:
    """Every planned run of the cell is done (a cell the spec does not plan is not complete)."""
    return planned.get(key, 0) > 0 and len(records.get(key, [])) == planned[key]


def h1(records: dict[tuple, list[dict]], planned: dict[tuple, int], *, block: str = "stress_core",
       srpo_method: str = "srpo_mean", others: tuple[str, str] = ("grpo", "magrpo")) -> dict[str, Any]:
    """SRPO-mean collapses less often than GRPO and MAGRPO under reuse >= 4 (one-sided Fisher).
    H6 is the same test on block stress_fair (the methods with fair clip ranges)."""
    def pooled(method: str) -> tuple[int, int, bool]:
        keys = [(block, "k4", lv, method) for lv in STRESS_LEVELS]
        runs = [r for k in keys for r in records.get(k, [])]
        complete = all(_complete(records, planned, k) for k in keys)
        return sum(r["collapsed"] for r in runs), len(runs), complete

    srpo = pooled(srpo_method)
    out: dict[str, Any] = {srpo_method: list(srpo[:2]), "comparisons": {}}
    if not srpo[2] or not all(pooled(m)[2] for m in others):
        out["verdict"] = "not run yet"
        return out
    p_less, p_greater = [], []
    for other in others:
        c, n, _ = pooled(other)
        p_less.append(fisher_one_sided(srpo[0], srpo[1], c, n, a_more=False))
        p_greater.append(fisher_one_sided(srpo[0], srpo[1], c, n, a_more=True))
        out["comparisons"][other] = {"collapsed": [c, n]}
    for other, pl, pg in zip(others, holm(p_less), holm(p_greater)):
        out["comparisons"][other].update(p_srpo_lower_holm=pl, p_srpo_higher_holm=pg)
    lower = all(c["p_srpo_lower_holm"] < 0.05 for c in out["comparisons"].values())
    higher = any(c["p_srpo_higher_holm"] < 0.05 for c in out["comparisons"].values())
    out["verdict"] = "supported" if lower else ("refuted" if higher else "undecided")
    return out


def _spread_per_k(records: dict[tuple, list[dict]], method: str, key: str) -> dict[int, list[float]]:
    per_k: dict[int, list[float]] = {}
    for k in (1, 2, 4, 8, 16):
        values = []
        for r in records.get(("sizes", f"k{k}", "r4", method), []):
            series = [v for v in r["series"].get(key.format(k=k), []) if v is not None]
            if series:
                values.append(mean(series))
        per_k[k] = values
    return per_k


def h2(records: dict[tuple, list[dict]], planned: dict[tuple, int]) -> dict[str, Any]:
    """Slope of log(ratio spread) on log(k) per SRPO reduction (flat for mean/pooled, > 0.25 else)."""
    methods = ("srpo_mean", "srpo_pooled", "srpo_member_sum", "srpo_sum")
    complete = all(_complete(records, planned, ("sizes", f"k{k}", "r4", m)) for m in methods for k in (1, 2, 4, 8, 16))
    out: dict[str, Any] = {"slopes": {}, "grad_norm_slopes": {}}
    for m in (*methods, "grpo"):
        spread = _spread_per_k(records, m, "ratio/k{k}/log_std")
        grad = _spread_per_k(records, m, "grad_norm/mean")
        if all(spread.values()) and all(v > 0 for vs in spread.values() for v in vs):
            out["slopes"][m] = log_log_slope_ci(spread)
            out["spread_by_k"] = out.get("spread_by_k", {}) | {m: {k: mean(v) for k, v in spread.items()}}
        if all(grad.values()):
            out["grad_norm_slopes"][m] = log_log_slope_ci(grad)
            out["grad_norm_by_k"] = out.get("grad_norm_by_k", {}) | {m: {k: mean(v) for k, v in grad.items()}}
    if not complete or not all(m in out["slopes"] for m in methods):
        out["verdict"] = "not run yet"
        return out
    flat = all(out["slopes"][m][1] >= -0.25 and out["slopes"][m][2] <= 0.25 for m in methods[:2])
    grows = all(out["slopes"][m][1] > 0.25 for m in methods[2:])
    outside = any(out["slopes"][m][2] < -0.25 or out["slopes"][m][1] > 0.25 for m in methods[:2]) or any(
        out["slopes"][m][2] <= 0.25 for m in methods[2:])
    out["verdict"] = "supported" if flat and grows else ("refuted" if outside else "undecided")
    return out


def h3(records: dict[tuple, list[dict]], planned: dict[tuple, int]) -> dict[str, Any]:
    """SRPO ends higher than MAGRPO on the rounds preset, at r1 and r4 (Mann-Whitney, Holm)."""
    out: dict[str, Any] = {"levels": {}}
    keys = [("credit", "rounds", lv, m) for lv in ("r1", "r4") for m in ("srpo_mean", "magrpo")]
    if not all(_complete(records, planned, k) for k in keys):
        out["verdict"] = "not run yet"
        return out
    ps, signs = [], []
    for lv in ("r1", "r4"):
        a = [r["final"] for r in records[("credit", "rounds", lv, "srpo_mean")]]
        b = [r["final"] for r in records[("credit", "rounds", lv, "magrpo")]]
        p = mann_whitney_p(a, b)
        ps.append(p)
        signs.append(mean(a) - mean(b))
        out["levels"][lv] = {"srpo_mean": mean(a), "magrpo": mean(b), "p": p}
    for lv, p in zip(("r1", "r4"), holm(ps)):
        out["levels"][lv]["p_holm"] = p
    sig = [out["levels"][lv]["p_holm"] < 0.05 for lv in ("r1", "r4")]
    if all(sig) and all(s > 0 for s in signs):
        out["verdict"] = "supported"
    elif any(g and s < 0 for g, s in zip(sig, signs)):
        out["verdict"] = "refuted"
    else:
        out["verdict"] = "undecided"
    return out


# ----------------------------------------------------------------- writing


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def cell_table(summaries: dict[tuple, dict[str, Any]], block: str) -> list[str]:
    lines = [("| preset | level | method | runs | collapsed (95% CI) | why | final reward (95% CI) | "
              "reached 0.9 | median updates to 0.9 | clip frac |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (b, preset, level, method), s in summaries.items():
        if b != block or not s["runs"]:
            continue
        runs = f"{s['runs']}/{s['planned']}" + ("" if s["complete"] else " (incomplete)")
        why = ", ".join(f"{k} {v}" for k, v in sorted(s["reasons"].items())) or "-"
        lines.append(
            f"| {preset} | {level} | {method} | {runs} | {s['collapsed']} = {100 * s['collapse_rate']:.0f}% "
            f"[{100 * s['collapse_ci'][0]:.0f}, {100 * s['collapse_ci'][1]:.0f}] | {why} | "
            f"{_fmt(s['final_mean'], 3)} [{_fmt(s['final_ci'][0], 3)}, {_fmt(s['final_ci'][1], 3)}] | "
            f"{s['reached_target']}/{s['runs']} | {_fmt(s['steps_to_target_median'], 0)} | "
            f"{_fmt(s['clip_frac_mean'], 3)} |")
    return lines


def write_report(spec: StudySpec) -> str:
    """<output>/analysis.md, analysis.json and plots/*.png; returns the markdown."""
    from studies.testbed_mechanism.plots import write_plots

    output = spec.output
    records, planned = load_records(spec)
    summaries = {key: cell_summary(records.get(key, []), n) for key, n in planned.items()}
    hypotheses = {"H1": h1(records, planned), "H2": h2(records, planned), "H3": h3(records, planned),
                  "H6": h1(records, planned, block="stress_fair", srpo_method="srpo_mean_fair",
                           others=("grpo_fair", "magrpo_fair"))}
    plots = write_plots(records, output / "plots")
    done = sum(len(v) for v in records.values())
    lines = [f"# {spec.name}: results", "",
             (f"Runs done: {done} of {sum(planned.values())} planned. Written by "
              "`python -m studies.testbed_mechanism.analysis`; every number is read from the runs' "
              "records (`runs.jsonl.gz`)."), "",
             "## Hypotheses", ""]
    for name, h in hypotheses.items():
        lines.append(f"- **{name}: {h['verdict']}** - `{json.dumps(_rounded(h))}`")
    for block in spec.blocks:
        lines += ["", f"## Block `{block.name}`", "", *cell_table(summaries, block.name)]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in plots]
    text = "\n".join(lines) + "\n"
    output.mkdir(parents=True, exist_ok=True)
    (output / "analysis.md").write_text(text)
    summary = {"hypotheses": _rounded(hypotheses),
               "cells": [{"block": k[0], "preset": k[1], "level": k[2], "method": k[3], **_rounded(s)}
                         for k, s in summaries.items()]}
    (output / "analysis.json").write_text(json.dumps(summary, indent=1) + "\n")
    return text


def _rounded(x: Any) -> Any:
    if isinstance(x, float):
        return None if math.isnan(x) else float(f"{x:.4g}")
    if isinstance(x, dict):
        return {str(k): _rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rounded(v) for v in x]
    return x


def analysis_main(argv: Sequence[str] | None, *, module: str, description: str, default_spec: str,
                  write: Callable[[StudySpec], str]) -> int:
    """The command line of a series study's analysis: --spec, --output; prints the report."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    p.add_argument("--spec", default=default_spec, help=f"the study's spec (default {default_spec})")
    p.add_argument("--output", default=None, help="read and write here instead of the spec's output")
    args = p.parse_args(argv)
    spec = load_spec(args.spec)
    if args.output is not None:
        import dataclasses

        spec = dataclasses.replace(spec, output=Path(args.output))
    print(write(spec))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return analysis_main(argv, module="studies.testbed_mechanism.analysis", description=__doc__.splitlines()[0],
                         default_spec=SPEC, write=write_report)


if __name__ == "__main__":
    raise SystemExit(main())
