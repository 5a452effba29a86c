"""Credit in the default job's debate, on reasoning-gym tasks it was not tuned on: the runs of
issue 50's untuned-task benchmark (section 2) and of the preregistered credit study (section 3,
docs/results.md "Credit in debate").

Each run is the default job with only the task changed (`task.dataset`, `task.difficulty`, from
results/bench/untuned_screen_2026-12-06) and one ARM's settings, in a fresh process with
`train.threads=1`, JOBS side by side (no wall times: two runs on 2 cores slow each other):

    .venv/bin/python benchmarks/debate_credit.py run --arms srpo_consumed srpo_today \\
        --tasks chain_sum lcm --seeds 0 1 2 --runs-dir /tmp/credit
    .venv/bin/python benchmarks/debate_credit.py analyze --runs-dir /tmp/credit \\
        --out results/bench/debate_credit_2026-12-06

A record already in RUNS_DIR/<arm>-<task>-seed<S>.json is reused, so a killed queue resumes.
`analyze` writes per-run rows (held-out before / after / paired change with its CI and p, the
held-out cut share and top-answer share before and after, informative tasks a step, the
training cut share, each run's commit) and, where all four study arms ran on the same (task,
seed) pairs, the study's tests D1-D3 (mean difference of the paired change with its 95%
t-interval, exact two-sided sign-flip p, Holm over the three). `--with-rows` adds rows committed
earlier; `--target ARM` judges an arm by issue 50's rule (target.json); `--compare ARM OTHER`
pairs two arms by (task, seed) (compare.json):

    .venv/bin/python benchmarks/debate_credit.py analyze --runs-dir /tmp/scaled \
        --with-rows results/bench/debate_credit_2026-12-06/rows.json \
        --out results/bench/short_steps_2026-12-06 --target srpo_scaled --compare srpo_scaled srpo_today
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_before_after import ROOT, metric_rows, run_cells, run_side
from provenance import provenance

from srpo_lab.stats import holm, sign_flip_p, t_interval

# the screen's 8 (results/bench/untuned_screen_2026-12-06/README.md): difficulty, kind
TASKS: dict[str, tuple[str, str]] = {
    "chain_sum": ("{min_terms: 3, max_terms: 3, min_digits: 1, max_digits: 1}", "arithmetic"),
    "gcd": ("{max_value: 60}", "arithmetic (number theory)"),
    "lcm": ("{max_value: 50}", "arithmetic (number theory)"),
    "letter_counting": ("{min_words: 10, max_words: 20}", "string"),
    "aiw": ("{}", "logic"),
    "number_sequence": ("{min_terms: 4, max_terms: 5, min_value: -10, max_value: 10, max_complexity: 1}",
                        "pattern / logic"),
    "number_format": ("{min_num_candidates: 2, max_num_candidates: 2, min_n: 1, max_n: 100}", "comparison"),
    "count_primes": ("{min_n: 1, max_n: 100}", "counting"),
    # the default job's own task (basic_arithmetic, 2 one-digit terms): no task override
    "default": ("", "the default job"),
}
# the preregistered study's tasks (docs/results.md, "Credit in debate")
STUDY_TASKS = ("chain_sum", "lcm", "number_sequence", "aiw")
# issue 50's target: the screened tasks with base sampled answer success >= 5% must gain on every
# seed (results/bench/untuned_screen_2026-12-06); the other two only must not lose
GAIN_TASKS = ("chain_sum", "gcd", "lcm", "letter_counting", "aiw", "number_sequence")
UNTUNED_TASKS = tuple(t for t in TASKS if t != "default")
ONE_ANSWER_SHARE = 0.9  # held-out answers after training this much one answer: flagged "one answer"
DEFAULT_JOB_FLOOR = 19.1  # points: within 2 of the default job's +21.1 over seeds 0-4 (README)

# each arm: the overrides on top of the default job (docs/results.md, "Credit in debate")
# The study's arms pin the default job as it was at the study's first cell (90da75c): short steps
# "full" (a later default must not change them midway; candidate C below is not part of it)
_AS_PREREGISTERED = ["train.dynamic_sampling_short_steps=full"]
ARMS: dict[str, list[str]] = {
    "srpo_consumed": ["train.method=srpo", "train.unconsumed=singleton", *_AS_PREREGISTERED],
    "srpo_today": ["train.method=srpo", "train.unconsumed=in_set", *_AS_PREREGISTERED],
    "grpo_own": ["train.method=grpo", "train.unconsumed=singleton", "workflow.params.credit=own",
                 *_AS_PREREGISTERED],
    "magrpo": ["train.method=magrpo", "train.unconsumed=singleton", *_AS_PREREGISTERED],
    # issue 50's candidate C (results/bench/consumed_sets_2026-12-06/PLAN.md): today's sets, and
    # a step that dynamic sampling could not fill makes an update scaled to its signal
    "srpo_scaled": ["train.method=srpo", "train.unconsumed=in_set",
                    "train.dynamic_sampling_short_steps=scaled"],
}
STUDY_ARMS = ("srpo_consumed", "srpo_today", "grpo_own", "magrpo")
BASELINE = "srpo_consumed"  # D1-D3: this arm minus each other


def run_name(arm: str, task: str, seed: int) -> str:
    return f"{arm}-{task}-seed{seed}"


def overrides(arm: str, task: str, seed: int) -> list[str]:
    on_task = [] if task == "default" else [f"task.dataset={task}", f"task.difficulty={TASKS[task][0]}"]
    return [*on_task, f"seed={seed}", "train.threads=1", *ARMS[arm]]


def heldout_shares(run_dir: Path, when: str) -> dict:
    """The held-out evaluation's top answer and its share, and the share of members cut by the
    token budget (from the evaluation's episodes)."""
    ev = json.loads((run_dir / "eval" / f"{when}.json").read_text())
    members = cut = 0
    path = run_dir / "eval" / f"{when}.episodes.jsonl.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                for t in json.loads(line)["transitions"]:
                    for m in t["members"]:
                        members += 1
                        cut += m["stop_reason"] == "length"
    return {"top_answer": ev.get("top_answer"), "top_answer_share": ev.get("top_answer_share"),
            "cut_share": cut / members if members else None}


def one(arm: str, task: str, seed: int, runs_dir: Path) -> dict:
    name = run_name(arm, task, seed)
    rec = run_side(name, ROOT, None, overrides(arm, task, seed), runs_dir)
    steps = [r for r in metric_rows(runs_dir / name) if "loss" in r]
    # the overrides the run was started with (its record's), not today's ARMS
    return {"arm": arm, "task": task, "seed": seed, "overrides": rec.get("overrides", overrides(arm, task, seed)),
            "commit": rec.get("commit"), "dirty": rec.get("dirty"), "heldout": rec["heldout"],
            "before": heldout_shares(runs_dir / name, "before"),
            "after": heldout_shares(runs_dir / name, "after"),
            "informative_tasks_per_step": [r.get("rollout/dynamic/informative_tasks") for r in steps],
            "train_cut_share_per_step": [round(r.get("rollout/stop/length", float("nan")), 3) for r in steps],
            "unconsumed_share_per_step": [round(r["rollout/members/unconsumed_share"], 3) for r in steps
                                          if "rollout/members/unconsumed_share" in r],
            "empty_share_per_step": [round(r["rollout/members/empty_share"], 3) for r in steps
                                     if "rollout/members/empty_share" in r],
            "loss_scale_per_step": [r["rollout/dynamic/loss_scale"] for r in steps
                                    if "rollout/dynamic/loss_scale" in r],
            "episodes_generated": sum(r.get("rollout/episodes", 0) for r in steps)}


def study_tests(rows: list[dict]) -> dict:
    """D1-D3 (docs/results.md): per (task, seed) of the study, BASELINE's paired change minus
    each other arm's, in points; exact sign-flip p, Holm over the three, 95% t-interval."""
    change = {(r["arm"], r["task"], r["seed"]): 100 * r["heldout"]["diff"] for r in rows}
    pairs = sorted({(t, s) for (a, t, s) in change if a == BASELINE and t in STUDY_TASKS})
    tests, ps = {}, []
    for label, other in zip(("D1", "D2", "D3"), STUDY_ARMS[1:]):
        both = [(t, s) for t, s in pairs if (other, t, s) in change]
        diffs = [change[(BASELINE, t, s)] - change[(other, t, s)] for t, s in both]
        if not diffs:
            continue
        ci = t_interval(diffs) if len(diffs) > 1 else None
        p = sign_flip_p(diffs) if len(diffs) <= 20 else None
        tests[label] = {"minus": other, "pairs": len(diffs), "mean": sum(diffs) / len(diffs),
                        "ci95": None if ci is None else [ci.low, ci.high], "p": p, "diffs": diffs}
        ps.append((label, p))
    complete = [label for label, p in ps if p is not None and tests[label]["pairs"] == 20]
    if len(complete) == 3:
        for label, adj in zip(complete, holm([tests[lb]["p"] for lb in complete])):
            t = tests[label]
            t["holm_p"] = adj
            t["verdict"] = ("supported" if adj < 0.05 and t["mean"] > 0 else
                            "refuted" if adj < 0.05 and t["mean"] < 0 else "undecided")
    return tests


def one_answer(row: dict) -> bool:
    share = row["after"]["top_answer_share"]
    return share is not None and share >= ONE_ANSWER_SHARE


def target_verdict(rows: list[dict], arm: str, seeds: tuple[int, ...] = (0, 1, 2)) -> dict:
    """Issue 50's rule for `arm` (results/bench/consumed_sets_2026-12-06/PLAN.md, section C):
    no untuned task-seed loses with p < 0.05; every seed of each GAIN_TASKS task gains with
    p < 0.05; the default job's mean change over seeds 0-4 is at least DEFAULT_JOB_FLOOR. Each
    condition is True, False, or None while a run it needs is missing; `met_without_one_answer`
    reads the gain condition with one-answer gains (ONE_ANSWER_SHARE) counted as no gain."""
    mine = {(r["task"], r["seed"]): r for r in rows if r["arm"] == arm}
    untuned = [(t, s) for t in UNTUNED_TASKS for s in seeds]
    missing = [f"{t}-seed{s}" for t, s in untuned if (t, s) not in mine]
    signif = lambda r: r["heldout"]["p"] < 0.05
    losses = [f"{t}-seed{s}" for t, s in untuned if (t, s) in mine
              and signif(mine[(t, s)]) and mine[(t, s)]["heldout"]["diff"] < 0]
    short = [f"{t}-seed{s}" for t in GAIN_TASKS for s in seeds if (t, s) in mine
             and not (signif(mine[(t, s)]) and mine[(t, s)]["heldout"]["diff"] > 0)]
    flagged = [f"{t}-seed{s}" for t in GAIN_TASKS for s in seeds if (t, s) in mine
               and f"{t}-seed{s}" not in short and one_answer(mine[(t, s)])]
    default = [100 * mine[("default", s)]["heldout"]["diff"] for s in range(5) if ("default", s) in mine]
    complete = not missing

    def cond(failed: list, needs_all: bool = True) -> bool | None:
        return False if failed else (True if (complete or not needs_all) else None)

    no_loss, gains = cond(losses), cond(short)
    gains_strict = cond(short + flagged)
    default_ok = None if len(default) < 5 else sum(default) / 5 >= DEFAULT_JOB_FLOOR
    parts = (no_loss, gains, default_ok)
    met = False if False in parts else (None if None in parts else True)
    strict = (no_loss, gains_strict, default_ok)
    return {"arm": arm, "missing": missing, "significant_losses": losses, "gain_tasks_short": short,
            "one_answer_gains": flagged, "default_job_changes": default,
            "default_job_mean": sum(default) / len(default) if default else None,
            "no_significant_loss": no_loss, "every_gain_task_seed_gains": gains,
            "default_job_mean_ok": default_ok, "met": met,
            "met_without_one_answer": False if False in strict else (None if None in strict else True)}


def arm_difference(rows: list[dict], arm: str, other: str) -> dict | None:
    """Per (task, seed) both arms ran: arm's paired change minus other's, in points (mean, 95%
    t-interval, exact sign-flip p up to 20 pairs). None when they share no (task, seed)."""
    change = {(r["arm"], r["task"], r["seed"]): 100 * r["heldout"]["diff"] for r in rows}
    pairs = sorted({(t, s) for (a, t, s) in change if a == arm and (other, t, s) in change})
    if not pairs:
        return None
    diffs = [change[(arm, t, s)] - change[(other, t, s)] for t, s in pairs]
    ci = t_interval(diffs)
    return {"arm": arm, "minus": other, "pairs": [f"{t}-seed{s}" for t, s in pairs], "diffs": diffs,
            "mean": sum(diffs) / len(diffs), "ci95": [ci.low, ci.high] if len(diffs) > 1 else None,
            "p": sign_flip_p(diffs) if len(diffs) <= 20 else None}


def e4_summary(rows: list[dict]) -> list[dict]:
    """E4 (exploratory, docs/results.md "Credit in debate"): per study arm and task, over seeds,
    the mean paired change with its 95% t-interval, runs with a significant gain / loss
    (McNemar p < 0.05), the mean held-out top-answer share after, the mean training cut share
    of the last step and the mean episodes generated."""
    out = []
    for arm in STUDY_ARMS:
        for task in STUDY_TASKS:
            mine = [r for r in rows if r["arm"] == arm and r["task"] == task]
            if not mine:
                continue
            change = t_interval([100 * r["heldout"]["diff"] for r in mine])
            tops = [r["after"]["top_answer_share"] for r in mine if r["after"]["top_answer_share"] is not None]
            cuts = [r["train_cut_share_per_step"][-1] for r in mine if r["train_cut_share_per_step"]]
            out.append({"arm": arm, "task": task, "seeds": len(mine), "change": change.estimate,
                        "low": change.low, "high": change.high,
                        "gains": sum(r["heldout"]["diff"] > 0 and r["heldout"]["p"] < 0.05 for r in mine),
                        "losses": sum(r["heldout"]["diff"] < 0 and r["heldout"]["p"] < 0.05 for r in mine),
                        "top_answer_share_after": sum(tops) / len(tops) if tops else None,
                        "last_step_cut_share": sum(cuts) / len(cuts) if cuts else None,
                        "episodes_generated": sum(r["episodes_generated"] for r in mine) / len(mine)})
    return out


def e4_markdown(summary: list[dict]) -> str:
    lines = ["| arm | task | seeds | mean change, points [95% CI] | significant gains / losses | "
             "top answer share after | training cut share, last step | episodes generated |",
             "|---|---|---|---|---|---|---|---|"]
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"
    for e in sorted(summary, key=lambda e: (e["task"], STUDY_ARMS.index(e["arm"]))):
        lines.append(f"| {e['arm']} | {e['task']} | {e['seeds']} | {e['change']:+.1f} [{e['low']:+.1f}, "
                     f"{e['high']:+.1f}] | {e['gains']} / {e['losses']} | {pct(e['top_answer_share_after'])} | "
                     f"{pct(e['last_step_cut_share'])} | {e['episodes_generated']:.0f} |")
    return "\n".join(lines) + "\n"


def markdown(rows: list[dict], tests: dict) -> str:
    lines = [("| arm | task | seed | before | after | change [95% CI] | p | cut share before -> after "
              "| top answer share before -> after | informative tasks a step | commit |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda x: "-" if x is None else f"{100 * x:.0f}%"
    for r in sorted(rows, key=lambda r: (r["task"], r["arm"], r["seed"])):
        h = r["heldout"]
        info = [x for x in r["informative_tasks_per_step"] if x is not None]
        lines.append(
            f"| {r['arm']} | {r['task']} | {r['seed']} | {100 * h['before']:.1f}% | {100 * h['after']:.1f}% | "
            f"{100 * h['diff']:+.1f} [{100 * h['low']:+.1f}, {100 * h['high']:+.1f}] | {h['p']:.2g} | "
            f"{fmt(r['before']['cut_share'])} -> {fmt(r['after']['cut_share'])} | "
            f"{fmt(r['before']['top_answer_share'])} -> {fmt(r['after']['top_answer_share'])} | "
            f"{min(info, default=0):.0f}-{max(info, default=0):.0f} | {r['commit']}{'-dirty' if r['dirty'] else ''} |")
    if tests:
        lines += ["", "| test | minus | pairs | mean difference, points [95% CI] | sign-flip p | Holm p | verdict |",
                  "|---|---|---|---|---|---|---|"]
        for label, t in tests.items():
            ci = "" if t["ci95"] is None else f" [{t['ci95'][0]:+.1f}, {t['ci95'][1]:+.1f}]"
            pval = "-" if t["p"] is None else f"{t['p']:.3g}"
            holm_p = f"{t['holm_p']:.3g}" if "holm_p" in t else "-"
            lines.append(f"| {label} | {t['minus']} | {t['pairs']} | {t['mean']:+.1f}{ci} | {pval} | "
                         f"{holm_p} | {t.get('verdict', 'incomplete')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--arms", nargs="+", default=list(STUDY_ARMS), choices=list(ARMS))
    r.add_argument("--tasks", nargs="+", default=list(STUDY_TASKS), choices=list(TASKS))
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    r.add_argument("--jobs", type=int, default=2, help="runs side by side (each train.threads=1)")
    r.add_argument("--runs-dir", required=True)
    a = sub.add_parser("analyze")
    a.add_argument("--runs-dir", required=True)
    a.add_argument("--out", required=True, help="a folder: rows.json, tests.json, table.md")
    a.add_argument("--with-rows", nargs="*", default=[],
                   help="rows.json files written earlier (runs no longer on disk) to analyze with these")
    a.add_argument("--target", nargs="*", default=[], metavar="ARM",
                   help="arms to judge by issue 50's rule (target.json)")
    a.add_argument("--compare", nargs=2, action="append", default=[], metavar=("ARM", "OTHER"),
                   help="ARM's paired change minus OTHER's per (task, seed) (compare.json)")
    args = p.parse_args()
    runs_dir = Path(args.runs_dir)
    if args.cmd == "run":
        runs_dir.mkdir(parents=True, exist_ok=True)
        # seed-major, then task, then arm: a queue cut short leaves whole (task, seed) pairs
        jobs = [(arm, t, s) for s in args.seeds for t in args.tasks for arm in args.arms]
        run_cells(jobs, lambda arm, task, seed: one(arm, task, seed, runs_dir), args.jobs)
        return
    rows = [one(*name_parts(f.stem), runs_dir) for f in sorted(runs_dir.glob("*-seed*.json"))
            if name_parts(f.stem) is not None]
    seen = {(r["arm"], r["task"], r["seed"]) for r in rows}
    for path in args.with_rows:  # a run on disk wins over the same run's committed row
        rows += [r for r in json.loads(Path(path).read_text())["rows"]
                 if (r["arm"], r["task"], r["seed"]) not in seen]
    tests = study_tests(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rows.json").write_text(json.dumps({"written_by": provenance(ROOT), "rows": rows}, indent=1))
    (out / "tests.json").write_text(json.dumps(tests, indent=1))
    (out / "table.md").write_text(markdown(rows, tests))
    print((out / "table.md").read_text())
    summary = e4_summary(rows)
    if summary:
        (out / "e4.json").write_text(json.dumps(summary, indent=1))
        (out / "e4.md").write_text(e4_markdown(summary))
        print(e4_markdown(summary))
    if args.target:
        verdicts = [target_verdict(rows, arm) for arm in args.target]
        (out / "target.json").write_text(json.dumps(verdicts, indent=1))
        print(json.dumps(verdicts, indent=1))
    if args.compare:
        diffs = [arm_difference(rows, arm, other) for arm, other in args.compare]
        (out / "compare.json").write_text(json.dumps(diffs, indent=1))
        print(json.dumps(diffs, indent=1))


def name_parts(stem: str) -> tuple[str, str, int] | None:
    """(arm, task, seed) of a record's name, or None for another file."""
    for arm in ARMS:
        for task in TASKS:
            prefix = f"{arm}-{task}-seed"
            if stem.startswith(prefix) and stem[len(prefix):].isdigit():
                return arm, task, int(stem[len(prefix):])
    return None


if __name__ == "__main__":
    main()
