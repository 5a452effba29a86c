"""The SRPO-under-reuse study's analysis: M1 (the mechanism), H7 (the member trust region), H8
(per-round groups), the exploratory E1 / E2, and a table per block, from the runs' records.

    python -m studies.srpo_reuse.analysis [--spec studies/srpo_reuse/spec.yaml]

writes <output>/analysis.md and analysis.json (output: the spec's, results/srpo-reuse). The
collapse rule, final reward and per-cell table are the testbed mechanism study's
(studies/testbed_mechanism/analysis.py), as preregistered. A hypothesis whose cells are not all
done is reported as "not run yet", never tested on part of its seeds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from srpo_lab.stats import bootstrap_diff_ci, fisher_one_sided, holm, mann_whitney_p, mean
from srpo_lab.study.spec import StudySpec
from studies.testbed_mechanism.analysis import (
    _complete,
    _rounded,
    analysis_main,
    cell_summary,
    cell_table,
    load_records,
)

SPEC = "studies/srpo_reuse/spec.yaml"
STRESS = ("r16", "r4_lr3")  # M1, H7: the stress levels, pooled
EARLY_UPDATES = 10  # M1: "before they locked in" = updates 1-10
MECHANISM_KEYS = ("members/escaping_share", "members/outside_share", "members/spread/inside",
                  "members/spread/clipped", "members/stopped_share")
H8_LEVEL, H8_MARGIN = 0.975, 0.02  # Bonferroni over two levels; non-inferiority margin
ALPHA = 0.05

Records = dict[tuple, list[dict]]


def early_mean(record: dict[str, Any], key: str, updates: int = EARLY_UPDATES) -> float | None:
    """Mean of a run's series over its first `updates` updates (None where it logged nothing)."""
    values = [v for v in record["series"].get(key, [])[:updates] if v is not None]
    return mean(values) if values else None


def _stress_runs(records: Records, method: str) -> list[dict]:
    return [r for lv in STRESS for r in records.get(("reuse_stress", "k4", lv, method), [])]


def _stress_complete(records: Records, planned: dict[tuple, int], methods: Sequence[str]) -> bool:
    return all(_complete(records, planned, ("reuse_stress", "k4", lv, m)) for lv in STRESS for m in methods)


def mechanism_by_group(runs: list[dict]) -> dict[str, Any]:
    """Mean over runs of each mechanism metric's early mean, collapsed vs healthy runs."""
    out: dict[str, Any] = {}
    for group, sel in (("collapsed", True), ("healthy", False)):
        rs = [r for r in runs if r["collapsed"] == sel]
        out[group] = {"runs": len(rs)}
        for key in MECHANISM_KEYS:
            vals = [v for v in (early_mean(r, key) for r in rs) if v is not None]
            if vals:
                out[group][key] = mean(vals)
    return out


def m1(records: Records, planned: dict[tuple, int]) -> dict[str, Any]:
    """Collapsed SRPO-mean runs had more escaping members over updates 1-10 (Mann-Whitney)."""
    out: dict[str, Any] = {}
    if not _stress_complete(records, planned, ("srpo_mean",)):
        return {**out, "verdict": "not run yet"}
    runs = _stress_runs(records, "srpo_mean")
    out.update(mechanism_by_group(runs))
    collapsed = [early_mean(r, "members/escaping_share") for r in runs if r["collapsed"]]
    healthy = [early_mean(r, "members/escaping_share") for r in runs if not r["collapsed"]]
    collapsed, healthy = [v for v in collapsed if v is not None], [v for v in healthy if v is not None]
    if len(collapsed) < 3 or len(healthy) < 3:
        return {**out, "verdict": "undecided", "why": "fewer than 3 runs in a group"}
    p = mann_whitney_p(collapsed, healthy)
    higher = mean(collapsed) > mean(healthy)
    out.update(p=p, collapsed_mean=mean(collapsed), healthy_mean=mean(healthy))
    out["verdict"] = "undecided" if p >= ALPHA else ("supported" if higher else "refuted")
    return out


def h7(records: Records, planned: dict[tuple, int]) -> dict[str, Any]:
    """srpo_mtr collapses less often than srpo_mean and no more often than grpo and magrpo."""
    methods = ("srpo_mtr", "srpo_mean", "grpo", "magrpo")
    counts = {m: [sum(r["collapsed"] for r in _stress_runs(records, m)), len(_stress_runs(records, m))]
              for m in methods}
    out: dict[str, Any] = {"collapsed": counts}
    if not _stress_complete(records, planned, methods):
        return {**out, "verdict": "not run yet"}
    (a, n), others = counts["srpo_mtr"], ("srpo_mean", "grpo", "magrpo")
    fewer = fisher_one_sided(a, n, *counts["srpo_mean"], a_more=False)
    more = {m: fisher_one_sided(a, n, *counts[m], a_more=True) for m in others}
    # the support family: fewer than srpo_mean, more than grpo, more than magrpo (Holm over 3)
    support = holm([fewer, more["grpo"], more["magrpo"]])
    refute = holm([more[m] for m in others])  # more often than any of the three
    out.update(p_fewer_than_srpo_mean=fewer, p_more_than=more,
               holm_support={"fewer_than_srpo_mean": support[0], "more_than_grpo": support[1],
                             "more_than_magrpo": support[2]},
               holm_refute=dict(zip(others, refute)))
    if any(p < ALPHA for p in refute):
        out["verdict"] = "refuted"
    elif support[0] < ALPHA and support[1] >= ALPHA and support[2] >= ALPHA:
        out["verdict"] = "supported"
    else:
        out["verdict"] = "undecided"
    return out


