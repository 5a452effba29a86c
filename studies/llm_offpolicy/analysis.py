"""The preregistered tests of the LLM off-policy study (docs/results.md, "LLM off-policy study").

    python -m studies.llm_offpolicy.analysis [--math SPEC] [--search SPEC] [--out DIR]

reads the finished cells of studies/llm_offpolicy/math.yaml and search.yaml (the harness's
cells, srpo_lab.study) and writes DIR/analysis.md and DIR/analysis.json (default DIR:
results/llm-offpolicy): L1-L5 exactly as preregistered, each with its verdict, and the secondary
numbers. A hypothesis whose cells are not all finished is reported as "not run yet" with the
count it has, never tested on part of its seeds.

Tests (fixed before any run):
- L1: per (setting, seed) the held-out accuracy of SRPO minus the baseline's (r4 level, 3 math
  settings x 5 seeds = 15 pairs); exact two-sided sign-flip permutation test on their mean (all
  2^15 sign vectors), per baseline (GRPO, GSPO, MAGRPO), Holm over the three, alpha 0.05.
- L2: degraded runs of 15 at the stress level; one-sided Fisher exact (SRPO degrades more) per
  baseline (GRPO, MAGRPO), Holm over the two; refuted if either is significant the other way.
- L3: search-credit, per seed held-out EM of SRPO minus MAGRPO (10 pairs), exact sign-flip test.
- L4: per run, the share of training steps whose logged clip fraction is > 0; supported if every
  method's median run is >= 0.9. (The log has one row per training step, which averages its 4
  optimizer steps; a step counts when any of them clipped: the first of the 4 is on-policy and
  cannot clip. A step whose sets all had zero advantage updated nothing and logs no clip
  fraction: it counts as a step without clipping.)
- L5: set-ratio log-std and gradient norm by set size in math-mixed and math-routed: reported.

Exploratory, over whatever cells are finished: held-out retrieval recall of the trained search
runs (heldout_retrieval: added after seeds 0-1, not preregistered), degraded runs and held-out
change against the base model per method and learning rate (a table and DIR/degradation_<study>.png), and the
training-reward learning curves per setting and level, mean over seeds +- one standard error
(DIR/curves_<study>.png).

A run is degraded if a logged loss, reward or gradient norm is not finite, or its held-out
accuracy is below the base model's on the same problems with a two-sided McNemar p < 0.05. A
run that raised leaves no result: it shows as a missing cell, and the report lists those.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from srpo.record.episodes_log import read_records
from srpo_lab.stats import (
    fisher_one_sided,
    holm,
    paired_comparison,
    sign_flip_p,
    standard_error,
    wilson_interval,
)
from srpo_lab.study.report import StudyRuns, cell_key, load_runs
from srpo_lab.study.spec import load_spec

MATH_SETTINGS = ("math-mixed", "math-routed", "math-parallel4")
L1_BASELINES = ("grpo", "gspo", "magrpo")
L2_BASELINES = ("grpo", "magrpo")
STRESS = "_s"  # the stress level's method suffix (lr 8e-4)
ALPHA = 0.05


# ----------------------------------------------------------------- tests


def sign_counts(diffs: Sequence[float]) -> tuple[int, int]:
    """(pairs where SRPO is higher, tied pairs) of paired differences SRPO minus the other."""
    return sum(d > 0 for d in diffs), sum(d == 0 for d in diffs)


def _finite(rows: list[dict[str, Any]], key_of) -> bool:
    for row in rows:
        for k, v in row.items():
            if key_of(k) and isinstance(v, (int, float)) and not math.isfinite(v):
                return False
    return True


def degraded(result: dict[str, Any], rows: list[dict[str, Any]], base: dict[str, Any]) -> tuple[bool, str]:
    """(degraded?, why) by the preregistered definition."""
    if not _finite(rows, lambda k: k in ("loss", "reward/mean") or k.startswith("grad_norm")):
        return True, "non-finite loss, reward or gradient norm"
    if result["task_ids"] != base["task_ids"]:
        raise ValueError(f"{result['setting']}/{result['method']}/seed{result['seed']}: evaluated on other "
                         "problems than the base model")
    c = paired_comparison(base["correct"], result["correct"])
    if c.diff.estimate < 0 and c.p_value < ALPHA:
        return True, f"held-out {100 * c.diff.estimate:+.1f} points vs base, McNemar p = {c.p_value:.3g}"
    return False, ""


def family_level(method: str) -> tuple[str, str]:
    """A spec method's family and level: 'srpo_s' -> ('srpo', 's') (lr 8e-4), 'srpo' -> ('srpo', 'r4')."""
    return (method[: -len(STRESS)], "s") if method.endswith(STRESS) else (method, "r4")


