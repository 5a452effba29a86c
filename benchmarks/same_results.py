"""Do two training runs give the same results? For a change that must not change behaviour (a
refactor): run the same job from the commit before and after it, on one machine, at the same
threads (float sums round differently across machines and thread counts), then

    .venv/bin/python benchmarks/same_results.py RUN_BEFORE RUN_AFTER [--out same.json]

compares, problem for problem, every held-out evaluation (RUN/eval/<label>.json: the task ids
and each one's correctness) and, step for step, every metric of metrics.jsonl except times and
speeds (time/*, */seconds, tokens per second). Exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# metrics that measure the machine, not the run
_TIMING_MARKERS = ("time/", "seconds", "per_s", "tok_s", "wall", "rss", "memory")


def _is_timing(key: str) -> bool:
    return any(marker in key for marker in _TIMING_MARKERS)


def compare_evals(a: Path, b: Path) -> dict:
    out = {}
    for path in sorted((a / "eval").glob("*.json")):
        other = b / "eval" / path.name
        if not other.is_file():
            out[path.stem] = {"same": False, "why": f"{other} missing"}
            continue
        ea, eb = json.loads(path.read_text()), json.loads(other.read_text())
        same_ids = ea["task_ids"] == eb["task_ids"]
        differ = [t for t, x, y in zip(ea["task_ids"], ea["correct"], eb["correct"]) if x != y]
        out[path.stem] = {"same": same_ids and not differ, "accuracy": [ea["accuracy"], eb["accuracy"]],
                          "problems": len(ea["task_ids"]), "problems_that_differ": differ[:20]}
    return out


def compare_metrics(a: Path, b: Path) -> dict:
    rows_a = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows_b = [json.loads(line) for line in (b / "metrics.jsonl").read_text().splitlines() if line.strip()]
    differ: dict[str, int] = {}
    compared = 0
    for ra, rb in zip(rows_a, rows_b):
        for key in sorted(set(ra) | set(rb)):
            if _is_timing(key):
                continue
            compared += 1
            if ra.get(key) != rb.get(key):
                differ[key] = differ.get(key, 0) + 1
    return {"same": not differ and len(rows_a) == len(rows_b), "rows": [len(rows_a), len(rows_b)],
            "values_compared": compared, "keys_that_differ": differ}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    result = {"before": args.before.name, "after": args.after.name,
              "evals": compare_evals(args.before, args.after),
              "metrics": compare_metrics(args.before, args.after)}
    result["same"] = result["metrics"]["same"] and all(e["same"] for e in result["evals"].values())
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    sys.exit(0 if result["same"] else 1)


if __name__ == "__main__":
    main()
