"""Tables and plots of a study from its cells' result.json and metrics.jsonl.

A `record: series` study (srpo_lab.study.series) gets a table of its cells instead: runs done of
planned, runs that raised, and each metric's last logged value, mean over runs [95% t-interval];
what the series mean is its own analysis (studies/<name>/).

Accuracy per cell (setting x method) is the mean held-out accuracy over seeds with a 95%
t-interval over seeds (n seeds, so a 3-seed interval is wide: that is the honest width). The
macro-average of a method averages its settings within each seed, then takes the mean and
t-interval over seeds (only seeds where every setting is done). Methods are compared with the
reference method item by item: the same held-out problems, the same seed, pooled over settings
and seeds, as a paired difference with a 95% interval and McNemar's exact test.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srpo_lab.stats import Interval, paired_comparison, t_interval
from srpo_lab.study.page import write_study_page
from srpo_lab.study.runner import Cell, iter_results, plan_cells, read_metrics
from srpo_lab.study.spec import StudySpec

__all__ = ["StudyRuns", "cell_key", "load_runs", "markdown", "metric_table", "series_markdown",
           "series_summary", "summarize", "t_interval", "write_report"]

def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _fmt(iv: Interval, n: int) -> str:
    if n == 1:
        return f"{_pct(iv.estimate)} (n=1)"
    return f"{_pct(iv.estimate)} [{_pct(iv.low)}, {_pct(iv.high)}]"


@dataclass(frozen=True)
class StudyRuns:
    """Every planned cell's files, read once: the finished cells' result.json and metrics.jsonl
    rows, and the cells not run yet. Every table and plot of a report reads from this."""

    done: list[tuple[Cell, dict[str, Any], list[dict[str, float]]]]  # (cell, result, metrics rows)
    missing: list[Cell]

    def select(self, *, setting: str | None = None, method: str | None = None):
        """(cell, result, rows) of the finished cells of one setting and/or method (None: any)."""
        return [(c, r, rows) for c, r, rows in self.done
                if (setting is None or c.setting == setting) and (method is None or c.method == method)]


def load_runs(spec: StudySpec) -> StudyRuns:
    """Reads each planned cell's result and metrics once."""
    done, missing = [], []
    for cell, result in iter_results(spec):
        if result is None:
            missing.append(cell)
        elif spec.record == "series":
            done.append((cell, result, []))  # its series are in the record
        else:
            done.append((cell, result, read_metrics(cell.directory(spec.output) / "metrics.jsonl")))
    return StudyRuns(done, missing)


def series_summary(spec: StudySpec, runs: StudyRuns | None = None) -> dict[str, Any]:
    """Per cell (its label without the seed): runs planned and done, runs that raised, and per
    metric the mean over runs of the run's last logged value with a 95% t-interval over runs."""
    runs = runs if runs is not None else load_runs(spec)
    records = {c.label: r for c, r, _ in runs.done}
    cells: dict[str, dict[str, Any]] = {}
    for cell in plan_cells(spec):  # plan order: blocks as listed
        row = cells.setdefault("/".join(cell.parts), {"planned": 0, "runs": 0, "raised": 0, "last": {}})
        row["planned"] += 1
        record = records.get(cell.label)
        if record is None:
            continue
        row["runs"] += 1
        row["raised"] += record["error"] is not None
        for key, values in record["series"].items():
            finite = [v for v in values if v is not None and math.isfinite(v)]
            if finite:
                row["last"].setdefault(key, []).append(finite[-1])
    for row in cells.values():
        row["last"] = {key: dict(zip(("mean", "low", "high"), t_interval(values)), runs=len(values))
                       for key, values in row["last"].items()}
    return {"spec": spec.name, "cells": cells, "missing": [c.label for c in runs.missing]}