# ----------------------------------------------------------------- cells


class Cells:
    """The finished cells of one study, keyed (setting, method, seed); base cells as 'base'."""

    def __init__(self, runs: StudyRuns, planned: Sequence[tuple[str, str, int]], output: str | Path | None = None):
        self.results = {cell_key(c): r for c, r, _ in runs.done}
        # each finished cell's directory (its eval episodes), when the study's output folder is given
        self.dirs = {cell_key(c): Path(c.directory(output)) for c, _, _ in runs.done} if output is not None else {}
        self.rows = {cell_key(c): [row for row in rows if "loss" in row] for c, _, rows in runs.done}
        self.missing = ["/".join(map(str, k)) for k in planned if k not in self.results]

    def complete(self, keys: Sequence[tuple[str, str, int]]) -> bool:
        return all(k in self.results for k in keys)

    def accuracy(self, key: tuple[str, str, int]) -> float:
        return self.results[key]["accuracy"]


def _planned(spec) -> list[tuple[str, str, int]]:
    keys = [(s.name, m.name, seed) for s in spec.settings for m in spec.methods for seed in spec.seeds]
    if spec.base_eval:
        keys += [(s.name, "base", seed) for s in spec.settings for seed in spec.seeds]
    return keys


def _not_run(keys: Sequence[tuple[str, str, int]], cells: Cells) -> dict[str, Any]:
    have = sum(k in cells.results for k in keys)
    return {"verdict": "not run yet", "cells": f"{have} of {len(keys)} finished"}


# ----------------------------------------------------------------- hypotheses


def l1(cells: Cells, seeds: Sequence[int]) -> dict[str, Any]:
    keys = [(s, m, seed) for s in MATH_SETTINGS for m in ("srpo", *L1_BASELINES) for seed in seeds]
    if not cells.complete(keys):
        return _not_run(keys, cells)
    out: dict[str, Any] = {"comparisons": {}}
    ps = []
    for b in L1_BASELINES:
        diffs = [cells.accuracy((s, "srpo", seed)) - cells.accuracy((s, b, seed))
                 for s in MATH_SETTINGS for seed in seeds]
        p = sign_flip_p(diffs)
        ps.append(p)
        higher, ties = sign_counts(diffs)
        out["comparisons"][b] = {"pairs": len(diffs), "mean_diff": statistics.fmean(diffs), "p": p,
                                 "srpo_higher_pairs": higher, "ties": ties, "diffs": diffs}
    for b, p in zip(L1_BASELINES, holm(ps)):
        out["comparisons"][b]["p_holm"] = p
    sig = {b: c["p_holm"] < ALPHA for b, c in out["comparisons"].items()}
    higher = {b: c["mean_diff"] > 0 for b, c in out["comparisons"].items()}
    if any(sig[b] and not higher[b] for b in L1_BASELINES):
        out["verdict"] = "refuted"
    elif all(sig[b] and higher[b] for b in L1_BASELINES):
        out["verdict"] = "supported"
    else:
        out["verdict"] = "undecided"
    return out


def l2(cells: Cells, seeds: Sequence[int]) -> dict[str, Any]:
    methods = ("srpo" + STRESS, *(b + STRESS for b in L2_BASELINES))
    keys = [(s, m, seed) for s in MATH_SETTINGS for m in (*methods, "base") for seed in seeds]
    if not cells.complete(keys):
        return _not_run(keys, cells)
    counts: dict[str, dict[str, Any]] = {}
    for m in methods:
        why = {}
        for s in MATH_SETTINGS:
            for seed in seeds:
                bad, reason = degraded(cells.results[(s, m, seed)], cells.rows[(s, m, seed)],
                                       cells.results[(s, "base", seed)])
                if bad:
                    why[f"{s}/seed{seed}"] = reason
        counts[m] = {"degraded": len(why), "runs": len(MATH_SETTINGS) * len(seeds), "which": why}
    out: dict[str, Any] = {"counts": counts, "comparisons": {}}
    srpo = counts["srpo" + STRESS]
    more, fewer = [], []
    for b in L2_BASELINES:
        o = counts[b + STRESS]
        more.append(fisher_one_sided(srpo["degraded"], srpo["runs"], o["degraded"], o["runs"], a_more=True))
        fewer.append(fisher_one_sided(srpo["degraded"], srpo["runs"], o["degraded"], o["runs"], a_more=False))
    for b, pm, pf in zip(L2_BASELINES, holm(more), holm(fewer)):
        out["comparisons"][b] = {"p_srpo_more_holm": pm, "p_srpo_fewer_holm": pf}
    if any(c["p_srpo_fewer_holm"] < ALPHA for c in out["comparisons"].values()):
        out["verdict"] = "refuted"
    elif all(c["p_srpo_more_holm"] < ALPHA for c in out["comparisons"].values()):
        out["verdict"] = "supported"
    else:
        out["verdict"] = "undecided"
    return out


