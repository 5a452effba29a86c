"""Plots of the testbed mechanism study (studies.testbed_mechanism.analysis): learning curves
with bands, collapse rate against stress, diagnostics against set size. One PNG per figure
(matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path

from srpo_lab.stats import mean, standard_error, wilson_interval

LEVEL_ORDER = ("r1", "r4", "r16", "r4_lr3", "r4_lr10")
STRESS_BLOCKS = ("stress_core", "stress_fair", "stress_all")  # sets of 4 on the stress levels


def _band(runs: list[list[float | None]]) -> tuple[list[float], list[float], list[float]]:
    """Per step: mean over runs and a normal 95% band of the mean (mean +- 1.96 standard errors;
    no band where one run has the step)."""
    steps = max(len(r) for r in runs)
    means, lo, hi = [], [], []
    for t in range(steps):
        xs = [r[t] for r in runs if t < len(r) and r[t] is not None]
        m = mean(xs)
        half = 1.96 * (standard_error(xs) or 0.0)
        means.append(m)
        lo.append(m - half)
        hi.append(m + half)
    return means, lo, hi


def _curves(records: dict, block: str, preset: str, title: str, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    levels = [lv for lv in LEVEL_ORDER if any(k[0] == block and k[1] == preset and k[2] == lv and v
                                              for k, v in records.items())]
    if not levels:
        return None
    fig, axes = plt.subplots(1, len(levels), figsize=(3.6 * len(levels), 3.2), sharey=True, squeeze=False)
    for ax, lv in zip(axes[0], levels):
        for (b, p, level, method), runs in sorted(records.items()):
            if (b, p, level) != (block, preset, lv) or not runs:
                continue
            m, lo, hi = _band([r["series"]["reward/mean"] for r in runs])
            x = range(1, len(m) + 1)
            ax.plot(x, m, label=f"{method} (n={len(runs)})")
            ax.fill_between(x, lo, hi, alpha=0.2)
        ax.set_title(f"{lv}")
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("reward (mean over runs, 95% band)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _collapse(records: dict, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    methods = sorted({k[3] for k, v in records.items() if k[0] in STRESS_BLOCKS and v})
    if not methods:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(methods)
    for i, method in enumerate(methods):
        xs, ys, err = [], [], [[], []]
        for j, lv in enumerate(LEVEL_ORDER):
            runs = [r for k, v in records.items() for r in v
                    if k[0] in STRESS_BLOCKS and k[2] == lv and k[3] == method]
            if not runs:
                continue
            c = sum(r["collapsed"] for r in runs)
            _, lo, hi = wilson_interval(c, len(runs))
            rate = c / len(runs)
            xs.append(j + (i - len(methods) / 2 + 0.5) * width)
            ys.append(rate)
            err[0].append(rate - lo)
            err[1].append(hi - rate)
        ax.bar(xs, ys, width=width, yerr=err, capsize=2, label=method)
    ax.set_xticks(range(len(LEVEL_ORDER)), LEVEL_ORDER)
    ax.set_xlabel("stress level (reuse x learning rate)")
    ax.set_ylabel("collapse rate (Wilson 95%)")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _by_size(records: dict, key: str, ylabel: str, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    methods = sorted({k[3] for k, v in records.items() if k[0] == "sizes" and v})
    if not methods:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.8))
    for method in methods:
        ks, ys = [], []
        for k in (1, 2, 4, 8, 16):
            vals = []
            for r in records.get(("sizes", f"k{k}", "r4", method), []):
                s = [v for v in r["series"].get(key.format(k=k), []) if v is not None]
                if s:
                    vals.append(sum(s) / len(s))
            if vals:
                ks.append(k)
                ys.append(sum(vals) / len(vals))
        if ks:
            ax.plot(ks, ys, marker="o", label=method)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("set size k")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(records: dict, folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    folder.mkdir(parents=True, exist_ok=True)
    made = [
        _curves(
            records, "stress_core", "k4", "H1: sets of 4, reward by stress level", folder / "stress_core_curves.png"
        ),
        _collapse(records, folder / "collapse_by_level.png"),
        _by_size(
            records, "ratio/k{k}/log_std", "std of the method's own log-ratio", folder / "ratio_spread_by_size.png"
        ),
        _by_size(records, "grad_norm/mean", "gradient norm (mean over policies)", folder / "grad_norm_by_size.png"),
        _curves(records, "credit", "rounds", "H3: 3 rounds of 4, per-transition credit", folder / "credit_curves.png"),
        _curves(records, "stress_fair", "k4", "H6: fair clip ranges, sets of 4", folder / "stress_fair_curves.png"),
        _curves(records, "stress_all", "k4", "H4: other methods, sets of 4", folder / "stress_all_curves.png"),
    ]
    return [p for p in made if p is not None]