def series_markdown(spec: StudySpec, summary: dict[str, Any]) -> str:
    """results.md of a series study: one row per cell, the scalar metrics' last values."""
    keys = [k for k in spec.report_metrics if "{k}" not in k]
    lines = [f"# Study `{spec.name}`", ""]
    if spec.description:
        lines += [spec.description.strip(), ""]
    lines += [("Per cell: runs done of planned, runs that raised, and each metric's last logged value "
               "(mean over runs [95% t-interval over runs]). What the runs mean is the study's own analysis."), "",
              "| cell | runs | raised | " + " | ".join(keys) + " |", "|---|---|---|" + "---|" * len(keys)]
    for name, row in summary["cells"].items():
        cols = []
        for k in keys:
            v = row["last"].get(k)
            cols.append("-" if v is None else (f"{v['mean']:.3g}" if v["runs"] == 1
                                               else f"{v['mean']:.3g} [{v['low']:.3g}, {v['high']:.3g}]"))
        lines.append(f"| {name} | {row['runs']}/{row['planned']} | {row['raised']} | " + " | ".join(cols) + " |")
    if summary["missing"]:
        lines += ["", f"Not run yet: {len(summary['missing'])} cells."]
    return "\n".join(lines) + "\n"


def cell_key(cell: Cell) -> tuple[str, str, int]:
    return (cell.setting, cell.method or "base", cell.seed)


def _aligned(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[bool], list[bool]]:
    if a["task_ids"] != b["task_ids"]:
        raise ValueError(f"{a['setting']}/seed{a['seed']}: {a['method']} and {b['method']} were "
                         "evaluated on different held-out tasks; they cannot be paired")
    return a["correct"], b["correct"]


def summarize(spec: StudySpec, runs: StudyRuns | None = None) -> dict[str, Any]:
    """The numbers behind the tables (also written as summary.json)."""
    runs = runs if runs is not None else load_runs(spec)
    if spec.record == "series":
        raise ValueError(f"study {spec.name}: a series study has no evaluations to summarize (series_summary)")
    # keyed (setting, method, seed); base cells under method "base"
    results = {cell_key(c): r for c, r, _ in runs.done}
    methods = [m.name for m in spec.methods]
    columns = (["base"] if spec.base_eval else []) + methods
    cells: dict[str, dict[str, Any]] = {}
    for s in spec.settings:
        cells[s.name] = {}
        for m in columns:
            accs = [results[(s.name, m, seed)]["accuracy"] for seed in spec.seeds if (s.name, m, seed) in results]
            if accs:
                iv = t_interval(accs)
                cells[s.name][m] = {"mean": iv.estimate, "low": iv.low, "high": iv.high, "seeds": len(accs),
                                    "per_seed": accs}
    macro: dict[str, Any] = {}
    for m in columns:
        per_seed = []
        for seed in spec.seeds:
            accs = [results.get((s.name, m, seed), {}).get("accuracy") for s in spec.settings]
            if all(a is not None for a in accs):
                per_seed.append(sum(accs) / len(accs))
        if per_seed:
            iv = t_interval(per_seed)
            macro[m] = {"mean": iv.estimate, "low": iv.low, "high": iv.high, "seeds": len(per_seed),
                        "per_seed": per_seed}
    paired: dict[str, Any] = {}
    ref = spec.reference
    for m in columns:
        if ref is None or m == ref:
            continue
        for scope in [s.name for s in spec.settings] + ["all"]:
            xs, ys, pairs = [], [], 0
            for s in spec.settings:
                if scope not in ("all", s.name):
                    continue
                for seed in spec.seeds:
                    a, b = results.get((s.name, m, seed)), results.get((s.name, ref, seed))
                    if a and b:
                        ca, cb = _aligned(a, b)
                        xs += ca
                        ys += cb
                        pairs += 1
            if xs:
                c = paired_comparison(xs, ys)  # "after" = the reference: diff = ref - other
                paired.setdefault(m, {})[scope] = {
                    "n": c.n, "runs": pairs, "other": c.before, "reference": c.after, "diff": c.diff.estimate,
                    "low": c.diff.low, "high": c.diff.high, "ref_only": c.gained, "other_only": c.lost,
                    "p": c.p_value,
                }
    budget = {}
    for m in methods:
        rows = [r for (s, mm, seed), r in results.items() if mm == m]
        if rows:
            budget[m] = {k: sum(r.get(k, 0.0) for r in rows) / len(rows)  # cells of older runs lack *_dropped
                         for k in ("steps", "episodes", "members", "tokens_generated", "tokens_dropped",
                                   "train_seconds", "wall_seconds")}
    return {"spec": spec.name, "reference": ref, "cells": cells, "macro": macro, "paired": paired,
            "budget": budget, "missing": ["/".join(map(str, cell_key(c))) for c in runs.missing]}