def l3(cells: Cells | None, seeds: Sequence[int], setting: str = "search-credit") -> dict[str, Any]:
    if cells is None:
        return {"verdict": "not run yet", "cells": "search spec not given"}
    keys = [(setting, m, seed) for m in ("srpo", "magrpo") for seed in seeds]
    if not cells.complete(keys):
        return _not_run(keys, cells)
    diffs = [cells.accuracy((setting, "srpo", seed)) - cells.accuracy((setting, "magrpo", seed)) for seed in seeds]
    p = sign_flip_p(diffs)
    mean_diff = statistics.fmean(diffs)
    verdict = "undecided" if p >= ALPHA else ("supported" if mean_diff > 0 else "refuted")
    higher, ties = sign_counts(diffs)
    return {"pairs": len(diffs), "mean_diff": mean_diff, "p": p, "diffs": diffs, "verdict": verdict,
            "srpo_higher": higher, "ties": ties}


RETRIEVAL_METRICS = ("recall_at_k", "retrieval_credit_r1", "retrieval_credit_r2")


def episode_retrieval(record: dict[str, Any], where: str) -> dict[str, float]:
    """One held-out search episode's retrieval: recall_at_k (share of the question's supporting
    documents found by the end) and the recall gain of each query round (what that round's query
    set was rewarded with in training; 0 for a round that did not run)."""
    meta = record.get("metadata") or {}
    if "recall_at_k" not in meta:
        raise ValueError(f"{where}: episode {record.get('task_id')!r} has no recall_at_k: not a search episode")
    return {k: float(meta.get(k, 0.0)) for k in RETRIEVAL_METRICS}


def heldout_retrieval(cells: Cells, seeds: Sequence[int], setting: str = "search-credit",
                      methods: Sequence[str] = ("srpo", "magrpo"), label: str = "after") -> dict[str, Any]:
    """Exploratory, not preregistered (added on 2026-12-02 after the seed-0 and seed-1 cells had
    finished, because held-out cover EM sits at the floor: 0-2 of 64 for every run): what the
    per-transition credit rewards, measured on the held-out episodes of each trained run
    (RUN/eval/after.episodes.jsonl.gz). Per run the means over its episodes of RETRIEVAL_METRICS;
    per seed SRPO minus MAGRPO, with the exact sign-flip test only once every planned seed of both
    is finished (never on part of the seeds). The base model's row comes from the base cells that
    kept their episodes (RUN/eval/base.episodes.jsonl.gz; its evaluation is greedy, the same for
    every seed)."""
    per_run: dict[str, dict[int, dict[str, float]]] = {}
    for m in ("base", *methods):
        for seed in seeds:
            key = (setting, m, seed)
            if key not in cells.results or key not in cells.dirs:
                continue
            path = cells.dirs[key] / "eval" / f"{'base' if m == 'base' else label}.episodes.jsonl.gz"
            if m == "base" and not path.is_file():
                continue  # base evaluations before `srpo eval --out` wrote episodes (seeds 0-8) have none
            if not path.is_file():
                raise FileNotFoundError(f"{path}: a finished search cell without its held-out episodes")
            eps = [episode_retrieval(r, str(path)) for r in read_records(path)]
            if not eps:
                raise ValueError(f"{path}: no episodes")
            per_run.setdefault(m, {})[seed] = {k: statistics.fmean(e[k] for e in eps) for k in RETRIEVAL_METRICS} | {
                "episodes": len(eps)}
    out: dict[str, Any] = {"per_run": per_run}
    a, b = methods[0], methods[1]
    paired = [seed for seed in seeds if seed in per_run.get(a, {}) and seed in per_run.get(b, {})]
    out["paired_seeds"] = len(paired)
    if paired and len(paired) == len(seeds):
        out["diff"] = {}
        for k in RETRIEVAL_METRICS:
            diffs = [per_run[a][seed][k] - per_run[b][seed][k] for seed in paired]
            higher, ties = sign_counts(diffs)
            out["diff"][k] = {"mean_diff": statistics.fmean(diffs), "p": sign_flip_p(diffs),
                              "higher": higher, "ties": ties}
    return out


