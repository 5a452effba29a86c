"""H1-H3 of PLAN.md in this folder, read from its analysis.json: one-sided Welch p, Holm over the three.

Run from the repository root:
    D=results/bench/time_to_accuracy_2026-12-07_own
    python $D/verdicts.py $D > $D/verdicts.txt
"""

import json
import statistics
import sys
from pathlib import Path

from scipy import stats
from srpo_lab.stats import holm

ARM = "srpo_trio_grpo_own"
# H3's comparator, fixed in PLAN.md: the consumed-sets arm's lowest debater at its last checkpoint,
# seeds 0-4 (results/bench/time_to_accuracy_2026-12-07_consumed), of 256 problems
CONSUMED_LOWEST = [9 / 256, 32 / 256, 4 / 256, 0 / 256, 56 / 256]


def welch(a: list[float], b: list[float]) -> tuple[float, float, float, float]:
    """mean(a) - mean(b), its Welch 95% interval, and the one-sided p of 'a above b'."""
    two_sided = stats.ttest_ind(a, b, equal_var=False)
    ci = two_sided.confidence_interval(0.95)
    p = stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue
    return statistics.fmean(a) - statistics.fmean(b), float(ci.low), float(ci.high), float(p)


def main(folder: Path) -> None:
    analysis = json.loads((folder / "analysis.json").read_text())
    comparison = next(c for c in analysis["comparisons"] if c["arm"] == ARM)
    at = {row["t"]: row for row in comparison["at_fixed_times"]}
    lowest = analysis["times"][ARM]["lowest_agent_end"]
    tests = {"H1": welch(at[120.0]["arm"], at[120.0]["peer"]), "H2": welch(at[300.0]["arm"], at[300.0]["peer"]),
             "H3": welch(lowest, CONSUMED_LOWEST)}
    adjusted = dict(zip(tests, holm([t[3] for t in tests.values()])))
    for name, (d, low, high, p) in tests.items():
        verdict = "supported" if adjusted[name] < 0.05 and d > 0 else "refuted" if high < 0 else "undecided"
        print(f"{name}: {100 * d:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] one-sided p {p:.3f} "
              f"Holm {adjusted[name]:.3f}: {verdict}")
    print("lowest debater at the end, seeds 0-4:", [round(100 * x, 1) for x in lowest],
          "consumed sets:", [round(100 * x, 1) for x in CONSUMED_LOWEST])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
