"""Plots of a run's metrics.jsonl: one PNG per panel in `RUN/plots/`.

Panels and the keys they read (a panel whose keys are all absent is skipped):

    reward        reward/mean, band ± reward/std
    eval_accuracy eval/accuracy, band [eval/ci_low, eval/ci_high]
    clip_frac     clip/k{K}/frac per set size K, clip/all/frac
    set_ratio     ratio/k{K}/log_mean per set size K, band ± ratio/k{K}/log_std
    kl            approx_kl, kl_ref
    grad_norm     grad_norm, grad_norm/<policy>
    loss          loss, policy/loss

`plot_runs` overlays several runs on the same panels for comparisons. Figures are built with
the object API on the Agg canvas: no pyplot state, no display needed.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from srpo.disk import atomic_write_bytes, refuse_symlink
from srpo.record.metrics_log import read_metrics

PLOTS_DIR = "plots"


@dataclass(frozen=True)
class Series:
    """One line of a panel: `key` over steps, with an optional shaded band.

    band: ("std", key) for mean ± that key, or ("range", low_key, high_key).
    """

    label: str
    key: str
    band: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Panel:
    name: str  # file stem
    title: str
    ylabel: str
    series: Callable[[set[str]], list[Series]]  # the series to draw, given the keys present


def _by_set_size(keys: set[str], pattern: str) -> list[int]:
    """Set sizes K for which `pattern.format(K)` is a key, ascending."""
    rx = re.compile("^" + re.escape(pattern).replace(r"\{\}", r"k(\d+)") + "$")
    return sorted(int(m.group(1)) for k in keys if (m := rx.match(k)))


def _present(keys: set[str], *candidates: str) -> list[Series]:
    return [Series(k, k) for k in candidates if k in keys]


PANELS: tuple[Panel, ...] = (
    Panel("reward", "Reward (mean ± std over episodes)", "reward",
          lambda keys: [Series("reward", "reward/mean", ("std", "reward/std"))]),
    Panel("eval_accuracy", "Held-out accuracy", "accuracy",
          lambda keys: [Series("eval accuracy", "eval/accuracy",
                               ("range", "eval/ci_low", "eval/ci_high"))]),
    Panel("clip_frac", "Clip fraction by set size", "fraction clipped",
          lambda keys: [Series(f"k={k}", f"clip/k{k}/frac")
                        for k in _by_set_size(keys, "clip/{}/frac")]
          + _present(keys, "clip/all/frac")),
    Panel("set_ratio", "Set log-ratio by set size (mean ± std)", "log ratio",
          lambda keys: [Series(f"k={k}", f"ratio/k{k}/log_mean", ("std", f"ratio/k{k}/log_std"))
                        for k in _by_set_size(keys, "ratio/{}/log_mean")]),
    Panel("kl", "KL", "KL", lambda keys: _present(keys, "approx_kl", "kl_ref")),
    Panel("grad_norm", "Gradient norm", "grad norm",
          lambda keys: _present(keys, "grad_norm")
          + [Series(k, k) for k in sorted(keys) if k.startswith("grad_norm/")]),
    Panel("loss", "Loss", "loss", lambda keys: _present(keys, "loss", "policy/loss")),
)


def _column(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the records that carry `key` (NaN stays: it draws as a gap)."""
    pairs = [(r["step"], float(r[key])) for r in records if r.get(key) is not None]
    return [s for s, _ in pairs], [v for _, v in pairs]


def _band(
    records: list[dict[str, Any]], series: Series
) -> tuple[list[int], list[float], list[float]] | None:
    if series.band is None:
        return None
    kind, *keys = series.band
    rows = [r for r in records if all(r.get(k) is not None for k in (series.key, *keys))]
    if not rows:
        return None
    steps = [r["step"] for r in rows]
    if kind == "std":
        mean, std = [r[series.key] for r in rows], [r[keys[0]] for r in rows]
        return steps, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)]
    return steps, [r[keys[0]] for r in rows], [r[keys[1]] for r in rows]


def _draw(panel: Panel, runs: Sequence[tuple[str, list[dict[str, Any]]]], path: Path) -> bool:
    """Draw `panel` for every run into `path`; False (no file) if no run has its keys."""
    fig = Figure(figsize=(7, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    drawn = 0
    for run_idx, (run_label, records) in enumerate(runs):
        keys = {k for r in records for k in r}
        for series_idx, series in enumerate(panel.series(keys)):
            steps, values = _column(records, series.key)
            if not steps:
                continue
            label = f"{run_label}: {series.label}" if run_label else series.label
            # One color per series in a single run; one color per run (and a style per
            # series) when runs are overlaid.
            style = ("-", "--", ":", "-.")[series_idx % 4] if len(runs) > 1 else "-"
            color = f"C{run_idx % 10}" if len(runs) > 1 else f"C{series_idx % 10}"
            marker = "." if len(steps) < 30 else None  # sparse series (eval) stay visible
            ax.plot(steps, values, style, color=color, label=label, marker=marker)
            band = _band(records, series)
            if band is not None:
                ax.fill_between(band[0], band[1], band[2], color=color, alpha=0.2, linewidth=0)
            drawn += 1
    if not drawn:
        return False
    ax.set_title(panel.title)
    ax.set_xlabel("step")
    ax.set_ylabel(panel.ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    atomic_write_bytes(path, buffer.getvalue())  # temp + rename: never through a link at `path`
    return True


def _load(run_dir: str | Path) -> list[dict[str, Any]]:
    records = read_metrics(run_dir)
    if not records:
        raise ValueError(f"{Path(run_dir)} has an empty metrics log: nothing to plot")
    return records


def _plot(runs: Sequence[tuple[str, list[dict[str, Any]]]], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for panel in PANELS:
        path = out_dir / f"{panel.name}.png"
        if _draw(panel, runs, path):
            written.append(path)
    return written


def plot_run(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write one PNG per panel that has data into `out_dir` (default `RUN/plots`).

    Returns the files written. Raises FileNotFoundError without a metrics.jsonl and ValueError
    if it holds no record.
    """
    out = Path(out_dir) if out_dir is not None else Path(run_dir) / PLOTS_DIR
    if out_dir is None:  # RUN/plots a link would put the PNGs outside the run
        refuse_symlink(out, "its plots")
    return _plot([("", _load(run_dir))], out)


def plot_runs(
    run_dirs: Sequence[str | Path], out_dir: str | Path, labels: Sequence[str] | None = None
) -> list[Path]:
    """Overlay several runs on the same panels (one color per run); labels default to the run
    directory names. Returns the files written into `out_dir`."""
    if labels is None:
        labels = [Path(d).name for d in run_dirs]
    if len(labels) != len(run_dirs):
        raise ValueError(f"{len(labels)} labels for {len(run_dirs)} runs")
    if not run_dirs:
        raise ValueError("plot_runs needs at least one run directory")
    return _plot([(label, _load(d)) for label, d in zip(labels, run_dirs)], Path(out_dir))