def clip_active_share(rows: list[dict[str, Any]], *, updating_only: bool = False) -> float:
    """Share of a run's training steps (rows with a loss) whose logged clip fraction is > 0. A step
    in which every set had a zero advantage updates nothing and logs no clip fraction: the clip did
    not act there, so it counts as a step without clipping (L4's denominator is all of a run's
    steps). updating_only: the share among the steps that logged one (the steps that updated)."""
    steps = [r for r in rows if "loss" in r]
    if not steps:
        raise ValueError("a run without training rows")
    fracs = [r["clip/all/frac"] for r in steps if "clip/all/frac" in r]
    if updating_only:
        return sum(f > 0 for f in fracs) / len(fracs) if fracs else float("nan")
    return sum(f > 0 for f in fracs) / len(steps)


def l4(studies: Sequence[tuple[str, Cells, Any]]) -> dict[str, Any]:
    """Every r4 method of both studies: the median run's share of steps with clipping (the verdict,
    pooled over the studies, once every planned run is finished), and per study over the runs
    finished so far (descriptive), also among the steps that updated."""
    per_method: dict[str, list[float]] = {}
    by_study: dict[str, dict[str, dict[str, Any]]] = {}
    planned = 0
    for label, cells, spec in studies:
        for s in spec.settings:
            for m in spec.methods:
                if m.name.endswith(STRESS):
                    continue
                for seed in spec.seeds:
                    planned += 1
                    key = (s.name, m.name, seed)
                    if key in cells.rows:
                        share = clip_active_share(cells.rows[key])
                        per_method.setdefault(m.name, []).append(share)
                        d = by_study.setdefault(label, {}).setdefault(m.name, {"shares": [], "updating": []})
                        d["shares"].append(share)
                        d["updating"].append(clip_active_share(cells.rows[key], updating_only=True))
    described = {label: {m: {"runs": len(d["shares"]), "median_share": statistics.median(d["shares"]),
                             "median_share_updating": _nan_median(d["updating"])}
                         for m, d in per.items()} for label, per in by_study.items()}
    done = sum(len(v) for v in per_method.values())
    if done < planned:
        return {"verdict": "not run yet", "cells": f"{done} of {planned} finished", "by_study": described}
    medians = {m: statistics.median(v) for m, v in per_method.items()}
    return {"median_share": medians, "runs": {m: len(v) for m, v in per_method.items()}, "by_study": described,
            "verdict": "supported" if all(v >= 0.9 for v in medians.values()) else "refuted"}


def _nan_median(values: Sequence[float]) -> float | None:
    """Median of the finite values (a run that never updated has no share among updating steps)."""
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else None


def l5(cells: Cells, spec, settings: Sequence[str] = ("math-mixed", "math-routed")) -> dict[str, Any]:
    """Mean over a method's runs and steps of set_ratio/k{k}/log_std and of the gradient norm
    (the mean of a step's grad_norm/<policy> values), per set size (grad norm: whole step)."""
    out: dict[str, Any] = {}
    for s in settings:
        for m in spec.methods:
            rows = [row for seed in spec.seeds for row in cells.rows.get((s, m.name, seed), [])]
            if not rows:
                continue
            by_k: dict[int, list[float]] = {}
            for row in rows:
                for key, v in row.items():
                    parts = key.split("/")
                    if (len(parts) == 3 and parts[0] == "set_ratio" and parts[2] == "log_std"
                            and parts[1].startswith("k")):
                        by_k.setdefault(int(parts[1][1:]), []).append(v)
            norms = [statistics.fmean(v for k, v in row.items() if k.startswith("grad_norm/")) for row in rows
                     if any(k.startswith("grad_norm/") for k in row)]
            out.setdefault(s, {})[m.name] = {
                "set_ratio_log_std": {k: statistics.fmean(v) for k, v in sorted(by_k.items())},
                "grad_norm": statistics.fmean(norms) if norms else None,
                "steps": len(rows),
            }
    return out