def metric_table(spec: StudySpec, metrics: Sequence[str], runs: StudyRuns | None = None
                 ) -> dict[str, dict[str, dict[str, Any]]]:
    """Per (setting, method) and metric: mean over seeds of the run's mean and of its maximum over
    steps, and the number of non-finite values (for the stability study)."""
    runs = runs if runs is not None else load_runs(spec)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for s in spec.settings:
        for m in spec.methods:
            logs = [rows for _, _, rows in runs.select(setting=s.name, method=m.name)]
            if not logs:
                continue
            row = {}
            for key in metrics:
                means, maxes, bad = [], [], 0
                for rows in logs:
                    vals = [r[key] for r in rows if key in r]
                    bad += sum(1 for v in vals if not math.isfinite(v))
                    vals = [v for v in vals if math.isfinite(v)]
                    if vals:
                        means.append(sum(vals) / len(vals))
                        maxes.append(max(vals))
                if means:
                    row[key] = {"mean": sum(means) / len(means), "max": max(maxes), "nonfinite": bad,
                                "seeds": len(means)}
            out.setdefault(s.name, {})[m.name] = row
    return out


def markdown(spec: StudySpec, summary: dict[str, Any], metrics: dict[str, Any] | None = None) -> str:
    """results.md of the study: accuracy table, macro-average, paired comparisons, budget."""
    cols = (["base"] if spec.base_eval else []) + [m.name for m in spec.methods]
    lines = [f"# Study `{spec.name}`", ""]
    if spec.description:
        lines += [spec.description.strip(), ""]
    lines += ["Held-out accuracy (%), mean over seeds [95% t-interval over seeds]:", "",
              "| setting | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for s in spec.settings:
        row = summary["cells"].get(s.name, {})
        lines.append(f"| {s.name} | " + " | ".join(
            _fmt(Interval(row[c]["mean"], row[c]["low"], row[c]["high"]), row[c]["seeds"]) if c in row else "-"
            for c in cols) + " |")
    macro = summary["macro"]
    lines.append("| **macro-average** | " + " | ".join(
        _fmt(Interval(macro[c]["mean"], macro[c]["low"], macro[c]["high"]), macro[c]["seeds"]) if c in macro else "-"
        for c in cols) + " |")
    if summary["paired"]:
        ref = summary["reference"]
        lines += ["", f"Paired comparison with `{ref}` (same problems, same seed; diff = {ref} minus the "
                  "other, points, 95% interval; McNemar exact p):", "",
                  "| method | scope | runs | items | other % | " + ref + " % | diff | "
                  + ref + " only | other only | p |", "|---|---|---|---|---|---|---|---|---|---|"]
        for m, scopes in summary["paired"].items():
            for scope, c in scopes.items():
                lines.append(f"| {m} | {scope} | {c['runs']} | {c['n']} | {_pct(c['other'])} | "
                             f"{_pct(c['reference'])} | "
                             f"{100 * c['diff']:+.1f} [{100 * c['low']:+.1f}, {100 * c['high']:+.1f}] | "
                             f"{c['ref_only']} | {c['other_only']} | {c['p']:.3g} |")
    if summary["budget"]:
        lines += ["", "Budget per run (mean over runs): the same rollouts for every method; tokens differ "
                  "only by what the policies chose to generate (dynamic sampling generates more, and "
                  "drops what it generated for uninformative tasks: counted in both columns):", "",
                  "| method | steps | episodes | members | tokens generated | of which dropped | train s | wall s |",
                  "|---|---|---|---|---|---|---|---|"]
        for m, b in summary["budget"].items():
            lines.append(f"| {m} | {b['steps']:.0f} | {b['episodes']:.0f} | {b['members']:.0f} | "
                         f"{b['tokens_generated']:.0f} | {b['tokens_dropped']:.0f} | {b['train_seconds']:.0f} | "
                         f"{b['wall_seconds']:.0f} |")
    if metrics:
        keys = list(spec.report_metrics)
        lines += ["", "Training metrics: mean over steps (max over steps), averaged over seeds:", "",
                  "| setting | method | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
        for s, by_method in metrics.items():
            for m, row in by_method.items():
                cells = []
                for k in keys:
                    v = row.get(k)
                    if v is None:
                        cells.append("-")
                    else:
                        cells.append(f"{v['mean']:.3g} ({v['max']:.3g})"
                                     + (f" {v['nonfinite']} non-finite" if v["nonfinite"] else ""))
                lines.append(f"| {s} | {m} | " + " | ".join(cells) + " |")
    if summary["missing"]:
        lines += ["", f"Not run yet ({len(summary['missing'])} cells): " + ", ".join(summary["missing"])]
    return "\n".join(lines) + "\n"


def set_size_markdown(sizes: dict[str, dict[str, dict[int, float]]]) -> str:
    """Table: method x diagnostic, one column per set size."""
    ks = sorted({k for diags in sizes.values() for per_k in diags.values() for k in per_k})
    lines = ["Diagnostics by set size k (mean over every step of every run):", "",
             "| method | diagnostic | " + " | ".join(f"k={k}" for k in ks) + " |",
             "|---|---|" + "---|" * len(ks)]
    for m, diags in sizes.items():
        for d, per_k in diags.items():
            lines.append(f"| {m} | {d.replace('{k}', '')} | "
                         + " | ".join(f"{per_k[k]:.3g}" if k in per_k else "-" for k in ks) + " |")
    return "\n".join(lines) + "\n"


def _smooth(values: list[float], window: int) -> list[float]:
    out = []
    for i in range(len(values)):
        part = values[max(0, i - window + 1) : i + 1]
        out.append(sum(part) / len(part))
    return out


def plot_curves(spec: StudySpec, metrics: Sequence[str], out_dir: Path, *, window: int = 3,
                runs: StudyRuns | None = None) -> list[Path]:
    """One figure per metric: a panel per setting, a line per method (mean over seeds, moving
    average over `window` steps)."""
    runs = runs if runs is not None else load_runs(spec)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    settings = [s.name for s in spec.settings]
    for key in metrics:
        fig, axes = plt.subplots(1, len(settings), figsize=(4 * len(settings), 3.2), squeeze=False)
        legend_ax = None  # the last panel with a line (a panel of a setting not run yet has none)
        for ax, s in zip(axes[0], settings):
            for m in spec.methods:
                series = [[row[key] for row in rows if key in row and "rollout/episodes" in row]
                          for _, _, rows in runs.select(setting=s, method=m.name)]
                if not series:
                    continue
                length = min(len(x) for x in series)
                mean = [sum(x[i] for x in series) / len(series) for i in range(length)]
                ax.plot(range(1, length + 1), _smooth(mean, window), label=f"{m.name} ({len(series)})")
                legend_ax = ax
            ax.set_title(s, fontsize=9)
            ax.set_xlabel("step")
        axes[0][0].set_ylabel(key)
        if legend_ax is not None:
            legend_ax.legend(fontsize=7)
        fig.suptitle(f"{spec.name}: {key} (mean over seeds, moving average {window})", fontsize=9)
        fig.tight_layout()
        path = out_dir / (key.replace("/", "_") + ".png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written


SET_SIZE_DIAGNOSTICS = ("clip/k{k}/frac", "set_ratio/k{k}/log_std", "adv/k{k}/abs_mean")


def by_set_size(spec: StudySpec, runs: StudyRuns | None = None) -> dict[str, dict[str, dict[int, float]]]:
    """Per method and diagnostic, the mean over every logged step of every run (all settings)
    for each set size k found in the logs: {method: {diagnostic: {k: value}}}."""
    import re

    out: dict[str, dict[str, dict[int, float]]] = {}
    patterns = {d: re.compile("^" + re.escape(d).replace(re.escape("{k}"), r"(\d+)") + "$")
                for d in SET_SIZE_DIAGNOSTICS}
    runs = runs if runs is not None else load_runs(spec)
    for m in spec.methods:
        sums: dict[str, dict[int, list[float]]] = {d: {} for d in SET_SIZE_DIAGNOSTICS}
        for _, _, rows in runs.select(method=m.name):
            for row in rows:
                for key, value in row.items():
                    for d, pat in patterns.items():
                        hit = pat.match(key)
                        if hit and math.isfinite(value):
                            sums[d].setdefault(int(hit.group(1)), []).append(value)
        out[m.name] = {d: {k: sum(v) / len(v) for k, v in sorted(ks.items())} for d, ks in sums.items() if ks}
    return out


def plot_by_set_size(spec: StudySpec, out_dir: Path, runs: StudyRuns | None = None) -> Path | None:
    """One panel per diagnostic: its mean over steps and runs against the set size, per method."""
    data = by_set_size(spec, runs)
    if not any(data.values()):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(SET_SIZE_DIAGNOSTICS), figsize=(4 * len(SET_SIZE_DIAGNOSTICS), 3.2),
                             squeeze=False)
    for ax, d in zip(axes[0], SET_SIZE_DIAGNOSTICS):
        for m, diags in data.items():
            if d in diags:
                ks = sorted(diags[d])
                ax.plot(ks, [diags[d][k] for k in ks], marker="o", label=m)
        ax.set_title(d.replace("{k}", ""), fontsize=9)
        ax.set_xlabel("set size k")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"{spec.name}: diagnostics by set size (mean over steps and runs)", fontsize=9)
    fig.tight_layout()
    path = out_dir / "by_set_size.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_report(spec: StudySpec, *, plots: bool = True) -> dict[str, Path]:
    """SPEC.output/results.md, summary.json, plots/*.png and report.html (links each cell's report);
    a series study: results.md and summary.json of series_summary."""
    runs = load_runs(spec)
    if spec.record == "series":
        summary = series_summary(spec, runs)
        spec.output.mkdir(parents=True, exist_ok=True)
        out = {"markdown": spec.output / "results.md", "summary": spec.output / "summary.json"}
        out["markdown"].write_text(series_markdown(spec, summary))
        out["summary"].write_text(json.dumps(summary, indent=1) + "\n")
        return out
    summary = summarize(spec, runs)
    metrics = metric_table(spec, spec.report_metrics, runs)
    out = {"markdown": spec.output / "results.md", "summary": spec.output / "summary.json"}
    spec.output.mkdir(parents=True, exist_ok=True)
    sizes = by_set_size(spec, runs)
    text = markdown(spec, summary, metrics)
    if any(sizes.values()):
        text += "\n" + set_size_markdown(sizes)
    out["markdown"].write_text(text)
    summary_json = {**summary, "metrics": metrics, "by_set_size": sizes}
    out["summary"].write_text(json.dumps(summary_json, indent=1) + "\n")
    out["html"] = write_study_page(spec.output, f"study: {spec.output.name}", [
        {"label": c.label, "dir": c.directory(spec.output), "done": r is not None,
         **({k: r[k] for k in ("accuracy", "ci_low", "ci_high")} if r else {})}
        for c, r in iter_results(spec)])
    if plots:
        for p in plot_curves(spec, spec.report_metrics, spec.output / "plots", runs=runs):
            out[p.stem] = p
        size_plot = plot_by_set_size(spec, spec.output / "plots", runs)
        if size_plot is not None:
            out[size_plot.stem] = size_plot
    return out