def _finals(records: Records, block: str, setting: str, level: str, method: str) -> list[float]:
    return [r["final"] for r in records.get((block, setting, level, method), []) if r["final"] is not None]


def h8(records: Records, planned: dict[tuple, int]) -> dict[str, Any]:
    """srpo_event's final reward is at least grpo's on the credit rounds (non-inferiority, 0.02)."""
    levels = ("r1", "r4")
    keys = [("credit_event", "rounds", lv, m) for lv in levels for m in ("srpo_event", "grpo")]
    if not all(_complete(records, planned, k) for k in keys):
        return {"verdict": "not run yet"}
    out: dict[str, Any] = {"levels": {}}
    for lv in levels:
        a = _finals(records, "credit_event", "rounds", lv, "srpo_event")
        b = _finals(records, "credit_event", "rounds", lv, "grpo")
        point, lo, hi = bootstrap_diff_ci(a, b, level=H8_LEVEL)
        out["levels"][lv] = {"srpo_event": mean(a), "grpo": mean(b), "diff": point, "ci_975": [lo, hi]}
    lows = [out["levels"][lv]["ci_975"][0] for lv in levels]
    highs = [out["levels"][lv]["ci_975"][1] for lv in levels]
    if any(h < 0 for h in highs):
        out["verdict"] = "refuted"
    elif all(lo > -H8_MARGIN for lo in lows):
        out["verdict"] = "supported"
    else:
        out["verdict"] = "undecided"
    return out


def e2(records: Records, planned: dict[tuple, int]) -> dict[str, Any]:
    """Exploratory: srpo_mtr with (task, event) groups against srpo_event and grpo (95% intervals)."""
    out: dict[str, Any] = {}
    for lv in ("r1", "r4"):
        keys = [("credit_mtr", "rounds", lv, "srpo_mtr_event")] + [
            ("credit_event", "rounds", lv, m) for m in ("srpo_event", "grpo")]
        if not all(_complete(records, planned, k) for k in keys):
            out[lv] = "not run yet"
            continue
        mtr = _finals(records, "credit_mtr", "rounds", lv, "srpo_mtr_event")
        row: dict[str, Any] = {"srpo_mtr_event": mean(mtr) if mtr else None}
        for other in ("srpo_event", "grpo"):
            b = _finals(records, "credit_event", "rounds", lv, other)
            if mtr and b:
                row[f"minus_{other}"] = list(bootstrap_diff_ci(mtr, b, level=0.95))
        out[lv] = row
    return out


def mechanism_by_update(records: Records, method: str, key: str = "members/escaping_share",
                        window: int = 10) -> dict[str, list[float | None]]:
    """Mean of `key` per window of updates (1-10, 11-20, ...), collapsed vs healthy runs."""
    runs = _stress_runs(records, method)
    out: dict[str, list[float | None]] = {}
    for group, sel in (("collapsed", True), ("healthy", False)):
        rows = []
        for start in range(0, 40, window):
            vals = [v for r in runs if r["collapsed"] == sel
                    for v in r["series"].get(key, [])[start:start + window] if v is not None]
            rows.append(mean(vals) if vals else None)
        out[group] = rows
    return out


def write_report(spec: StudySpec) -> str:
    """<output>/analysis.md and analysis.json; returns the markdown."""
    records, planned = load_records(spec)
    summaries = {key: cell_summary(records.get(key, []), n) for key, n in planned.items()}
    hypotheses = {"M1": m1(records, planned), "H7": h7(records, planned), "H8": h8(records, planned)}
    exploratory = {"E2": e2(records, planned),
                   "escaping_by_update": {m: mechanism_by_update(records, m) for m in ("srpo_mean", "srpo_mtr")},
                   "srpo_mtr_mechanism": mechanism_by_group(_stress_runs(records, "srpo_mtr"))}
    done = sum(len(v) for v in records.values())
    lines = [f"# {spec.name}: results", "",
             (f"Runs done: {done} of {sum(planned.values())} planned. Written by "
              "`python -m studies.srpo_reuse.analysis` from the runs' records (`cells/`)."), "",
             "## Hypotheses", ""]
    for name, h in hypotheses.items():
        lines.append(f"- **{name}: {h['verdict']}** - `{json.dumps(_rounded(h))}`")
    lines += ["", "## Exploratory", ""] + [f"- **{k}** - `{json.dumps(_rounded(v))}`" for k, v in exploratory.items()]
    for block in spec.blocks:
        lines += ["", f"## Block `{block.name}`", "", *cell_table(summaries, block.name)]
    text = "\n".join(lines) + "\n"
    spec.output.mkdir(parents=True, exist_ok=True)
    (spec.output / "analysis.md").write_text(text)
    summary = {"hypotheses": _rounded(hypotheses), "exploratory": _rounded(exploratory),
               "cells": [{"block": k[0], "preset": k[1], "level": k[2], "method": k[3], **_rounded(s)}
                         for k, s in summaries.items()]}
    (spec.output / "analysis.json").write_text(json.dumps(summary, indent=1) + "\n")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    return analysis_main(argv, module="studies.srpo_reuse.analysis", description=__doc__.splitlines()[0],
                         default_spec=SPEC, write=write_report)


if __name__ == "__main__":
    raise SystemExit(main())