def secondary(cells: Cells, spec) -> dict[str, Any]:
    """Per (setting, method): held-out accuracy (mean over seeds), McNemar against the base model
    pooled over seeds, final training reward (mean of the last 3 steps), clip fraction, approx KL,
    entropy and degenerate-group share (means over steps and seeds), and the share of steps that
    updated anything (update/skipped_set_share < 1)."""
    out: dict[str, Any] = {}
    for s in spec.settings:
        for m in ["base"] + [m.name for m in spec.methods]:
            keys = [(s.name, m, seed) for seed in spec.seeds if (s.name, m, seed) in cells.results]
            if not keys:
                continue
            row: dict[str, Any] = {"runs": len(keys), "accuracy": statistics.fmean(cells.accuracy(k) for k in keys)}
            if m != "base":
                pairs = [k for k in keys if (s.name, "base", k[2]) in cells.results]
                if pairs:
                    before = [x for k in pairs for x in cells.results[(s.name, "base", k[2])]["correct"]]
                    after = [x for k in pairs for x in cells.results[k]["correct"]]
                    c = paired_comparison(before, after)
                    row["vs_base"] = {"diff": c.diff.estimate, "low": c.diff.low, "high": c.diff.high, "p": c.p_value}
                steps = [r for k in keys for r in cells.rows[k]]
                final = [statistics.fmean(r["reward/mean"] for r in cells.rows[k][-3:]) for k in keys if cells.rows[k]]
                row["final_reward"] = statistics.fmean(final) if final else None
                for name, key in (("clip_frac", "clip/all/frac"), ("approx_kl", "approx_kl"), ("entropy", "entropy"),
                                  ("degenerate_share", "adv/degenerate_share")):
                    vals = [r[key] for r in steps if key in r]
                    row[name] = statistics.fmean(vals) if vals else None
                # share of training steps that updated anything (not every set had a zero advantage)
                skipped = [r["update/skipped_set_share"] for r in steps if "update/skipped_set_share" in r]
                row["updating_steps"] = statistics.fmean(x < 1.0 for x in skipped) if skipped else None
            out.setdefault(s.name, {})[m] = row
    return out


def degradation(cells: Cells, spec) -> dict[str, Any]:
    """Per method family (srpo, grpo, ...) and level (r4: lr 2e-4, s: lr 8e-4), over every finished
    run with a finished base cell, all settings pooled: degraded runs (the L2 definition) with a
    Wilson 95% interval, and the held-out change against the base model (mean and standard error
    over runs). Exploratory: reported as it stands, also while cells are missing."""
    out: dict[str, Any] = {}
    for m in spec.methods:
        family, level = family_level(m.name)
        bad = runs = 0
        changes = []
        for s in spec.settings:
            for seed in spec.seeds:
                key, base_key = (s.name, m.name, seed), (s.name, "base", seed)
                if key not in cells.results or base_key not in cells.results:
                    continue
                runs += 1
                bad += degraded(cells.results[key], cells.rows[key], cells.results[base_key])[0]
                changes.append(cells.accuracy(key) - cells.accuracy(base_key))
        if runs == 0:
            continue
        ci = wilson_interval(bad, runs)
        sem = standard_error(changes)
        out.setdefault(family, {})[level] = {
            "runs": runs, "degraded": bad, "rate": bad / runs, "low": ci.low, "high": ci.high,
            "heldout_change": statistics.fmean(changes), "heldout_change_sem": sem}
    return out


