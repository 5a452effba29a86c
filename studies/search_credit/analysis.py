"""The search credit study's preregistered tests (docs/results.md, "Search credit study").

    python -m studies.search_credit.analysis [--spec studies/search_credit/spec.yaml] [--out DIR]

Reads the finished cells (the study harness's files: srpo_lab.study) and writes DIR/analysis.md and
DIR/analysis.json (default DIR: the spec's output folder). A test is computed only once every
cell it needs is finished; before that it says "not run yet" and how many cells are done, and
the per-method table (E3) shows the runs finished so far.

- C1, C2: per seed the held-out exact match of SRPO minus that of MAGRPO (C1) or GRPO (C2);
  two-sided paired t-test over the seeds (scipy.stats.ttest_rel, df = seeds - 1), Holm over the
  two, alpha 0.05. Supported: significant with SRPO higher; refuted: significant with SRPO lower;
  else undecided. Each mean difference with its 95% t-interval.
- Secondary (beside the verdicts, not deciding them): per question the mean over the seeds of
  SRPO's exact match minus the baseline's, a two-sided sign-flip permutation test over the
  questions with SIGN_FLIP_DRAWS random sign vectors (numpy, seed 0); it treats the trained runs
  as fixed and asks whether the difference holds across questions.
- E3 (exploratory): per method, the mean over its runs of what the held-out episodes record
  (eval/after.episodes.jsonl.gz: token F1, recall of the supporting document, tagged answers,
  rounds), the gain over the base model with a McNemar test per run, the final training reward
  (mean of `reward/mean` over a run's last FINAL_STEPS steps), the episodes generated per run
  (kept + dropped by dynamic sampling) and the degraded runs (the LLM off-policy study's rule:
  a non-finite loss, reward or gradient norm, or held-out below the base model with McNemar
  p < 0.05).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from srpo.record.episodes_log import read_records
from srpo_lab.stats import holm, paired_comparison, t_interval
from srpo_lab.study.report import load_runs
from srpo_lab.study.spec import load_spec

# The LLM off-policy study's cell index, planned cells and degradation rule, shared so both studies judge alike.
from studies.llm_offpolicy.analysis import Cells, _planned, degraded

SETTING = "search-world"
REFERENCE = "srpo"
BASELINES = {"C1": "magrpo", "C2": "grpo"}
ALPHA = 0.05
SIGN_FLIP_DRAWS = 100_000
FINAL_STEPS = 3
DEFAULT_SPEC = Path("studies/search_credit/spec.yaml")

# what one held-out search episode records (Episode.metadata) -> the name reported
EPISODE_METRICS = {"score_f1": "token_f1", "recall_at_k": "recall", "score_format": "tagged",
                   "search_rounds": "rounds"}


# ----------------------------------------------------------------- tests


def paired_t_p(diffs: Sequence[float]) -> float:
    """Two-sided p of a paired t-test of mean(diffs) against 0 (df = n - 1). All-equal
    differences have no variance: p = 1 when they are all 0, 0 when they are all the same
    non-zero value (every pair agrees exactly), as the limit of the test."""
    if len(diffs) < 2:
        raise ValueError(f"a paired t-test needs at least 2 pairs, got {len(diffs)}")
    if max(diffs) == min(diffs):
        return 1.0 if diffs[0] == 0 else 0.0
    from scipy.stats import ttest_1samp  # the analysis's only scipy use; never on the training path
    return float(ttest_1samp(list(diffs), 0.0).pvalue)


def question_sign_flip_p(per_question: Sequence[float], draws: int = SIGN_FLIP_DRAWS, seed: int = 0) -> float:
    """Two-sided Monte-Carlo sign-flip p of mean(per_question) against 0: the share of `draws`
    random sign vectors whose |sum| is at least the observed |sum|, counting the observed one
    ((hits + 1) / (draws + 1), so p is never 0)."""
    d = np.asarray(per_question, dtype=np.float64)
    if d.size == 0:
        raise ValueError("question_sign_flip_p needs at least one question")
    observed = abs(d.sum())
    rng = np.random.default_rng(seed)
    hits, left = 0, draws
    while left:  # in chunks: draws x questions signs at once would be 25.6M floats
        n = min(left, 10_000)
        signs = rng.choice((-1.0, 1.0), size=(n, d.size))
        hits += int((np.abs(signs @ d) >= observed - 1e-9).sum())
        left -= n
    return (hits + 1) / (draws + 1)


def _per_question(cells: Cells, method: str, seeds: Sequence[int], setting: str = SETTING) -> list[float]:
    """Per question (in the reference's order), the mean over seeds of the reference's exact match
    minus `method`'s; every run must be scored on the same questions."""
    ref_ids = cells.results[(setting, REFERENCE, seeds[0])]["task_ids"]
    total = [0.0] * len(ref_ids)
    for seed in seeds:
        a, b = cells.results[(setting, REFERENCE, seed)], cells.results[(setting, method, seed)]
        if a["task_ids"] != ref_ids or b["task_ids"] != ref_ids:
            raise ValueError(f"seed {seed}: {REFERENCE} and {method} were evaluated on other questions")
        for i, (x, y) in enumerate(zip(a["correct"], b["correct"])):
            total[i] += (float(x) - float(y)) / len(seeds)
    return total


def credit_tests(cells: Cells, seeds: Sequence[int], draws: int = SIGN_FLIP_DRAWS,
                 setting: str = SETTING) -> dict[str, Any]:
    """C1 and C2 as preregistered, with the secondary question-level test (`draws` sign
    vectors; the preregistered number is the default) beside each. setting: the spec's setting
    (the 2-hop study reuses these tests on its own)."""
    keys = [(setting, m, s) for m in (REFERENCE, *BASELINES.values()) for s in seeds]
    if not cells.complete(keys):
        have = sum(k in cells.results for k in keys)
        return {"verdict": "not run yet", "cells": f"{have} of {len(keys)} finished"}
    out: dict[str, Any] = {}
    for name, method in BASELINES.items():
        diffs = [cells.accuracy((setting, REFERENCE, s)) - cells.accuracy((setting, method, s)) for s in seeds]
        iv = t_interval(diffs)
        out[name] = {"baseline": method, "diffs": diffs, "mean_diff": iv.estimate, "ci": [iv.low, iv.high],
                     "p": paired_t_p(diffs),
                     "secondary_question_sign_flip_p": question_sign_flip_p(
                         _per_question(cells, method, seeds, setting), draws)}
    for name, p_holm in zip(BASELINES, holm([out[n]["p"] for n in BASELINES])):
        c = out[name]
        c["p_holm"] = p_holm
        c["verdict"] = ("undecided" if p_holm >= ALPHA else "supported" if c["mean_diff"] > 0 else "refuted")
    return out


# ----------------------------------------------------------------- E3: what each method learned


def episode_means(path: Path, metrics: dict[str, str] = EPISODE_METRICS) -> dict[str, float]:
    """Means over one run's held-out episodes of `metrics` (episode metadata key -> name)."""
    records = list(read_records(path))
    if not records:
        raise ValueError(f"{path}: no episodes")
    out = {}
    for key, name in metrics.items():
        values = []
        for r in records:
            meta = r.get("metadata") or {}
            if key not in meta:
                raise ValueError(f"{path}: episode {r.get('task_id')!r} has no {key!r}: not a search episode")
            values.append(float(meta[key]))
        out[name] = statistics.fmean(values)
    return out


def final_reward(rows: list[dict[str, Any]]) -> float:
    values = [row["reward/mean"] for row in rows if "reward/mean" in row]
    if not values:
        return math.nan
    return statistics.fmean(values[-FINAL_STEPS:])


def _t(values: list[float]) -> dict[str, Any]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return {"mean": math.nan, "ci": [math.nan, math.nan], "runs": 0}
    iv = t_interval(finite)
    return {"mean": iv.estimate, "ci": [iv.low, iv.high], "runs": len(finite)}


def per_method(cells: Cells, seeds: Sequence[int], setting: str = SETTING,
               metrics: dict[str, str] = EPISODE_METRICS) -> dict[str, Any]:
    """E3: per method (and the base model), each run's numbers and their means over runs."""
    out: dict[str, Any] = {}
    for method in ("base", REFERENCE, *BASELINES.values()):
        runs: dict[int, dict[str, Any]] = {}
        for seed in seeds:
            key = (setting, method, seed)
            if key not in cells.results:
                continue
            result = cells.results[key]
            run: dict[str, Any] = {"exact_match": result["accuracy"]}
            if key in cells.dirs:
                label = "base" if method == "base" else "after"
                path = cells.dirs[key] / "eval" / f"{label}.episodes.jsonl.gz"
                if path.is_file():
                    run |= episode_means(path, metrics)
            base = cells.results.get((setting, "base", seed))
            if method != "base":
                run["final_reward"] = final_reward(cells.rows[key])
                # a run's `episodes` sums `rollout/episodes`, which counts every episode generated,
                # the ones dynamic sampling dropped included; the trained ones are the rest
                run["episodes_generated"] = float(result.get("episodes", math.nan))
                run["episodes_trained"] = run["episodes_generated"] - float(result.get("episodes_dropped", 0.0))
                if base is not None:
                    c = paired_comparison(base["correct"], result["correct"])
                    run["gain"], run["gain_p"] = c.diff.estimate, c.p_value
                    run["degraded"], run["degraded_why"] = degraded(result, cells.rows[key], base)
            runs[seed] = run
        if not runs:
            continue
        names = sorted({k for r in runs.values() for k, v in r.items() if isinstance(v, float)} - {"gain_p"})
        out[method] = {"runs": runs, "means": {n: _t([r[n] for r in runs.values() if n in r]) for n in names},
                       "degraded": sum(bool(r.get("degraded")) for r in runs.values())}
    return out


# ----------------------------------------------------------------- report


def analyse(spec_path: Path = DEFAULT_SPEC, metrics: dict[str, str] = EPISODE_METRICS) -> dict[str, Any]:
    """The tests and E3 of a spec with one setting (this study's, or another search study's)."""
    spec = load_spec(spec_path)
    if len(spec.settings) != 1:
        raise ValueError(f"{spec_path}: the credit analysis needs one setting, found "
                         f"{[v.name for v in spec.settings]}")
    setting = spec.settings[0].name
    cells = Cells(load_runs(spec), _planned(spec), spec.output)
    seeds = list(spec.seeds)
    return {"spec": str(spec_path), "seeds": seeds, "missing": cells.missing,
            "tests": credit_tests(cells, seeds, setting=setting),
            "per_method": per_method(cells, seeds, setting, metrics)}


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.1f}"