def plot_degradation(deg: dict[str, Any], path: str | Path, lrs: dict[str, float] | None = None) -> Path:
    """Two panels against the learning rate, one line per method: the share of degraded runs (Wilson
    95% band) and the held-out change against the base model (+- one standard error)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lrs = lrs or {"r4": 2e-4, "s": 8e-4}
    fig, (ax_rate, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (family, levels) in enumerate(sorted(deg.items())):
        lv = [lvl for lvl in ("r4", "s") if lvl in levels]
        x = [lrs[lvl] * (1 + 0.04 * (i - 1.5)) for lvl in lv]  # a small offset keeps the bars apart
        rate = [levels[lvl]["rate"] for lvl in lv]
        err = [[levels[lvl]["rate"] - levels[lvl]["low"] for lvl in lv],
               [levels[lvl]["high"] - levels[lvl]["rate"] for lvl in lv]]
        ax_rate.errorbar(x, rate, yerr=err, marker="o", capsize=3,
                         label=f"{family} (runs: {'/'.join(str(levels[lvl]['runs']) for lvl in lv)})")
        acc = [100 * levels[lvl]["heldout_change"] for lvl in lv]
        sem = [100 * (levels[lvl]["heldout_change_sem"] or 0.0) for lvl in lv]
        ax_acc.errorbar(x, acc, yerr=sem, marker="o", capsize=3, label=family)
    for ax in (ax_rate, ax_acc):
        ax.set_xscale("log")
        ax.set_xlabel("learning rate (4 optimizer steps per rollout batch)")
        ax.grid(alpha=0.3)
    ax_rate.set_ylabel("degraded runs (share, Wilson 95%)")
    ax_rate.set_ylim(-0.05, 1.05)
    ax_acc.set_ylabel("held-out change vs base (points, +- s.e.)")
    ax_acc.axhline(0, color="black", lw=0.8)
    ax_rate.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def learning_curves(cells: Cells, spec, metric: str = "reward/mean") -> dict[str, Any]:
    """Per setting, level (r4, s) and method family: the mean of `metric` at each training step
    over the finished seeds, with its standard error (stdev / sqrt(runs); None for one run).
    Steps are the training log's rows (one per rollout batch, averaging its optimizer steps)."""
    out: dict[str, Any] = {}
    for s in spec.settings:
        for m in spec.methods:
            family, level = family_level(m.name)
            by_step: dict[int, list[float]] = {}
            for seed in spec.seeds:
                for i, row in enumerate(cells.rows.get((s.name, m.name, seed), []), start=1):
                    if metric in row and math.isfinite(row[metric]):
                        by_step.setdefault(int(row.get("step", i)), []).append(row[metric])
            if not by_step:
                continue
            curve = []
            for step, vals in sorted(by_step.items()):
                sem = standard_error(vals)
                curve.append({"step": step, "mean": statistics.fmean(vals), "sem": sem, "runs": len(vals)})
            out.setdefault(s.name, {}).setdefault(level, {})[family] = curve
    return out


def plot_learning_curves(curves: dict[str, Any], path: str | Path, metric: str = "reward/mean") -> Path:
    """A grid: one column per setting, one row per level (r4: lr 2e-4, s: lr 8e-4); one line per
    method family (the mean over seeds) with a shaded band of +- one standard error."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(curves)
    levels = [lvl for lvl in ("r4", "s") if any(lvl in curves[s] for s in settings)]
    fig, axes = plt.subplots(len(levels), len(settings), figsize=(4.2 * len(settings), 3.2 * len(levels)),
                             squeeze=False, sharex=True)
    families = sorted({f for s in settings for lvl in curves[s].values() for f in lvl})
    colors = {f: f"C{i}" for i, f in enumerate(families)}
    for r, lvl in enumerate(levels):
        for c, s in enumerate(settings):
            ax = axes[r][c]
            for family, curve in sorted(curves[s].get(lvl, {}).items()):
                x = [p["step"] for p in curve]
                y = [p["mean"] for p in curve]
                e = [p["sem"] or 0.0 for p in curve]
                runs = max(p["runs"] for p in curve)
                ax.plot(x, y, color=colors[family], label=f"{family} ({runs})")
                ax.fill_between(x, [a - b for a, b in zip(y, e)], [a + b for a, b in zip(y, e)],
                                color=colors[family], alpha=0.15, lw=0)
            ax.set_title(f"{s}, {lvl}", fontsize=9)
            ax.grid(alpha=0.3)
            if c == 0:
                ax.set_ylabel(f"{metric} (+- s.e. over seeds)", fontsize=8)
            if r == len(levels) - 1:
                ax.set_xlabel("training step")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------- report


def analyze(math_spec_path: str | Path, search_spec_path: str | Path | None) -> dict[str, Any]:
    math_spec = load_spec(math_spec_path)
    math_cells = Cells(load_runs(math_spec), _planned(math_spec))
    search_spec = load_spec(search_spec_path) if search_spec_path else None
    search_cells = (Cells(load_runs(search_spec), _planned(search_spec), search_spec.output) if search_spec else None)
    studies = [("math", math_cells, math_spec)] + ([("search", search_cells, search_spec)] if search_spec else [])
    return {
        "L1": l1(math_cells, math_spec.seeds),
        "L2": l2(math_cells, math_spec.seeds),
        "L3": l3(search_cells, search_spec.seeds if search_spec else []),
        "L4": l4(studies),
        "L5": l5(math_cells, math_spec),
        "degradation": {"math": degradation(math_cells, math_spec),
                        **({"search": degradation(search_cells, search_spec)} if search_spec else {})},
        "secondary": {"math": secondary(math_cells, math_spec),
                      **({"search": secondary(search_cells, search_spec)} if search_spec else {})},
        **({"retrieval": heldout_retrieval(search_cells, search_spec.seeds)} if search_spec else {}),
        "curves": {"math": learning_curves(math_cells, math_spec),
                   **({"search": learning_curves(search_cells, search_spec)} if search_spec else {})},
        "missing": {"math": math_cells.missing, **({"search": search_cells.missing} if search_cells else {})},
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}"


def markdown(a: dict[str, Any]) -> str:
    lines = ["# LLM off-policy study: the preregistered tests", "",
             "Generated by `python -m studies.llm_offpolicy.analysis` from the cells under results/llm-offpolicy/.", "",
             "| hypothesis | verdict | numbers |", "|---|---|---|"]
    h = a["L1"]
    if "comparisons" in h:
        nums = "; ".join(f"vs {b}: mean {_pct(c['mean_diff'])} points, SRPO higher in {c['srpo_higher_pairs']}/"
                         f"{c['pairs']} (ties {c['ties']}), p = {c['p']:.3g}, Holm {c['p_holm']:.3g}"
                         for b, c in h["comparisons"].items())
    else:
        nums = h["cells"]
    lines.append(f"| L1 SRPO gains more than GRPO, GSPO, MAGRPO (r4) | {h['verdict']} | {nums} |")
    h = a["L2"]
    if "counts" in h:
        nums = ("degraded of 15: " + ", ".join(f"{m} {c['degraded']}" for m, c in h["counts"].items()) + "; "
                + "; ".join(f"vs {b}: Holm p(SRPO more) {c['p_srpo_more_holm']:.3g}, "
                            f"p(SRPO fewer) {c['p_srpo_fewer_holm']:.3g}" for b, c in h["comparisons"].items()))
    else:
        nums = h["cells"]
    lines.append(f"| L2 SRPO degrades more often than GRPO, MAGRPO (s) | {h['verdict']} | {nums} |")
    h = a["L3"]
    nums = (f"mean {_pct(h['mean_diff'])} EM points over {h['pairs']} seeds (SRPO higher in {h['srpo_higher']}, "
            f"ties {h['ties']}), p = {h['p']:.3g}" if "p" in h else h["cells"])
    lines.append(f"| L3 SRPO beats MAGRPO on search-credit (r4) | {h['verdict']} | {nums} |")
    h = a["L4"]
    nums = (", ".join(f"{m} {v:.2f}" for m, v in h["median_share"].items()) if "median_share" in h else h["cells"])
    lines.append(f"| L4 reuse makes the clip act (median run's share of steps with clipping) | {h['verdict']} "
                 f"| {nums} |")
    if h.get("by_study"):
        lines += ["", "## L4 by study, r4 runs finished so far (descriptive)", "",
                  ("A step whose sets all had zero advantage updates nothing and counts as a step without clipping; "
                   "the last column leaves those steps out."), "",
                  "| study | method | runs | median share of steps with clipping | among steps that updated |",
                  "|---|---|---|---|---|"]
        for label, per in h["by_study"].items():
            for m, d in per.items():
                upd = "-" if d["median_share_updating"] is None else f"{d['median_share_updating']:.2f}"
                lines.append(f"| {label} | {m} | {d['runs']} | {d['median_share']:.2f} | {upd} |")
    lines += ["", "## L5: set-ratio log-std by set size and gradient norm (exploratory)", "",
              "| setting | method | set_ratio log-std by k | grad norm | steps |", "|---|---|---|---|---|"]
    for s, per in a["L5"].items():
        for m, v in per.items():
            ks = ", ".join(f"k{k} {x:.4f}" for k, x in v["set_ratio_log_std"].items()) or "-"
            gn = "-" if v["grad_norm"] is None else f"{v['grad_norm']:.3f}"
            lines.append(f"| {s} | {m} | {ks} | {gn} | {v['steps']} |")
    for study, per_family in a.get("degradation", {}).items():
        lines += ["", f"## Degraded runs and held-out change by learning rate ({study}, all settings, exploratory)", "",
                  "| method | level | runs | degraded (Wilson 95%) | held-out change vs base (points, +- s.e.) |",
                  "|---|---|---|---|---|"]
        for family, levels in per_family.items():
            for lvl, d in levels.items():
                sem = "-" if d["heldout_change_sem"] is None else f"{100 * d['heldout_change_sem']:.1f}"
                lines.append(f"| {family} | {lvl} | {d['runs']} | {d['degraded']} "
                             f"({100 * d['low']:.0f}-{100 * d['high']:.0f}%) "
                             f"| {_pct(d['heldout_change'])} +- {sem} |")
    for study, per_setting in a["secondary"].items():
        lines += ["", f"## Secondary ({study})", "",
                  "| setting | method | runs | held-out | vs base (points, 95% CI, McNemar p) | final reward "
                  "| clip frac | approx KL | entropy | degenerate share | steps that updated |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for s, per in per_setting.items():
            for m, r in per.items():
                vb = r.get("vs_base")
                vs = f"{_pct(vb['diff'])} [{_pct(vb['low'])}, {_pct(vb['high'])}], p = {vb['p']:.3g}" if vb else "-"
                cols = [f"{r[k]:.4g}" if r.get(k) is not None else "-" for k in
                        ("final_reward", "clip_frac", "approx_kl", "entropy", "degenerate_share", "updating_steps")]
                lines.append(f"| {s} | {m} | {r['runs']} | {100 * r['accuracy']:.1f}% | {vs} | "
                             + " | ".join(cols) + " |")
    if a.get("retrieval"):
        lines += retrieval_markdown(a["retrieval"])
    missing = {k: v for k, v in a["missing"].items() if v}
    if missing:
        lines += ["", "Cells not finished: " + "; ".join(f"{k}: {len(v)}" for k, v in missing.items())]
    return "\n".join(lines) + "\n"


def retrieval_markdown(r: dict[str, Any]) -> list[str]:
    lines = ["", "## Held-out retrieval on search-credit (exploratory, not preregistered)", "",
             ("Means over each run's 64 held-out episodes, then over seeds (+- s.e.): recall = share of the "
              "question's supporting documents found; round-r gain = what round r's query set found that "
              "earlier rounds had not (its training credit)."), "",
             "| method | runs | recall | round-1 gain | round-2 gain |", "|---|---|---|---|---|"]
    for m, runs in r["per_run"].items():
        cols = []
        for k in RETRIEVAL_METRICS:
            vals = [v[k] for v in runs.values()]
            sem = standard_error(vals)
            cols.append(f"{statistics.fmean(vals):.3f}" + ("" if sem is None else f" +- {sem:.3f}"))
        lines.append(f"| {m} | {len(runs)} | " + " | ".join(cols) + " |")
    if "diff" in r:
        lines += ["", "SRPO minus MAGRPO per seed (" + str(r["paired_seeds"]) + " pairs, exact sign-flip): "
                  + "; ".join(f"{k} {d['mean_diff']:+.3f} (SRPO higher in {d['higher']}, ties {d['ties']}, "
                              f"p = {d['p']:.3g})" for k, d in r["diff"].items())]
    else:
        lines += ["", f"Paired seeds finished: {r['paired_seeds']} (the test waits for all)."]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--math", default="studies/llm_offpolicy/math.yaml")
    p.add_argument("--search", default="studies/llm_offpolicy/search.yaml")
    p.add_argument("--out", default="results/llm-offpolicy")
    args = p.parse_args(argv)
    a = analyze(args.math, args.search or None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "analysis.json").write_text(json.dumps(a, indent=1, default=str))
    (out / "analysis.md").write_text(markdown(a))
    for study, deg in a["degradation"].items():
        if deg:
            plot_degradation(deg, out / f"degradation_{study}.png")
    for study, curves in a["curves"].items():
        if curves:
            plot_learning_curves(curves, out / f"curves_{study}.png")
    print(markdown(a))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