def markdown(a: dict[str, Any], title: str = "Search credit study",
             extra_columns: Sequence[str] = ()) -> str:
    lines = [f"# {title}: analysis", "",
             f"Spec `{a['spec']}`, seeds {a['seeds']}. Cells not finished: {len(a['missing'])}.", ""]
    tests = a["tests"]
    lines += ["## C1, C2 (preregistered)", ""]
    if tests.get("verdict") == "not run yet":
        lines += [f"Not run yet: {tests['cells']} cells the tests need.", ""]
    else:
        lines += [("| | SRPO minus | mean difference, points (95% CI) | per seed | paired t p | Holm p | "
                   "verdict | secondary: question sign-flip p |"), "|---|---|---|---|---|---|---|---|"]
        for name in BASELINES:
            c = tests[name]
            lines.append(f"| {name} | {c['baseline']} | {100 * c['mean_diff']:+.1f} ({100 * c['ci'][0]:+.1f} to "
                         f"{100 * c['ci'][1]:+.1f}) | {', '.join(f'{100 * d:+.1f}' for d in c['diffs'])} | "
                         f"{c['p']:.3g} | {c['p_holm']:.3g} | **{c['verdict']}** | "
                         f"{c['secondary_question_sign_flip_p']:.3g} |")
        lines.append("")
    lines += ["## E3: what each method learned (exploratory; means over finished runs, 95% t-intervals)", ""]
    cols = ["exact_match", "token_f1", "recall", *extra_columns, "tagged", "rounds", "gain", "final_reward",
            "episodes_generated", "episodes_trained"]
    lines += ["| method | runs | " + " | ".join(cols) + " | degraded |", "|---|---|" + "---|" * len(cols) + "---|"]
    for method, m in a["per_method"].items():
        cells_ = []
        for col in cols:
            v = m["means"].get(col)
            if v is None or not math.isfinite(v["mean"]):
                cells_.append("-")
            elif col in ("exact_match", "gain", "recall", "tagged", *extra_columns):
                cells_.append(f"{_pct(v['mean'])} ({_pct(v['ci'][0])}-{_pct(v['ci'][1])})")
            else:
                cells_.append(f"{v['mean']:.3g} ({v['ci'][0]:.3g}-{v['ci'][1]:.3g})")
        lines.append(f"| {method} | {len(m['runs'])} | " + " | ".join(cells_) + f" | {m['degraded']} |")
    lines += ["", ("exact_match, gain (points against the base model, paired by question), recall and tagged "
                   "are in percent; rounds per episode; final_reward the mean of the last "
                   f"{FINAL_STEPS} steps' training reward; episodes_generated every episode rolled out "
                   "(dynamic sampling's dropped ones included), episodes_trained the ones it kept."),
              ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, *, description: str = __doc__.splitlines()[0],
         default_spec: Path = DEFAULT_SPEC, metrics: dict[str, str] = EPISODE_METRICS,
         title: str = "Search credit study", extra_columns: Sequence[str] = ()) -> int:
    """The command line; another search study passes its own spec, metrics and title."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--spec", type=Path, default=default_spec)
    p.add_argument("--out", type=Path, default=None, help="folder for analysis.md / .json (default: the spec's output)")
    args = p.parse_args(argv)
    a = analyse(args.spec, metrics)
    text = markdown(a, title, extra_columns)
    out = args.out or Path(load_spec(args.spec).output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "analysis.json").write_text(json.dumps(a, indent=1, default=str))
    (out / "analysis.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
